// linnet bench-engine: the batch engine beside its own baselines, measured in one process on
// one loaded model (docs/benchmarks.md). Not a test: figures and ratios.
//   generate: N prompts by continuous batching, then the same prompts one at a time;
//   eval:     documents through the Evaluator, then the same packs as direct log_probs_packed calls;
//   memory:   peak RSS beside parameters and the KV pool.
#include <sys/resource.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "runtime/loader.h"
#include "core/files.h"
#include "engine/evaluator.h"
#include "engine/generator.h"
#include "layers/footprint.h"
#include "architectures/hf_config.h"
#include "architectures/presets.h"
#include "launcher/kv_memory.h"
#include "launcher/options.h"
#include "launcher/model_command.h"

namespace linnet::cli {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int64_t peak_rss() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

// Generates every request with at most `rows` running at once; returns seconds.
double generate(Model& model, const std::vector<engine::Request>& requests, int64_t rows, int64_t budget,
                int64_t* tokens, int64_t* peak_pages) {
  engine::Generator gen(model, engine::SchedulerLimits{0, rows, budget}, {});
  for (const auto& r : requests)
    if (const std::string why = gen.submit(r); !why.empty()) throw Error(why);
  const auto t0 = Clock::now();
  while (!gen.idle()) gen.step();
  *tokens = gen.stats().generated_tokens;
  *peak_pages = gen.stats().peak_pages;
  return since(t0);
}

}  // namespace

