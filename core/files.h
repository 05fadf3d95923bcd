// Reading the files users give: only regular files are opened (a FIFO would block open()
// forever, a directory gives a bare stream error), and JSON is parsed with a nesting limit
// (deep nesting overflows the stack of recursive code that walks or prints it). Every error
// names the file and what it was meant to be.
#pragma once
#include <nlohmann/json.hpp>
#include <cstdio>
#include <string>
#include <string_view>

namespace linnet {

// Deeper JSON than any real config, calls, index or tokenizer file needs.
constexpr int kMaxJsonDepth = 64;

// "-" as a file's path is the process's standard input where linnet reads, its standard
// output where it writes (as for most command-line tools).
inline bool is_std_stream(const std::string& path) { return path == "-"; }

// Throws unless path names a regular file (after symlinks): "<path>: <what> is a directory".
void require_regular_file(const std::string& path, const std::string& what);
// The whole file; checks it is regular first. "-": all of stdin.
std::string read_text_file(const std::string& path, const std::string& what);
// JSON text, refusing nesting deeper than kMaxJsonDepth; errors start with `source`.
nlohmann::json parse_json(const std::string& text, const std::string& source);
// The same, keeping the objects' keys in the order written (what a chat template iterates or
// prints, as Python's dicts do).
nlohmann::ordered_json parse_ordered_json(const std::string& text, const std::string& source);
nlohmann::json read_json_file(const std::string& path, const std::string& what);

// ---- writing: nothing is lost without a word ----
// Every write, flush and close is checked, and a file is fsynced before it is called
// written: on a full disk (ENOSPC), over a quota or a size limit (EFBIG), or on an I/O error
// the caller gets an Error naming the file, what it was and errno's text — never a file
// silently shorter than the run says.

// An output written in pieces (a JSON line at a time). A failed write leaves what was
// written before it in place (and maybe part of the failed piece: readers of line files
// drop a last line without its newline).
class OutputFile {
 public:
  // mode: "w" (truncate) or "a" (append). "-": stdout (through a descriptor of its own, so
  // closing this leaves stdout open).
  OutputFile(std::string path, const char* mode, std::string what);
  ~OutputFile();  // closes without checking: call close() to know
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(std::string_view bytes);
  // Hands what was written to the kernel (a killed process then loses none of it).
  void flush();
  // flush, fsync (where the file supports it), close.
  void close();
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail(const char* doing, int err);
  std::string path_, what_;
  std::FILE* file_ = nullptr;
};

// `content` as the whole of `path` (created or truncated), checked and fsynced.
void write_text_file(const std::string& path, std::string_view content, const std::string& what);

}  // namespace linnet
