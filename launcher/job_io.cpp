#include "launcher/job_io.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
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

// ---- input ----

std::vector<InputLine> read_job_input(const std::string& path, Ranks& ranks, const std::set<std::string>& keys,
                                      const LineIds& ids) {
  if (!is_std_stream(path)) return read_input_lines(path, keys, ids);
  std::string text;  // "T" and the text, or "E" and why it could not be read
  if (ranks.world_rank() == 0) try {
      text = read_text_file(path, "input");
      text.insert(text.begin(), 'T');
    } catch (const std::exception& e) {
      text = str("E", e.what());
    }
  ranks.world_broadcast(text);
  if (text.empty() || text[0] != 'T') throw Error(text.empty() ? "stdin: no input" : text.substr(1));
  return parse_input_lines(text.substr(1), path, keys, ids);
}

// ---- output ----

void add_output_options(po::options_description& desc) {
  desc.add_options()
      ("resume", "keep OUT.jsonl's finished lines and run only the rest (lines that ended in an error run again)")
      ("resume-keep-errors", "with --resume: count OUT.jsonl's error lines as done")
      ("overwrite", "replace a non-empty OUT.jsonl (without it, or --resume, a non-empty output is refused)");
}

OutputPolicy output_policy(const po::variables_map& vm) {
  OutputPolicy p{vm.count("resume") > 0, vm.count("resume-keep-errors") > 0, vm.count("overwrite") > 0};
  if (p.resume && p.overwrite) throw UsageError("--resume and --overwrite exclude each other");
  if (p.keep_errors && !p.resume) throw UsageError("--resume-keep-errors needs --resume");
  return p;
}

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

bool holds_bytes(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && fs::file_size(path, ec) > 0;
}

// A run killed while writing (or stopped by a full disk) leaves a last line without its
// newline: that line is cut off (its input runs again), so that what --resume appends starts
// on a line of its own.
void drop_partial_line(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec || size == 0) return;
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.back() == '\n') return;
  const size_t keep = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
  const size_t line = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  spdlog::warn("{}:{}: the last line is incomplete ({} bytes without a newline: a run killed or stopped while "
               "writing it); it is dropped and its input runs again", path, line, text.size() - keep);
  fs::resize_file(path, keep);
}

// One finished line of an output file.
struct DoneLine {
  size_t line = 0;
  std::string text;
  bool error = false;
};

// The finished lines a file holds, by id (the last line of an id wins, a result over an
// error line). A line that is not a JSON object with an "id" is named in a warning and left
// out; so is a last line cut off by a kill (drop_partial_line has warned of it).
std::map<std::string, DoneLine> finished_lines(const std::string& path, const std::string& key, bool warn) {
  std::map<std::string, DoneLine> out;
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t number = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t eol = text.find('\n', at);
    if (eol == std::string::npos) break;  // no newline: a line a kill cut off
    const std::string line = text.substr(at, eol - at);
    at = eol + 1;
    ++number;
    if (line.empty()) continue;
    try {  // parse_json: a line nested past the limit is refused like any other bad line
      const json j = parse_json(line, str(path, ":", number));
      if (!j.is_object() || !j.contains(key))
        throw Error(str(path, ":", number, ": not a JSON object with an \"", key, "\""));
      DoneLine d{number, line, j.contains("error") && !j["error"].is_null()};
      auto [it, fresh] = out.emplace(j[key].dump(), d);
      if (!fresh && !(d.error && !it->second.error)) it->second = d;
    } catch (const std::exception& e) {
      if (warn)
        spdlog::warn("{} — this line is not a result and is left out of the output ({})", e.what(),
                     line.size() > 60 ? line.substr(0, 60) + "…" : line);
    }
  }
  return out;
}

