// Reading the files users give: only regular files are opened (a FIFO would block open()
// forever, a directory gives a bare stream error), and JSON is parsed with a nesting limit
// (deep nesting overflows the stack of recursive code that walks or prints it). Every error
// names the file and what it was meant to be.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace linnet {

// Deeper JSON than any real config, calls, index or tokenizer file needs.
constexpr int kMaxJsonDepth = 64;

// Throws unless path names a regular file (after symlinks): "<path>: <what> is a directory".
void require_regular_file(const std::string& path, const std::string& what);
// The whole file; checks it is regular first.
std::string read_text_file(const std::string& path, const std::string& what);
// JSON text, refusing nesting deeper than kMaxJsonDepth; errors start with `source`.
nlohmann::json parse_json(const std::string& text, const std::string& source);
nlohmann::json read_json_file(const std::string& path, const std::string& what);

}  // namespace linnet
