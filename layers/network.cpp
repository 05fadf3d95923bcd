#include "layers/network.h"

#include <algorithm>
#include <cstring>

#include "layers/decoder_builder.h"
#include "layers/model_definition.h"
#include "layers/weight_loader.h"

namespace linnet {

Network::Network(const ModelConfig& config, const Generics& g, WeightSource& weights, Backend& backend,
                 Communicator& comm, const StagePlace& stage)
    : config_(config), g_(g), stage_(stage), be_(backend), comm_(comm), ctx_{backend, comm},
      act_(backend.compute_dtype(g.t)) {
  LINNET_CHECK(comm.size() == g.shards, "communicator of ", comm.size(), " ranks for Shards=", g.shards);
  stage_.share.end = std::min(stage_.share.end, g.layers);
  LINNET_CHECK(stage_.share.begin >= 0 && stage_.share.begin < stage_.share.end && (stage_.stages == 1 || stage_.pipe),
               "pipeline stage ", stage_.stage, " of ", stage_.stages, ": layers [", stage_.share.begin, ", ",
               stage_.share.end, ") of ", g.layers);
  // (Before any weight is read.)
  if (!be_.supports_cache(g.cache_dtype(act_), act_))
    throw Error(str("--kv-cache-dtype ", dtype_name(g.cache_dtype(act_)), ": the ", be_.name(),
                    " backend keeps its KV cache in f32, bf16, f16 or fp8 (f8_e4m3) beside ", dtype_name(act_),
                    " activations"));
  const int64_t shard = comm.rank();
  WeightLoader w(config, g, weights, backend, shard);
  // The embedding on the first stage (and on the last for a tied lm_head); the final norm and
  // lm_head on the last (layers/stage.h).
  const StageShare& share = stage_.share;
  if (share.first || (share.last && config.tie_word_embeddings))
    embedding_.weight = w.matrix("embedding.weight", {"embedding.weight"}, w.spec("embedding.weight").shard_shape());
  if (share.last) {
    norm_ = w.norm("norm.weight");
    if (config.tie_word_embeddings) {
      // A view of the embedding's rows: the tied matrix is held once (the last shard of a
      // padded vocab sees fewer rows; shard_logits pads its columns).
      const auto [begin, end] = w.spec("lm_head.weight").shard_range(shard);
      lm_head_.weight = embedding_.weight.rows(begin, end);
    } else {
      lm_head_.weight = w.matrix("lm_head.weight", {"lm_head.weight"}, w.spec("lm_head.weight").shard_shape());
    }
  }

  // The RoPEs: the model's, and a second for the sliding layers where the family has one.
  for (int r = 0; r < (config.local_rope ? 2 : 1); ++r) {
    RopeTable t;
    t.rope = layer_rope(config, r);
    const RopeFrequencies f = rope_frequencies(config, t.rope);
    t.inv_freq = be_.upload(Tensor::from_floats({static_cast<int64_t>(f.inv_freq.size())}, f.inv_freq));
    t.scale = f.scale;
    t.by_length = rope_depends_on_length(t.rope.scaling);
    t.threshold = rope_length_threshold(config, t.rope.scaling);
    ropes_.push_back(std::move(t));
  }
  // Each layer as the architecture builds it, and what it keeps (layers/model_definition.h).
  // (Only this stage's layers: layers_[k] is layer share.begin + k; the others keep no cache.)
  const ModelDefinition& def = definition_of(config);
  for (int64_t i = share.begin; i < share.end; ++i)
    layers_.push_back(def.layer ? def.layer(w, config, g, i, shard) : decoder_layer(w, config, g, i, shard));
  matrices_ = w.take_matrices();
  std::vector<LayerCacheSpec> states = layer_states(config, g);
  for (int64_t i = 0; i < static_cast<int64_t>(states.size()); ++i)
    if (!share.runs_layer(i)) states[static_cast<size_t>(i)].kind = LayerCacheSpec::Kind::none;
  cache_ = KvCache(be_, states, g.batch, g.max_seq, g.cache_dtype(act_), g.state_rows());
  for (size_t i = 0; i < cache_.size(); ++i) recurrent_ |= cache_.spec(i).kind == LayerCacheSpec::Kind::recurrent;
  state_next_.assign(static_cast<size_t>(g.batch), 0);
  snapshot_next_.assign(static_cast<size_t>(g.state_snapshots), 0);

  std::vector<int32_t> table(static_cast<size_t>(g.num_pages()));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);  // row r, page j → r·PPR + j
  identity_table_ = be_.upload(Tensor::from_ints({g.batch, g.pages_per_row()}, {table.begin(), table.end()}));
}

