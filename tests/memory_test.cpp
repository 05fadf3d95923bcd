// What a rank holds: the tied lm_head is a view of the embedding (held once), and the figures
// `linnet inspect` prints (rank_footprint) are what a loaded model adds to the process's RSS.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/loader.h"
#include "architectures/hf_config.h"
#include "runtime/write_checkpoint.h"
#include "layers/footprint.h"
#include "model_fixtures.h"

using namespace linnet;
namespace fs = std::filesystem;

namespace {

// Resident set size of this process, bytes (/proc/self/status VmRSS; VmHWM: its peak so far).
int64_t rss_bytes(const std::string& field = "VmRSS:") {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == field) {
      int64_t kib = 0;
      in >> kib;
      return kib * 1024;
    }
    in.ignore(1 << 20, '\n');
  }
  return -1;
}

// A tied model whose embedding dominates: 32000 × 512 f32 = 62.5 MiB.
fs::path tied_checkpoint() {
  return linnet::testing::shared_checkpoint("linnet_memory_tied", [](const std::string& d) {
    ModelConfig c = linnet::testing::tiny_config();
    c.vocab = 32000;
    c.hidden = 512;
    c.heads = 8;
    c.kv_heads = 4;
    c.inner = 1024;
    c.layers = 2;
    c.max_position = 256;
    c.tie_word_embeddings = true;
    write_random_checkpoint(c, d, DType::f32, 11);
  });
}

}  // namespace

TEST(Memory, TiedLmHeadSharesTheEmbedding) {
  const fs::path d = tied_checkpoint();
  const ModelConfig c = load_hf_config(d.string());
  const Generics g = bind_generics(c, RunOptions{1, 256, 1, 64, std::nullopt});
  const Footprint f = rank_footprint(c, g, DType::f32);
  // The file holds the embedding once; so does a rank (norms are f32 in both).
  const int64_t file = static_cast<int64_t>(fs::file_size(d / "model.safetensors"));
  EXPECT_LT(std::abs(f.parameters - file), int64_t{1} << 16) << "parameters " << f.parameters << ", file " << file;
  // At Shards 4 (no padding: 32000 = 4 × 8000) the lm_head slices are views too.
  const Generics g4 = bind_generics(c, RunOptions{1, 256, 4, 64, std::nullopt});
  EXPECT_LT(rank_footprint(c, g4, DType::f32).parameters, f.parameters);
}

TEST(Memory, ALoadedModelHoldsWhatInspectSays) {
  const fs::path d = tied_checkpoint();
  auto be = make_cpu_backend();
  SingleCommunicator comm;
  RunOptions o{1, 256, 1, 64, std::nullopt};
  const int64_t before = rss_bytes();
  ASSERT_GT(before, 0);
  LoadedModel m = load_model(d.string(), o, *be, comm);
  // The tied logits are still right: the lm_head is the embedding. The file's mapped pages
  // are gone once loaded (the weights are packed copies), and the KV cache's untouched zero
  // pages are not held: what is held is the footprint less the unused cache.
  const Tensor logits = m.model->forward(Tensor::from_ints({1, 3}, {5, 17, 29}));
  EXPECT_EQ(logits.shape(), (Shape{1, 3, 32000}));
  const int64_t held = rss_bytes() - before - logits.nbytes();
  const Footprint f = rank_footprint(m.config, m.generics, be->compute_dtype(m.generics.t), be->weight_dtype(m.generics.t));
  // Within 10% (+4 MiB of small buffers): a second copy of the 62.5 MiB embedding, or one
  // left mapped, would be far outside.
  EXPECT_GT(held, f.total() * 9 / 10) << "held " << held << ", footprint " << f.total();
  EXPECT_LT(held, f.total() * 11 / 10 + (int64_t{4} << 20)) << "held " << held << ", footprint " << f.total();
  // And at its peak, loading included (issue 16: ≤ 1.2 × weights + KV cache + a fixed
  // overhead): each matrix is packed from the mapped file, whose pages go once it is packed,
  // so a load never holds the weights twice. (ctest runs each test in a process of its own.)
  const int64_t peak = rss_bytes("VmHWM:") - before;
  EXPECT_LT(peak, f.total() * 12 / 10 + (int64_t{16} << 20)) << "peak " << peak << ", footprint " << f.total();
}
