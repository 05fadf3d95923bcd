// The files of `linnet generate` and `linnet eval` (docs/usage.md): JSON lines in, JSON lines
// out in input order, appended and flushed line by line so that a job that dies keeps what
// it finished, `--resume` to skip what is done, several replicas' parts merged at the end,
// and the job's progress (a bar on a terminal, a line now and then in a log).
#pragma once
#include <chrono>
#include <cstdio>
#include <boost/program_options.hpp>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/files.h"
#include "launcher/input_lines.h"

namespace linnet::cli {

class Ranks;

// The input lines of a job (read_input_lines): every rank reads the file itself; "-" (stdin,
// which mpirun hands to world rank 0 alone) is read by world rank 0 and sent to the others.
std::vector<InputLine> read_job_input(const std::string& path, Ranks& ranks, const std::set<std::string>& keys,
                                      const LineIds& ids = {});

// What to do with an OUT that already holds lines (docs/usage.md): refuse (the default),
// --overwrite it, or --resume from it — rerunning the lines that ended in an error unless
// --resume-keep-errors.
struct OutputPolicy {
  bool resume = false, keep_errors = false, overwrite = false;
};
// --resume, --resume-keep-errors and --overwrite of generate and eval.
void add_output_options(boost::program_options::options_description& desc);
OutputPolicy output_policy(const boost::program_options::variables_map& vm);

class JobOutput {
 public:
  // id_key: the key of an output line that holds its input line's id ("id"; run-batch's
  // "custom_id"). An output line is an error line when its "error" is there and not null.
  // input_path: the file the lines came from (an output that is the input is refused). An output
  // that is not a regular file (a pipe, a FIFO, /dev/stdout, "-" for stdout) is written as a
  // stream: no --resume from it, and this run's results are kept in memory instead of read back.
  JobOutput(const std::string& path, const std::string& input_path, OutputPolicy policy, Ranks& ranks,
            const std::vector<InputLine>& lines, std::string id_key = "id");
  ~JobOutput();

  // Indices (into `lines`) this replica does, in order.
  const std::vector<size_t>& mine() const { return mine_; }
  size_t skipped_done() const { return already_; }  // lines --resume found finished

  // The result of lines[index] (one of mine()): written as soon as every earlier one of mine is.
  void put(size_t index, const nlohmann::ordered_json& result);
  // Why one of mine() ended in an error, as a warning: logged once, by the rank that writes
  // the line (every shard of the replica knows it; under mpirun each would repeat it).
  void warn_line(const std::string& message) const;
  // After every put: merges the replicas' parts (collective over the world).
  void finish();
  // On world rank 0 after finish(): the output lines this run wrote (not those --resume kept).
  std::vector<nlohmann::json> results_of_this_run() const;
  // Where the command's summary line goes: stderr when the output is this process's stdout
  // ("-", or a path to the same file; the summary would land among the results), else stdout.
  std::FILE* summary_stream() const;

 private:
  void write_ready();

  std::string path_, part_, id_key_;
  Ranks& ranks_;
  OutputPolicy policy_;
  std::vector<std::string> order_;                // every line's id, in input order
  bool writer_ = false;
  bool stream_ = false;                           // not a regular file: written once, never read back
  std::vector<nlohmann::json> streamed_;          // this run's results when stream_ (world rank 0)
  std::unique_ptr<OutputFile> file_;
  size_t written_ = 0;                            // lines this rank wrote
  std::vector<size_t> mine_;
  size_t next_ = 0, already_ = 0;                 // next of mine() to write
  std::map<size_t, std::string> pending_;         // finished out of order
  std::set<std::string> done_before_;             // ids --resume found
};

// --progress-interval SECONDS of generate, eval and run-batch.
void add_progress_option(boost::program_options::options_description& desc);

// Where a job's progress goes: on world rank 0 only, unless --quiet (or a --log-level above
// info); a bar rewritten in place when stderr is a terminal, else a log line every
// --progress-interval seconds (0: none).
struct ProgressOutput {
  bool on = false;
  bool terminal = false;
  double interval_s = 30;
  std::string replica;  // "replica 0 of 2" when several replicas split the lines (rank 0 sees its own share)
};
ProgressOutput progress_output(const boost::program_options::variables_map& vm, const Ranks& ranks);

// A job's progress, counted as it happens: requests finished, tokens made (generated, or read
// by eval's windows) and the time left, estimated from tokens per second over the tokens still
// to make. A request's budget is the most it may make (max_new_tokens; a window's tokens):
// what the unfinished ones will make is their budget scaled by what the finished ones made of
// theirs (EOS and stop strings end requests early).
class Progress {
 public:
  // what: "generate"; unit: "requests"; token_budget: every request's budget together.
  Progress(std::string what, std::string unit, size_t requests, int64_t token_budget, ProgressOutput out);
  // One request finished, having made `tokens` of its `budget`.
  void finished(int64_t budget, int64_t tokens);
  // After each step: the tokens made so far, by finished and running requests together.
  void update(int64_t tokens);
  // The bar's last state and its newline (on a terminal).
  void end();

  // The estimate, for the line and the tests.
  size_t done() const { return done_; }
  int64_t tokens() const { return tokens_; }
  int64_t tokens_left() const;
  double seconds_left(double elapsed_s) const;  // < 0: not known yet
  std::string line(double elapsed_s) const;     // "12/64 requests done · 3100 tokens · 812 tok/s · ETA 0:07"

 private:
  void show(bool last);

  std::string what_, unit_;
  size_t requests_, done_ = 0;
  int64_t budget_, budget_done_ = 0, tokens_ = 0, tokens_done_ = 0;
  ProgressOutput out_;
  std::chrono::steady_clock::time_point start_, shown_;
};

}  // namespace linnet::cli
