// linnet inspect: the model card as a checkpoint binds it, then (when asked) what each rank
// holds for a given Shards.
#include <unistd.h>

#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "architectures/hf_config.h"
#include "architectures/presets.h"
#include "core/backend.h"
#include "layers/card.h"
#include "layers/footprint.h"
#include "layers/model_definition.h"
#include "layers/parameters.h"
#include "launcher/options.h"

namespace linnet::cli {

namespace {

std::string render_card(const ModelConfig& c, const Generics& g) {
  std::ostringstream o;
  o << "Entries\n\nEntry\tSignature\n";
  for (const auto& e : card::entries()) o << e.name << "\t" << card::format_signature(e) << "\n";
  o << "\nGenerics\n\nThe root block's generics as this checkpoint binds them.\n\n";
  o << "Vocab\t" << g.vocab << "\nH\t" << g.hidden << "\nHeads\t" << g.heads << "\nKvHeads\t" << g.kv_heads
    << "\nInner\t" << g.inner << "\nLayers\t" << g.layers << "\nBatch\t" << g.batch << "\nMaxSeq\t" << g.max_seq
    << "\nT\t" << dtype_name(g.t) << "\n";
  for (const auto& [name, value] : card::extra_generics(c)) o << name << "\t" << value << "\n";
  o << "\nBlocks\n\nEvery block of the program with its members and functions, as linnet inspect prints them.";
  for (const auto& b : card::blocks_for(c)) {
    o << "\n\n" << b.name << "\n\n" << b.header;
    for (const auto& m : b.members) o << "\n  " << m;
    for (const auto& f : b.functions) o << "\n  " << f.kind << " " << card::format_signature(f);
  }
  return o.str();
}

std::string render_shards(const ModelConfig& c, const Generics& g, const RunOptions& options, const std::string& backend) {
  std::ostringstream o;
  const DType held = backend_compute_dtype(backend, g.t), weights = backend_weight_dtype(backend, g.t);
  const std::string as = weights == held ? dtype_name(held)
                                         : str(dtype_name(weights), " (matrices; ", dtype_name(held), " the norms and the KV cache)");
  o << "Shards\n\nShards " << g.shards << ", T " << dtype_name(g.t) << " (held as " << as << " by the "
    << backend << " backend), Batch " << g.batch << ", MaxSeq " << g.max_seq << ", PageSize " << g.page_size
    << ". Every rank holds the same shapes";
  if (g.vocab % g.shards) o << " (lm_head's last shard padded: " << g.vocab_per_shard() * g.shards - g.vocab << " rows)";
  if (g.kv_replicas() > 1)
    o << " (KV heads replicated: KvHeads " << g.kv_heads << " < Shards " << g.shards << ", so each rank holds the one KV "
      << "head its q heads use, and each KV head is held by " << g.kv_replicas() << " ranks: k/v rows, their cache)";
  if (c.quantization)
    o << ". The linear layers' matrices are stored " << c.quantization->describe()
      << " (quantization_config; read as stored, their scales counted in the bytes)";
  o << ":\n\nParameter\tSplit\tShape per rank\tStored\tBytes per rank\n";
  // One line per parameter of the first layer of each kind (dense or sparse; full or linear
  // attention), its count after ×; one line per expert tensor (experts[*]), × the experts a rank holds.
  auto layer_of = [](const std::string& name) -> int64_t {
    if (name.rfind("layers[", 0) != 0) return -1;
    return std::stoll(name.substr(7, name.find(']') - 7));
  };
  auto kind_of = [&](int64_t i) { return (c.sparse_layer(i) ? 2 : 0) + (c.linear_layer(i) ? 1 : 0); };
  int64_t first[4] = {-1, -1, -1, -1}, count[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < g.layers; ++i) {
    count[kind_of(i)] += 1;
    if (first[kind_of(i)] < 0) first[kind_of(i)] = i;
  }
  const std::vector<ParamSpec> specs = parameter_specs(c, g);
  // Per kind, the tensors (after "layers[i]") of its first layer; a tensor several kinds have
  // (the norms) is one line, × the layers of all of them.
  std::map<std::string, int64_t> layers_with;
  for (const auto& p : specs)
    if (const int64_t layer = layer_of(p.card_name); layer >= 0 && layer == first[kind_of(layer)])
      layers_with[p.card_name.substr(p.card_name.find(']') + 1)] += count[kind_of(layer)];
  std::set<std::string> listed;
  for (const auto& p : specs) {
    const int64_t layer = layer_of(p.card_name);
    std::string name = p.card_name;
    int64_t times = 1;
    if (layer >= 0) {
      if (layer != first[kind_of(layer)]) continue;
      times = layers_with[name.substr(name.find(']') + 1)];
      name = "layers[*]" + name.substr(name.find(']') + 1);
      if (!listed.insert(name).second) continue;
    }
    if (const size_t at = name.find(".experts["); at != std::string::npos) {
      const size_t close = name.find(']', at);
      if (name.substr(at + 9, close - at - 9) != "0") continue;
      name = name.substr(0, at) + ".experts[*]" + name.substr(close + 1);
      times *= g.experts_per_shard();
    }
    o << name << "\t" << split_name(p.split) << (p.replicas > 1 ? str(" (×", p.replicas, " replicated)") : "") << "\t"
      << p.shard_shape().to_string() << "\t";
    if (!p.layout.dense())
      o << p.layout.describe() << (p.held_dequantized ? str(", held in ", dtype_name(weights), " (absorbed)") : "");
    else
      o << dtype_name(p.dtype == DType::f32 ? DType::f32 : p.full.rank() == 2 ? weights : held);  // f32: kept so (routers)
    o << "\t";
    if (name == "lm_head.weight" && c.tie_word_embeddings) {
      o << "0 (a view of embedding.weight: tied)\n";
      continue;
    }
    o << held_bytes(c, p, held, weights);
    if (times > 1 || layer >= 0) o << " ×" << times;
    o << "\n";
  }
  if (c.moe())
    o << "\nExperts: " << g.experts << " per layer, " << g.experts_per_shard() << " held by each rank ("
      << (g.expert_parallel() ? str("--moe-sharding expert: rank s holds experts s·", g.experts_per_shard(), " … whole")
                              : str("--moe-sharding tensor: ", g.expert_inner_per_shard(), " of each expert's ",
                                    g.expert_inner, " inner rows"))
      << ")\n";
  // What the loader refuses before any read (a slice off a quantized format's block
  // boundaries): said here, so a plan is never one that cannot run.
  auto block_problem = [&](const Generics& gm) -> std::string {
    try {
      for (const ParamSpec& p : parameter_specs(c, gm)) p.check_blocks(gm.shards);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  if (const std::string why = block_problem(g); !why.empty()) o << "\nRefused at load: " << why << "\n";
  const Footprint f = rank_footprint(c, g, held, weights);
  o << "\nParameters per rank\t" << f.parameters << " (" << human_bytes(static_cast<double>(f.parameters)) << ")\n";
  const auto states = layer_states(c, g);
  o << "KV cache per rank\t" << f.kv_cache << " (" << human_bytes(static_cast<double>(f.kv_cache)) << ") = ";
  if (!states.empty() && states[0].kind == LayerCacheSpec::Kind::latent)  // latent attention: one vector a position
    o << g.layers << " layers × [" << g.batch << ", " << g.max_seq << ", " << states[0].dim << "] "
      << dtype_name(g.cache_dtype(held)) << (g.kv_dtype ? " (--kv-cache-dtype)" : "")
      << " (cache_latent: [k_pe | c_kv], whole on every rank)\n";
  else {
    int64_t kv_layers = 0;  // the layers keeping keys and values (not a hybrid's linear ones)
    for (const auto& s : states) kv_layers += s.kind == LayerCacheSpec::Kind::heads;
    o << "2 × " << kv_layers << " layers × [" << g.batch << ", " << g.kv_heads_per_shard() << ", " << g.max_seq << ", "
      << g.head_dim() << "] " << dtype_name(g.cache_dtype(held)) << (g.kv_dtype ? " (--kv-cache-dtype)" : "") << "\n";
  }
  if (f.state > 0) {
    // Gated DeltaNet: a fixed size a row, whatever MaxSeq (the conv's last inputs, the delta state).
    const LayerCacheSpec* r = nullptr;
    int64_t n = 0;
    for (const auto& s : states)
      if (s.kind == LayerCacheSpec::Kind::recurrent) r = &s, ++n;
    o << "Recurrent state per rank\t" << f.state << " (" << human_bytes(static_cast<double>(f.state)) << ") = " << n
      << " layers × (" << g.batch << " rows + " << g.state_snapshots << " snapshots) × ([" << r->conv_channels << ", " << r->conv_kept << "] + ["
      << r->delta.value_heads << ", " << r->delta.key_dim << ", " << r->delta.value_dim << "]) f32\n";
  }
  o << "Total per rank\t" << f.total() << " (" << human_bytes(static_cast<double>(f.total())) << ")\n";
  if (c.moe()) {
    // Both ways to shard the experts, side by side (what --moe-sharding would change).
    o << "\nPer rank by --moe-sharding (parameters + KV cache):\n";
    for (MoeSharding m : {MoeSharding::expert, MoeSharding::tensor}) {
      RunOptions other = options;
      other.moe_sharding = m;
      o << moe_sharding_name(m) << "\t";
      try {
        const Footprint fm = rank_footprint(c, bind_generics(c, other), held, weights);
        o << fm.total() << " (" << human_bytes(static_cast<double>(fm.total())) << "; parameters "
          << human_bytes(static_cast<double>(fm.parameters)) << ")" << (m == g.moe_sharding ? "  (this run)" : "");
        if (const std::string why = block_problem(bind_generics(c, other)); !why.empty()) o << "  refused at load";
        o << "\n";
      } catch (const Error& e) {
        o << "not possible: " << e.what() << "\n";
      }
    }
  }
  return o.str();
}

// Each pipeline stage's layers and what one of its ranks holds (parallel/world_config.h).
std::string render_stages(const ModelConfig& c, const Generics& g, const PipelineOption& pipeline,
                          const std::string& backend) {
  const DType held = backend_compute_dtype(backend, g.t), weights = backend_weight_dtype(backend, g.t);
  const std::vector<StageLayers> stages = stage_layers(g.layers, pipeline.pp, pipeline.counts);
  std::ostringstream o;
  o << "Pipeline stages\n\n--pp " << pipeline.pp << (pipeline.counts.empty() ? " (layers split evenly" : " (--pp-layers")
    << "): each stage a contiguous range of layers on its own Shards " << g.shards
    << " ranks — a replica's ranks shard innermost, then stage (docs/parallel.md); the embedding on stage 0, the final "
       "norm and lm_head on stage "
    << pipeline.pp - 1
    << (c.tie_word_embeddings && pipeline.pp > 1 ? " (lm_head tied to the embedding: a copy of it there)" : "") << ":\n\n";
  o << "(The per-rank totals above are one rank's at --pp 1; a stage's ranks hold its row here.)\n\n";
  o << "Stage\tLayers\tBesides\tParameters per rank\tKV cache per rank\tRecurrent state per rank\tTotal per rank\n";
  for (size_t s = 0; s < stages.size(); ++s) {
    StageShare share{stages[s].begin, stages[s].end, s == 0, s + 1 == stages.size()};
    const Footprint f = rank_footprint(c, g, held, weights, share);
    std::string besides = share.first ? "embedding" : "";
    if (share.last) besides += std::string(besides.empty() ? "" : ", ") + "norm, lm_head";
    o << s << "\t" << stages[s].begin << "–" << stages[s].end - 1 << " (" << stages[s].count() << ")\t"
      << (besides.empty() ? "—" : besides) << "\t" << f.parameters << " (" << human_bytes(double(f.parameters)) << ")\t"
      << f.kv_cache << " (" << human_bytes(double(f.kv_cache)) << ")\t" << f.state << " ("
      << human_bytes(double(f.state)) << ")\t" << f.total() << " (" << human_bytes(double(f.total())) << ")\n";
  }
  return o.str();
}

}  // namespace

int cmd_inspect(const Args& args) {
  po::options_description desc("linnet inspect");
  desc.add_options()("checkpoint", po::value<std::string>()->required(),
                     "checkpoint directory (config.json is enough), a config.json, or a preset's name (a plan "
                     "for a published model's shapes: deepseek-v3, kimi-k2, glm-4.5, …)")(
      "backend", po::value<std::string>()->default_value("auto"),
      "size for this backend's dtypes: cpu, cuda or auto (cuda when a GPU is visible)");
  add_run_options(desc);
  po::variables_map vm;
  if (!parse(args, desc, vm, "linnet inspect"))
    return 0;
  const std::string dir = vm["checkpoint"].as<std::string>();
  const ModelConfig config = preset_or_config(dir);
  const RunOptions options = run_options(vm);
  const Generics g = bind_generics(config, options);
  // The card alone is byte-for-byte what the seed shows; the per-rank sizes follow only
  // when a sizing option was given, so `inspect` without one reproduces the card exactly.
  const bool sizing = vm.count("shards") || !vm["batch"].defaulted() || !vm["max-seq"].defaulted() ||
                      vm.count("page-size") || !vm["backend"].defaulted() || vm.count("dtype") ||
                      !vm["moe-sharding"].defaulted() || !vm["kv-cache-dtype"].defaulted() || vm.count("state-snapshots");
  const PipelineOption pipeline = pp_option(vm);
  const bool staged = pipeline.pp > 1 || vm.count("pp-layers");
  if (staged) stage_layers(g.layers, pipeline.pp, pipeline.counts);  // a layout that cannot be: refused before anything
  std::string out = "linnet inspect " + dir + "\n\n" + render_card(config, g);
  std::string backend = vm["backend"].as<std::string>();
  if (backend == "auto") backend = cuda_device_count() > 0 ? "cuda" : "cpu";
  if (sizing || staged) out += "\n\n" + render_shards(config, g, options, backend);
  if (staged) out += "\n" + render_stages(config, g, pipeline, backend);
  if (!sizing && !staged && isatty(STDOUT_FILENO)) out += "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace linnet::cli