bool Network::rope_follows_length() const {
  for (const auto& r : ropes_)
    if (r.by_length) return true;
  return false;
}

Tensor Network::upload_ints(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i32);
  if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * sizeof(int32_t));
  return be_.upload(t);
}

Hidden Network::run(const TokenPlan& plan, const Tensor* table, const std::vector<int32_t>& select) {
  DevicePlan dp;
  dp.n = static_cast<int64_t>(plan.size());
  // The plan's arrays (and the table) go to the device in one transfer.
  auto host = [](const std::vector<int32_t>& v) {
    Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i32);
    if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * sizeof(int32_t));
    return t;
  };
  std::vector<Tensor> up = {host(plan.ids), host(plan.positions), host(plan.run_start), host(plan.cache_row),
                            host(plan.slots)};
  up.push_back(host(select));
  if (table) up.push_back(table->dtype() == DType::i32 ? *table : table->to(DType::i32));
  StatePlan state;  // (checked before anything is uploaded or run)
  if (recurrent_ && plan.size() > 0) {
    state = state_plan(plan);
    up.push_back(host(state.rows));
    if (!state.keep.empty()) up.push_back(host(state.keep));
  }
  const size_t state_at = up.size() - (state.keep.empty() ? 1 : 2);
  const size_t first_rope = up.size();
  std::vector<int> per_token;  // the ropes whose [N, R/2] frequencies go up with the plan
  rope_inputs(plan, up, per_token);
  up = be_.upload_many(up);
  for (size_t r = 0; r < ropes_.size(); ++r) {
    dp.rope_freq.push_back(ropes_[r].inv_freq);
    dp.rope_scale.push_back(ropes_[r].scale);
  }
  for (size_t k = 0; k < per_token.size(); ++k) dp.rope_freq[static_cast<size_t>(per_token[k])] = up[first_rope + k];
  dp.ids = up[0];
  dp.positions = up[1];
  dp.run_start = up[2];
  dp.cache_row = up[3];
  dp.slots = up[4];
  Hidden out{Tensor(), up[5], static_cast<int64_t>(select.size())};
  dp.table = table ? up[6] : identity_table_;
  for (size_t i = 0, run = 0; i < plan.size(); ++i) {
    const bool cache = plan.cache_row[i] >= 0;
    run = cache && i > 0 && plan.cache_row[i - 1] == plan.cache_row[i] ? run + 1 : (cache ? 1 : 0);
    dp.row_run = std::max<int64_t>(dp.row_run, static_cast<int64_t>(run));
    dp.any_packed |= plan.run_start[i] >= 0;
    dp.any_cache |= plan.cache_row[i] >= 0;
    if (plan.cache_row[i] >= 0) dp.span = std::max<int64_t>(dp.span, plan.positions[i] + 1);
    dp.any_write |= plan.slots[i] >= 0;
  }
  out.x = be_.empty({dp.n, g_.hidden}, act_);
  if (dp.n == 0) return out;
  LayerCache scratch;  // packed runs' own state: zeroed before each recurrent layer
  if (recurrent_) {
    dp.state_rows = up[state_at];
    if (!state.keep.empty()) dp.state_keep = up[state_at + 1];
    zero_state_rows(state.fresh);
    copy_state_rows(state.restores);  // (a restored row is not a fresh one)
    if (state.scratch_rows > 0)
      for (size_t i = 0; i < cache_.size(); ++i) {
        const LayerCacheSpec& s = cache_.spec(i);
        if (s.kind != LayerCacheSpec::Kind::recurrent) continue;
        scratch.conv = be_.empty({state.scratch_rows, s.conv_channels, s.conv_kept}, DType::f32);
        scratch.delta = be_.empty({state.scratch_rows, s.delta.value_heads, s.delta.key_dim, s.delta.value_dim}, DType::f32);
        break;
      }
  }
  if (stage_.share.first) {
    embedding_.forward(ctx_, dp.ids, out.x);
    // Gemma: × √H; Granite: × embedding_multiplier.
    if (config_.embedding_scale != 1.0)
      be_.pointwise(out.x, Backend::Pointwise::multiply, static_cast<float>(config_.embedding_scale));
  } else {
    stage_.pipe->recv(out.x, stage_.stage - 1);  // the previous stage's residual stream [N, H]
  }
  for (size_t k = 0; k < layers_.size(); ++k) {
    const size_t i = static_cast<size_t>(stage_.share.begin) + k;  // the model's layer
    if (scratch.conv.defined() && cache_.spec(i).kind == LayerCacheSpec::Kind::recurrent) {
      be_.fill_zero(scratch.conv);
      be_.fill_zero(scratch.delta);
      layers_[k].forward(ctx_, out.x, dp, scratch);
      continue;
    }
    layers_[k].forward(ctx_, out.x, dp, cache_.layer(i));
  }
  if (!stage_.share.last) stage_.pipe->send(out.x, stage_.stage + 1);  // on to the next stage
  return out;
}