// A file's lines and its parts' (a killed run's), merged by id as finished_lines does.
std::map<std::string, DoneLine> finished_lines_of_all(const std::string& path, const std::string& key, bool warn) {
  std::map<std::string, DoneLine> all = finished_lines(path, key, warn);
  for (const auto& p : part_files(path))
    for (auto& [id, d] : finished_lines(p, key, warn)) {
      auto [it, fresh] = all.emplace(id, d);
      if (!fresh && !(d.error && !it->second.error)) it->second = std::move(d);
    }
  return all;
}
}  // namespace

JobOutput::JobOutput(const std::string& path, const std::string& input_path, OutputPolicy policy, Ranks& ranks,
                     const std::vector<InputLine>& lines, std::string id_key)
    : path_(path), part_(part_path(path, ranks.replica())), id_key_(std::move(id_key)), ranks_(ranks), policy_(policy) {
  const int replicas = ranks.replicas();
  writer_ = ranks.leads_replica();
  for (const auto& l : lines) order_.push_back(l.id.dump());
  // World rank 0 checks and prepares OUT: a non-empty one is kept for --resume (with any
  // parts a killed run left: their finished lines are gathered into OUT, in input order, when
  // this run finishes), replaced with --overwrite, refused otherwise.
  std::string problem;
  std::error_code ec;
  stream_ = is_std_stream(path) || (fs::exists(path, ec) && !fs::is_regular_file(path, ec));
  if (ranks.world_rank() == 0) {
    try {
      // The same file twice (a path, a link, /dev/stdin and /dev/stdout on one file): writing
      // would destroy the input, and --resume would take the requests for their answers. ("-"
      // for either: the shell opened them, and the input is read whole before a line is written.)
      if (!is_std_stream(path) && !is_std_stream(input_path) && fs::exists(path, ec) && fs::exists(input_path, ec) &&
          fs::equivalent(path, input_path, ec))
        throw UsageError(str(path, ": the output is the input file (", input_path,
                             "); give another output path"));
      if (stream_ && (policy.resume || replicas > 1))
        throw Error(str(is_std_stream(path) ? "--output - (stdout)" : path + ": --output",
                        " is not a regular file; --resume and several replicas need one (they read it back and "
                        "merge into it)"));
      const auto parts = stream_ ? std::vector<std::string>{} : part_files(path);
      if (!policy.resume && !policy.overwrite) {
        std::string held = !stream_ && holds_bytes(path) ? path : "";
        for (const auto& p : parts)
          if (held.empty() && holds_bytes(p)) held = p;
        if (!held.empty())
          throw UsageError(str(held, " already holds results: give --resume to keep them and run only the lines "
                               "they lack, or --overwrite to replace them"));
      }
      if (stream_) {
        // Opened once, by the writer below: opening a FIFO and closing it again would end its
        // reader's input, and the second open would wait for a reader forever.
      } else if (!policy.resume) {
        OutputFile(path, "w", "the output").close();
        for (const auto& p : parts) fs::remove(p);
      } else {
        if (fs::exists(path, ec)) drop_partial_line(path);
        for (const auto& p : parts) drop_partial_line(p);  // parts are appended to
        OutputFile(path, "a", "the output").close();
      }
    } catch (const UsageError& e) {
      problem = str("U", e.what());
    } catch (const std::exception& e) {
      problem = str("E", e.what());
    }
  }
  // Every rank learns world rank 0's verdict (a broadcast, not a barrier: the others must
  // fail with it rather than wait for a rank that has left).
  ranks.world_broadcast(problem);
  if (!problem.empty()) {
    if (problem[0] == 'U') throw UsageError(problem.substr(1));
    throw Error(problem.substr(1));
  }
  std::set<std::string> done;
  if (policy.resume) {
    std::set<std::string> input_ids(order_.begin(), order_.end());
    size_t errors = 0;
    for (const auto& [id, d] : finished_lines_of_all(path, id_key_, ranks.world_rank() == 0)) {
      if (!input_ids.count(id)) {
        if (ranks.world_rank() == 0)
          spdlog::warn("{}:{}: id {} is not an id of the input; the line is kept, after the input's lines", path,
                       d.line, id);
        continue;
      }
      if (d.error && !policy.keep_errors) {
        ++errors;
        continue;
      }
      done.insert(id);
    }
    if (errors && ranks.world_rank() == 0)
      spdlog::warn("{}: {} line(s) ended in an error; they run again (--resume-keep-errors keeps them)", path, errors);
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
  if (writer_) file_ = std::make_unique<OutputFile>(replicas == 1 ? path : part_, "a", "the output");
}

JobOutput::~JobOutput() = default;

void JobOutput::put(size_t index, const nlohmann::ordered_json& result) {
  const auto it = std::lower_bound(mine_.begin(), mine_.end(), index);
  LINNET_CHECK(it != mine_.end() && *it == index, "result for line index ", index, " that this replica does not run");
  pending_[static_cast<size_t>(it - mine_.begin())] =
      result.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  write_ready();
}

void JobOutput::warn_line(const std::string& message) const {
  if (writer_) spdlog::warn("{}", message);
}

void JobOutput::write_ready() {
  for (auto it = pending_.find(next_); it != pending_.end(); it = pending_.find(++next_)) {
    if (file_) {
      try {
        file_->write(it->second + "\n");
        file_->flush();  // a finished line survives whatever happens next
        if (stream_) streamed_.push_back(json::parse(it->second));
      } catch (const Error& e) {
        throw Error(str(e.what(), ". ", written_, " result line(s) of this run were written whole before it; "
                        "`--resume` continues from the last complete line"));
      }
      ++written_;
    }
    pending_.erase(it);
  }
}

void JobOutput::finish() {
  if (file_) {
    file_->close();  // fsynced: the lines are on the disk
    file_.reset();
  }
  ranks_.world_barrier();
  if (stream_) return;  // one replica, no --resume: nothing to merge
  const auto parts = part_files(path_);
  if (ranks_.world_rank() != 0 || (parts.empty() && !policy_.resume)) return;
  // OUT, every part, this run's and a killed run's: each id once, in input order (then lines
  // of ids the input no longer has, as they were), written aside and renamed into place (a
  // kill now leaves the old file whole).
  std::map<std::string, DoneLine> all = finished_lines_of_all(path_, id_key_, false);
  const std::string tmp = path_ + ".merging";
  OutputFile out(tmp, "w", "the merged output");
  for (const auto& id : order_)
    if (auto it = all.find(id); it != all.end()) {
      out.write(it->second.text + "\n");
      all.erase(it);
    }
  std::vector<const DoneLine*> others;
  for (const auto& [id, d] : all) others.push_back(&d);
  std::sort(others.begin(), others.end(), [](auto* a, auto* b) { return a->line < b->line; });
  for (const DoneLine* d : others) out.write(d->text + "\n");
  out.close();
  fs::rename(tmp, path_);
  for (const auto& p : parts) fs::remove(p);
}

std::vector<json> JobOutput::results_of_this_run() const {
  if (stream_) return streamed_;  // a pipe read back would wait on the write end this process holds
  std::vector<json> out;
  const std::set<std::string> input_ids(order_.begin(), order_.end());
  std::ifstream in(path_);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      json j = parse_json(line, path_);
      const std::string id = j.is_object() ? j.value(id_key_, json()).dump() : "";
      if (input_ids.count(id) && !done_before_.count(id)) out.push_back(std::move(j));
    } catch (const std::exception&) {
    }
  }
  return out;
}