int cmd_bench_engine(const Args& args) {
  po::options_description desc("linnet bench-engine");
  desc.add_options()
      ("checkpoint", po::value<std::string>(), "a checkpoint directory")
      ("config", po::value<std::string>(), "a config.json (or a preset name) with --random-weights")
      ("random-weights", "random weights generated for the config instead of a checkpoint")
      ("layers", po::value<int64_t>(), "override the layer count (random weights)")
      ("no-single", "generate: skip the one-at-a-time baseline")
      ("no-eval", "skip the eval part")
      ("prompts", po::value<int64_t>()->default_value(256), "generate: how many prompts")
      ("prompt-min", po::value<int64_t>()->default_value(8), "generate: shortest prompt (tokens)")
      ("prompt-max", po::value<int64_t>()->default_value(64), "generate: longest prompt (tokens)")
      ("max-new-tokens", po::value<int64_t>()->default_value(64), "generate: tokens per prompt (EOS ignored)")
      ("max-rows", po::value<int64_t>()->default_value(256), "generate: requests running at once")
      ("max-batch-tokens", po::value<int64_t>()->default_value(512), "tokens per step / per packed call")
      ("documents", po::value<int64_t>()->default_value(64), "eval: documents of MaxSeq tokens")
      ("backend", po::value<std::string>()->default_value("auto"), "cpu, cuda or auto")
      ("json", po::value<std::string>(), "write the report as JSON here");
  add_run_options(desc);
  po::variables_map vm;
  if (!parse(args, desc, vm, "linnet bench-engine"))
    return 0;
  const int64_t n = positive_option(vm, "prompts"), lo = positive_option(vm, "prompt-min"),
                hi = positive_option(vm, "prompt-max"), m = positive_option(vm, "max-new-tokens"),
                rows = positive_option(vm, "max-rows"), budget = positive_option(vm, "max-batch-tokens"),
                docs = positive_option(vm, "documents");
  if (hi < lo) throw UsageError("--prompt-max must be at least --prompt-min");
  check_report_option(vm, "json");
  ModelCommand cmd = ModelCommand::open(vm, false);
  RunOptions& o = cmd.options;
  Ranks& ranks = *cmd.ranks;
  if (ranks.shards().size() != 1) throw UsageError("bench-engine runs on one rank");
  const std::string& source = cmd.source;
  const ModelConfig& config = cmd.config;
  // The pool: every prompt at once when memory allows (as generate sizes it), unless --batch says.
  if (vm["batch"].defaulted())
    o.batch = pool_batch(config, o, ranks, KvMemory{0.8, 0},
                         std::vector<int64_t>(static_cast<size_t>(std::min(n, rows)), hi + m));
  const int64_t rss0 = peak_rss();
  LoadedModel loaded = cmd.load();
  Model& model = *loaded.model;
  const Generics& g = loaded.generics;
  const Footprint fp = rank_footprint(loaded.config, g, ranks.backend().compute_dtype(g.t), ranks.backend().weight_dtype(g.t));

  std::mt19937 rng(1);
  std::vector<engine::Request> requests;
  int64_t prompt_tokens = 0;
  for (int64_t i = 0; i < n; ++i) {
    engine::Request r;
    r.index = static_cast<size_t>(i);
    r.prompt.resize(static_cast<size_t>(lo + static_cast<int64_t>(rng() % static_cast<uint32_t>(hi - lo + 1))));
    for (auto& t : r.prompt) t = static_cast<int32_t>(1 + rng() % static_cast<uint32_t>(g.vocab - 1));
    r.params.max_new_tokens = m;
    r.params.ignore_eos = true;
    prompt_tokens += static_cast<int64_t>(r.prompt.size());
    requests.push_back(std::move(r));
  }
  int64_t batched_tokens = 0, single_tokens = 0, batched_pages = 0, single_pages = 0;
  const double batched = generate(model, requests, rows, budget, &batched_tokens, &batched_pages);
  const bool single_run = !vm.count("no-single"), eval_run = !vm.count("no-eval");
  const double single = single_run ? generate(model, requests, 1, budget, &single_tokens, &single_pages) : 0;

  // Eval: documents of MaxSeq tokens as rolling windows, then the very same packs called directly.
  std::vector<engine::Window> windows;
  std::vector<std::array<Tensor, 4>> packs;
  double eval_s = 0, direct_s = 0;
  int64_t scored = 0;
  if (eval_run) {
    for (int64_t d = 0; d < docs; ++d) {
      std::vector<int32_t> text(static_cast<size_t>(g.max_seq));
      for (auto& t : text) t = static_cast<int32_t>(1 + rng() % static_cast<uint32_t>(g.vocab - 1));
      for (auto& w : engine::rolling_windows(static_cast<size_t>(d), text, 1, g.max_seq)) windows.push_back(std::move(w));
    }
    engine::Evaluator ev(model, std::max(budget, g.max_seq));
    std::vector<engine::WindowScore> scores;
    // Direct: the same windows packed the same way (budget), one log_probs_packed call each.
    for (size_t next = 0; next < windows.size();) {
      std::vector<int64_t> tok, pos, seg, tgt;
      for (size_t first = next; next < windows.size(); ++next) {
        const auto& w = windows[next];
        const int64_t len = static_cast<int64_t>(w.context.size() + w.scored.size()) - 1;
        if (next > first && static_cast<int64_t>(tok.size()) + len > std::max(budget, g.max_seq)) break;
        std::vector<int32_t> all = w.context;
        all.insert(all.end(), w.scored.begin(), w.scored.end());
        for (int64_t i = 0; i < len; ++i) {
          tok.push_back(all[i]);
          pos.push_back(i);
          seg.push_back(static_cast<int64_t>(next - first));
          tgt.push_back(i + 1 >= static_cast<int64_t>(w.context.size()) ? all[i + 1] : -1);
        }
      }
      const int64_t p = static_cast<int64_t>(tok.size());
      packs.push_back({Tensor::from_ints({p}, tok), Tensor::from_ints({p}, pos), Tensor::from_ints({p}, seg),
                       Tensor::from_ints({p}, tgt, DType::i64)});
    }
    // Alternating, best of 3 each (the first runs also warm the threads and caches).
    eval_s = direct_s = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      auto t0 = Clock::now();
      ev.score(windows, scores);
      eval_s = std::min(eval_s, since(t0));
      t0 = Clock::now();
      for (const auto& pk : packs) model.log_probs_packed(pk[0], pk[1], pk[2], pk[3]);
      direct_s = std::min(direct_s, since(t0));
    }
    for (const auto& s : scores) scored += s.tokens;
  }

  const int64_t pool_bytes = fp.kv_per_slot * g.batch * g.max_seq, rss = peak_rss();
  std::printf("linnet bench-engine: %s, backend %s, T %s, Batch %lld × MaxSeq %lld (pool %lld pages of %lld)\n",
              source.c_str(), ranks.backend().name().c_str(), dtype_name(g.t),
              static_cast<long long>(g.batch), static_cast<long long>(g.max_seq),
              static_cast<long long>(g.num_pages()), static_cast<long long>(g.page_size));
  std::printf("generate %lld prompts (%lld–%lld tokens, %lld new each):\n", static_cast<long long>(n),
              static_cast<long long>(lo), static_cast<long long>(hi), static_cast<long long>(m));
  std::printf("  continuous batching (≤ %lld rows): %8.2f s  %8.1f tok/s  peak %lld pages\n",
              static_cast<long long>(rows), batched, batched_tokens / batched, static_cast<long long>(batched_pages));
  if (single_run) {
    std::printf("  one at a time                   : %8.2f s  %8.1f tok/s  peak %lld pages\n", single,
                single_tokens / single, static_cast<long long>(single_pages));
    std::printf("  speed-up                        : %8.2f×\n", single / batched);
  }
  if (eval_run) {
    std::printf("eval %lld documents of %lld tokens (%zu windows, %zu packs, %lld tokens scored):\n",
                static_cast<long long>(docs), static_cast<long long>(g.max_seq), windows.size(), packs.size(),
                static_cast<long long>(scored));
    std::printf("  Evaluator       : %8.3f s  %8.1f tok/s\n", eval_s, scored / eval_s);
    std::printf("  log_probs_packed: %8.3f s  %8.1f tok/s\n", direct_s, scored / direct_s);
    std::printf("  engine overhead : %+7.1f%%\n", 100 * (eval_s / direct_s - 1));
  }
  std::printf("memory: peak RSS %s (before loading %s); parameters %s, KV pool %s\n", human_bytes(double(rss)).c_str(),
              human_bytes(double(rss0)).c_str(), human_bytes(double(fp.parameters)).c_str(),
              human_bytes(double(pool_bytes)).c_str());
  if (vm.count("json")) {
    nlohmann::json j = {
        {"model", source}, {"backend", ranks.backend().name()},
        {"prompts", n}, {"max_new_tokens", m}, {"prompt_tokens", prompt_tokens},
        {"generate", {{"batched_s", batched}, {"batched_tok_s", batched_tokens / batched},
                      {"peak_pages", batched_pages}, {"pool_pages", g.num_pages()}}},
        {"memory", {{"peak_rss", rss}, {"rss_before_load", rss0}, {"parameters", fp.parameters}, {"kv_pool", pool_bytes}}}};
    if (single_run) {
      j["generate"]["single_s"] = single;
      j["generate"]["speedup"] = single / batched;
      j["generate"]["single_tok_s"] = single_tokens / single;
    }
    if (eval_run)
      j["eval"] = {{"evaluator_s", eval_s}, {"direct_s", direct_s}, {"overhead", eval_s / direct_s - 1},
                   {"tokens_scored", scored}};
    write_text_file(vm["json"].as<std::string>(), j.dump(2) + "\n", "the --json report");
  }
  return 0;
}

}  // namespace linnet::cli
