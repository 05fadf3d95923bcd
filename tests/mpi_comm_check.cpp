// mpi_comm_check: run under `mpirun -np N`; checks every MpiCommunicator collective, the
// device staging path, MpiRuntime's groups, and (on 1-4 ranks) a tensor-parallel tiny model
// against the same model on one rank. Exits 0 when all pass; on the first mismatch a rank
// prints it and ends the job through abort_all (non-zero). tests/mpi_communicator_test.cpp
// runs it.
//
//   mpi_comm_check [--fail-on-rank R]   rank R throws mid-run (between collectives the others
//                                        are already waiting in): the job must end non-zero.
//                  [--skip-model]       leave out the model check
//   mpi_comm_check --nccl-one-rank collectives|watchdog
//                  one rank, one GPU, a NcclCommunicator over MPI_COMM_SELF (tests/
//                  nccl_one_rank_test.cpp): its non-blocking setup and every collective, or the
//                  watchdog aborting a collective left unfinished past LINNET_NCCL_TIMEOUT
//                  behind a planted hang. Exit 77 (and the reason) without a GPU or NCCL.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/random_weights.h"
#include "core/backend.h"
#include "core/cuda_module.h"
#include "layers/model.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_runtime.h"
#include "parallel/nccl_communicator.h"

using namespace linnet;

namespace {

int g_checks = 0;

template <class... A>
void expect(bool cond, const A&... what) {
  ++g_checks;
  if (!cond) throw Error(str("check failed: ", what...));
}

// ---- a fake device: host memory tagged Device::cuda, reachable only through to_host and
// copy_from_host (which are counted, so the staging path is seen to be taken) ----
class FakeDeviceBackend final : public Backend {
 public:
  int to_host_calls = 0, copy_from_host_calls = 0;