Network::StatePlan Network::state_plan(const TokenPlan& plan) {
  const size_t n = plan.size();
  StatePlan s;
  s.rows.resize(n);
  const bool scratch = plan.state_row[0] < 0;
  if (scratch) {
    // Packed runs that write no cache row (forward, scoring): each its own state, from zero.
    LINNET_CHECK(plan.state_restores.empty() && plan.state_keep.empty(),
                 "a plan of packed runs with scratch states restores or keeps snapshots");
    std::map<int32_t, int32_t> run_row;
    for (size_t i = 0; i < n; ++i) {
      LINNET_CHECK(plan.state_row[i] < 0 && plan.run_start[i] >= 0,
                   "a plan mixes tokens on state rows with packed runs of their own (token ", i, ")");
      s.rows[i] = run_row.try_emplace(plan.run_start[i], static_cast<int32_t>(run_row.size())).first->second;
    }
    s.scratch_rows = static_cast<int64_t>(run_row.size());
    return s;
  }
  const int64_t snapshots = g_.state_snapshots;
  // Restores first: a snapshot copied into a row, which then goes on where the snapshot stopped.
  std::map<int32_t, int64_t> next;  // row → the position it goes on at, where restored
  for (const TokenPlan::StateRestore& r : plan.state_restores) {
    LINNET_CHECK(r.snapshot >= 0 && r.snapshot < snapshots && r.row >= 0 && r.row < g_.batch, "restoring snapshot ",
                 r.snapshot, " of ", snapshots, " into row ", r.row, " of Batch=", g_.batch);
    const int64_t held = snapshot_next_[static_cast<size_t>(r.snapshot)];
    if (held != r.position || r.position <= 0)
      throw Error(str("state snapshot ", r.snapshot, " holds ",
                      held == 0 ? std::string("nothing") : str("a sequence up to position ", held - 1),
                      "; restored into row ", r.row, " to go on at position ", r.position,
                      " it would give that row another sequence's state"));
    LINNET_CHECK(next.emplace(r.row, r.position).second, "row ", r.row, " restored twice in one call");
    s.restores.emplace_back(static_cast<int32_t>(g_.batch + r.snapshot), r.row);
  }
  // Tokens on cache rows: a row's tokens in this call are consecutive positions; its first
  // starts a sequence (position 0, or the first of a packed run written into the row) or goes on
  // where the row's state stopped. Anything else would read a state that belongs elsewhere.
  std::map<int32_t, int32_t> last;  // row → its last position in this call
  for (size_t i = 0; i < n; ++i) {
    const int32_t r = plan.state_row[i], p = plan.positions[i];
    LINNET_CHECK(r >= 0 && r < g_.batch, "token ", i, " has state row ", r, " outside [0, Batch=", g_.batch, ")");
    s.rows[i] = r;
    const bool starts = p == 0 || plan.run_start[i] == static_cast<int32_t>(i);
    auto it = last.find(r);
    if (it == last.end()) {
      const auto restored = next.find(r);
      if (starts && restored == next.end()) s.fresh.push_back(r);
      else if (const int64_t at = restored != next.end() ? restored->second : state_next_[static_cast<size_t>(r)]; at != p)
        throw Error(str("row ", r, " at position ", p, ": this model's Gated DeltaNet layers keep one running state a row "
                        "(not a cache of every position), which ",
                        at == 0 ? std::string("holds nothing yet; a call may start the row at 0")
                                : str("holds that row's sequence up to position ", at - 1,
                                      restored != next.end() ? " (restored from a snapshot)" : "",
                                      "; a call may go on at position ", at,
                                      restored != next.end() ? std::string() : std::string(" or start the row again at 0"))));
      last.emplace(r, p);
      continue;
    }
    if (starts || p != it->second + 1)
      throw Error(str("row ", r, ": position ", p, " follows position ", it->second, " in one call; this model's Gated "
                      "DeltaNet layers need each row's tokens in a call to be one run of consecutive positions"));
    it->second = p;
  }
  // Keeps: a token's row state, after it, into a snapshot (each snapshot at most once a call).
  std::map<int32_t, int64_t> kept;  // snapshot → the position it goes on at
  if (!plan.state_keep.empty()) {
    LINNET_CHECK(plan.state_keep.size() == n, "state_keep of ", plan.state_keep.size(), " for ", n, " tokens");
    s.keep.assign(n, -1);
    for (size_t i = 0; i < n; ++i) {
      const int32_t k = plan.state_keep[i];
      if (k < 0) continue;
      LINNET_CHECK(k < snapshots, "token ", i, " keeps its state in snapshot ", k, " of ", snapshots);
      LINNET_CHECK(kept.emplace(k, plan.positions[i] + 1).second, "snapshot ", k, " kept twice in one call");
      s.keep[i] = static_cast<int32_t>(g_.batch + k);
    }
  }
  for (const auto& [r, p] : next) state_next_[static_cast<size_t>(r)] = p;
  for (const auto& [r, p] : last) state_next_[static_cast<size_t>(r)] = p + 1;
  for (const auto& [k, p] : kept) snapshot_next_[static_cast<size_t>(k)] = p;
  return s;
}