std::FILE* JobOutput::summary_stream() const {
  if (is_std_stream(path_)) return stderr;
  struct stat out{}, std_out{};
  if (::fstat(STDOUT_FILENO, &std_out) == 0 && ::stat(path_.c_str(), &out) == 0 && out.st_dev == std_out.st_dev &&
      out.st_ino == std_out.st_ino)
    return stderr;
  return stdout;
}

// ---- progress ----

void add_progress_option(po::options_description& desc) {
  desc.add_options()("progress-interval", po::value<double>()->default_value(30),
                     "seconds between progress lines when stderr is not a terminal (0: none; a terminal shows a bar)");
}

ProgressOutput progress_output(const po::variables_map& vm, const Ranks& ranks) {
  ProgressOutput o;
  o.on = ranks.world_rank() == 0 && spdlog::get_level() <= spdlog::level::info;
  o.terminal = ::isatty(STDERR_FILENO) != 0;
  o.interval_s = vm.count("progress-interval") ? vm["progress-interval"].as<double>() : 30;
  if (!(o.interval_s >= 0)) throw UsageError("--progress-interval must be 0 (no lines) or a number of seconds");
  if (ranks.replicas() > 1) o.replica = str("replica ", ranks.replica(), " of ", ranks.replicas());
  return o;
}

