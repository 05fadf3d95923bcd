// Small random models of any config.json, for the families' and the mixtures of experts' tests
// (families_test.cpp, moe_test.cpp): every entry tied to forward, batch invariance bit for bit,
// and a random checkpoint with the fixtures' tokenizer for the command-line runs. The configs
// have Vocab 97 (ids from random_ids), MaxSeq 32 and pages of 8.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "architectures/hf_config.h"
#include "checkpoint/random_weights.h"
#include "runtime/write_checkpoint.h"
#include "core/backend.h"
#include "layers/model.h"
#include "model_fixtures.h"
#include "parallel/communicator.h"

namespace linnet::testing {

// j with more's keys set.
inline nlohmann::json with(nlohmann::json j, const nlohmann::json& more) {
  for (const auto& [k, v] : more.items()) j[k] = v;
  return j;
}
inline ModelConfig parse(const nlohmann::json& j) { return parse_hf_config(j, "cfg.json"); }
// The error parse gives j, or "(no error)".
inline std::string error_of(const nlohmann::json& j) {
  try {
    parse(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline std::vector<int64_t> random_ids(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int64_t> v(n);
  for (auto& x : v) x = static_cast<int64_t>(g() % 97);
  return v;
}
inline Tensor i32(const std::vector<int64_t>& v) { return Tensor::from_ints({static_cast<int64_t>(v.size())}, v); }
inline Tensor column(const std::vector<int64_t>& v) { return Tensor::from_ints({static_cast<int64_t>(v.size()), 1}, v); }
inline Tensor row(const Tensor& t, int64_t r) { return t.rows(r, r + 1).reshape({t.dim(1)}); }
inline bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// A one-rank CPU model of config j with random weights (seed), at Batch batch, MaxSeq max_seq
// (32 unless given), pages of 8.
struct ConfigModel {
  ModelConfig c;
  Generics g;
  std::unique_ptr<Backend> be = make_cpu_backend();
  SingleCommunicator comm;
  std::unique_ptr<Model> m;
  explicit ConfigModel(const nlohmann::json& j, DType t = DType::f32, int64_t batch = 4, uint64_t seed = 5,
                       int64_t max_seq = 32)
      : c(parse(j)) {
    c.dtype = t;
    g = bind_generics(c, RunOptions{batch, max_seq, 1, 8, t});
    RandomWeights w(seed, t);
    m = std::make_unique<Model>(c, g, w, *be, comm);
  }
  Model* operator->() { return m.get(); }
};

// Through every way into the cache — prefill and decode, prefill_slots, shuffled pages,
// packed prefill with a step beside it — a sequence of 20 gets forward's logits; log_probs
// are forward's log-softmax; generate is decode's argmax. Windows of 5 over pages of 8.
inline void expect_every_entry_agrees_with_forward(const nlohmann::json& j) {
  ConfigModel ref(j);
  const int64_t s = 20;
  const auto a = random_ids(s, 31), b = random_ids(s, 32);
  std::vector<int64_t> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  const Tensor fwd = ref->forward(ids({2, s}, ab));  // [2, s, V]
  auto fwd_at = [&](int64_t r, int64_t p) {
    return fwd.reshape({2 * s, 97}).rows(r * s + p, r * s + p + 1).reshape({97});
  };
  const double tol = 2e-5;
  {  // prefill 12, then decode one token at a time
    ConfigModel m(j, DType::f32, 2);
    std::vector<int64_t> head;
    for (int64_t r = 0; r < 2; ++r) head.insert(head.end(), ab.begin() + r * s, ab.begin() + r * s + 12);
    Tensor out = m->prefill(ids({2, 12}, head), 0);
    for (int64_t r = 0; r < 2; ++r) EXPECT_LT(rel_diff(row(out, r), fwd_at(r, 11)), tol) << "prefill row " << r;
    for (int64_t p = 12; p < s; ++p) {
      out = m->decode(column({a[p], b[p]}), static_cast<int32_t>(p));
      for (int64_t r = 0; r < 2; ++r) EXPECT_LT(rel_diff(row(out, r), fwd_at(r, p)), tol) << "decode " << p;
    }
  }
  {  // prefill_slots into rows 3 and 1, shorter second sequence padded
    ConfigModel m(j);
    std::vector<int64_t> toks = ab;
    Tensor out = m->prefill_slots(ids({2, s}, toks), i32({3, 1}), i32({s, 15}));
    EXPECT_LT(rel_diff(row(out, 0), fwd_at(0, s - 1)), tol);
    EXPECT_LT(rel_diff(row(out, 1), fwd_at(1, 14)), tol);
  }
  {  // paged: a shuffled table; prefill_paged of 13 then step_paged (a 7-token chunk of a, and b's decode)
    ConfigModel m(j, DType::f32, 2);
    std::vector<int64_t> table(8);  // 2 rows × 4 pages of 8
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(3));
    const Tensor tab = Tensor::from_ints({2, 4}, table);
    auto slot = [&](int64_t r, int64_t p) { return table[r * 4 + p / 8] * 8 + p % 8; };
    std::vector<int64_t> t, pos, rows, slots;
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t p = 0; p < 13; ++p) t.push_back(ab[r * s + p]), pos.push_back(p), rows.push_back(r), slots.push_back(slot(r, p));
    Tensor out = m->prefill_paged(i32(t), i32(pos), i32(rows), i32(slots), i32({12, 25}), tab);
    EXPECT_LT(rel_diff(row(out, 0), fwd_at(0, 12)), tol);
    EXPECT_LT(rel_diff(row(out, 1), fwd_at(1, 12)), tol);
    t.clear(), pos.clear(), rows.clear(), slots.clear();
    for (int64_t p = 13; p < s; ++p) t.push_back(a[p]), pos.push_back(p), rows.push_back(0), slots.push_back(slot(0, p));
    out = m->step_paged(i32(t), i32(pos), i32(rows), i32(slots), i32({6, -1}), column({0, b[13]}), i32({-1, 13}), tab);
    EXPECT_LT(rel_diff(row(out, 0), fwd_at(0, s - 1)), tol) << "step_paged prefill part";
    EXPECT_LT(rel_diff(row(out, 3), fwd_at(1, 13)), tol) << "step_paged step part";
    out = m->decode_paged(column({a[0], b[14]}), i32({-1, 14}), tab);
    EXPECT_LT(rel_diff(row(out, 1), fwd_at(1, 14)), tol) << "decode_paged";
  }
  {  // packed: both sequences in one call; log-probs, hidden states and prefill_packed
    ConfigModel m(j);
    std::vector<int64_t> pos, seg, tgt;
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t p = 0; p < s; ++p) pos.push_back(p), seg.push_back(r), tgt.push_back(p + 1 < s ? ab[r * s + p + 1] : -100);
    const Tensor lp = m->log_probs_packed(i32(ab), i32(pos), i32(seg), Tensor::from_ints({2 * s}, tgt, DType::i64));
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t p = 0; p + 1 < s; ++p) {
        const auto l = fwd_at(r, p).to_floats();
        const double mx = *std::max_element(l.begin(), l.end());
        double se = 0;
        for (float x : l) se += std::exp(x - mx);
        EXPECT_NEAR(lp.to_floats()[r * s + p], l[ab[r * s + p + 1]] - mx - std::log(se), 2e-5) << r << " " << p;
      }
    Tensor out = m->prefill_packed(i32(ab), i32(seg), i32(pos), i32(seg), i32({s - 1, 2 * s - 1, -1, -1}));
    EXPECT_LT(rel_diff(row(out, 0), fwd_at(0, s - 1)), tol) << "prefill_packed";
    EXPECT_LT(rel_diff(row(out, 1), fwd_at(1, s - 1)), tol) << "prefill_packed";
  }
  {  // generate = decode's argmax loop
    ConfigModel m(j, DType::f32, 2), n(j, DType::f32, 2);
    std::vector<int64_t> head;
    for (int64_t r = 0; r < 2; ++r) head.insert(head.end(), ab.begin() + r * s, ab.begin() + r * s + 9);
    m->prefill(ids({2, 9}, head), 0);
    n->prefill(ids({2, 9}, head), 0);
    const auto gen = m->generate(column({a[9], b[9]}), 9, 10).to_ints();
    std::vector<int64_t> cur = {a[9], b[9]};
    for (int64_t i = 0; i < 10; ++i) {
      const Tensor l = n->decode(column(cur), static_cast<int32_t>(9 + i));
      for (int64_t r = 0; r < 2; ++r) {
        const auto v = row(l, r).to_floats();
        cur[r] = std::max_element(v.begin(), v.end()) - v.begin();
        EXPECT_EQ(gen[r * 10 + i], cur[r]) << "row " << r << " step " << i;
      }
    }
  }
}

