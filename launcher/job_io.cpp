#include "launcher/job_io.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/files.h"
#include "launcher/options.h"
#include "launcher/ranks.h"

namespace linnet::cli {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<InputLine> read_input_lines(const std::string& path, const std::set<std::string>& keys) {
  const std::string text = read_text_file(path, "input");
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
    try {
      in.value = parse_json(s, str(path, ":", line));
      if (!in.value.is_object()) throw Error(str(path, ":", line, ": expected a JSON object"));
      if (in.value.contains("id")) {
        const json& id = in.value["id"];
        if (!id.is_string() && !id.is_number_integer())
          throw Error(str(path, ":", line, ": \"id\" must be a string or an integer, got ", id.dump()));
        in.id = id;
      }
      if (auto [it, fresh] = seen.emplace(in.id.dump(), line); !fresh)
        throw Error(str(path, ":", line, ": id ", in.id.dump(), " is already the id of line ", it->second));
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

OnError on_error_option(const std::string& value) {
  if (value == "stop") return OnError::stop;
  if (value == "skip") return OnError::skip;
  throw UsageError(str("--on-error '", value, "': expected stop or skip"));
}

void report_input_errors(const std::string& path, const std::vector<InputLine>& lines, OnError policy) {
  size_t bad = 0;
  const InputLine* first = nullptr;
  for (const auto& l : lines) {
    if (l.error.empty()) continue;
    ++bad;
    if (!first) first = &l;
    if (policy == OnError::skip) spdlog::warn("{} (skipped)", l.error);
    else if (bad > 1) spdlog::error("{}", l.error);
  }
  if (policy == OnError::stop && first)
    throw Error(bad == 1 ? first->error
                         : str(first->error, " (and ", bad - 1, " more bad line(s) in ", path,
                               "; --on-error skip runs the others)"));
}

// ---- output ----

namespace {
std::string part_path(const std::string& path, int replica) { return str(path, ".part", replica); }

std::vector<std::string> part_files(const std::string& path) {
  std::vector<std::string> out;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string(), prefix = p.filename().string() + ".part";
    if (name.rfind(prefix, 0) == 0 && name.size() > prefix.size()) out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A run killed while writing leaves a last line without its newline: that line is cut off
// (its input runs again), so that what --resume appends starts on a line of its own.
void drop_partial_line(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec || size == 0) return;
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.back() == '\n') return;
  const size_t keep = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
  spdlog::warn("{}: its last line is incomplete (a run killed while writing it?); it is dropped and runs again", path);
  fs::resize_file(path, keep);
}

std::FILE* open_or_throw(const std::string& path, const char* mode) {
  std::FILE* f = std::fopen(path.c_str(), mode);
  if (!f) throw Error(str(path, ": cannot write the output: ", std::strerror(errno)));
  return f;
}
}  // namespace

// The finished lines a file holds (a last line cut off by a kill, or one that is not JSON,
// does not count), by id.
static std::map<std::string, std::string> finished_lines(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t at = 0; at < text.size();) {
    const size_t eol = text.find('\n', at);
    if (eol == std::string::npos) break;  // no newline: a line a kill cut off
    const std::string line = text.substr(at, eol - at);
    at = eol + 1;
    if (line.empty()) continue;
    try {  // parse_json: a line nested past the limit is refused like any other bad line
      const json j = parse_json(line, path);
      if (j.is_object() && j.contains("id")) out.emplace(j["id"].dump(), line);
    } catch (const std::exception&) {
    }
  }
  return out;
}

JobOutput::JobOutput(const std::string& path, bool resume, Ranks& ranks, const std::vector<InputLine>& lines)
    : path_(path), part_(part_path(path, ranks.replica())), ranks_(ranks), resume_(resume) {
  const int replicas = ranks.replicas();
  writer_ = ranks.shards().rank() == 0;
  for (const auto& l : lines) order_.push_back(l.id.dump());
  // World rank 0 starts OUT afresh, or (resume) leaves OUT and any parts a killed run left:
  // their finished lines are gathered into OUT, in input order, when this run finishes.
  std::string problem;
  if (ranks.world_rank() == 0) {
    try {
      if (!resume) {
        std::fclose(open_or_throw(path, "w"));
        for (const auto& p : part_files(path)) fs::remove(p);
      } else {
        drop_partial_line(path);
        for (const auto& p : part_files(path)) drop_partial_line(p);  // parts are appended to
        std::fclose(open_or_throw(path, "a"));
      }
    } catch (const Error& e) {
      problem = e.what();
    }
  }
  ranks.world_barrier();
  if (!problem.empty()) throw Error(problem);
  std::set<std::string> done;
  if (resume) {
    for (const auto& [id, line] : finished_lines(path)) done.insert(id);
    for (const auto& p : part_files(path))
      for (const auto& [id, line] : finished_lines(p)) done.insert(id);
  }
  done_before_ = done;
  size_t k = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (done.count(lines[i].id.dump())) {
      ++already_;
      continue;
    }
    if (static_cast<int>(k++ % static_cast<size_t>(replicas)) == ranks.replica()) mine_.push_back(i);
  }
  // One replica writes OUT itself; several write parts (appended: a part of a killed run keeps
  // its lines), merged at the end.
  if (writer_) file_ = open_or_throw(replicas == 1 ? path : part_, "a");
}