  std::string name() const override { return "fake-device"; }
  Device device() const override { return Device::cuda; }
  DType compute_dtype(DType w) const override { return w; }
  int64_t memory_available() const override { return host_memory_available(); }
  Tensor empty(const Shape& shape, DType dtype) override {
    auto s = std::make_shared<Storage>();
    s->bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
    s->data = new char[s->bytes + 1];
    s->device = Device::cuda;
    s->release = [](void* p) { delete[] static_cast<char*>(p); };
    return Tensor(s, 0, shape, dtype);
  }
  Tensor upload(const Tensor& host) override {
    Tensor t = empty(host.shape(), host.dtype());
    std::memcpy(t.data(), host.data(), host.nbytes());
    return t;
  }
  Tensor to_host(const Tensor& t) override {
    ++to_host_calls;
    Tensor h = Tensor::empty(t.shape(), t.dtype());
    std::memcpy(h.data(), t.data(), t.nbytes());
    return h;
  }
  void copy_from_host(const Tensor& host, Tensor& dst) override {
    ++copy_from_host_calls;
    LINNET_CHECK(host.device() == Device::cpu && dst.device() == Device::cuda && host.nbytes() == dst.nbytes());
    std::memcpy(dst.data(), host.data(), host.nbytes());
  }
  void fill_zero(Tensor& t) override { std::memset(t.data(), 0, t.nbytes()); }
  void synchronize() override {}
  [[noreturn]] void no() { throw Error("fake device backend: op not implemented"); }
  void convert(const Tensor&, Tensor&) override { no(); }
  void embedding(const Tensor&, const Tensor&, Tensor&) override { no(); }
  void matmul(const Tensor&, const Tensor&, const Tensor*, Tensor&) override { no(); }
  void rms_norm(const Tensor&, const Tensor&, float, Tensor&) override { no(); }
  void add_rms_norm(Tensor&, const Tensor&, const Tensor&, float, Tensor&) override { no(); }
  void add(Tensor&, const Tensor&) override { no(); }
  void rope_heads(Tensor&, int64_t, int64_t, int64_t, const Tensor&, const Tensor&, float) override { no(); }
  void swiglu(const Tensor&, Tensor&) override { no(); }
  void geglu(const Tensor&, Tensor&) override { no(); }
  void swiglu_clamped(const Tensor&, Tensor&, float, float) override { no(); }
  void pointwise(Tensor&, Pointwise, float) override { no(); }
  void sum_squares(const Tensor&, int64_t, int64_t, Tensor&) override { no(); }
  void row_amax(const Tensor&, Tensor&) override { no(); }
  void round_activations(const Tensor&, const ActivationRounding&, const Tensor*, Tensor&) override { no(); }
  void matmul_rounded(const Tensor&, const ActivationRounding&, const Tensor*, const Tensor&, const Tensor*,
                      Tensor&) override {
    no();
  }
  void rms_norm_cols(Tensor&, int64_t, int64_t, int64_t, const Tensor&, float, const Tensor*, int64_t) override { no(); }
  void kv_write(const Tensor&, const AttentionDims&, const Tensor&, Tensor&, Tensor&) override { no(); }
  void attention_packed(const Tensor&, const AttentionDims&, const Tensor&, Tensor&) override { no(); }
  void attention_cache(const Tensor&, const AttentionDims&, const Tensor&, const Tensor&, const Tensor&,
                       const Tensor&, const Tensor&, Tensor&) override {
    no();
  }
  void gather_rows(const Tensor&, const Tensor&, Tensor&) override { no(); }
  void copy_columns(const Tensor&, Tensor&, int64_t, int64_t) override { no(); }
  void copy_heads(const Tensor&, Tensor&, const HeadCopy&) override { no(); }
  void scale_by_position(Tensor&, int64_t, int64_t, const Tensor&, float, int64_t) override { no(); }
  void router_softmax(const Tensor&, Tensor&) override { no(); }
  void top_k(const Tensor&, int64_t, bool, Tensor&, Tensor&) override { no(); }
  void choose_experts(const Tensor&, const Tensor*, const ExpertChoice&, int64_t, Tensor&, Tensor&) override { no(); }
  void grouped_matmul(const Tensor&, const Tensor&, const std::vector<int64_t>&, Tensor&) override { no(); }
  void moe_combine(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&) override { no(); }
  void logit_stats(const Tensor&, int64_t, int64_t, const Tensor&, Tensor&, Tensor&, Tensor&) override { no(); }
  void argmax(const Tensor&, int64_t, int64_t, Tensor&, Tensor&) override { no(); }
  void gumbel_max(const Tensor&, int64_t, int64_t, uint64_t, uint64_t, int32_t, float, Tensor&, Tensor&) override {
    no();
  }
  void sigmoid_mul(Tensor&, const Tensor&) override { no(); }
  void causal_conv1d(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) override { no(); }
  void gated_delta_rule(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, const DeltaNetDims&,
                        Tensor&, Tensor&) override {
    no();
  }
  void rms_norm_gated(const Tensor&, const Tensor&, const Tensor&, float, Tensor&) override { no(); }
};

// Values every rank can compute for every rank r: multiples of 1/4 in [-8, 8], exact in
// bf16/f16 and in their sums over up to 4 ranks.
float value_of(int r, int64_t i, uint32_t seed) {
  std::mt19937 gen(seed * 1000003u + static_cast<uint32_t>(i) * 7919u + static_cast<uint32_t>(r) * 104729u);
  return static_cast<float>(static_cast<int>(gen() % 65) - 32) / 4.0f;
}

Tensor data_of(int r, int64_t n, DType d, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = value_of(r, i, seed);
  return Tensor::from_floats({n}, v, d);
}

// What a value of value_of() reads back as after a trip through dtype d.
float as_stored(DType d, float x) { return d == DType::i32 || d == DType::i64 ? std::trunc(x) : x; }

std::vector<float> floats(const Tensor& t, Backend* be) {
  return t.device() == Device::cpu ? t.to_floats() : be->to_host(t).to_floats();
}

// ---- the collectives ----
void check_collectives(Communicator& comm, Backend* device) {
  const int rank = comm.rank(), size = comm.size();
  const int64_t n = 1000;
  auto place = [&](const Tensor& h) { return device ? device->upload(h) : h.clone(); };
  const char* where = device ? " (staged)" : "";

  // all_reduce_sum, same seed on every rank: x·N. f32 with random floats too.
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    Tensor x = place(data_of(0, n, d, 11));
    comm.all_reduce_sum(x);
    auto got = floats(x, device);
    for (int64_t i = 0; i < n; ++i)
      expect(got[i] == value_of(0, i, 11) * size, "all_reduce_sum ", dtype_name(d), where, " [", i, "] = ", got[i],
             ", want ", value_of(0, i, 11) * size);
  }
  {
    std::mt19937 gen(5);
    std::normal_distribution<float> nd;
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& e : v) e = nd(gen);
    Tensor x = place(Tensor::from_floats({10, 100}, v));
    comm.all_reduce_sum(x);
    auto got = floats(x, device);
    for (int64_t i = 0; i < n; ++i)
      expect(std::fabs(got[i] - v[i] * size) <= 1e-5f * std::fabs(v[i] * size) + 1e-6f, "all_reduce_sum f32 random",
             where, " [", i, "]");
  }
  // Float sums are the rank-order sum ((x₀ + x₁) + x₂) + … of every element, bit for bit,
  // whatever the count (MPI_Allreduce alone changed association with the size at 3 ranks):
  // magnitudes that differ by rank make the association show.
  for (DType d : {DType::f32, DType::bf16})
    for (int64_t count : {int64_t{1}, int64_t{5}, int64_t{1000}, int64_t{4096}, int64_t{65537}, int64_t{300000}}) {
      const float scale[] = {1e4f, 1.f, 1e-3f, 3e2f};
      auto part = [&](int r) {
        std::mt19937 gen(77u + static_cast<uint32_t>(r));
        std::normal_distribution<float> nd;
        std::vector<float> v(static_cast<size_t>(count));
        for (auto& e : v) e = nd(gen) * scale[r % 4];
        return Tensor::from_floats({count}, v, d);
      };
      std::vector<std::vector<float>> parts;
      for (int r = 0; r < size; ++r) parts.push_back(part(r).to_floats());
      Tensor x = place(part(rank));
      comm.all_reduce_sum(x);
      const Tensor got = device ? device->to_host(x) : x;
      std::vector<float> sum(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) {
        float s = parts[0][i];
        for (int r = 1; r < size; ++r) s = s + parts[r][i];
        sum[i] = s;
      }
      const Tensor want = Tensor::from_floats({count}, sum, d);
      int64_t differ = 0;
      for (int64_t i = 0; i < count; ++i)
        differ += std::memcmp(static_cast<const char*>(got.data()) + i * dtype_size(d),
                              static_cast<const char*>(want.data()) + i * dtype_size(d), dtype_size(d)) != 0;
      expect(differ == 0, "all_reduce_sum ", dtype_name(d), where, " of ", count, " elements: ", differ,
             " differ from the rank-order sum");
    }
  // Integer sums, and a view (rows of a larger tensor) reduced in place without touching the rest.
  {
    Tensor x = Tensor::from_ints({4}, {1, -2, 3, 1000000000000LL}, DType::i64);
    if (device) x = device->upload(x);
    comm.all_reduce_sum(x);
    Tensor h = device ? device->to_host(x) : x;
    expect(h.ptr<int64_t>()[3] == 1000000000000LL * size && h.ptr<int64_t>()[1] == -2 * size, "all_reduce_sum i64",
           where);
    Tensor big = Tensor::from_floats({3, 2}, {1, 2, 3, 4, 5, 6});
    Tensor mid = big.rows(1, 2);
    comm.all_reduce_sum(mid);
    auto b = big.to_floats();
    expect(b[0] == 1 && b[1] == 2 && b[2] == 3.0f * size && b[3] == 4.0f * size && b[4] == 5 && b[5] == 6,
           "all_reduce_sum of a row view");
  }
  // all_reduce_max on rank-dependent data.
  for (DType d : {DType::f32, DType::bf16}) {
    Tensor x = place(data_of(rank, n, d, 12));
    comm.all_reduce_max(x);
    auto got = floats(x, device);
    for (int64_t i = 0; i < n; ++i) {
      float want = value_of(0, i, 12);
      for (int r = 1; r < size; ++r) want = std::max(want, value_of(r, i, 12));
      expect(got[i] == want, "all_reduce_max ", dtype_name(d), where, " [", i, "] = ", got[i], ", want ", want);
    }
  }
  // all_gather: rank order.
  for (DType d : {DType::f32, DType::bf16, DType::i32}) {
    Tensor local = place(data_of(rank, 6, d, 13).reshape({2, 3}));
    Tensor out = device ? device->empty({size, 2, 3}, d) : Tensor::zeros({size, 2, 3}, d);
    comm.all_gather(local, out);
    auto got = floats(out, device);
    for (int r = 0; r < size; ++r)
      for (int64_t i = 0; i < 6; ++i)
        expect(got[r * 6 + i] == as_stored(d, value_of(r, i, 13)),
               "all_gather ", dtype_name(d), where, " rank ", r, " [", i, "]");
  }
  // broadcast from the last rank (≠ 0 with several ranks); the others start with garbage.
  const int root = size - 1;
  for (DType d : {DType::f32, DType::bf16, DType::i32, DType::i64}) {
    Tensor x = place(rank == root ? data_of(root, 50, d, 14) : Tensor::from_floats({50}, std::vector<float>(50, -99), d));
    comm.broadcast(x, root);
    auto got = floats(x, device);
    for (int64_t i = 0; i < 50; ++i) {
      const float want = as_stored(d, value_of(root, i, 14));
      expect(got[i] == want, "broadcast ", dtype_name(d), " from ", root, where, " [", i, "] = ", got[i], ", want ", want);
    }
  }
  bool threw = false;
  try {
    Tensor x = Tensor::zeros({2}, DType::f32);
    comm.broadcast(x, size);
  } catch (const Error&) {
    threw = true;
  }
  expect(threw, "broadcast from root ", size, " of ", size, " ranks must throw");

  // max_with_index. Element i:
  //   i % 4 == 0: every rank has the same value; indices are larger on lower ranks, so the
  //               lowest index (the tie's winner) sits on the last rank;
  //   i % 4 == 1: rank (i/4) % size has the largest value (with a larger index than others);
  //   i % 4 == 2: -inf everywhere but on rank 0 (a shard of padding only beats nothing);
  //   i % 4 == 3: random values, index = rank·1000 + i; ties resolved to the lowest index.
  {
    const int64_t m = 64;
    std::vector<float> v(m);
    std::vector<int64_t> ix(m);
    auto val = [&](int r, int64_t i) -> float {
      switch (i % 4) {
        case 0: return 1.5f;
        case 1: return r == (i / 4) % size ? 10.0f : -1.0f;
        case 2: return r == 0 ? -3.0f : -INFINITY;
        default: return value_of(r, i, 15);
      }
    };
    auto idx = [&](int r, int64_t i) -> int32_t {
      switch (i % 4) {
        case 0: return (size - 1 - r) * 100 + static_cast<int32_t>(i);
        case 1: return (r == (i / 4) % size ? 50000 : 0) + static_cast<int32_t>(i);
        default: return r * 1000 + static_cast<int32_t>(i);
      }
    };
    for (int64_t i = 0; i < m; ++i) {
      v[i] = val(rank, i);
      ix[i] = idx(rank, i);
    }
    Tensor value = Tensor::from_floats({m}, v), index = Tensor::from_ints({m}, ix, DType::i32);
    if (device) {
      value = device->upload(value);
      index = device->upload(index);
    }
    comm.max_with_index(value, index);
    auto gv = floats(value, device);
    Tensor hi = device ? device->to_host(index) : index;
    for (int64_t i = 0; i < m; ++i) {
      float wv = val(0, i);
      int32_t wi = idx(0, i);
      for (int r = 1; r < size; ++r) {
        const float x = val(r, i);
        if (x > wv || (x == wv && idx(r, i) < wi)) {
          wv = x;
          wi = idx(r, i);
        }
      }
      expect(gv[i] == wv && hi.ptr<int32_t>()[i] == wi, "max_with_index", where, " [", i, "] = (", gv[i], ", ",
             hi.ptr<int32_t>()[i], "), want (", wv, ", ", wi, ")");
    }
  }
  // all_ok.
  expect(comm.all_ok(true), "all_ok(true) everywhere");
  expect(comm.all_ok(rank != size - 1) == false, "all_ok with the last rank false");
  expect(comm.all_ok(rank == 0) == (size == 1), "all_ok with only rank 0 true");
  comm.barrier();
}