// A sequence's logits through the paged entries and its log-probs through the packed ones are
// the same bits alone and among others (docs/numerics.md), in f32 and bf16.
inline void expect_batch_invariant_bit_for_bit(const nlohmann::json& j) {
  for (DType t : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    const auto target = random_ids(17, 41);
    std::vector<Tensor> alone;
    for (int others : {0, 3}) {
      ConfigModel m(j, t, 4);
      std::vector<int64_t> table(16);
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), std::mt19937(static_cast<uint32_t>(others)));
      const Tensor tab = Tensor::from_ints({4, 4}, table);
      const int64_t target_row = others;  // the target's row moves
      std::vector<int64_t> tok, pos, rows, slots, last(4, -1);
      std::vector<int64_t> ptok, ppos, pseg, ptgt;
      for (int64_t r = 0; r <= others; ++r) {
        const int64_t row_id = r == others ? target_row : r;
        const auto seq = r == others ? target : random_ids(5 + 3 * r, 50 + static_cast<uint32_t>(r));
        for (size_t p = 0; p < seq.size(); ++p) {
          tok.push_back(seq[p]), pos.push_back(static_cast<int64_t>(p)), rows.push_back(row_id);
          slots.push_back(table[row_id * 4 + p / 8] * 8 + p % 8);
          ptok.push_back(seq[p]), ppos.push_back(static_cast<int64_t>(p)), pseg.push_back(r);
          ptgt.push_back(p + 1 < seq.size() ? seq[p + 1] : -1);
        }
        last[row_id] = static_cast<int64_t>(tok.size()) - 1;
      }
      const Tensor pre = m->prefill_paged(i32(tok), i32(pos), i32(rows), i32(slots), i32(last), tab);
      std::vector<int64_t> next(4, 0), npos(4, -1);
      next[target_row] = 7, npos[target_row] = 17;
      const Tensor dec = m->decode_paged(column(next), i32(npos), tab);
      const Tensor lp = m->log_probs_packed(i32(ptok), i32(ppos), i32(pseg), Tensor::from_ints({static_cast<int64_t>(ptgt.size())}, ptgt, DType::i64));
      const int64_t first = static_cast<int64_t>(ptgt.size()) - 17;
      const std::vector<Tensor> got = {row(pre, target_row).clone(), row(dec, target_row).clone(),
                                       lp.reshape({lp.numel()}).rows(first, first + 17).clone()};
      if (others == 0) {
        alone = got;
        continue;
      }
      for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(same_bytes(got[i], alone[i])) << "result " << i << " among " << others;
    }
  }
}

}  // namespace linnet::testing