JobOutput::~JobOutput() {
  if (file_) std::fclose(file_);
}

void JobOutput::put(size_t index, const nlohmann::ordered_json& result) {
  const auto it = std::lower_bound(mine_.begin(), mine_.end(), index);
  LINNET_CHECK(it != mine_.end() && *it == index, "result for line index ", index, " that this replica does not run");
  pending_[static_cast<size_t>(it - mine_.begin())] =
      result.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  write_ready();
}

void JobOutput::write_ready() {
  for (auto it = pending_.find(next_); it != pending_.end(); it = pending_.find(++next_)) {
    if (file_) {
      std::fprintf(file_, "%s\n", it->second.c_str());
      std::fflush(file_);  // a finished line survives whatever happens next
    }
    pending_.erase(it);
  }
}

void JobOutput::finish() {
  if (file_) std::fclose(file_);
  file_ = nullptr;
  ranks_.world_barrier();
  const auto parts = part_files(path_);
  if (ranks_.world_rank() != 0 || (parts.empty() && !resume_)) return;
  // OUT, every part, this run's and a killed run's: each id once, in input order, written
  // aside and renamed into place (a kill now leaves the old file whole).
  std::map<std::string, std::string> all = finished_lines(path_);
  for (const auto& p : parts) all.merge(finished_lines(p));
  const std::string tmp = path_ + ".merging";
  std::FILE* out = open_or_throw(tmp, "w");
  for (const auto& id : order_)
    if (auto it = all.find(id); it != all.end()) std::fprintf(out, "%s\n", it->second.c_str());
  if (std::fclose(out) != 0) throw Error(str(tmp, ": cannot write the merged output"));
  fs::rename(tmp, path_);
  for (const auto& p : parts) fs::remove(p);
}

std::vector<json> JobOutput::results_of_this_run() const {
  std::vector<json> out;
  std::ifstream in(path_);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      json j = parse_json(line, path_);
      if (j.is_object() && !done_before_.count(j.value("id", json()).dump())) out.push_back(std::move(j));
    } catch (const std::exception&) {
    }
  }
  return out;
}

// ---- progress ----

Progress::Progress(const char* what, size_t total, bool enabled)
    : what_(what), total_(total), on_(enabled && ::isatty(STDERR_FILENO)), start_(std::chrono::steady_clock::now()),
      last_(start_) {}

void Progress::update(size_t done, int64_t tokens) {
  if (!on_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_ < std::chrono::milliseconds(200)) return;
  last_ = now;
  const double s = std::chrono::duration<double>(now - start_).count();
  const double eta = done > 0 ? s / static_cast<double>(done) * static_cast<double>(total_ - done) : 0;
  std::fprintf(stderr, "\r%s: %zu/%zu done · %.0f tok/s · ETA %d:%02d   ", what_, done, total_,
               s > 0 ? static_cast<double>(tokens) / s : 0.0, static_cast<int>(eta) / 60, static_cast<int>(eta) % 60);
  std::fflush(stderr);
}

void Progress::end() {
  if (on_) std::fprintf(stderr, "\n");
}

}  // namespace linnet::cli
