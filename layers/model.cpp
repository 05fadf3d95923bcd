#include "layers/model.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "layers/rope.h"

namespace linnet {

Model::Model(const ModelConfig& config, const Generics& g, WeightSource& weights, Backend& backend,
             Communicator& comm)
    : config_(config), g_(g), be_(backend), comm_(comm), ctx_{backend, comm}, act_(backend.compute_dtype(g.t)) {
  LINNET_CHECK(comm.size() == g.shards, "communicator of ", comm.size(), " ranks for Shards=", g.shards);
  const int64_t shard = comm.rank();
  std::unordered_map<std::string, ParamSpec> specs;
  for (auto& p : parameter_specs(config, g)) specs.emplace(p.card_name, p);
  // A parameter's slice on this shard, rounded to T (the run's dtype), then held as the
  // backend keeps it: matrices in weight_dtype(T) (on the CPU: T, as stored), the rest in
  // the compute dtype.
  const DType matrices = backend.weight_dtype(g.t);
  // Each source is let go of as soon as it is copied (drop_pages: a mapped file's pages go
  // back), so a load holds the weights once, not beside the file.
  auto converted = [](const Tensor& t, DType dt) {
    if (t.dtype() == dt) return t;
    Tensor c = t.to(dt);
    t.drop_pages();
    return c;
  };
  auto host = [&](const std::string& card_name) {
    Tensor t = converted(weights.read(specs.at(card_name), shard), g.t);
    return converted(t, t.rank() == 2 ? matrices : act_);
  };
  // Matrices go up laid out for the backend's products (packed once, here); the rest as they are.
  auto up = [&](const Tensor& t) {
    Tensor d = t.rank() == 2 ? be_.upload_matrix(t) : be_.upload(t);
    if (d.data() != t.data()) t.drop_pages();
    return d;
  };
  auto param = [&](const std::string& card_name) { return up(host(card_name)); };
  auto stacked = [&](std::vector<std::string> names) {
    std::vector<Tensor> parts;
    for (auto& n : names) parts.push_back(host(n));
    if (parts[0].rank() != 2) return be_.upload(stack_rows(parts));  // biases
    Tensor d = be_.upload_matrix(parts);
    for (const auto& p : parts) p.drop_pages();
    return d;
  };
  // A matrix by the model's name for it: from a file already in the backend's layout where the
  // source has one (one shard only), else read from its parts. Kept in matrices_ either way.
  auto matrix = [&](const std::string& name, const std::vector<std::string>& parts, const Shape& shape) {
    Tensor m;
    if (g.shards == 1 && !be_.packed_format().empty()) m = weights.packed(name, be_.packed_format(), matrices, shape);
    m = m.defined() ? be_.upload_matrix(m) : parts.size() == 1 ? param(parts[0]) : stacked(parts);
    matrices_.emplace_back(name, m);
    return m;
  };

  embedding_.weight = matrix("embedding.weight", {"embedding.weight"}, specs.at("embedding.weight").shard_shape());
  norm_ = RmsNorm{param("norm.weight"), static_cast<float>(config.rms_norm_eps)};
  if (config.tie_word_embeddings) {
    // A view of the embedding's rows: the tied matrix is held once (the last shard of a
    // padded vocab sees fewer rows; shard_logits pads its columns).
    const auto [begin, end] = specs.at("lm_head.weight").shard_range(shard);
    lm_head_.weight = embedding_.weight.rows(begin, end);
  } else {
    lm_head_.weight = matrix("lm_head.weight", {"lm_head.weight"}, specs.at("lm_head.weight").shard_shape());
  }

  std::vector<float> freq = rope_inv_freq(config);
  Tensor inv_freq = be_.upload(Tensor::from_floats({static_cast<int64_t>(freq.size())}, freq));
  const int64_t d = g.head_dim(), qh = g.heads_per_shard(), kvh = g.kv_heads_per_shard(), inner = g.inner_per_shard();
  layers_.resize(static_cast<size_t>(g.layers));
  for (int64_t i = 0; i < g.layers; ++i) {
    const std::string p = "layers[" + std::to_string(i) + "].";
    DecoderLayer& L = layers_[static_cast<size_t>(i)];
    const float eps = static_cast<float>(config.rms_norm_eps);
    L.attention_norm = RmsNorm{param(p + "attention_norm.weight"), eps};
    L.mlp_norm = RmsNorm{param(p + "mlp_norm.weight"), eps};

    GroupedQueryAttention& A = L.attention;
    A.dims = AttentionDims{qh, kvh, d, g.max_seq, g.page_size};
    const std::string a = p + "attention.";
    A.qkv_proj.weight = matrix(a + "qkv_proj.weight", {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"},
                               {(qh + 2 * kvh) * d, g.hidden});
    if (config.qkv_bias) A.qkv_proj.bias = stacked({a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"});
    // The card's q_proj/k_proj/v_proj are views of the stacked product's rows.
    const int64_t rq = qh * d, rk = kvh * d;
    A.q_proj.weight = A.qkv_proj.weight.rows(0, rq);
    A.k_proj.weight = A.qkv_proj.weight.rows(rq, rq + rk);
    A.v_proj.weight = A.qkv_proj.weight.rows(rq + rk, rq + 2 * rk);
    if (config.qkv_bias) {
      A.q_proj.bias = A.qkv_proj.bias.rows(0, rq);
      A.k_proj.bias = A.qkv_proj.bias.rows(rq, rq + rk);
      A.v_proj.bias = A.qkv_proj.bias.rows(rq + rk, rq + 2 * rk);
    }
    A.o_proj.weight = matrix(a + "o_proj.weight", {a + "o_proj.weight"}, specs.at(a + "o_proj.weight").shard_shape());
    if (config.o_bias) A.o_proj.bias = param(a + "o_proj.bias");
    A.inv_freq = inv_freq;
    A.cache_k = be_.zeros({g.batch, kvh, g.max_seq, d}, act_);
    A.cache_v = be_.zeros({g.batch, kvh, g.max_seq, d}, act_);

    SwiGlu& M = L.mlp;
    const std::string m = p + "mlp.";
    M.gate_up.weight = matrix(m + "gate_up.weight", {m + "gate.weight", m + "up.weight"}, {2 * inner, g.hidden});
    if (config.mlp_bias) M.gate_up.bias = stacked({m + "gate.bias", m + "up.bias"});
    M.gate.weight = M.gate_up.weight.rows(0, inner);
    M.up.weight = M.gate_up.weight.rows(inner, 2 * inner);
    if (config.mlp_bias) {
      M.gate.bias = M.gate_up.bias.rows(0, inner);
      M.up.bias = M.gate_up.bias.rows(inner, 2 * inner);
    }
    M.down.weight = matrix(m + "down.weight", {m + "down.weight"}, specs.at(m + "down.weight").shard_shape());
    if (config.mlp_bias) M.down.bias = param(m + "down.bias");
  }

  std::vector<int32_t> table(static_cast<size_t>(g.num_pages()));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);  // row r, page j → r·PPR + j
  identity_table_ = be_.upload(Tensor::from_ints({g.batch, g.pages_per_row()}, {table.begin(), table.end()}));
}

Tensor Model::upload_ints(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i32);
  if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * sizeof(int32_t));
  return be_.upload(t);
}

Hidden Model::run(const TokenPlan& plan, const Tensor* table, const std::vector<int32_t>& select) {
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
  up = be_.upload_many(up);
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
  embedding_.forward(ctx_, dp.ids, out.x);
  for (const auto& layer : layers_) layer.forward(ctx_, out.x, dp);
  return out;
}

Tensor Model::final_hidden(const Tensor& x, const std::vector<int32_t>& select) {
  return final_hidden(Hidden{x, upload_ints(select), static_cast<int64_t>(select.size())});
}

Tensor Model::final_hidden(const Hidden& hidden) {
  Tensor rows = be_.empty({hidden.rows, g_.hidden}, act_);
  be_.gather_rows(hidden.x, hidden.select, rows);  // −1 → a zero row, which stays zero
  Tensor h = be_.empty(rows.shape(), act_);
  norm_.forward(ctx_, rows, h);
  return h;
}

Tensor Model::shard_logits(const Tensor& h, DType dt) {
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
  if (dt == act_) return local;
  Tensor converted = be_.empty(local.shape(), dt);
  be_.convert(local, converted);
  return converted;
}

Tensor Model::logits(const Hidden& hidden) {
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

std::vector<int32_t> Model::choose(const Hidden& hidden, float temperature, uint64_t key0, uint64_t key1,
                                   int32_t step) {
  const int64_t r = hidden.rows, s = comm_.rank();
  // Logits rounded to T, as the entries return them, so generate picks what decode shows.
  Tensor local = shard_logits(final_hidden(hidden), g_.t);
  Tensor value = be_.empty({r}, DType::f32), index = be_.empty({r}, DType::i32);
  if (temperature > 0)
    be_.gumbel_max(local, g_.vocab_valid(s), g_.vocab_begin(s), key0, key1, step, temperature, value, index);
  else
    be_.argmax(local, g_.vocab_valid(s), g_.vocab_begin(s), value, index);
  auto back = be_.to_host_many({value, index});  // one wait
  Tensor &hv = back[0], &hi = back[1];
  comm_.max_with_index(hv, hi);  // each shard's best → the global best, lowest index on ties
  return {hi.ptr<int32_t>(), hi.ptr<int32_t>() + r};
}

std::vector<Tensor> Model::cache_snapshot() {
  std::vector<Tensor> out;
  for (auto& L : layers_) {
    out.push_back(be_.to_host(L.attention.cache_k).clone());
    out.push_back(be_.to_host(L.attention.cache_v).clone());
  }
  return out;
}

}  // namespace linnet
