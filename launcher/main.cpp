// linnet: one command, several subcommands (see `linnet help`). Under mpirun every rank runs
// the same subcommand; an error on any rank ends the whole job with its message.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include <unistd.h>

#include "core/cpu/blas_kernels.h"
#include "core/cpu/cpu_threads.h"
#include "core/error.h"
#include "launcher/commands.h"
#include "launcher/options.h"
#include "launcher/world.h"
#ifdef LINNET_HAVE_MPI
#include "parallel/mpi_runtime.h"
#endif

namespace linnet::cli {
namespace {
const MpiRuntime* g_runtime = nullptr;
}
const MpiRuntime* mpi_runtime() { return g_runtime; }
void set_mpi_runtime(const MpiRuntime* rt) { g_runtime = rt; }
}  // namespace linnet::cli

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  std::function<int(const linnet::cli::Args&)> run;
  bool on_every_rank = false;  // else, under mpirun, world rank 0 alone does it
};

// The launcher's rank from its environment, before (or without) MPI_Init.
int launcher_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return 0;
}

const std::vector<Subcommand>& subcommands() {
  using namespace linnet::cli;
  static const std::vector<Subcommand> table = {
      {"devices", "the CPU backend's kernels and threads, the CUDA devices (or why none); exit 1 without a GPU", cmd_devices},
      {"inspect", "print the model card a checkpoint binds, and per-rank sizes", cmd_inspect},
      {"init", "write a random-weight Hugging Face checkpoint", cmd_init},
      {"pack", "save a checkpoint's matrices in the CPU backend's layout, mapped by later loads", cmd_pack},
      {"quantize", "write a checkpoint's linear layers quantized (FP8 blocks) in a format transformers reads", cmd_quantize},
      {"import-llama2c", "convert a llama2.c checkpoint to a Hugging Face checkpoint", cmd_import_llama2c},
      {"run", "call a sequence of entries on one loaded model", cmd_run, true},
      {"bench", "time prefill and decode beside their measured floors", cmd_bench, true},
      {"generate", "completions for a file of prompts (continuous batching)", cmd_generate, true},
      {"eval", "log-likelihoods of a file of texts or continuations (as lm-eval scores them)", cmd_eval, true},
      {"serve", "an OpenAI-compatible HTTP server (completions, chat) on the batch engine", cmd_serve, true},
      {"run-batch", "an OpenAI batch file (vLLM's run-batch format) through the batch engine", cmd_run_batch, true},
      {"bench-engine", "the batch engine beside one-at-a-time generation and direct scoring", cmd_bench_engine, true},
      {"bench-sweep", "several bench / bench-engine configurations in one process (one GPU's weights made once)", cmd_bench_sweep},
      {"tokenize", "text to token ids with a checkpoint's tokenizer", cmd_tokenize},
      {"detokenize", "token ids to text with a checkpoint's tokenizer", cmd_detokenize},
      {"apply-chat-template", "the prompt a conversation becomes under the checkpoint's chat template", cmd_apply_chat_template},
  };
  return table;
}

void usage(FILE* out) {
  std::fprintf(out, "usage: linnet <subcommand> [options]   (linnet <subcommand> --help)\n\n");
  for (const auto& s : subcommands()) std::fprintf(out, "  %-20s %s\n", s.name, s.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") ||
      !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const Subcommand* cmd = nullptr;
  for (const auto& s : subcommands())
    if (!std::strcmp(argv[1], s.name)) cmd = &s;
  if (!cmd) {
    std::fprintf(stderr, "linnet: unknown subcommand '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
  }
  // Settings the libraries read once, as they load (before main): when one must change, start
  // again with it. OpenBLAS on a CPU it does not know runs SSE3 kernels: the ones the CPU has
  // instead (core/cpu/blas_kernels.h). The commands that run a model: OpenMP's waiting threads
  // spin briefly, then sleep, unless the user chose (core/cpu/cpu_threads.h). Once only; if
  // exec fails, go on as we are.
  bool again = false;
  if (const std::string core = linnet::better_blas_coretype(); !core.empty() && !std::getenv("LINNET_BLAS_CHOSEN")) {
    ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
    ::setenv("LINNET_BLAS_CHOSEN", linnet::blas_coretype().c_str(), 1);
    again = true;
  }
  if (cmd->on_every_rank && linnet::choose_omp_spin()) again = true;
  if (again) {
    ::execv("/proc/self/exe", argv);
    linnet::forget_omp_spin();  // this process's OpenMP has its default: the log must not say otherwise
  }
  // inspect, init, quantize, import-llama2c, tokenize, detokenize, apply-chat-template: one rank's work; the others (if
  // started by mpirun) leave at once so files are written once and output printed once.
  if (!cmd->on_every_rank && launcher_rank() != 0) return 0;
  // Logs and errors go to stderr, results to stdout. Ranks other than 0 log warnings and
  // errors only (--log-level overrides), so their lines never crowd rank 0's.
  spdlog::set_default_logger(spdlog::stderr_color_mt("linnet"));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  if (launcher_rank() != 0) spdlog::set_level(spdlog::level::warn);
  [[maybe_unused]] int world_size = 1;  // only read with MPI
#ifdef LINNET_HAVE_MPI
  std::unique_ptr<linnet::MpiRuntime> runtime;  // outlives the handler below (see world.h)
  if (cmd->on_every_rank && linnet::MpiRuntime::launched_by_mpi()) {
    runtime = std::make_unique<linnet::MpiRuntime>();
    linnet::cli::set_mpi_runtime(runtime.get());
    world_size = runtime->world_size();
    spdlog::set_pattern("[%H:%M:%S.%e] [rank " + std::to_string(runtime->world_rank()) + "] [%l] %v");
  }
#endif
  try {
    const int code = cmd->run(linnet::cli::Args(argv + 2, argv + argc));
    // Results printed to stdout (tokenize, inspect, run --print, the summaries) count too: a
    // full disk or a closed pipe behind it is an error, not a silent loss.
    errno = 0;
    if (std::fflush(stdout) != 0 || std::ferror(stdout))
      throw linnet::Error(linnet::str("stdout: cannot write the results: ", std::strerror(errno ? errno : EIO)));
    return code;
  } catch (const linnet::cli::UsageError& e) {
    // Every rank parses the same command line, so every rank lands here: no one to wait for.
    spdlog::error("{} (see linnet {} --help)", e.what(), cmd->name);
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
#ifdef LINNET_HAVE_MPI
    // Every rank checks the same inputs alike, so usually all fail together and may exit
    // cleanly; if some rank is instead waiting in a collective for this one, end them all.
    if (world_size > 1 && !linnet::all_ranks_arrive(3.0))
      linnet::abort_all(std::string("error: ") + e.what(), 1);
#endif
    return 1;
  }
}
