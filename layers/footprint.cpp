#include "layers/footprint.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "layers/model_definition.h"
#include "layers/parameters.h"

namespace linnet {

namespace {
int64_t mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw Error(str("model size overflows 64 bits (", a, " × ", b, ")"));
  return r;
}
int64_t add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw Error(str("model size overflows 64 bits (", a, " + ", b, ")"));
  return r;
}
}  // namespace

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024 && u < 6) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", b, units[u]);
  return buf;
}

int64_t held_bytes_per_value(const ModelConfig& c, const ParamSpec& p, DType held, DType weights) {
  if (p.layout.dense() && p.dtype == DType::f32) return 4;  // kept in f32 whatever T (DeepSeek's router)
  if (p.shard_shape().rank() == 2) return static_cast<int64_t>(dtype_size(weights));
  // (Gated DeltaNet's gated norm is a plain weight, held as the other vectors.)
  if (c.norm_plus_one && p.card_name.ends_with("norm.weight") && !p.card_name.ends_with("linear_attention.norm.weight"))
    return 4;
  return static_cast<int64_t>(dtype_size(held));
}

int64_t held_bytes(const ModelConfig& c, const ParamSpec& p, DType held, DType weights) {
  const Shape s = p.shard_shape();
  if (s.rank() == 2 && !p.layout.dense() && !p.held_dequantized) return p.layout.bytes(s, weights);
  int64_t n = 1;
  for (int64_t d : s.dims()) n = mul(n, d);
  return mul(n, held_bytes_per_value(c, p, held, weights));
}

Footprint rank_footprint(const ModelConfig& c, const Generics& g, DType held) { return rank_footprint(c, g, held, held); }

bool StageShare::holds(const std::string& card_name) const {
  if (card_name.rfind("layers[", 0) == 0) return runs_layer(std::stoll(card_name.substr(7, card_name.find(']') - 7)));
  return card_name.rfind("embedding", 0) == 0 ? first : last;
}


Footprint rank_footprint(const ModelConfig& c, const Generics& g, DType held, DType weights, const StageShare& stage) {
  Footprint f;
  const int64_t e = static_cast<int64_t>(dtype_size(g.cache_dtype(held)));
  // A tied lm_head is a view of the embedding, which a last stage that is not the first loads
  // whole for it (layers/network.cpp).
  const bool tied_copy = c.tie_word_embeddings && stage.last && !stage.first;
  for (const auto& p : parameter_specs(c, g)) {
    if (p.card_name == "lm_head.weight" && c.tie_word_embeddings) continue;
    if (!stage.holds(p.card_name) && !(tied_copy && p.card_name == "embedding.weight")) continue;  // another stage's
    if (!p.held_by(0)) continue;  // another rank's expert (every rank holds Experts/Shards of them)
    f.parameters = add(f.parameters, held_bytes(c, p, held, weights));
  }
  const std::vector<LayerCacheSpec> states = layer_states(c, g);
  for (int64_t i = 0; i < static_cast<int64_t>(states.size()); ++i) {
    if (!stage.runs_layer(i)) continue;
    const LayerCacheSpec& layer = states[static_cast<size_t>(i)];
    f.kv_per_slot = add(f.kv_per_slot, mul(layer.values_per_slot(), e));
    f.state_per_row = add(f.state_per_row, mul(layer.state_values_per_row(), 4));
  }
  f.kv_cache = mul(f.kv_per_slot, mul(g.batch, g.max_seq));
  f.state = mul(f.state_per_row, g.state_rows());
  return f;
}

void check_fits(const ModelConfig& c, const Generics& g, DType held, int64_t available, int ranks_sharing,
                bool max_seq_defaulted, const std::string& device) {
  check_fits(c, g, held, held, available, ranks_sharing, max_seq_defaulted, device);
}

void check_fits(const ModelConfig& c, const Generics& g, DType held, DType weights, int64_t available, int ranks_sharing,
                bool max_seq_defaulted, const std::string& device, const StagePlace& stage) {
  const Footprint f = rank_footprint(c, g, held, weights, stage.share);
  const int64_t budget = available / 10 * 9 / std::max(1, ranks_sharing);
  if (f.total() <= budget) return;
  const std::string share =
      ranks_sharing > 1 ? str(" (90% of ", human_bytes(double(available)), " shared by ", ranks_sharing, " ranks)")
                        : str(" (90% of ", human_bytes(double(available)), ")");
  const std::string which =
      stage.stages > 1 ? str("pipeline stage ", stage.stage, " of ", stage.stages, " (layers ", stage.share.begin, "–",
                             std::min(stage.share.end, g.layers) - 1, "): ")
                       : std::string();
  std::string msg = str(which, "this rank needs ", human_bytes(double(f.total())), " (parameters ",
                        human_bytes(double(f.parameters)), " + KV cache ", human_bytes(double(f.kv_cache)),
                        " for Batch ", g.batch, " × MaxSeq ", g.max_seq, ", ", dtype_name(held),
                        f.state > 0 ? str(" + recurrent state ", human_bytes(double(f.state)), " for Batch ", g.batch,
                                          " + ", g.state_snapshots, " snapshots")
                                    : std::string(),
                        "), but the ", device, " has ", human_bytes(double(budget)), share);
  if (f.parameters >= budget) {
    msg += str("; the parameters alone do not fit: use more shards (ranks) or another dtype");
  } else {
    const int64_t room = budget - f.parameters;
    const int64_t slots = std::max<int64_t>(0, room - f.state) / std::max<int64_t>(1, f.kv_per_slot);
    const int64_t max_seq = slots / g.batch / g.page_size * g.page_size;
    // (Each row of Batch brings its state and, by default, a snapshot's: --state-snapshots.)
    const int64_t batch = room / std::max<int64_t>(1, f.kv_per_slot * g.max_seq + f.state_per_row * (g.state_snapshots > 0 ? 2 : 1));
    msg += max_seq_defaulted ? str("; MaxSeq defaults to max_position_embeddings (", c.max_position,
                                   "): pass --max-seq to lower it")
                             : std::string();
    if (max_seq > 0) msg += str("; the largest --max-seq that fits at --batch ", g.batch, " is ", max_seq);
    if (batch > 0) msg += str("; the largest --batch that fits at --max-seq ", g.max_seq, " is ", batch);
  }
  throw Error(msg);
}

}  // namespace linnet
