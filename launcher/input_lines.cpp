#include "launcher/input_lines.h"

#include <spdlog/spdlog.h>

#include <map>

#include "core/error.h"
#include "core/files.h"

namespace linnet::cli {

using nlohmann::json;

std::vector<InputLine> read_input_lines(const std::string& path, const std::set<std::string>& keys,
                                        const LineIds& ids) {
  return parse_input_lines(read_text_file(path, "input"), path, keys, ids);
}

std::vector<InputLine> parse_input_lines(const std::string& text, const std::string& path,
                                         const std::set<std::string>& keys, const LineIds& ids) {
  // A JSON array (pretty-printed or on one line) would otherwise read as a line of errors each.
  const size_t first = text.find_first_not_of(" \t\r\n");
  bool array = false;
  if (first != std::string::npos && text[first] == '[') try {
      array = parse_json(text, path).is_array();
    } catch (const Error&) {
    }
  if (array)
    throw Error(str(path, ": JSON Lines expected: one JSON object per line; this file is a JSON array (write each "
                    "element on a line of its own, e.g. `jq -c '.[]' ", path, "`)"));
  std::vector<InputLine> out;
  std::map<std::string, size_t> seen;  // id → its line
  size_t line = 0;
  for (size_t at = 0; at <= text.size();) {
    size_t eol = text.find('\n', at);
    if (eol == std::string::npos) eol = text.size();
    std::string s = text.substr(at, eol - at);
    at = eol + 1;
    ++line;
    if (!s.empty() && s.back() == '\r') s.pop_back();
    if (s.find_first_not_of(" \t") == std::string::npos) continue;
    InputLine in;
    in.line = line;
    in.id = static_cast<int64_t>(line);
    in.text = s;
    try {
      in.value = parse_json(s, str(path, ":", line));
      if (!in.value.is_object()) throw Error(str(path, ":", line, ": expected a JSON object"));
      if (in.value.contains(ids.key)) {
        const json& id = in.value[ids.key];
        if (ids.string_only && !id.is_string())
          throw Error(str(path, ":", line, ": \"", ids.key, "\" must be a string, got ", id.dump()));
        if (!id.is_string() && !id.is_number_integer())
          throw Error(str(path, ":", line, ": \"", ids.key, "\" must be a string or an integer, got ", id.dump()));
        in.id = id;
      } else if (ids.string_only) {
        throw Error(str(path, ":", line, ": \"", ids.key, "\" is required (a string, unique in the file)"));
      }
      if (auto [it, fresh] = seen.emplace(in.id.dump(), line); !fresh) {
        const json dup = in.id;
        // Where ids are strings, the line number (an integer) names this line's error apart.
        if (ids.string_only) in.id = static_cast<int64_t>(line);
        throw Error(str(path, ":", line, ": ", ids.key, " ", dup.dump(), " is already the ", ids.key, " of line ",
                        it->second));
      }
      for (const auto& [k, v] : in.value.items())
        if (!keys.count(k)) {
          std::string known;
          for (const auto& x : keys) known += (known.empty() ? "" : ", ") + x;
          throw Error(str(path, ":", line, ": unknown key '", k, "' (keys: ", known, ")"));
        }
    } catch (const Error& e) {
      in.error = e.what();
    }
    out.push_back(std::move(in));
    if (eol == text.size()) break;
  }
  return out;
}


void report_input_errors(const std::string& path, const std::vector<InputLine>& lines, OnError policy, bool log) {
  size_t bad = 0;
  const InputLine* first = nullptr;
  for (const auto& l : lines) {
    if (l.error.empty()) continue;
    ++bad;
    if (!first) first = &l;
    if (!log) continue;
    if (policy == OnError::skip) spdlog::warn("{} (skipped)", l.error);
    else if (bad > 1) spdlog::error("{}", l.error);
  }
  if (policy == OnError::stop && first)
    throw Error(bad == 1 ? first->error
                         : str(first->error, " (and ", bad - 1, " more bad line(s) in ", path,
                               "; --on-error skip runs the others)"));
}

}  // namespace linnet::cli
