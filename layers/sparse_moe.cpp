#include "layers/sparse_moe.h"

#include <algorithm>
#include <cstring>

namespace linnet {

namespace {

Tensor host_ints(const std::vector<int32_t>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::i32);
  if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

}  // namespace

void Router::forward(Context& ctx, const Tensor& x, Tensor& weights, Tensor& experts) const {
  Backend& be = ctx.backend;
  const int64_t n = x.dim(0), e = gate.out_features();
  if (choice && round_to) {
    // Mistral 4: F.linear(x, weight) and softmax(-1) in T; the choice among those probabilities.
    auto rounded = [&](Tensor& t) {
      if (*round_to == DType::f32) return;
      Tensor r = be.empty(t.shape(), *round_to);
      be.convert(t, r);
      be.convert(r, t);
    };
    Tensor logits = be.empty({n, e}, DType::f32);
    if (x.dtype() == DType::f32) {
      gate.forward(ctx, x, logits);
    } else {
      Tensor l = be.empty({n, e}, x.dtype());
      gate.forward(ctx, x, l);
      be.convert(l, logits);
    }
    rounded(logits);
    Tensor probs = be.empty({n, e}, DType::f32);
    be.router_softmax(logits, probs);
    rounded(probs);
    be.choose_experts(probs, nullptr, *choice, top_k, weights, experts);
    return;
  }
  if (choice) {  // transformers: F.linear(x.float(), weight.float()), then the choice in f32
    Tensor x32 = x;
    if (x.dtype() != DType::f32) {
      x32 = be.empty(x.shape(), DType::f32);
      be.convert(x, x32);
    }
    Tensor logits = be.empty({n, e}, DType::f32);
    gate.forward(ctx, x32, logits);
    if (!choice->sigmoid) {  // DeepSeek V2: the choice among the softmax's probabilities
      Tensor probs = be.empty({n, e}, DType::f32);
      be.router_softmax(logits, probs);
      logits = probs;
    }
    be.choose_experts(logits, bias.defined() ? &bias : nullptr, *choice, top_k, weights, experts);
    return;
  }
  Tensor logits = be.empty({n, e}, x.dtype());
  gate.forward(ctx, x, logits);
  if (round_to && *round_to != x.dtype()) {
    // gpt-oss: the logits (with the router's bias) in T, as F.linear gives them in the model's
    // dtype; the top-k of those, their softmax (the probabilities renormalised over the chosen).
    Tensor r = be.empty(logits.shape(), *round_to);
    be.convert(logits, r);
    be.convert(r, logits);
  }
  Tensor probs = be.empty({n, e}, DType::f32);
  be.router_softmax(logits, probs);
  be.top_k(probs, top_k, normalize, weights, experts);
}

void SparseMoe::run_experts(Context& ctx, const Tensor& xs, const std::vector<int64_t>& offsets, Tensor& y) const {
  Backend& be = ctx.backend;
  const int64_t m = xs.dim(0);
  // gpt-oss's biases: row r (of local expert g) gets row g of the table, gathered then added.
  Tensor expert_of;
  if (gate_up_bias.defined() || down_bias.defined()) {
    std::vector<int32_t> g(static_cast<size_t>(m));
    for (size_t e = 0; e + 1 < offsets.size(); ++e)
      for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) g[static_cast<size_t>(r)] = static_cast<int32_t>(e);
    expert_of = be.upload(host_ints(g, {m}));
  }
  auto add_bias = [&](Tensor& out, const Tensor& table) {
    Tensor b = be.empty(out.shape(), out.dtype());
    be.gather_rows(table, expert_of, b);
    be.add(out, b);
  };
  Tensor gu = be.empty({m, 2 * inner}, xs.dtype());
  be.grouped_matmul(gate_up.rounded_input(ctx, xs, false), gate_up.weight, offsets, gu);
  if (gate_up_bias.defined()) add_bias(gu, gate_up_bias);
  Tensor act = be.empty({m, inner}, xs.dtype());
  if (clamped) be.swiglu_clamped(gu, act, clamped->alpha, clamped->limit);
  else be.swiglu(gu, act);
  // Tensor sharding slices down by columns: a per-token scale takes the whole row's amax, all-reduced
  // (every rank holds the same rows in the same order). Expert sharding holds experts whole.
  const bool columns_split = !expert_parallel && ctx.comm.size() > 1;
  be.grouped_matmul(down.rounded_input(ctx, act, columns_split), down.weight, offsets, y);
  if (down_bias.defined()) add_bias(y, down_bias);
}

