// Shared command-line plumbing for the subcommands (Boost.Program_options).
#pragma once
#include <boost/program_options.hpp>
#include <iostream>
#include <memory>

#include "core/error.h"
#include "engine/scheduler.h"
#include "launcher/kv_memory.h"
#include "launcher/commands.h"
#include "layers/generics.h"
#include "parallel/world_config.h"
#include "launcher/input_lines.h"
#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace linnet::cli {

namespace po = boost::program_options;

// A command line that cannot be run as given (unknown option, missing or malformed value,
// options that exclude each other): main reports it and exits 2, as docs/cli.md says.
class UsageError : public Error {
 public:
  using Error::Error;
};

// Parses args against desc plus the options every subcommand takes (--help, --log-level,
// --quiet), applies the logging ones, and prints usage and returns false for --help.
// Anything wrong with the command line throws UsageError. The usage line is made from desc
// (usage_of), so it never leaves an option out.
bool parse(const Args& args, po::options_description& desc, po::variables_map& vm, const char* command);
// "linnet generate --checkpoint DIR --prompts IN.jsonl … [--max-new-tokens N] …": the
// required options first, then the others in brackets.
std::string usage_of(const std::string& command, const po::options_description& desc);

// --batch, --max-seq, --page-size, --shards, --dtype, --threads.
void add_run_options(po::options_description& desc);
RunOptions run_options(const po::variables_map& vm);
// --kv-cache-dtype's value: none for auto; a UsageError naming the value otherwise.
std::optional<DType> kv_cache_dtype_option(const std::string& v);
// --threads N (0: automatic, core/cpu/cpu_threads.h; at most 4 × the cores this rank may use).
int threads_option(const po::variables_map& vm);
// --tp K (0: every rank of the job in one replica).
int tp_option(const po::variables_map& vm);
// --pp and --pp-layers (parallel/world_config.h): the stages and, when given, each one's layer count.
struct PipelineOption {
  int pp = 1;
  std::vector<int64_t> counts;
};
PipelineOption pp_option(const po::variables_map& vm);
// --add-bos auto|yes|no: whether texts start with BOS — auto as transformers decides it for
// the checkpoint's tokenizer (tokenizer/tokenizer.h), logged with the reason.
void add_bos_option(po::options_description& desc);
bool add_bos_from(const po::variables_map& vm, const std::string& checkpoint_dir, const Tokenizer& tok);

// --chat-template FILE: a Jinja chat template used instead of the checkpoint's.
void add_chat_template_option(po::options_description& desc);
// The chat template a command renders conversations with: --chat-template's file, else the
// checkpoint's (tokenizer_config.json's chat_template, chat_template.jinja, as transformers
// reads them). A checkpoint without one gets none and `why_not` says so (completions still
// run); one whose template does not parse gets none with a warning. A --chat-template that
// cannot be read or does not parse is an error, naming the file, line and column.
std::unique_ptr<ChatTemplate> chat_template_from(const po::variables_map& vm, const std::string& checkpoint_dir,
                                                 std::string& why_not);

// The continuous-batching engine's options (generate, serve, run-batch): --kv-cache-memory,
// --max-batch-tokens, --max-rows, --backend, --tp; read back as the scheduler's limits and the
// KV pool's size.
void add_engine_options(po::options_description& desc);
struct EngineOptions {
  engine::SchedulerLimits limits;
  KvMemory kv_memory;
};
EngineOptions engine_options_from(const po::variables_map& vm);

// --on-error stop|skip.
OnError on_error_option(const std::string& value);

// "; did you mean --max-new-tokens?" for an unknown --max-tokens ("" when nothing is close).
std::string nearest_option_hint(const std::string& given, const po::options_description& desc);

// A count that must be positive: UsageError "--gen must be at least 1, got -5" otherwise.
int64_t positive_option(const po::variables_map& vm, const char* name);

// --NAME FILE where a report will be written at the end of a long run: checked before the
// run (its folder exists and is writable, it is not a directory), so a typo fails at once.
void check_report_option(const po::variables_map& vm, const char* name);

}  // namespace linnet::cli
