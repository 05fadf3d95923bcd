// linnet pack (checkpoint/packed_file.h): a load that maps the packed file gives the bits a
// load that packs gives; a file made from other files, in another dtype or for another layout
// is not used.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/loader.h"
#include "checkpoint/packed_file.h"
#include "runtime/write_checkpoint.h"
#include "model_fixtures.h"
#include "mpi_run.h"

using namespace linnet;
using namespace linnet::testing;
namespace fs = std::filesystem;

namespace {

// Flips the sign bit of the bf16 value at `at` (a same-size rewrite of the file).
void in_place_negate(const fs::path& p, uint64_t at) {
  std::fstream io(p, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(static_cast<std::streamoff>(at + 1));
  char c = 0;
  io.read(&c, 1);
  c = static_cast<char>(c ^ 0x80);
  io.seekp(static_cast<std::streamoff>(at + 1));
  io.write(&c, 1);
}

fs::path fresh_checkpoint(const std::string& name, DType dt) {
  const fs::path d = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  ModelConfig c = tiny_config();
  c.hidden = 64;
  c.heads = 4;
  c.kv_heads = 2;
  c.inner = 96;
  write_random_checkpoint(c, d.string(), dt, 3);
  return d;
}

struct Loaded {
  std::unique_ptr<Backend> be = make_cpu_backend();
  SingleCommunicator comm;
  LoadedModel m;
  Loaded(const fs::path& d, std::optional<DType> t = std::nullopt) { m = load_model(d.string(), RunOptions{2, 32, 1, 8, t}, *be, comm); }
  std::vector<uint8_t> logits() {
    const Tensor l = m.model->forward(Tensor::from_ints({2, 5}, {1, 5, 9, 13, 17, 2, 4, 8, 16, 32}));
    const auto* p = static_cast<const uint8_t*>(l.data());
    return {p, p + l.nbytes()};
  }
};

}  // namespace

TEST(PackedFile, MappedGivesTheBitsOfPackingAtLoad) {
  for (DType dt : {DType::bf16, DType::f32}) {
    const fs::path d = fresh_checkpoint("linnet_packed", dt);
    Loaded packing(d);
    EXPECT_FALSE(packing.m.from_packed_file);
    const auto want = packing.logits();
    write_packed_file(d.string(), packing.m.model->matrices(), packing.m.generics.t, packing.be->packed_format());
    Loaded mapped(d);
    EXPECT_TRUE(mapped.m.from_packed_file) << dtype_name(dt);
    EXPECT_TRUE(mapped.logits() == want) << dtype_name(dt);
    // Another T than the file's: packed at load, the same bits as any load of that T.
    const DType other = dt == DType::bf16 ? DType::f32 : DType::bf16;
    Loaded as_other(d, other);
    EXPECT_FALSE(as_other.m.from_packed_file);
    fs::remove_all(d);
  }
}

TEST(PackedFile, NotUsedOnceTheCheckpointChanges) {
  const fs::path d = fresh_checkpoint("linnet_packed_stale", DType::bf16);
  {
    Loaded l(d);
    write_packed_file(d.string(), l.m.model->matrices(), l.m.generics.t, l.be->packed_format());
  }
  EXPECT_TRUE(Loaded(d).m.from_packed_file);
  std::ofstream(d / "config.json", std::ios::app) << "\n";  // a changed config: size and time differ
  Loaded after(d);
  EXPECT_FALSE(after.m.from_packed_file);
  fs::remove_all(d);
}

TEST(PackedFile, TheCommandWritesIt) {
  const fs::path d = fresh_checkpoint("linnet_packed_cli", DType::bf16);
  const auto r = run_command({LINNET_BINARY, "pack", "--checkpoint", d.string()}, 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(d / kPackedFileName));
  EXPECT_TRUE(Loaded(d).m.from_packed_file);
  const auto bad = run_command({LINNET_BINARY, "pack", "--checkpoint", (d / "nowhere").string()}, 60);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("nowhere"), std::string::npos) << bad.output;
  fs::remove_all(d);
}

// A packed file that claims to fit but holds a matrix of the wrong size is named in a warning
// and packed at load instead, never read past its end.
TEST(PackedFile, AWrongSizedMatrixIsPackedAtLoadInstead) {
  const fs::path d = fresh_checkpoint("linnet_packed_bad", DType::bf16);
  const auto want = Loaded(d).logits();
  {
    SafetensorsWriter w((d / kPackedFileName).string());
    w.set_metadata("linnet.format", make_cpu_backend()->packed_format());
    w.set_metadata("linnet.dtype", "bf16");
    w.set_metadata("linnet.source", checkpoint_identity(d.string()));
    w.set_metadata("linnet.rows.embedding.weight", "97");
    w.declare("embedding.weight", DType::bf16, {32, 64});  // 97 rows need 128
    const std::vector<uint16_t> zeros(32 * 64, 0);
    w.write("embedding.weight", zeros.data(), zeros.size() * 2);
    w.finish();
  }
  Loaded l(d);
  EXPECT_FALSE(l.m.from_packed_file);
  EXPECT_TRUE(l.logits() == want);
  const auto r = run_command({LINNET_BINARY, "pack", "--checkpoint", d.string(), "--verify"}, 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("embedding.weight"), std::string::npos) << r.output;
  fs::remove_all(d);
}

