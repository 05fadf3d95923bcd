// The input files of `linnet generate` and `linnet eval` (and the fuzz target that reads
// them as an attacker would): JSON Lines, each line's errors found here and named by line.
#pragma once
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace linnet::cli {

// One input line: its number (1-based), its id ("id", else the line number), its object, and
// why it cannot be run ("" when it can).
struct InputLine {
  size_t line = 0;
  nlohmann::json id;
  nlohmann::json value;
  std::string error;
  std::string text;  // the line as written (a conversation is read again from it with its keys in order)
};

// Which key names a line (unique in the file; absent: the line number). run-batch's
// custom_id must be a string.
struct LineIds {
  std::string key = "id";
  bool string_only = false;
};

// Every non-empty line of the file (each rank reads it alike). A line that is not a JSON
// object, or has a key outside `keys`, gets its error here; callers add their own. A file
// that is one JSON array (not JSON Lines) is refused as a whole.
std::vector<InputLine> read_input_lines(const std::string& path, const std::set<std::string>& keys,
                                        const LineIds& ids = {});
// The same over text already read (`path` names it in the errors).
std::vector<InputLine> parse_input_lines(const std::string& text, const std::string& path,
                                         const std::set<std::string>& keys, const LineIds& ids = {});

// What to do with a line that cannot be run: stop before any work (the default), or skip it,
// writing {"id", "error"} in its place, and go on.
enum class OnError { stop, skip };
// Applies --on-error to the lines' errors: throws the first (with every error logged) for
// stop; logs each as a warning for skip. Every rank reads the same lines: only the one with
// `log` set (world rank 0) logs them.
void report_input_errors(const std::string& path, const std::vector<InputLine>& lines, OnError policy, bool log);

// "generate: …" / "eval: …" end: the exit code of a run whose every line was written — 0, or
// kExitSomeLinesFailed when any of them is an error line (docs/cli.md).
inline constexpr int kExitSomeLinesFailed = 3;

// The output file of a job over `lines`, as seen from one rank. Lines are spread over the
// replicas (line k of the ones left to do goes to replica k mod R); each replica's shard 0
// writes its results in its lines' order, flushed line by line, to OUT itself with one
// replica, else to a part file OUT.part<r>. At the end world rank 0 gathers OUT and every part
// (a killed run's too, with --resume) into OUT: each id once, in input order.

}  // namespace linnet::cli