// ---- groups ----
// all_to_all: rank r sends rank q (r + 2q) % 3 rows of 5 values each (some pairs none),
// values every rank can recompute; f32, bf16, i64; host tensors and staged device ones; and
// exchange_counts.
void check_all_to_all(Communicator& comm, Backend* device) {
  const int rank = comm.rank(), size = comm.size();
  const int64_t w = 5;
  auto rows_from = [](int r, int q) { return static_cast<int64_t>((r + 2 * q) % 3); };
  const char* where = device ? " (staged)" : "";
  for (DType d : {DType::f32, DType::bf16, DType::i64}) {
    std::vector<int64_t> send_rows(static_cast<size_t>(size)), recv_rows(static_cast<size_t>(size));
    std::vector<float> out;
    for (int q = 0; q < size; ++q) {
      send_rows[q] = rows_from(rank, q);
      recv_rows[q] = rows_from(q, rank);
      for (int64_t i = 0; i < send_rows[q] * w; ++i) out.push_back(value_of(rank * 100 + q, i, 17));
    }
    int64_t sent = 0, got = 0;
    for (int q = 0; q < size; ++q) sent += send_rows[q], got += recv_rows[q];
    Tensor send = Tensor::from_floats({sent, w}, out, d);
    Tensor recv = Tensor::zeros({got, w}, d);
    if (device) {
      send = device->upload(send);
      recv = device->upload(recv);
    }
    expect(exchange_counts(comm, send_rows) == recv_rows, "exchange_counts on rank ", rank);
    comm.all_to_all(send, send_rows, recv, recv_rows);
    const auto back = floats(recv, device);
    int64_t at = 0;
    for (int q = 0; q < size; ++q)
      for (int64_t i = 0; i < recv_rows[q] * w; ++i, ++at)
        expect(back[static_cast<size_t>(at)] == as_stored(d, value_of(q * 100 + rank, i, 17)), "all_to_all ",
               dtype_name(d), where, " from rank ", q, " [", i, "] = ", back[static_cast<size_t>(at)]);
  }
}

