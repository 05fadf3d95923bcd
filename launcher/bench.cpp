// linnet bench: latency and throughput of prefill and decode at given shapes, each beside its
// floor measured in the same run (bytes / copy bandwidth for decode, FLOPs / matmul rate for
// prefill), with the collectives' share when Shards > 1. Not a test: numbers, not verdicts.
#include <cblas.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "layers/model_definition.h"
#include "runtime/loader.h"
#include "core/files.h"
#include "core/profiling_backend.h"
#include "architectures/hf_config.h"
#include "architectures/presets.h"
#include "checkpoint/random_weights.h"
#include "launcher/options.h"
#include "layers/footprint.h"
#include "launcher/model_command.h"
#include "parallel/timed_communicator.h"

namespace linnet::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct Stats {
  double median = 0, min = 0, max = 0;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

// Times f (after `warmup` untimed runs), waiting for the backend around each run. The
// collectives' clock starts after the warm-up too (ranks may still be loading before it).
template <class F>
Stats time_it(Backend& be, int warmup, int repeats, F f, TimedCommunicator* comm = nullptr) {
  for (int i = 0; i < warmup; ++i) f();
  if (comm) {
    comm->barrier();
    comm->reset();
  }
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    be.synchronize();
    const auto t0 = Clock::now();
    f();
    be.synchronize();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return stats(t);
}

// The two ceilings: device copy bandwidth (bytes read + written) and matmul rate.
// Host read bandwidth with the run's own OpenMP threads: what a decode step on the CPU
// streams its weights at (a copy also writes, and ran on fewer threads).
double host_read_bandwidth() {
  const int64_t n = int64_t{64} << 20;  // 256 MiB of f32: far past the caches
  // On huge pages, as the weights are (Tensor::empty): 4 KiB pages would measure TLB misses.
  Tensor buf = Tensor::empty({n}, DType::f32);
  std::fill(buf.ptr<float>(), buf.ptr<float>() + n, 1.0f);
  const float* a = buf.ptr<float>();
  double sink = 0;
  constexpr int64_t kChunk = 4096;
  auto once = [&] {
    double total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (int64_t c = 0; c < n / kChunk; ++c) {
      const float* p = a + c * kChunk;
      float part = 0;
      for (int64_t k = 0; k < kChunk; k += 16) {
        __builtin_prefetch(p + k + 1024);  // 4 KiB ahead, as the weight kernels read
        float line = 0;
#pragma omp simd reduction(+ : line)
        for (int64_t j = 0; j < 16; ++j) line += p[k + j];
        part += line;
      }
      total += part;
    }
    sink += total;
  };
  once();
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  if (sink < 0) std::printf(" ");  // keeps the sums from being optimised away
  return static_cast<double>(n) * sizeof(float) / t[t.size() / 2];
}

double copy_bandwidth(Backend& be, DType dt) {
  const int64_t n = be.device() == Device::cpu ? (int64_t{64} << 20) : (int64_t{1} << 30);
  Tensor a = be.empty({n}, dt), b = be.empty({n}, dt);
  be.fill_zero(a);
  const Stats s = time_it(be, 2, 5, [&] { be.convert(a, b); });
  return 2.0 * static_cast<double>(a.nbytes()) / s.median;
}
// The machine's f32 matrix rate: on the CPU OpenBLAS's sgemm (a library tuned to the core,
// independent of the backend's own kernel); on CUDA the backend's own product (cuBLAS's
// comes from Backend::library_matmul_rate).
double matmul_rate(Backend& be, DType dt) {
  if (be.device() == Device::cpu) {
    const int n = 1024;
    std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), c(a.size());
    std::vector<double> t;
    for (int r = 0; r < 7; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, a.data(), n, 0.0f, c.data(), n);
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return 2.0 * n * n * n / t[t.size() / 2];
  }
  const int64_t n = 8192;
  Tensor x = be.upload(Tensor::from_floats({n, n}, std::vector<float>(n * n, 0.5f), dt));
  Tensor y = be.empty({n, n}, dt);
  const Stats s = time_it(be, 2, 5, [&] { be.matmul(x, x, nullptr, y); });
  return 2.0 * static_cast<double>(n) * n * n / s.median;
}

}  // namespace