void Network::copy_state_rows(const std::vector<std::pair<int32_t, int32_t>>& copies) {
  for (size_t i = 0; i < cache_.size(); ++i) {
    if (cache_.spec(i).kind != LayerCacheSpec::Kind::recurrent) continue;
    LayerCache& c = cache_.layer(i);
    for (const auto& [from, to] : copies)
      for (Tensor* t : {&c.conv, &c.delta}) {
        const int64_t width = t->numel() / t->dim(0);
        const Tensor src = t->rows(from, from + 1).reshape({1, width});
        Tensor dst = t->rows(to, to + 1).reshape({1, width});
        be_.copy_columns(src, dst, 0, width);
      }
  }
}

void Network::zero_state_rows(const std::vector<int32_t>& rows) {
  if (rows.empty()) return;
  std::vector<int32_t> sorted = rows;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < cache_.size(); ++i) {
    if (cache_.spec(i).kind != LayerCacheSpec::Kind::recurrent) continue;
    LayerCache& c = cache_.layer(i);
    for (size_t a = 0; a < sorted.size();) {  // runs of consecutive rows, one fill each
      size_t b = a + 1;
      while (b < sorted.size() && sorted[b] == sorted[b - 1] + 1) ++b;
      Tensor conv = c.conv.rows(sorted[a], sorted[b - 1] + 1), delta = c.delta.rows(sorted[a], sorted[b - 1] + 1);
      be_.fill_zero(conv);
      be_.fill_zero(delta);
      a = b;
    }
  }
}

// Dynamic NTK and longrope frequencies follow the sequence's length, as transformers'
// dynamic_rope_update: the longest position of the token's own sequence in this call + 1
// (its packed run, or its cache row's tokens in the call). Keys already in the cache keep the
// rotation they were written with (transformers' cache too).
void Network::rope_inputs(const TokenPlan& plan, std::vector<Tensor>& host, std::vector<int>& which) {
  const size_t n = plan.size();
  for (size_t r = 0; r < ropes_.size(); ++r) {
    RopeTable& t = ropes_[r];
    if (!t.by_length || n == 0) continue;
    std::map<int64_t, int32_t> longest;  // by run start (≥ 0) or cache row (−1 − row)
    auto key = [&](size_t i) -> int64_t { return plan.run_start[i] >= 0 ? plan.run_start[i] : -1 - plan.cache_row[i]; };
    bool beyond = false;
    for (size_t i = 0; i < n; ++i) {
      int32_t& m = longest.try_emplace(key(i), plan.positions[i]).first->second;
      m = std::max(m, plan.positions[i]);
      beyond |= plan.positions[i] + 1 > t.threshold;
    }
    if (!beyond) continue;  // every sequence within the original length: the loaded frequencies
    const int64_t half = t.inv_freq.numel();
    Tensor f = Tensor::empty({static_cast<int64_t>(n), half}, DType::f32);
    for (size_t i = 0; i < n; ++i) {
      const int64_t seq_len = longest[key(i)] + 1;
      auto it = t.by_len.find(seq_len);
      if (it == t.by_len.end()) {
        if (t.by_len.size() > 4096) t.by_len.clear();
        it = t.by_len.emplace(seq_len, rope_frequencies(config_, t.rope, seq_len).inv_freq).first;
      }
      std::memcpy(f.ptr<float>() + i * half, it->second.data(), static_cast<size_t>(half) * sizeof(float));
    }
    host.push_back(f);
    which.push_back(static_cast<int>(r));
  }
}