void SparseMoe::forward(Context& ctx, const Tensor& x, Tensor& out) const {
  if (x.dim(0) == 0) return;  // every rank holds the same rows: all return here together
  if (expert_parallel && ctx.comm.size() > 1)
    forward_expert_parallel(ctx, x, out);
  else
    forward_local(ctx, x, out);
  if (shared) {  // transformers: routed + shared_experts(x), each rounded to T, then added
    Tensor s = ctx.backend.empty(out.shape(), out.dtype());
    shared->forward(ctx, x, s);  // (its down's partial sums all-reduced there)
    if (shared_gate.weight.defined()) {  // × sigmoid(shared_expert_gate(x)), a scalar a row
      Tensor g = ctx.backend.empty({x.dim(0), 1}, x.dtype());
      shared_gate.forward(ctx, x, g);
      ctx.backend.sigmoid_mul(s, g);
    }
    ctx.backend.add(out, s);
  }
}

void SparseMoe::forward_local(Context& ctx, const Tensor& x, Tensor& out) const {
  Backend& be = ctx.backend;
  const int64_t n = x.dim(0), k = router.top_k, h = x.dim(1), groups = local_experts();
  Tensor weights = be.empty({n, k}, DType::f32), chosen = be.empty({n, k}, DType::i32);
  router.forward(ctx, x, weights, chosen);
  // The host groups the rows by expert (one wait per layer): expert e's rows in token order.
  const Tensor ids = be.to_host(chosen);
  const int32_t* id = ids.ptr<int32_t>();
  std::vector<int64_t> offsets(static_cast<size_t>(groups) + 1, 0);
  for (int64_t i = 0; i < n * k; ++i) ++offsets[static_cast<size_t>(id[i] - first_expert) + 1];
  for (int64_t g = 0; g < groups; ++g) offsets[g + 1] += offsets[g];
  std::vector<int64_t> cursor(offsets.begin(), offsets.end() - 1);
  std::vector<int32_t> token(static_cast<size_t>(n * k)), row(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < n * k; ++i) {
    const int64_t r = cursor[static_cast<size_t>(id[i] - first_expert)]++;
    row[static_cast<size_t>(i)] = static_cast<int32_t>(r);  // where choice i's output lands
    token[static_cast<size_t>(r)] = static_cast<int32_t>(i / k);
  }
  const auto up = be.upload_many({host_ints(token, {n * k}), host_ints(row, {n, k})});
  Tensor xs = be.empty({n * k, h}, x.dtype());
  be.gather_rows(x, up[0], xs);
  Tensor y = be.empty({n * k, h}, x.dtype());
  run_experts(ctx, xs, offsets, y);
  be.moe_combine(y, up[1], chosen, weights, out);
  // Tensor sharding: each rank summed its slices' partial products; the shards' sums add here.
  if (ctx.comm.size() > 1) ctx.comm.all_reduce_sum(out);
}

