// What one rank holds: its parameter slices and its KV cache, in the dtype the backend keeps
// them in. `linnet inspect` prints it; the loader compares it with the memory the backend
// has before it allocates anything.
// Card notation (KvHeads/Shards, MaxSeq, T …): the generics table of docs/entries.md.
#pragma once
#include <cstdint>
#include <string>

#include "layers/generics.h"
#include "layers/stage.h"

namespace linnet {

struct ParamSpec;

// The bytes a rank holds per value of parameter p: matrices in `weights`, Gemma's (1 + w) norm
// weights in f32 on every backend (layers/weight_loader.cpp forms 1 + w in f32, as transformers does),
// the other vectors in `held`. The one rule rank_footprint and `linnet inspect` both count by.
int64_t held_bytes_per_value(const ModelConfig& config, const ParamSpec& p, DType held, DType weights);
// The bytes a rank holds of p (its shard shape): a matrix's from its layout (the stored values
// and the companions: scales, zero points, g_idx), numel × held_bytes_per_value otherwise
// (dense: the same). What rank_footprint sums and `linnet inspect` prints.
int64_t held_bytes(const ModelConfig& config, const ParamSpec& p, DType held, DType weights);

struct Footprint {
  int64_t parameters = 0;     // bytes; a tied lm_head is a view of the embedding (0 bytes)
  int64_t kv_cache = 0;       // bytes: each layer's state (layers/cache_layout.h) × Batch × MaxSeq
  int64_t kv_per_slot = 0;    // bytes per (row, position) of the cache
  // bytes: the recurrent layers' state (Gated DeltaNet), f32, a fixed size per row × (Batch +
  // the state snapshots)
  int64_t state = 0;
  int64_t state_per_row = 0;
  int64_t total() const { return parameters + kv_cache + state; }
};

// `held`: the dtype the backend keeps the cache and 1-D parameters in (Backend::compute_dtype(T));
// `weights`: the dtype of the matrices (Backend::weight_dtype(T)); without it, `held`.
Footprint rank_footprint(const ModelConfig& config, const Generics& g, DType held);
Footprint rank_footprint(const ModelConfig& config, const Generics& g, DType held, DType weights,
                         const StageShare& stage = {});

// Throws unless `ranks_sharing` ranks of this footprint fit in `available` bytes (the memory
// one backend device has: free host RAM, free GPU memory), keeping a tenth back for
// activations. The message gives the figures and the largest --max-seq (and --batch) that fit;
// `max_seq_defaulted`: MaxSeq came from max_position_embeddings, not from --max-seq.
void check_fits(const ModelConfig& config, const Generics& g, DType held, int64_t available, int ranks_sharing,
                bool max_seq_defaulted, const std::string& device);
// With pipeline stages, this rank's stage's share only; the message names the stage.
void check_fits(const ModelConfig& config, const Generics& g, DType held, DType weights, int64_t available,
                int ranks_sharing, bool max_seq_defaulted, const std::string& device, const StagePlace& stage = {});

std::string human_bytes(double bytes);  // "1.50 GiB"

}  // namespace linnet