int cmd_bench(const Args& args) {
  po::options_description desc("linnet bench");
  desc.add_options()
      ("checkpoint", po::value<std::string>(), "a checkpoint directory")
      ("config", po::value<std::string>(), "a config.json (or a preset name) with --random-weights")
      ("random-weights", "random weights generated for the config instead of a checkpoint")
      ("layers", po::value<int64_t>(), "override the layer count (random weights)")
      ("prompt", po::value<int64_t>()->default_value(128), "prefill length per row")
      ("gen", po::value<int64_t>()->default_value(32), "decode steps timed per repeat")
      ("warmup", po::value<int>()->default_value(1), "untimed repeats")
      ("repeats", po::value<int>()->default_value(3), "timed repeats (median, min, max reported)")
      ("json", po::value<std::string>(), "write the report as JSON here")
      ("profile", "after the timed runs, one prefill and --gen decode steps more with each op timed")
      ("backend", po::value<std::string>()->default_value("auto"), "cpu, cuda or auto")
      ("tp", po::value<int>()->default_value(0), "ranks per model replica");
  add_run_options(desc);
  po::variables_map vm;
  if (!parse(args, desc, vm, "linnet bench"))
    return 0;
  const int64_t prompt = positive_option(vm, "prompt"), gen = positive_option(vm, "gen");
  const int repeats = static_cast<int>(positive_option(vm, "repeats")), warmup = vm["warmup"].as<int>();
  if (warmup < 0) throw UsageError(str("--warmup must be 0 or more, got ", warmup));
  check_report_option(vm, "json");
  ModelCommand cmd = ModelCommand::open(vm, false);
  RunOptions& o = cmd.options;
  Ranks& ranks = *cmd.ranks;
  Backend& be = ranks.backend();
  // The model calls its ops through this; it times them only while armed (--profile).
  ProfilingBackend model_be(be);
  TimedCommunicator comm(ranks.shards(), be);
  if (o.max_seq == 0) {  // every step the run takes, in whole pages; checked: --gen 2^62 must not wrap
    int64_t steps = 0, need = 0;
    if (__builtin_mul_overflow(gen, int64_t{warmup} + repeats + (vm.count("profile") ? 1 : 0), &steps) || __builtin_add_overflow(prompt, steps + 63, &need))
      throw UsageError(str("bench: --prompt ", prompt, " + --gen ", gen, " x (", warmup, " + ", repeats,
                           ") runs are more positions than a sequence can hold"));
    o.max_seq = need / 64 * 64;
  }

  const ModelConfig& config = cmd.config;
  const std::string& source = cmd.source;
  // The host's read ceiling is measured before the weights load: its 256 MiB buffer, freed
  // before the packed file's pages are made resident (its checksums are verified at load),
  // then never adds to the peak RSS beside the weights (+190 MiB on the 1B preset, issue 36).
  const double host_bw = be.device() == Device::cpu ? host_read_bandwidth() : 0;
  const auto load_start = std::chrono::steady_clock::now();
  std::unique_ptr<Model> model = std::move(cmd.load(model_be, comm).model);
  // Loading (or making random weights) up to a model ready on every rank of the group.
  comm.barrier();
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  const Generics g = model->generics();
  const DType act = be.compute_dtype(g.t);
  const double bw = be.device() == Device::cpu ? host_bw : copy_bandwidth(be, act);
  // The matmul ceiling: on the CPU OpenBLAS; on a GPU cuBLAS where it can be opened, else the
  // backend's own product (then a prefill "of floor" only compares linnet with itself).
  const double own_rate = matmul_rate(be, act);
  std::string rate_source = be.device() == Device::cpu ? "OpenBLAS sgemm" : "linnet's own";
  double rate = own_rate;
  if (be.device() != Device::cpu) {
    std::string lib;
    if (const double r = be.library_matmul_rate(act, &lib); r > 0) {
      rate = r;
      rate_source = lib;
    } else if (!lib.empty()) {
      rate_source += str(" (", lib, ")");
    }
  }

  // Parameters this rank streams per decode step, and the FLOPs of a prefill.
  // Matrices in the backend's weight dtype (the CPU keeps bf16/f16 as stored), the rest in act.
  const DType held_weights = be.weight_dtype(g.t);
  int64_t matmul_params = 0, lm_head_params = 0;
  double wbytes = 0;
  // A mixture of experts: a token runs TopK of the Experts, so a prefill's products cover TopK /
  // Experts of the experts' weights per token; which experts a decode step reads depends on the
  // routing, so their bytes are counted as the step runs (the backend's
  // grouped_matmul_weight_bytes: each expert with rows, once).
  double expert_params = 0;
  for (const auto& p : parameter_specs(config, g)) {
    if (!p.held_by(comm.rank())) continue;  // another rank's expert
    const int64_t n = p.shard_shape().numel();
    if (p.card_name == "embedding.weight") continue;  // the embedding reads only B rows (a tied lm_head: whole)
    const double bytes = static_cast<double>(n) * dtype_size(p.full.rank() == 2 ? held_weights : act);
    if (p.card_name.find(".experts[") != std::string::npos) {
      expert_params += static_cast<double>(n);
      continue;
    }
    if (p.full.rank() == 2) matmul_params += n;
    // Latent attention's kv_b_proj is read by grouped_matmul (its absorbed per-head blocks):
    // counted with the experts' bytes as the step runs, not twice.
    if (p.held_dequantized) continue;
    wbytes += bytes;
    if (p.card_name == "lm_head.weight") lm_head_params = n;
  }
  const double active = g.experts > 0 ? static_cast<double>(g.top_k) / static_cast<double>(g.experts) : 0.0;
  auto grouped_weight_bytes = [&be] {
    for (const auto& [name, value] : be.counters())
      if (name == "grouped_matmul_weight_bytes") return static_cast<double>(value);
    return 0.0;
  };
  std::vector<int64_t> ids(static_cast<size_t>(g.batch * prompt));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7919) % g.vocab);
  const Tensor prompt_t = Tensor::from_ints({g.batch, prompt}, ids);

  const Stats pre = time_it(be, warmup, repeats, [&] { model->prefill(prompt_t, 0); }, &comm);
  const double pre_comm = comm.seconds() / repeats, pre_a2a = comm.all_to_all_seconds() / repeats;
  // The layers for every token; the lm_head only for the last one of each row (all prefill reads).
  const double pre_flops = 2.0 * (static_cast<double>(matmul_params - lm_head_params) + expert_params * active) *
                               g.batch * prompt +
                           2.0 * static_cast<double>(lm_head_params) * g.batch;
  int64_t pos = prompt;
  // Each row its own token (the same token in every row would route every row alike).
  std::vector<int64_t> step_ids(static_cast<size_t>(g.batch));
  for (size_t i = 0; i < step_ids.size(); ++i) step_ids[i] = static_cast<int64_t>((i * 7919 + 13) % g.vocab);
  Tensor step = Tensor::from_ints({g.batch, 1}, step_ids);
  const double experts_read_before = grouped_weight_bytes();
  const Stats dec = time_it(
      be, warmup, repeats, [&] {
        for (int64_t i = 0; i < gen; ++i) model->decode(step, static_cast<int32_t>(pos++));
      },
      &comm);
  const double dec_comm = comm.seconds() / repeats / gen, dec_a2a = comm.all_to_all_seconds() / repeats / gen;
  const double per_tok = dec.median / gen;
  // This rank's experts' bytes a decode step read (warm-up steps included in the mean).
  const double expert_step_bytes = (grouped_weight_bytes() - experts_read_before) / ((warmup + repeats) * gen);
  // Decode floor: the weights once, plus the cache read at the mean position — each layer's
  // keys and values, or latent attention's one latent vector a position (layers/cache_layout.h).
  // A hybrid's Gated DeltaNet layers read and write each row's state every step (f32).
  double kv_per_position = 0, state_per_row = 0;
  for (const LayerCacheSpec& l : layer_states(config, g)) {
    kv_per_position += static_cast<double>(l.values_per_slot());
    state_per_row += static_cast<double>(l.state_values_per_row());
  }
  const double kv = kv_per_position * g.batch * (prompt + gen) * dtype_size(g.cache_dtype(act)) +
                    2.0 * state_per_row * 4 * g.batch;
  // Decode streams the weights once for all rows, but at a larger batch its FLOPs bound it.
  const double dec_flops = 2.0 * (static_cast<double>(matmul_params) + expert_params * active) * g.batch;
  const double dec_floor = std::max((wbytes + expert_step_bytes + kv) / bw, dec_flops / rate), pre_floor = pre_flops / rate;

  // --profile: the same work once more, each op timed (device time on a GPU). What the ops
  // do not cover is the host's planning, uploads and launch gaps.
  nlohmann::json profile;
  std::string profile_text;
  if (vm.count("profile")) {
    auto measure = [&](const char* phase, int64_t steps, auto&& work) {
      model_be.reset();
      be.synchronize();
      comm.barrier();
      model_be.arm(true);
      const auto t0 = std::chrono::steady_clock::now();
      work();
      be.synchronize();
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      model_be.arm(false);
      double in_ops = 0;
      nlohmann::json ops = nlohmann::json::array();
      profile_text += str(phase, " (", steps, steps == 1 ? " call" : " steps", ", ", wall * 1e3, " ms wall):\n");
      for (const auto& t : model_be.report()) {
        in_ops += t.seconds;
        ops.push_back({{"op", t.op}, {"calls", t.calls}, {"seconds", t.seconds}});
        char line[160];
        std::snprintf(line, sizeof line, "  %-18s %8lld calls %10.3f ms %9.1f us/call %6.1f%%\n", t.op.c_str(),
                      static_cast<long long>(t.calls), t.seconds * 1e3, t.seconds / t.calls * 1e6, 100 * t.seconds / wall);
        profile_text += line;
      }
      char line[160];
      std::snprintf(line, sizeof line, "  %-18s %8s       %10.3f ms %9s        %6.1f%%\n", "(outside the ops)", "",
                    (wall - in_ops) * 1e3, "", 100 * (wall - in_ops) / wall);
      profile_text += line;
      profile[phase] = {{"wall_s", wall}, {"steps", steps}, {"ops", ops}};
    };
    measure("prefill", 1, [&] { model->prefill(prompt_t, 0); });
    measure("decode", gen, [&] {
      for (int64_t i = 0; i < gen; ++i) model->decode(step, static_cast<int32_t>(pos++));
    });
  }

  nlohmann::json report = {
      {"model", source}, {"backend", be.name()}, {"dtype", dtype_name(g.t)}, {"shards", g.shards},
      {"batch", g.batch}, {"prompt", prompt}, {"gen", gen}, {"repeats", repeats}, {"load_s", load_s},
      {"ceilings", {{"bandwidth_GBps", bw / 1e9}, {"bandwidth", be.device() == Device::cpu ? "read" : "copy"},
                    {"matmul_TFLOPs", rate / 1e12}, {"matmul", rate_source}}},
      {"prefill", {{"median_s", pre.median}, {"min_s", pre.min}, {"max_s", pre.max},
                   {"tokens_per_s", g.batch * prompt / pre.median}, {"collective_s", pre_comm},
                   {"floor_s", pre_floor}, {"fraction_of_floor", pre_floor / pre.median}}},
      {"decode", {{"ms_per_step", per_tok * 1e3}, {"min_ms", dec.min / gen * 1e3}, {"max_ms", dec.max / gen * 1e3},
                  {"tokens_per_s", g.batch / per_tok}, {"collective_ms_per_step", dec_comm * 1e3},
                  {"floor_ms", dec_floor * 1e3}, {"fraction_of_floor", dec_floor / per_tok}}}};
  if (be.device() != Device::cpu) report["ceilings"]["own_matmul_TFLOPs"] = own_rate / 1e12;
  if (g.experts > 0) {
    // The experts' all-to-alls (expert sharding), part of the collectives above: their share of a step.
    report["moe"] = {{"experts", g.experts}, {"top_k", g.top_k}, {"sharding", moe_sharding_name(g.moe_sharding)},
                     {"expert_bytes_per_decode_step", expert_step_bytes}};
    report["prefill"]["all_to_all_s"] = pre_a2a;
    report["prefill"]["all_to_all_share"] = pre_a2a / pre.median;
    report["decode"]["all_to_all_ms_per_step"] = dec_a2a * 1e3;
    report["decode"]["all_to_all_share"] = dec_a2a / per_tok;
  }
  for (const auto& [name, value] : be.counters()) report["backend_counters"][name] = value;  // graphs, launches
  if (ranks.world_rank() == 0) {
    std::printf("linnet bench: %s, backend %s, T %s, Shards %lld, Batch %lld\n", source.c_str(), be.name().c_str(),
                dtype_name(g.t), static_cast<long long>(g.shards), static_cast<long long>(g.batch));
    if (ranks.stages() > 1)  // (issue 41: the stages' own floors, bubble and transfers are not measured yet)
      std::printf("pipeline: %d stages, one micro-batch in flight; the floors below are one rank's whole model, not a "
                  "stage's, and the bubble's and the stage-to-stage transfers' shares are not reported yet\n",
                  ranks.stages());
    std::printf("load: %.2f s (%s)\n", load_s, vm.count("random-weights") ? "making random weights" : "reading the checkpoint");
    std::printf("ceilings: %s %.1f GB/s, matmul %.2f TFLOP/s (%s, measured now)", be.device() == Device::cpu ? "read" : "copy",
                bw / 1e9, rate / 1e12, rate_source.c_str());
    if (be.device() != Device::cpu && rate != own_rate) std::printf("; linnet's own product %.2f TFLOP/s", own_rate / 1e12);
    std::printf("\n");
    std::printf("%-8s %12s %14s %14s %12s %10s\n", "phase", "median", "throughput", "collectives", "floor", "of floor");
    std::printf("%-8s %9.2f ms %10.0f tok/s %11.2f ms %9.2f ms %9.0f%%\n", "prefill", pre.median * 1e3,
                g.batch * prompt / pre.median, pre_comm * 1e3, pre_floor * 1e3, 100 * pre_floor / pre.median);
    std::printf("%-8s %9.3f ms %10.0f tok/s %11.3f ms %9.3f ms %9.0f%%\n", "decode", per_tok * 1e3, g.batch / per_tok,
                dec_comm * 1e3, dec_floor * 1e3, 100 * dec_floor / per_tok);
    if (g.experts > 0)
      std::printf("experts: %lld, top %lld, --moe-sharding %s; a decode step read %.1f MB of this rank's experts; "
                  "all-to-all (in the collectives above): prefill %.2f ms (%.1f%% of it), decode %.3f ms a step (%.1f%%)\n",
                  static_cast<long long>(g.experts), static_cast<long long>(g.top_k), moe_sharding_name(g.moe_sharding),
                  expert_step_bytes / 1e6, pre_a2a * 1e3, 100 * pre_a2a / pre.median, dec_a2a * 1e3,
                  100 * dec_a2a / per_tok);
    if (!profile.is_null()) {
      report["profile"] = profile;
      std::printf("profile (each op timed on its own: %s):\n%s", be.device() == Device::cpu ? "wall time" : "device time, CUDA events",
                  profile_text.c_str());
    }
    if (vm.count("json")) {
      write_text_file(vm["json"].as<std::string>(), report.dump(2) + "\n", "the --json report");
    }
  }
  return 0;
}

}  // namespace linnet::cli