namespace {
// 0:07, 12:34, 1:02:03.
std::string clock_text(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}
}  // namespace

Progress::Progress(std::string what, std::string unit, size_t requests, int64_t token_budget, ProgressOutput out)
    : what_(std::move(what)), unit_(std::move(unit)), requests_(requests), budget_(token_budget), out_(std::move(out)),
      start_(std::chrono::steady_clock::now()), shown_(start_) {
  if (!out_.replica.empty()) what_ += str(" (", out_.replica, ")");
}

void Progress::finished(int64_t budget, int64_t tokens) {
  ++done_;
  budget_done_ += budget;
  tokens_done_ += tokens;
}

int64_t Progress::tokens_left() const {
  // What the finished requests made of their budgets says what the others will make of theirs.
  const double made = budget_done_ > 0 ? static_cast<double>(tokens_done_) / static_cast<double>(budget_done_) : 1.0;
  const double expected = made * static_cast<double>(budget_ - budget_done_);
  return std::max<int64_t>(0, std::llround(expected) - (tokens_ - tokens_done_));
}

double Progress::seconds_left(double elapsed_s) const {
  if (done_ >= requests_) return 0;
  if (tokens_ <= 0 || elapsed_s <= 0) return -1;
  return static_cast<double>(tokens_left()) / (static_cast<double>(tokens_) / elapsed_s);
}

std::string Progress::line(double elapsed_s) const {
  const double eta = seconds_left(elapsed_s);
  return str(done_, "/", requests_, " ", unit_, " done · ", tokens_, " tokens · ",
             static_cast<long long>(elapsed_s > 0 ? std::llround(static_cast<double>(tokens_) / elapsed_s) : 0),
             " tok/s · ETA ", eta < 0 ? std::string("?") : clock_text(eta));
}

void Progress::update(int64_t tokens) {
  tokens_ = tokens;
  if (out_.on) show(false);
}

void Progress::show(bool last) {
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (out_.terminal) {
    if (!last && now - shown_ < std::chrono::milliseconds(200)) return;  // at most 5 redraws a second
    shown_ = now;
    // The bar fills with tokens (made against made + still to make), else with requests.
    const double all = static_cast<double>(tokens_ + tokens_left());
    double f = all > 0 ? static_cast<double>(tokens_) / all
                       : (requests_ ? static_cast<double>(done_) / static_cast<double>(requests_) : 1.0);
    if (done_ >= requests_) f = 1;
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(f * kWidth);
    const std::string bar = std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(kWidth - filled), '.');
    std::fprintf(stderr, "\r%s [%s] %s\x1b[K%s", what_.c_str(), bar.c_str(), line(elapsed).c_str(), last ? "\n" : "");
    std::fflush(stderr);
    return;
  }
  if (last || out_.interval_s <= 0 || now - shown_ < std::chrono::duration<double>(out_.interval_s)) return;
  shown_ = now;
  spdlog::info("{}: {} · {} elapsed", what_, line(elapsed), clock_text(elapsed));
}

void Progress::end() {
  if (out_.on && out_.terminal) show(true);
}

}  // namespace linnet::cli
