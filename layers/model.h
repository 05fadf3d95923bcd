// llama::Model: the card's root block and its 17 entries (docs/entries.md "The entries"), a
// façade over the network (layers/network.h: blocks, KV cache, forward) and the one sampler
// (layers/sampler.h). Entries take and return host tensors; each checks its inputs against the
// card before it touches the KV cache. This rank holds shard `shard` of Shards (docs/entries.md "Weights and
// shards"); the communicator joins the shards.
// Card notation (Batch, MaxSeq, Vocab, T, Shards …): the generics table of docs/entries.md.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "layers/batch_plan.h"
#include "layers/choice.h"
#include "layers/generics.h"
#include "layers/network.h"
#include "layers/sampler.h"
#include "layers/validate.h"
#include "layers/weight_source.h"

namespace linnet {

class Model {
 public:
  // `stage`: this rank's pipeline stage (layers/stage.h; default: the whole model). Every
  // entry runs on every stage's ranks and returns the same results on each.
  Model(const ModelConfig& config, const Generics& generics, WeightSource& weights, Backend& backend,
        Communicator& comm, const StagePlace& stage = {});

  const ModelConfig& config() const { return config_; }
  const Generics& generics() const { return g_; }
  // Whether a RoPE of the model follows each sequence's length in the call (dynamic NTK,
  // longrope): a sequence's numbers past that length then depend on how it is split into calls.
  bool rope_follows_length() const { return net_.rope_follows_length(); }
  int64_t shard() const { return comm_.rank(); }

  // ---- the entries ----
  Tensor forward(const Tensor& tokens);
  Tensor next_token(const Tensor& tokens);
  Tensor decode(const Tensor& token, int32_t pos);
  Tensor prefill(const Tensor& tokens, int32_t pos);
  Tensor decode_rows(const Tensor& tokens, const Tensor& positions);
  Tensor prefill_slots(const Tensor& tokens, const Tensor& slots, const Tensor& lengths);
  float loss_packed(const Tensor& tokens, const Tensor& positions, const Tensor& segments, const Tensor& targets,
                    const Tensor& weights);
  Tensor log_probs_packed(const Tensor& tokens, const Tensor& positions, const Tensor& segments,
                          const Tensor& targets);
  Tensor hidden_packed(const Tensor& tokens, const Tensor& positions, const Tensor& segments);
  Tensor prefill_packed(const Tensor& tokens, const Tensor& rows, const Tensor& positions, const Tensor& segments,
                        const Tensor& last);
  Tensor step_packed(const Tensor& tokens, const Tensor& rows, const Tensor& positions, const Tensor& segments,
                     const Tensor& last, const Tensor& step_tokens, const Tensor& step_positions);
  Tensor decode_paged(const Tensor& tokens, const Tensor& positions, const Tensor& table);
  Tensor prefill_paged(const Tensor& tokens, const Tensor& positions, const Tensor& rows, const Tensor& slots,
                       const Tensor& last, const Tensor& table);
  Tensor step_paged(const Tensor& tokens, const Tensor& positions, const Tensor& rows, const Tensor& slots,
                    const Tensor& last, const Tensor& step_tokens, const Tensor& step_positions, const Tensor& table);
  Tensor generate(const Tensor& token, int32_t pos, int64_t steps);
  Tensor sample(const Tensor& token, int32_t pos, const Tensor& key, float temperature, int64_t steps);
  std::pair<Tensor, int32_t> generate_until(const Tensor& token, int32_t pos, int32_t eos, int64_t max_new);

  // Any entry by name (the launcher's way in): inputs by argument name, scalars as 0-d
  // tensors; `given` binds Steps/MaxNew. Returns the results in the card's order.
  std::vector<Tensor> call(const std::string& entry, const EntryArgs& args,
                           const std::map<std::string, int64_t>& given = {});