void check_groups(MpiRuntime& mpi) {
  const int w = mpi.world_size(), wr = mpi.world_rank();
  for (int tp = 1; tp <= w; ++tp) {
    if (w % tp != 0) {
      bool threw = false;
      try {
        mpi.make_groups(tp);
      } catch (const Error& e) {
        threw = std::string(e.what()).find("does not divide") != std::string::npos;
      }
      expect(threw, "make_groups(", tp, ") on ", w, " ranks must throw on every rank");
      continue;
    }
    Groups g = mpi.make_groups(tp);
    expect(g.tp == tp && g.replicas == w / tp && g.replica == wr / tp && g.shard == wr % tp, "make_groups(", tp,
           ") numbering");
    MpiCommunicator shards(g.shard_comm);
    expect(shards.size() == tp && shards.rank() == g.shard, "shard_comm of tp ", tp);
    // Sums stay inside a replica: Σ world ranks of replica r = tp·r·tp + tp(tp−1)/2.
    Tensor x = Tensor::from_ints({1}, {wr}, DType::i64);
    shards.all_reduce_sum(x);
    const int64_t r = g.replica, want = int64_t(tp) * r * tp + int64_t(tp) * (tp - 1) / 2;
    expect(x.ptr<int64_t>()[0] == want, "sum inside replica ", r, " of tp ", tp, " = ", x.ptr<int64_t>()[0], ", want ",
           want);
    check_collectives(shards, nullptr);
  }
  {
    Groups whole = mpi.make_groups(0);
    expect(whole.tp == w && whole.replicas == 1, "make_groups(0) is the whole world");
  }
  bool threw = false;
  try {
    mpi.make_groups(-2);
  } catch (const Error&) {
    threw = true;
  }
  expect(threw, "make_groups(-2) must throw");
  expect(mpi.local_rank() >= 0 && mpi.local_rank() < std::max(mpi.local_size(), w), "local_rank ", mpi.local_rank());
}