namespace {

// A checkpoint with its packed file, and the logits a load that packs gives.
struct PackedCheckpoint {
  fs::path dir;
  std::vector<uint8_t> want;
  explicit PackedCheckpoint(const std::string& name, uint64_t seed = 3) {
    dir = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    ModelConfig c = tiny_config();
    c.hidden = 64;
    c.heads = 4;
    c.kv_heads = 2;
    c.inner = 96;
    write_random_checkpoint(c, dir.string(), DType::bf16, seed);
    Loaded l(dir);
    want = l.logits();
    write_packed_file(dir.string(), l.m.model->matrices(), l.m.generics.t, l.be->packed_format());
  }
  ~PackedCheckpoint() { fs::remove_all(dir); }
  fs::path packed() const { return dir / kPackedFileName; }
  // Where tensor `name`'s bytes start in the packed file.
  uint64_t offset_of(const std::string& name) const {
    SafetensorsFile f(packed().string());
    return f.data_start() + f.info(name).begin;
  }
  // A load must not use the file whole, and must give the logits of packing at load.
  void expect_refused_and_exact(const std::string& what) const {
    Loaded l(dir);
    EXPECT_FALSE(l.m.from_packed_file) << what << ": the packed file was used";
    EXPECT_TRUE(l.logits() == want) << what << ": other logits than packing at load";
    const auto r = run_command({LINNET_BINARY, "pack", "--checkpoint", dir.string(), "--verify"}, 60);
    EXPECT_EQ(r.exit_code, 1) << what << ": pack --verify said\n" << r.output;
  }
};

void patch(const fs::path& p, uint64_t offset, const std::string& bytes) {
  std::fstream io(p, std::ios::in | std::ios::out | std::ios::binary);
  io.seekp(static_cast<std::streamoff>(offset));
  io.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_at(const fs::path& p, uint64_t offset, size_t n) {
  std::ifstream in(p, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset));
  std::string s(n, '\0');
  in.read(s.data(), static_cast<std::streamsize>(n));
  return s;
}

}  // namespace

// Each of a reviewer's probes loaded before with exit 0 and "matrices mapped", and logits
// off by up to 7.7e4; now each is a warning and the exact logits of packing at load.
TEST(PackedFile, ASoundFileIsUsedAndVerifies) {
  PackedCheckpoint c("linnet_packed_sound");
  Loaded l(c.dir);
  EXPECT_TRUE(l.m.from_packed_file);
  EXPECT_TRUE(l.logits() == c.want);
  const auto r = run_command({LINNET_BINARY, "pack", "--checkpoint", c.dir.string(), "--verify"}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("sound"), std::string::npos) << r.output;
}

TEST(PackedFile, FlippedBytesInAMatrixAreCaught) {
  PackedCheckpoint c("linnet_packed_xor");
  const uint64_t at = c.offset_of("layers[1].mlp.gate_up.weight") + 1000;
  std::string b = read_at(c.packed(), at, 64);
  for (char& x : b) x = static_cast<char>(x ^ 0x5a);
  patch(c.packed(), at, b);
  c.expect_refused_and_exact("64 XORed bytes");
}

TEST(PackedFile, AChangedEmbeddingValueIsCaught) {
  PackedCheckpoint c("linnet_packed_embedding");
  const uint16_t big = f32_to_bf16(1e4f);
  patch(c.packed(), c.offset_of("embedding.weight") + 2 * 130, std::string(reinterpret_cast<const char*>(&big), 2));
  c.expect_refused_and_exact("an embedding value set to 1e4");
}

TEST(PackedFile, SwappedOffsetsOfSameShapedTensorsAreCaught) {
  PackedCheckpoint c("linnet_packed_swap");
  // Rewrite the header with two layers' o_proj offsets exchanged (same length: same digits).
  std::ifstream in(c.packed(), std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  in.close();
  nlohmann::json h = nlohmann::json::parse(text);
  const std::string a = "layers[0].attention.o_proj.weight", b = "layers[1].attention.o_proj.weight";
  ASSERT_EQ(h[a]["shape"], h[b]["shape"]);
  std::swap(h[a]["data_offsets"], h[b]["data_offsets"]);
  std::string swapped = h.dump();
  ASSERT_LE(swapped.size(), text.size());
  swapped.append(text.size() - swapped.size(), ' ');
  patch(c.packed(), 8, swapped);
  c.expect_refused_and_exact("two same-shape tensors' offsets swapped");
}

TEST(PackedFile, ASourceRewrittenWithItsSizeAndTimeKeptIsCaught) {
  PackedCheckpoint c("linnet_packed_rewritten");
  const fs::path src = c.dir / "model.safetensors";
  const auto mtime = fs::last_write_time(src);
  const auto size = fs::file_size(src);
  {  // one weight changed in place, then the modification time set back
    SafetensorsFile f(src.string());
    const uint64_t at = f.data_start() + f.info("model.layers.0.mlp.up_proj.weight").begin;
    in_place_negate(src, at);
  }
  fs::last_write_time(src, mtime);
  ASSERT_EQ(fs::file_size(src), size);
  ASSERT_EQ(fs::last_write_time(src), mtime);
  // The packed file is another model's now: not used; the load packs the changed weights.
  Loaded l(c.dir);
  EXPECT_FALSE(l.m.from_packed_file);
  EXPECT_NE(run_command({LINNET_BINARY, "pack", "--checkpoint", c.dir.string(), "--verify"}, 60).exit_code, 0);
}

TEST(PackedFile, AnotherCheckpointsPackWithMatchedTimesIsCaught) {
  PackedCheckpoint a("linnet_packed_a", 3), b("linnet_packed_b", 4);
  fs::copy_file(a.packed(), b.packed(), fs::copy_options::overwrite_existing);
  for (const char* f : {"config.json", "model.safetensors"}) fs::last_write_time(b.dir / f, fs::last_write_time(a.dir / f));
  b.expect_refused_and_exact("another checkpoint's pack");
}