Tensor Network::final_hidden(const Tensor& x, const std::vector<int32_t>& select) {
  return final_hidden(Hidden{x, upload_ints(select), static_cast<int64_t>(select.size())});
}

Tensor Network::final_hidden(const Hidden& hidden) {
  LINNET_CHECK(runs_head(), "the final norm on pipeline stage ", stage_.stage, " of ", stage_.stages, " (the last's)");
  Tensor rows = be_.empty({hidden.rows, g_.hidden}, act_);
  be_.gather_rows(hidden.x, hidden.select, rows);  // −1 → a zero row, which stays zero
  Tensor h = be_.empty(rows.shape(), act_);
  norm_.forward(ctx_, rows, h);
  return h;
}

Tensor Network::shard_logits(const Tensor& h, DType dt) {
  Tensor local = be_.empty({h.dim(0), g_.vocab_per_shard()}, act_);
  const int64_t rows = lm_head_.out_features();
  if (rows == g_.vocab_per_shard()) {
    lm_head_.forward(ctx_, h, local);  // column-parallel: this shard's vocab rows
  } else {
    // A tied lm_head on the last shard of a padded vocab: its real rows, then zero columns.
    be_.fill_zero(local);
    if (rows > 0) {
      Tensor real = be_.empty({h.dim(0), rows}, act_);
      lm_head_.forward(ctx_, h, real);
      be_.copy_columns(real, local, 0, rows);
    }
  }
  // Granite divides the logits by logits_scaling; Gemma 2 soft-caps them (padding stays 0).
  if (config_.logits_scaling != 1.0)
    be_.pointwise(local, Backend::Pointwise::divide, static_cast<float>(config_.logits_scaling));
  if (config_.final_softcap > 0)
    be_.pointwise(local, Backend::Pointwise::softcap, static_cast<float>(config_.final_softcap));
  if (dt == act_) return local;
  Tensor converted = be_.empty(local.shape(), dt);
  be_.convert(local, converted);
  return converted;
}

void Network::from_head(Tensor& host) {
  if (stage_.stages > 1) stage_.pipe->broadcast(host, stage_.stages - 1);
}

void Network::from_head(std::vector<int32_t>& v) {
  if (stage_.stages == 1) return;
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i32);
  if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * sizeof(int32_t));
  stage_.pipe->broadcast(t, stage_.stages - 1);
  if (!v.empty()) std::memcpy(v.data(), t.data(), v.size() * sizeof(int32_t));
}

Tensor Network::logits(const Hidden& hidden) {
  if (stage_.stages > 1) {  // the last stage's logits, on every stage
    Tensor full = runs_head() ? logits_here(hidden) : Tensor::empty({hidden.rows, g_.vocab}, g_.t);
    from_head(full);
    return full;
  }
  return logits_here(hidden);
}

Tensor Network::logits_here(const Hidden& hidden) {
  const int64_t r = hidden.rows;
  Tensor local = shard_logits(final_hidden(hidden), g_.t);
  if (g_.shards == 1) return be_.to_host(local);
  // All-gather the vocab shards, then lay them side by side, dropping lm_head's padding.
  Tensor gathered = be_.empty({g_.shards, r, local.dim(1)}, g_.t);
  comm_.all_gather(local, gathered);
  Tensor full = be_.empty({r, g_.vocab}, g_.t);
  for (int64_t s = 0; s < g_.shards; ++s) {
    Tensor part = gathered.rows(s, s + 1).reshape({r, local.dim(1)});
    be_.copy_columns(part, full, g_.vocab_begin(s), g_.vocab_valid(s));
  }
  return be_.to_host(full);
}

}  // namespace linnet
