// The network: llama::Model's blocks (embedding, decoder layers, final norm, lm_head) and its
// state (the KV cache, one per layer: layers/kv_cache.h), and the forward over a token plan.
// It knows nothing of entries or requests: the entries (layers/model.h) and the batch engine
// hand it a TokenPlan and read logits or hidden states back. This rank holds shard
// comm.rank() of Shards (docs/entries.md "Weights and shards").
// Card notation (N, R, H, Vocab, Shards, T …): the generics table of docs/entries.md.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "layers/decoder_layer.h"
#include "layers/embedding.h"
#include "layers/generics.h"
#include "layers/kv_cache.h"
#include "layers/rope.h"
#include "layers/stage.h"
#include "layers/token_plan.h"
#include "layers/weight_source.h"

namespace linnet {

class Network {
 public:
  // Every block's weights read from `weights` (this shard's slices), the cache zeroed.
  // `stage`: the layers and ends this rank's pipeline stage holds (default: the whole model).
  Network(const ModelConfig& config, const Generics& g, WeightSource& weights, Backend& backend,
          Communicator& comm, const StagePlace& stage = {});

  // The layers over a plan: the residual stream [N, H] after the last layer, with the rows
  // `select` names for the head (uploaded with the plan). table: the page table
  // [rows, pages] the cache-attending tokens read through (null: the contiguous cache).
  Hidden run(const TokenPlan& plan, const Tensor* table, const std::vector<int32_t>& select = {});
  // Final norm of the selected rows (index −1: a zero row) → [R, H] on the device.
  Tensor final_hidden(const Hidden& h);
  Tensor final_hidden(const Tensor& x, const std::vector<int32_t>& select);
  // lm_head over normed rows [R, H] → this shard's logits [R, Vocab/Shards] in `dt`
  // (columns past the shard's real vocab 0).
  Tensor shard_logits(const Tensor& h, DType dt);
  // Full logits [R, Vocab] in T on the host (all-gathered across shards; with pipeline stages,
  // the last stage's, on every stage).
  Tensor logits(const Hidden& h);
  // Pipeline stages: whether this rank runs the final norm, lm_head and the sampler (the last
  // stage; every rank without stages), and a host result of that stage's copied to every stage
  // (its shape and dtype known to all).
  bool runs_head() const { return stage_.share.last; }
  int stages() const { return stage_.stages; }
  void from_head(Tensor& host);
  void from_head(std::vector<int32_t>& v);
  // Which of the model's layers this rank runs.
  const StageShare& stage_share() const { return stage_.share; }

  // Whether a RoPE of the model follows each sequence's length in the call (dynamic NTK,
  // longrope): a sequence's numbers past that length then depend on how it is split into calls.
  bool rope_follows_length() const;
  KvCache& cache() { return cache_; }
  // Every matrix as the backend holds it, by the model's name (layers/weight_loader.h).
  const std::vector<std::pair<std::string, Tensor>>& matrices() const { return matrices_; }
  // A host vector of i32 on the device.
  Tensor upload_ints(const std::vector<int32_t>& v);
  DType compute_dtype() const { return act_; }

 private:
  // Each RoPE the layers use (ModelConfig::LayerKind::rope): its frequencies as loaded, and
  // whether they follow each sequence's length in the call (dynamic NTK, longrope).
  struct RopeTable {
    Rope rope;
    Tensor inv_freq;  // [R/2] on the device
    float scale = 1.0f;
    bool by_length = false;
    int64_t threshold = 0;  // seq_len from which by_length frequencies differ from inv_freq
    std::map<int64_t, std::vector<float>> by_len;  // host frequencies per sequence length
  };
  // The rope tables of a plan: static, or [N, R/2] per token (uploaded with the plan).
  void rope_inputs(const TokenPlan& plan, std::vector<Tensor>& host, std::vector<int>& which);

  // The recurrent layers' state (Gated DeltaNet) of a plan, worked out on the host before any
  // layer runs: each token's state row (its TokenPlan::state_row, or in a call of packed runs
  // that write nothing, its run's row of a scratch state), the rows a sequence starts on (to be
  // zeroed), and the check that every other row goes on exactly where it stopped.
  struct StatePlan {
    std::vector<int32_t> rows;   // [N]
    int64_t scratch_rows = 0;    // > 0: the call's runs use a scratch state of this many rows
    std::vector<int32_t> fresh;  // cache rows a sequence starts on in this call
    std::vector<std::pair<int32_t, int32_t>> restores;  // state rows: snapshot → row, before the call
    std::vector<int32_t> keep;   // [N] or empty: the state row each token's row state is kept in, −1 none
  };
  StatePlan state_plan(const TokenPlan& plan);
  Tensor logits_here(const Hidden& h);  // logits on the stage that runs the head
  // Zeroes the given rows of every recurrent layer's state.
  void zero_state_rows(const std::vector<int32_t>& rows);
  // Copies state rows (from, to) in every recurrent layer's state.
  void copy_state_rows(const std::vector<std::pair<int32_t, int32_t>>& copies);

  ModelConfig config_;
  Generics g_;
  StagePlace stage_;
  Backend& be_;
  Communicator& comm_;
  Context ctx_;
  DType act_;  // the backend's compute dtype

  std::vector<RopeTable> ropes_;
  std::vector<std::pair<std::string, Tensor>> matrices_;
  Embedding embedding_;
  std::vector<DecoderLayer> layers_;
  RmsNorm norm_;
  Linear lm_head_;         // [Vocab/Shards (padded), H], column-parallel
  KvCache cache_;
  // The recurrent layers (Gated DeltaNet): whether there are any, and per cache row the next
  // position its state expects (0: none yet, or a sequence may start there).
  bool recurrent_ = false;
  std::vector<int64_t> state_next_;
  std::vector<int64_t> snapshot_next_;  // per snapshot (Generics::state_snapshots): the same
  Tensor identity_table_;  // [Batch, MaxSeq/PageSize] on the device: the contiguous cache
};

}  // namespace linnet