void SparseMoe::forward_expert_parallel(Context& ctx, const Tensor& x, Tensor& out) const {
  Backend& be = ctx.backend;
  Communicator& comm = ctx.comm;
  const int64_t ranks = comm.size(), me = comm.rank();
  const int64_t n = x.dim(0), k = router.top_k, h = x.dim(1), el = local_experts();
  // This rank's rows ("home"): ⌈N/S⌉ of them from me·⌈N/S⌉ (fewer, or none, at the end).
  const int64_t per = (n + ranks - 1) / ranks;
  const int64_t h0 = std::min(me * per, n), h1 = std::min(h0 + per, n), nh = h1 - h0;

  // 1. Route the home rows; group their choices by expert (expert e's rows in token order),
  //    which also groups them by the rank that holds the expert, in rank order.
  Tensor weights = be.empty({nh, k}, DType::f32), chosen = be.empty({nh, k}, DType::i32);
  if (nh > 0) router.forward(ctx, x.rows(h0, h1), weights, chosen);
  const Tensor ids = nh > 0 ? be.to_host(chosen) : Tensor::empty({0, k}, DType::i32);
  const int32_t* id = ids.ptr<int32_t>();
  std::vector<int64_t> per_expert(static_cast<size_t>(num_experts), 0);
  for (int64_t i = 0; i < nh * k; ++i) ++per_expert[static_cast<size_t>(id[i])];
  std::vector<int64_t> start(static_cast<size_t>(num_experts) + 1, 0);
  for (int64_t e = 0; e < num_experts; ++e) start[e + 1] = start[e] + per_expert[static_cast<size_t>(e)];
  std::vector<int32_t> token(static_cast<size_t>(nh * k)), row(static_cast<size_t>(nh * k));
  {
    std::vector<int64_t> cursor(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < nh * k; ++i) {
      const int64_t r = cursor[static_cast<size_t>(id[i])]++;
      row[static_cast<size_t>(i)] = static_cast<int32_t>(r);
      token[static_cast<size_t>(r)] = static_cast<int32_t>(i / k);
    }
  }
  std::vector<int64_t> send_rows(static_cast<size_t>(ranks));
  for (int64_t q = 0; q < ranks; ++q) send_rows[q] = start[(q + 1) * el] - start[q * el];

  // 2. How many rows each rank sends each of my experts: per (source, local expert).
  Tensor counts_out = Tensor::empty({ranks, el}, DType::i64), counts_in = Tensor::zeros({ranks, el}, DType::i64);
  for (int64_t i = 0; i < ranks * el; ++i) counts_out.ptr<int64_t>()[i] = per_expert[static_cast<size_t>(i)];
  const std::vector<int64_t> ones(static_cast<size_t>(ranks), 1);
  comm.all_to_all(counts_out, ones, counts_in, ones);
  const int64_t* cin = counts_in.ptr<int64_t>();
  std::vector<int64_t> recv_rows(static_cast<size_t>(ranks), 0);
  for (int64_t q = 0; q < ranks; ++q)
    for (int64_t e = 0; e < el; ++e) recv_rows[q] += cin[q * el + e];
  int64_t m_in = 0;
  for (int64_t q = 0; q < ranks; ++q) m_in += recv_rows[q];
  const int64_t m_out = nh * k;

  // The received rows arrive by source, each source's by expert; the experts want them by
  // expert: `grouped[i]` is the received row at grouped position i, `back` the inverse.
  std::vector<int64_t> offsets(static_cast<size_t>(el) + 1, 0);
  for (int64_t e = 0; e < el; ++e) {
    offsets[e + 1] = offsets[e];
    for (int64_t q = 0; q < ranks; ++q) offsets[e + 1] += cin[q * el + e];
  }
  std::vector<int32_t> grouped(static_cast<size_t>(m_in)), back(static_cast<size_t>(m_in));
  {
    std::vector<int64_t> cursor(offsets.begin(), offsets.end() - 1);
    int64_t at = 0;
    for (int64_t q = 0; q < ranks; ++q)
      for (int64_t e = 0; e < el; ++e)
        for (int64_t j = 0; j < cin[q * el + e]; ++j, ++at) {
          const int64_t g = cursor[static_cast<size_t>(e)]++;
          grouped[static_cast<size_t>(g)] = static_cast<int32_t>(at);
          back[static_cast<size_t>(at)] = static_cast<int32_t>(g);
        }
  }
  bool identity = true;
  for (int64_t i = 0; i < m_in && identity; ++i) identity = grouped[static_cast<size_t>(i)] == i;

  const auto up = be.upload_many({host_ints(token, {m_out}), host_ints(row, {nh, k}), host_ints(grouped, {m_in}),
                                  host_ints(back, {m_in})});
  // 3. Dispatch: each chosen (token, expert) row to the expert's rank.
  Tensor send = be.empty({m_out, h}, x.dtype());
  if (m_out > 0) be.gather_rows(x.rows(h0, h1), up[0], send);
  Tensor recv = be.empty({m_in, h}, x.dtype());
  comm.all_to_all(send, send_rows, recv, recv_rows);
  // 4. This rank's experts over the rows they were sent.
  Tensor y_in = be.empty({m_in, h}, x.dtype());
  if (m_in > 0) {
    if (identity) {
      run_experts(ctx, recv, offsets, y_in);
    } else {
      Tensor xs = be.empty({m_in, h}, x.dtype()), ys = be.empty({m_in, h}, x.dtype());
      be.gather_rows(recv, up[2], xs);
      run_experts(ctx, xs, offsets, ys);
      be.gather_rows(ys, up[3], y_in);
    }
  }
  // 5. Combine: the outputs back to their tokens' home ranks, summed there in expert order.
  Tensor y_home = be.empty({m_out, h}, x.dtype());
  comm.all_to_all(y_in, recv_rows, y_home, send_rows);
  Tensor mine = be.empty({per, h}, x.dtype());
  if (nh > 0) {
    Tensor rows = mine.rows(0, nh);
    be.moe_combine(y_home, up[1], chosen, weights, rows);
  }
  if (nh < per) {
    Tensor pad = mine.rows(nh, per);
    be.fill_zero(pad);
  }
  // 6. Every rank's rows to every rank: the residual stream whole again.
  Tensor all = be.empty({ranks * per, h}, x.dtype());
  comm.all_gather(mine, all);
  be.convert(all.rows(0, n), out);
}

}  // namespace linnet