// ---- a tensor-parallel tiny model equals the one-rank model ----
ModelConfig model_config(int shards) {
  ModelConfig c;
  c.vocab = 97;  // divides by none of 2, 3, 4: the last vocab shard is padded
  c.heads = 2 * shards;
  c.kv_heads = shards;
  c.hidden = 8 * c.heads;
  c.inner = 12 * shards;
  c.layers = 2;
  c.max_position = 32;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000;
  c.dtype = DType::f32;
  return c;
}

double rel_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_floats(), y = b.to_floats();
  if (x.size() != y.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    den += double(y[i]) * y[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

void check_model(Communicator& comm) {
  const int shards = comm.size();
  const ModelConfig c = model_config(shards);
  RunOptions o;
  o.batch = 2;
  o.max_seq = 16;
  o.page_size = 8;
  auto cpu = make_cpu_backend();
  o.shards = shards;
  Generics g = bind_generics(c, o);
  RandomWeights w(3);
  Model tp(c, g, w, *cpu, comm);
  o.shards = 1;
  Generics g1 = bind_generics(c, o);
  SingleCommunicator single;
  RandomWeights w1(3);
  Model one(c, g1, w1, *cpu, single);

  std::vector<int64_t> toks;
  for (int i = 0; i < 2 * 7; ++i) toks.push_back((i * 37 + 5) % c.vocab);
  Tensor t = Tensor::from_ints({2, 7}, toks, DType::i32);
  const double e = rel_diff(tp.forward(t), one.forward(t));
  expect(e < 1e-5, "forward on ", shards, " shards vs one rank: relative difference ", e);
  Tensor nt = tp.next_token(t), n1 = one.next_token(t);
  expect(rel_diff(nt, n1) < 1e-5, "next_token on ", shards, " shards");
  std::vector<int64_t> pos, seg, tgt;
  for (int i = 0; i < 7; ++i) {
    pos.push_back(i);
    seg.push_back(0);
    tgt.push_back(i == 6 ? -1 : toks[i + 1]);
  }
  Tensor tk = Tensor::from_ints({7}, std::vector<int64_t>(toks.begin(), toks.begin() + 7), DType::i32);
  Tensor lp = tp.log_probs_packed(tk, Tensor::from_ints({7}, pos, DType::i32), Tensor::from_ints({7}, seg, DType::i32),
                                  Tensor::from_ints({7}, tgt, DType::i64));
  Tensor lp1 = one.log_probs_packed(tk, Tensor::from_ints({7}, pos, DType::i32),
                                    Tensor::from_ints({7}, seg, DType::i32), Tensor::from_ints({7}, tgt, DType::i64));
  expect(rel_diff(lp, lp1) < 1e-5, "log_probs_packed on ", shards, " shards: ", rel_diff(lp, lp1));
  // Greedy generation goes through the vocab-shard argmax (max_with_index).
  Tensor start = Tensor::from_ints({2, 1}, {3, 11}, DType::i32);
  Tensor gen = tp.generate(start, 0, 6), gen1 = one.generate(start, 0, 6);
  expect(gen.to_ints() == gen1.to_ints(), "generate on ", shards, " shards picks the one-rank tokens");
}

// ---- a mixture of experts over the shards ----
// Layer 1 of 2 sparse: 4·Shards experts (8 on 1, 2 and 4 ranks: 12 on 3), top 2 renormalised,
// inner 4·Shards.
ModelConfig moe_config(int shards) {
  ModelConfig c = model_config(shards);
  c.experts = shards == 3 ? 12 : 8;
  c.experts_per_token = 2;
  c.expert_inner = 4 * shards;
  c.norm_topk_prob = true;
  c.layer_kinds = {LayerKind{}, LayerKind{false, 0, true}};
  return c;
}

// Layer 1's experts as rank `shard` holds them (the model's way: stacked matrices).
SparseMoe moe_layer(const ModelConfig& c, const Generics& g, int shard, Backend& be) {
  std::map<std::string, ParamSpec> specs;
  for (const auto& p : parameter_specs(c, g)) specs.emplace(p.card_name, p);
  RandomWeights w(4);
  SparseMoe m;
  const std::string pre = "layers[1].mlp.";
  m.router.gate.weight = be.upload_matrix(w.read(specs.at(pre + "router.weight"), shard));
  m.router.top_k = g.top_k;
  m.router.normalize = c.norm_topk_prob;
  m.num_experts = g.experts;
  m.first_expert = g.expert_begin(shard);
  m.inner = g.expert_inner_per_shard();
  m.expert_parallel = g.expert_parallel();
  std::vector<Tensor> gu, dn;
  for (int64_t e = m.first_expert; e < m.first_expert + g.experts_per_shard(); ++e) {
    const std::string x = pre + "experts[" + std::to_string(e) + "].";
    gu.push_back(w.read(specs.at(x + "gate.weight"), shard));
    gu.push_back(w.read(specs.at(x + "up.weight"), shard));
    dn.push_back(w.read(specs.at(x + "down.weight"), shard));
  }
  m.gate_up.weight = be.upload_matrix(gu);
  m.down.weight = be.upload_matrix(dn);
  m.experts.resize(static_cast<size_t>(g.experts_per_shard()));
  return m;
}

// Expert sharding gives every token the bits one rank gives it (whole experts, the sum in the
// same order); tensor sharding its slices' sum within f32 noise. Then the whole model in each
// sharding against one rank: forward within 1e-5, greedy tokens equal. 1, 3 and 17 rows: some
// ranks route none.
void check_moe(Communicator& comm) {
  const int shards = comm.size();
  const ModelConfig c = moe_config(shards);
  auto cpu = make_cpu_backend();
  SingleCommunicator single;
  RunOptions o;
  o.batch = 2;
  o.max_seq = 16;
  o.page_size = 8;
  o.shards = 1;
  const Generics g1 = bind_generics(c, o);
  const SparseMoe one = moe_layer(c, g1, 0, *cpu);
  for (MoeSharding m : {MoeSharding::expert, MoeSharding::tensor}) {
    o.shards = shards;
    o.moe_sharding = m;
    const Generics g = bind_generics(c, o);
    const SparseMoe mine = moe_layer(c, g, comm.rank(), *cpu);
    for (int64_t n : {1, 3, 17}) {
      std::mt19937 gen(static_cast<uint32_t>(n));
      std::normal_distribution<float> z;
      std::vector<float> xv(static_cast<size_t>(n * c.hidden));
      for (auto& v : xv) v = z(gen);
      const Tensor x = Tensor::from_floats({n, c.hidden}, xv);
      Tensor a = Tensor::zeros({n, c.hidden}, DType::f32), b = Tensor::zeros({n, c.hidden}, DType::f32);
      Context c1{*cpu, single}, cs{*cpu, comm};
      one.forward(c1, x, a);
      mine.forward(cs, x, b);
      if (m == MoeSharding::expert)
        expect(std::memcmp(a.data(), b.data(), a.nbytes()) == 0, "expert sharding on ", shards, " ranks, ", n,
               " rows: not the one-rank bits (", rel_diff(b, a), ")");
      else
        expect(rel_diff(b, a) < 1e-6, "tensor sharding on ", shards, " ranks, ", n, " rows: ", rel_diff(b, a));
    }
    RandomWeights w(3), w1(3);
    Model tp(c, g, w, *cpu, comm);
    Model ref(c, g1, w1, *cpu, single);
    std::vector<int64_t> toks;
    for (int i = 0; i < 2 * 7; ++i) toks.push_back((i * 37 + 5) % c.vocab);
    const Tensor t = Tensor::from_ints({2, 7}, toks, DType::i32);
    const double e = rel_diff(tp.forward(t), ref.forward(t));
    expect(e < 1e-5, "moe forward (", moe_sharding_name(m), ") on ", shards, " shards vs one rank: ", e);
    const Tensor start = Tensor::from_ints({2, 1}, {3, 11}, DType::i32);
    expect(tp.generate(start, 0, 6).to_ints() == ref.generate(start, 0, 6).to_ints(), "moe generate (",
           moe_sharding_name(m), ") on ", shards, " shards picks the one-rank tokens");
  }
}

// ---- one rank on one GPU through NCCL ----
// Every collective of a one-rank NcclCommunicator (a sum or max of one rank is its own values,
// bit for bit: bf16 and f16 go through the f32 path and back exactly), after work the backend
// recorded for a graph (flushed before the collective: the sum reads what it wrote).
int nccl_collectives(Communicator& c, Backend& be) {
  expect(c.name() == "nccl" && c.size() == 1 && c.rank() == 0, "a one-rank nccl communicator, got ", c.name());
  std::vector<float> vals(1000);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>(i % 37) * 0.75f - 9.5f;
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    const Tensor host = Tensor::from_floats({10, 100}, vals, dt);
    Tensor src = be.upload(host);
    Tensor x = be.zeros({10, 100}, dt);  // recorded
    be.convert(src, x);                  // recorded: the all-reduce must see it
    c.all_reduce_sum(x);
    expect(be.to_host(x).to_floats() == host.to_floats(), "all_reduce_sum of one rank in ", dtype_name(dt));
    c.all_reduce_max(x);
    expect(be.to_host(x).to_floats() == host.to_floats(), "all_reduce_max of one rank in ", dtype_name(dt));
    Tensor gathered = be.empty({1, 10, 100}, dt);
    c.all_gather(x, gathered);
    expect(be.to_host(gathered).to_floats() == host.to_floats(), "all_gather of one rank in ", dtype_name(dt));
    c.broadcast(x, 0);
    expect(be.to_host(x).to_floats() == host.to_floats(), "broadcast from rank 0 in ", dtype_name(dt));
  }
  {
    Tensor i = be.upload(Tensor::from_ints({5}, {1, -2, 3, 40000, -5}, DType::i32));
    c.all_reduce_sum(i);
    expect(be.to_host(i).to_ints() == std::vector<int64_t>{1, -2, 3, 40000, -5}, "all_reduce_sum of i32");
  }
  bool threw = false;
  try {
    Tensor x = be.zeros({4}, DType::f32);
    c.broadcast(x, 1);
  } catch (const Error&) {
    threw = true;
  }
  expect(threw, "broadcast from rank 1 of 1 must throw");
  // Host tensors and the rest go through the inner MPI communicator.
  Tensor h = Tensor::from_floats({3}, {1.5f, -2.f, 7.f});
  c.all_reduce_sum(h);
  expect(h.to_floats() == std::vector<float>{1.5f, -2.f, 7.f}, "all_reduce_sum of a host tensor");
  Tensor v = Tensor::from_floats({2}, {0.5f, 3.f}), idx = Tensor::from_ints({2}, {7, 9}, DType::i32);
  c.max_with_index(v, idx);
  expect(idx.to_ints() == std::vector<int64_t>{7, 9}, "max_with_index of one rank");
  c.barrier();
  expect(c.all_ok(true) && !c.all_ok(false), "all_ok");
  std::printf("nccl-one-rank collectives: %d checks passed\n", g_checks);
  return 0;
}

// A collective queued behind a kernel that holds the stream for 8 s, with LINNET_NCCL_TIMEOUT
// 2: the watchdog must abort the communicator (its event still pending past the deadline) and
// the next collective must say so instead of waiting. What the stream reports once the planted
// kernel ends is printed, not judged: after an abort the rank is meant to end.
int nccl_watchdog(Communicator& c, Backend& be) {
  using Spin = void (*)(void*, double);
  auto spin = reinterpret_cast<Spin>(cuda_module_symbol("linnet_cuda_test_spin"));
  expect(spin != nullptr, "the CUDA module exports linnet_cuda_test_spin");
  Tensor x = be.upload(Tensor::from_floats({4}, {1, 2, 3, 4}));
  be.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  spin(be.stream_handle(), 8.0);
  c.all_reduce_sum(x);  // enqueued behind the planted kernel: returns, unfinished
  std::string message;
  for (int i = 0; i < 100 && message.empty(); ++i) {  // up to 10 s
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(2600)) continue;  // past the deadline
    try {
      Tensor y = be.upload(Tensor::from_floats({1}, {1}));
      c.all_reduce_sum(y);
    } catch (const Error& e) {
      message = e.what();
    }
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  expect(!message.empty(), "the watchdog did not abort a collective unfinished past LINNET_NCCL_TIMEOUT");
  expect(message.find("has not finished") != std::string::npos, "the abort names the unfinished collective: ", message);
  std::printf("nccl-one-rank watchdog: aborted after %.1f s: %s\n", waited, message.c_str());
  std::string after = "ok";
  try {
    be.synchronize();
  } catch (const Error& e) {
    after = e.what();
  }
  std::printf("nccl-one-rank watchdog: the stream once the planted kernel ended: %s\n", after.c_str());
  return 0;
}

int nccl_one_rank(const std::string& what) {
  if (what != "collectives" && what != "watchdog") {
    std::fprintf(stderr, "usage: mpi_comm_check --nccl-one-rank collectives|watchdog\n");
    return 2;
  }
  if (cuda_device_count() == 0) {
    std::printf("nccl-one-rank: skipped: no CUDA device (%s)\n", cuda_status().c_str());
    return 77;
  }
  if (what == "watchdog") ::setenv("LINNET_NCCL_TIMEOUT", "2", 1);  // read when the communicator is made
  MpiRuntime runtime;
  try {
    auto be = make_cuda_backend(0);
    std::unique_ptr<Communicator> c;
    try {
      c = make_nccl_communicator(MPI_COMM_SELF, 0, be->stream_handle(), be.get());
    } catch (const Error& e) {
      if (std::string(e.what()).find("without NCCL") != std::string::npos) {
        std::printf("nccl-one-rank: skipped: %s\n", e.what());
        return 77;
      }
      throw;
    }
    return what == "collectives" ? nccl_collectives(*c, *be) : nccl_watchdog(*c, *be);
  } catch (const std::exception& e) {
    std::printf("nccl-one-rank %s: FAILED: %s\n", what.c_str(), e.what());
    return 3;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int fail_on_rank = -1;
  bool model = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--fail-on-rank" && i + 1 < argc)
      fail_on_rank = std::atoi(argv[++i]);
    else if (a == "--skip-model")
      model = false;
    else if (a == "--nccl-one-rank" && i + 1 < argc)
      return nccl_one_rank(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: mpi_comm_check [--fail-on-rank R] [--skip-model] | --nccl-one-rank collectives|watchdog\n");
      return 2;
    }
  }
  // MpiRuntime lives outside the try: were it destroyed by the unwinding, MPI_Finalize would
  // wait for ranks stuck in a collective, and abort_all would come too late.
  std::unique_ptr<MpiRuntime> runtime;
  try {
    runtime = std::make_unique<MpiRuntime>();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_comm_check: %s\n", e.what());
    return 4;
  }
  MpiRuntime& mpi = *runtime;
  try {
    auto device = std::make_unique<FakeDeviceBackend>();
    MpiCommunicator world(MPI_COMM_WORLD, device.get());
    expect(world.name() == "mpi" && world.rank() == mpi.world_rank() && world.size() == mpi.world_size(), "world");
    if (fail_on_rank >= 0) {
      // The other ranks go on into a collective that can never complete.
      if (world.rank() == fail_on_rank) throw Error(str("deliberate failure on rank ", fail_on_rank));
      Tensor x = Tensor::zeros({4}, DType::f32);
      world.all_reduce_sum(x);
      world.barrier();
      throw Error("the collective finished although a rank had failed");
    }
    check_collectives(world, nullptr);
    check_collectives(world, device.get());
    check_all_to_all(world, nullptr);
    check_all_to_all(world, device.get());
    expect(device->to_host_calls > 0 && device->copy_from_host_calls > 0, "device tensors were staged");
    {  // A device tensor without a backend is an error, not a crash.
      MpiCommunicator bare(MPI_COMM_WORLD);
      Tensor x = device->empty({2}, DType::f32);
      bool threw = false;
      try {
        bare.all_reduce_sum(x);
      } catch (const Error&) {
        threw = true;
      }
      expect(threw, "device tensor without a backend must throw");
    }
    check_groups(mpi);
    if (model && world.size() <= 4) check_model(world);
    if (model && world.size() <= 4) check_moe(world);
    if (!world.all_ok(true)) throw Error("ranks disagree at the end");
    if (world.rank() == 0)
      std::printf("mpi_comm_check: %d checks passed on each of %d ranks\n", g_checks, world.size());
    return 0;
  } catch (const std::exception& e) {
    abort_all(e.what(), 3);
  }
}
