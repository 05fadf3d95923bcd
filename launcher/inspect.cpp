// linnet inspect: the model card as a checkpoint binds it, then (when asked) what each rank
// holds for a given Shards.
#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "checkpoint/hf_config.h"
#include "core/backend.h"
#include "layers/card.h"
#include "layers/footprint.h"
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

std::string render_shards(const ModelConfig& c, const Generics& g, const std::string& backend) {
  std::ostringstream o;
  const DType held = backend_compute_dtype(backend, g.t), weights = backend_weight_dtype(backend, g.t);
  const std::string as = weights == held ? dtype_name(held)
                                         : str(dtype_name(weights), " (matrices; ", dtype_name(held), " the norms and the KV cache)");
  o << "Shards\n\nShards " << g.shards << ", T " << dtype_name(g.t) << " (held as " << as << " by the "
    << backend << " backend), Batch " << g.batch << ", MaxSeq " << g.max_seq << ", PageSize " << g.page_size
    << ". Every rank holds the same shapes";
  if (g.vocab % g.shards) o << " (lm_head's last shard padded: " << g.vocab_per_shard() * g.shards - g.vocab << " rows)";
  o << ":\n\nParameter\tSplit\tShape per rank\tBytes per rank\n";
  for (const auto& p : parameter_specs(c, g)) {
    if (p.card_name.rfind("layers[", 0) == 0 && p.card_name.rfind("layers[0]", 0) != 0) continue;
    std::string name = p.card_name;
    if (name.rfind("layers[0]", 0) == 0) name = "layers[*]" + name.substr(9);
    const char* split = p.split == Split::mirrored ? "mirrored" : p.split == Split::rows ? "rows" : "columns";
    o << name << "\t" << split << "\t" << p.shard_shape().to_string() << "\t";
    if (name == "lm_head.weight" && c.tie_word_embeddings) o << "0 (a view of embedding.weight: tied)\n";
    else o << p.shard_shape().numel() * static_cast<int64_t>(p.shard_shape().rank() == 2 ? dtype_size(weights)
                                                             : c.norm_plus_one && name.ends_with("norm.weight") ? 4
                                                                                                               : dtype_size(held)) << (name.rfind("layers[*]", 0) == 0 ? " ×" + std::to_string(g.layers) : "") << "\n";
  }
  const Footprint f = rank_footprint(c, g, held, weights);
  o << "\nParameters per rank\t" << f.parameters << " (" << human_bytes(static_cast<double>(f.parameters)) << ")\n";
  o << "KV cache per rank\t" << f.kv_cache << " (" << human_bytes(static_cast<double>(f.kv_cache)) << ") = 2 × " << g.layers
    << " layers × [" << g.batch << ", " << g.kv_heads_per_shard() << ", " << g.max_seq << ", " << g.head_dim()
    << "]\n";
  o << "Total per rank\t" << f.total() << " (" << human_bytes(static_cast<double>(f.total())) << ")\n";
  return o.str();
}

}  // namespace

int cmd_inspect(const Args& args) {
  po::options_description desc("linnet inspect");
  desc.add_options()("checkpoint", po::value<std::string>()->required(),
                     "checkpoint directory (config.json is enough), or a config.json")(
      "backend", po::value<std::string>()->default_value("auto"),
      "size for this backend's dtypes: cpu, cuda or auto (cuda when a GPU is visible)");
  add_run_options(desc);
  po::variables_map vm;
  if (!parse(args, desc, vm, "linnet inspect"))
    return 0;
  const std::string dir = vm["checkpoint"].as<std::string>();
  const ModelConfig config = load_hf_config(dir);
  const Generics g = bind_generics(config, run_options(vm));
  // The card alone is byte-for-byte what the seed shows; the per-rank sizes follow only
  // when a sizing option was given, so `inspect` without one reproduces the card exactly.
  const bool sizing = vm.count("shards") || !vm["batch"].defaulted() || !vm["max-seq"].defaulted() ||
                      !vm["page-size"].defaulted() || !vm["backend"].defaulted() || vm.count("dtype");
  std::string out = "linnet inspect " + dir + "\n\n" + render_card(config, g);
  std::string backend = vm["backend"].as<std::string>();
  if (backend == "auto") backend = cuda_device_count() > 0 ? "cuda" : "cpu";
  if (sizing) out += "\n\n" + render_shards(config, g, backend);
  else if (isatty(STDOUT_FILENO)) out += "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace linnet::cli