  // ---- for the batch engine (engine/), not entries: the same checks and plans ---- One step of
  // the batch engine as it planned it (layers/batch_plan.h): every token run, its K/V written, and
  // each row's next token chosen next to the logits (docs/entries.md "The batch engine"); -1 for a
  // row that samples nothing. The plan is trusted: the engine built it from its pages.
  std::vector<int32_t> run_batch(const BatchPlan& plan);
  // log_probs_packed, and per token whether its target is the argmax of its logits
  // (lowest index on ties); both 0 where the target is negative.
  // greedy false: the flags are left out (an argmax over the vocab per token saved).
  // top (optional, top->n > 0): the n most likely tokens at each scored position.
  std::pair<Tensor, std::vector<uint8_t>> score_packed(const Tensor& tokens, const Tensor& positions,
                                                       const Tensor& segments, const Tensor& targets,
                                                       bool greedy = true, TopTokens* top = nullptr);

  // Host copy of every layer's cache_k and cache_v, for tests of "state unchanged".
  std::vector<Tensor> cache_snapshot() { return net_.cache().snapshot(be_); }
  // Every matrix as the backend holds it (Backend::packed_format), by the model's name for it
  // ("embedding.weight", "layers[0].attention.qkv_proj.weight", …; a tied lm_head is the
  // embedding): what a packed file saves (checkpoint/packed_file.h).
  const std::vector<std::pair<std::string, Tensor>>& matrices() const { return net_.matrices(); }

 private:
  // This shard's f32 logits [R, Vocab/Shards] of the selected rows: the values log_probs_packed
  // scores (before rounding to T), so a greedy token is its own top-1 (rounding to T makes
  // near-ties that f32, and transformers, resolve).
  Tensor local_logits(const Hidden& h) { return net_.shard_logits(net_.final_hidden(h), DType::f32); }
  // One token per cache row r at positions[r] (negative: idle), attending over the cache
  // through `table` (the contiguous cache when null); inputs already checked.
  Tensor rows_step(const std::vector<int64_t>& ids, const std::vector<int64_t>& positions, const Tensor* table);
  // Per-token log p(target) (0 for a negative target) over the packed tokens, in chunks,
  // each shard on its own vocab rows; with weights, targets of weight 0 are not checked.
  // greedy (optional): per token, whether its target is its logits' argmax.
  Tensor packed_log_probs(const std::string& entry, const EntryArgs& args, const Tensor* weights,
                          std::vector<uint8_t>* greedy = nullptr, TopTokens* top = nullptr);
  // The n best tokens of each row of this chunk's shard logits `local` [m, Vocab/Shards] f32
  // into top (rows scored[c0 + i]), with the chunk's global max and Σ exp.
  void top_tokens(const Tensor& local, int64_t top_n, const Tensor& global_max, const Tensor& sumexp,
                  const std::vector<int64_t>& scored, int64_t c0, TopTokens& top);
  // run_batch's micro-batches: groups of the plan's rows (sorted), one group (empty: every row)
  // without pipeline stages.
  std::vector<std::vector<int32_t>> micro_batches(const BatchPlan& plan) const;
  // Pipeline stages: packed_log_probs's results, as the last stage scored them, on every stage.
  void share_scores(Tensor& out, std::vector<uint8_t>* greedy, TopTokens* top);
  // step_paged's (and prefill_paged's) checks and plan; step_tokens undefined: prefill_paged.
  void plan_step_paged(const Tensor& tokens, const Tensor& positions, const Tensor& rows, const Tensor& slots,
                       const Tensor& last, const Tensor& step_tokens, const Tensor& step_positions,
                       const Tensor& table, TokenPlan& plan, std::vector<int32_t>& select);
  Tensor stepping(const Tensor& token, int32_t pos, int64_t steps, float temperature, uint64_t key0, uint64_t key1,
                  std::optional<int32_t> eos, int32_t* steps_taken);

  ModelConfig config_;
  Generics g_;
  Backend& be_;
  Communicator& comm_;
  Network net_;
  Sampler sampler_;
};

}  // namespace linnet
