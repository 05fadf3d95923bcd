// linnet pack (checkpoint/packed_file.h): a load that maps the packed file gives the bits a
// load that packs gives; a file made from other files, in another dtype or for another layout
// is not used.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint_weights.h"
#include "checkpoint/packed_file.h"
#include "checkpoint/write_checkpoint.h"
#include "model_fixtures.h"
#include "mpi_run.h"

using namespace linnet;
using namespace linnet::testing;
namespace fs = std::filesystem;

namespace {

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
    write_packed_file(d.string(), *packing.m.model, packing.be->packed_format());
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
    write_packed_file(d.string(), *l.m.model, l.be->packed_format());
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

// A packed file that claims to fit but holds a matrix of the wrong size is an error naming
// the file and the tensor, never a read past its end.
TEST(PackedFile, AWrongSizedMatrixIsAnErrorNamingIt) {
  const fs::path d = fresh_checkpoint("linnet_packed_bad", DType::bf16);
  {
    SafetensorsWriter w((d / kPackedFileName).string());
    w.set_metadata("linnet.format", make_cpu_backend()->packed_format());
    w.set_metadata("linnet.dtype", "bf16");
    w.set_metadata("linnet.source", checkpoint_fingerprint(d.string()));
    w.set_metadata("linnet.rows.embedding.weight", "97");
    w.declare("embedding.weight", DType::bf16, {32, 64});  // 97 rows need 128
    const std::vector<uint16_t> zeros(32 * 64, 0);
    w.write("embedding.weight", zeros.data(), zeros.size() * 2);
    w.finish();
  }
  try {
    Loaded l(d);
    FAIL() << "loaded a damaged packed file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(kPackedFileName), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("embedding.weight"), std::string::npos) << e.what();
  }
  fs::remove_all(d);
}
