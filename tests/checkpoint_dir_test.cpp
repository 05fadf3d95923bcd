// CheckpointDir: the three layouts of a Hugging Face checkpoint's weights, and the errors
// for missing, misplaced and misshaped tensors.
#include <sys/stat.h>

#include <filesystem>

#include "checkpoint/checkpoint_dir.h"
#include "tests/checkpoint_test_util.h"

using namespace linnet;
using namespace linnet::testutil;
using ::testing::AllOf;
using ::testing::HasSubstr;

namespace {

Tensor ramp(Shape shape, DType dtype = DType::f32, float start = 0) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return Tensor::from_floats(std::move(shape), v, dtype);
}

// Two shards and their index, as transformers writes them (plus a non-standard dtype map
// in "metadata", which must be ignored).
void write_sharded(const ScratchDir& dir) {
  save_safetensors(dir / "model-00001-of-00002.safetensors",
                   {{"embed", ramp({4, 3})}, {"norm", ramp({3}, DType::bf16)}, {"unlisted", ramp({1})}});
  save_safetensors(dir / "model-00002-of-00002.safetensors", {{"lm_head", ramp({5, 3}, DType::f32, 100)}});
  write_file(dir / "model.safetensors.index.json", R"({
    "metadata": {"total_size": 128, "dtypes": {"embed": "F64"}},
    "weight_map": {"embed": "model-00001-of-00002.safetensors", "norm": "model-00001-of-00002.safetensors",
                   "lm_head": "model-00002-of-00002.safetensors"}})");
}

}  // namespace

TEST(CheckpointDir, SingleFile) {
  ScratchDir dir;
  save_safetensors(dir / "model.safetensors", {{"w", ramp({4, 6})}, {"b", ramp({6}, DType::bf16)}});
  write_file(dir / "stray.safetensors", "not even a safetensors file");  // ignored: model.safetensors wins
  CheckpointDir ck(dir.str());
  EXPECT_EQ(ck.dir(), dir.str());
  EXPECT_TRUE(ck.has("w"));
  EXPECT_FALSE(ck.has("x"));
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"b", "w"}));
  EXPECT_EQ(ck.file_of("w").path(), dir / "model.safetensors");
  EXPECT_EQ(ck.info("b").dtype, DType::bf16);
  EXPECT_EQ(ck.read("w").to_floats(), ramp({4, 6}).to_floats());
  EXPECT_EQ(ck.view("b").to_floats(), ramp({6}).to_floats());
  EXPECT_EQ(ck.read_rows("w", 1, 3).to_floats(), ramp({4, 6}).rows(1, 3).to_floats());
  EXPECT_EQ(ck.read_cols("w", 2, 3).to_floats(), (std::vector<float>{2, 8, 14, 20}));
  ck.expect("w", {4, 6});
  ck.expect("b", {6}, DType::bf16);
}

TEST(CheckpointDir, ShardedWithIndex) {
  ScratchDir dir;
  write_sharded(dir);
  CheckpointDir ck(dir.str());
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"embed", "lm_head", "norm"}));
  EXPECT_FALSE(ck.has("unlisted"));  // only what the index lists
  EXPECT_EQ(ck.file_of("lm_head").path(), dir / "model-00002-of-00002.safetensors");
  EXPECT_EQ(ck.file_of("embed").path(), dir / "model-00001-of-00002.safetensors");
  EXPECT_EQ(&ck.file_of("embed"), &ck.file_of("norm"));  // each shard opened once
  EXPECT_EQ(ck.read("lm_head").to_floats(), ramp({5, 3}, DType::f32, 100).to_floats());
  EXPECT_EQ(ck.read_rows("lm_head", 4, 5).to_floats(), (std::vector<float>{112, 113, 114}));
  ck.expect("embed", {4, 3}, DType::f32);
}

TEST(CheckpointDir, IndexNamingAMissingFile) {
  ScratchDir dir;
  write_sharded(dir);
  std::filesystem::remove(dir / "model-00002-of-00002.safetensors");
  EXPECT_THAT(error_of([&] { CheckpointDir ck(dir.str()); }),
              AllOf(HasSubstr(dir / "model.safetensors.index.json"), HasSubstr("model-00002-of-00002.safetensors"),
                    HasSubstr("does not exist")));
}

TEST(CheckpointDir, IndexListsATensorItsFileLacks) {
  ScratchDir dir;
  write_sharded(dir);
  save_safetensors(dir / "model-00002-of-00002.safetensors", {{"something_else", ramp({1})}});
  EXPECT_THAT(error_of([&] { CheckpointDir ck(dir.str()); }),
              AllOf(HasSubstr(dir / "model.safetensors.index.json"), HasSubstr("'lm_head'"),
                    HasSubstr(dir / "model-00002-of-00002.safetensors"), HasSubstr("no such tensor")));
}

TEST(CheckpointDir, MalformedIndex) {
  ScratchDir dir;
  const std::string index = dir / "model.safetensors.index.json";
  write_file(index, "{\"weight_map\": {");
  EXPECT_THAT(error_of([&] { CheckpointDir ck(dir.str()); }), AllOf(HasSubstr(index), HasSubstr("malformed JSON")));
  write_file(index, R"({"metadata": {}})");
  EXPECT_THAT(error_of([&] { CheckpointDir ck(dir.str()); }), AllOf(HasSubstr(index), HasSubstr("weight_map")));
  write_file(index, R"({"weight_map": {"w": 3}})");
  EXPECT_THAT(error_of([&] { CheckpointDir ck(dir.str()); }), AllOf(HasSubstr(index), HasSubstr("'w'")));
}

TEST(CheckpointDir, BrokenShardNamesTheShard) {
  ScratchDir dir;
  write_sharded(dir);
  write_file(dir / "model-00002-of-00002.safetensors", "\x01\x02");
  EXPECT_THAT(error_of([&] { CheckpointDir ck(dir.str()); }),
              AllOf(HasSubstr(dir / "model-00002-of-00002.safetensors"), HasSubstr("truncated")));
}

TEST(CheckpointDir, EverySafetensorsFileWithoutAManifest) {
  ScratchDir dir;
  save_safetensors(dir / "a.safetensors", {{"x", ramp({2})}});
  save_safetensors(dir / "b.safetensors", {{"y", ramp({3})}});
  write_file(dir / "config.json", "{}");
  CheckpointDir ck(dir.str());
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(ck.file_of("y").path(), dir / "b.safetensors");
  save_safetensors(dir / "c.safetensors", {{"x", ramp({2})}});
  EXPECT_THAT(error_of([&] { CheckpointDir again(dir.str()); }),
              AllOf(HasSubstr("'x'"), HasSubstr(dir / "a.safetensors"), HasSubstr(dir / "c.safetensors")));
}

TEST(CheckpointDir, DirectoryWithoutWeights) {
  ScratchDir dir;
  write_file(dir / "config.json", "{}");
  CheckpointDir ck(dir.str());
  EXPECT_FALSE(ck.has("model.embed_tokens.weight"));
  EXPECT_TRUE(ck.names().empty());
  const std::string want = dir.str() + ": checkpoint has no tensor 'model.embed_tokens.weight'";
  EXPECT_THAT(error_of([&] { ck.info("model.embed_tokens.weight"); }), HasSubstr(want));
  EXPECT_THAT(error_of([&] { ck.read("model.embed_tokens.weight"); }), HasSubstr(want));
  EXPECT_THAT(error_of([&] { ck.expect("model.embed_tokens.weight", {2, 2}); }), HasSubstr(want));
}

TEST(CheckpointDir, NotADirectory) {
  ScratchDir dir;
  EXPECT_THAT(error_of([&] { CheckpointDir ck(dir / "missing"); }), AllOf(HasSubstr(dir / "missing"), HasSubstr("not a directory")));
}

TEST(CheckpointDir, ExpectReportsShapeAndDtype) {
  ScratchDir dir;
  const std::string file = dir / "model.safetensors";
  save_safetensors(file, {{"w", ramp({2, 3}, DType::bf16)}});
  CheckpointDir ck(dir.str());
  EXPECT_THAT(error_of([&] { ck.expect("w", {3, 2}); }),
              HasSubstr(file + ": tensor 'w' has shape [2, 3], expected [3, 2]"));
  EXPECT_THAT(error_of([&] { ck.expect("w", {2, 3, 1}, DType::bf16); }), HasSubstr("has shape [2, 3], expected [2, 3, 1]"));
  EXPECT_THAT(error_of([&] { ck.expect("w", {2, 3}, DType::f32); }),
              HasSubstr(file + ": tensor 'w' has dtype bf16, expected f32"));
  EXPECT_THAT(error_of([&] { ck.expect("v", {2, 3}); }), HasSubstr(dir.str() + ": checkpoint has no tensor 'v'"));
  ck.expect("w", {2, 3});
  ck.expect("w", {2, 3}, DType::bf16);
}

// An index may name only files inside its checkpoint: never an absolute path or "..".
TEST(CheckpointDir, IndexNamingAFileOutsideIsRefused) {
  ScratchDir dir;
  save_safetensors(dir / "model-00001-of-00001.safetensors", {{"w", ramp({2})}});
  for (const char* name : {"../../../../etc/passwd", "/etc/passwd", "sub/../../x.safetensors"}) {
    write_file(dir / "model.safetensors.index.json",
               std::string(R"({"weight_map": {"w": ")") + name + R"("}})");
    EXPECT_THAT(error_of([&] { CheckpointDir ck(dir.str()); }),
                AllOf(HasSubstr("model.safetensors.index.json: weight_map names file '" + std::string(name) + "'"),
                      HasSubstr("a checkpoint may only name files inside its directory")));
  }
}

// A FIFO would block open() forever; a symlink loop must not look like "no weights".
TEST(CheckpointDir, FifoAndSymlinkLoopAreRefusedByName) {
  ScratchDir dir;
  ASSERT_EQ(::mkfifo((dir / "model.safetensors").c_str(), 0600), 0);
  EXPECT_THAT(error_of([&] { CheckpointDir ck(dir.str()); }), HasSubstr("model.safetensors: not a regular file (a FIFO)"));
  std::filesystem::remove(dir / "model.safetensors");
  std::filesystem::create_symlink("model.safetensors", dir / "model.safetensors");
  EXPECT_THAT(error_of([&] { CheckpointDir ck(dir.str()); }),
              HasSubstr("model.safetensors: cannot open: Too many levels of symbolic links"));
}

// A multimodal checkpoint's text model: transformers' saved names (language_model.model.*,
// language_model.lm_head.*) and its in-memory ones (model.language_model.*) read as a text
// checkpoint's; the vision tower and projector set aside; errors name the tensor as stored.
TEST(CheckpointDir, TextModelOfAMultimodalCheckpoint) {
  ScratchDir dir;
  save_safetensors(dir / "model.safetensors",
                   {{"language_model.model.embed_tokens.weight", ramp({4, 3})},
                    {"language_model.model.layers.0.mlp.up_proj.weight", ramp({2, 3}, DType::bf16)},
                    {"language_model.lm_head.weight", ramp({4, 3}, DType::f32, 50)},
                    {"vision_tower.patch_conv.weight", ramp({2})},
                    {"multi_modal_projector.linear_1.weight", ramp({2, 2})}});
  CheckpointDir ck(dir.str());
  EXPECT_EQ(ck.keep_text_model(), 2);
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight",
                                                  "model.layers.0.mlp.up_proj.weight"}));
  EXPECT_EQ(ck.read("lm_head.weight").to_floats(), ramp({4, 3}, DType::f32, 50).to_floats());
  EXPECT_EQ(ck.read_rows("model.layers.0.mlp.up_proj.weight", 1, 2).to_floats(), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(ck.info("model.embed_tokens.weight").shape, Shape({4, 3}));
  EXPECT_FALSE(ck.has("vision_tower.patch_conv.weight"));
  const std::string file = dir / "model.safetensors";
  EXPECT_THAT(error_of([&] { ck.expect("model.layers.0.mlp.up_proj.weight", {3, 3}); }),
              HasSubstr(file + ": tensor 'language_model.model.layers.0.mlp.up_proj.weight' has shape [2, 3], "
                        "expected [3, 3]"));
  EXPECT_THAT(error_of([&] { ck.expect("model.embed_tokens.weight", {4, 3}, DType::bf16); }),
              HasSubstr("tensor 'language_model.model.embed_tokens.weight' has dtype f32, expected bf16"));

  // transformers' module names, lm_head at the top.
  ScratchDir modules;
  save_safetensors(modules / "model.safetensors", {{"model.language_model.norm.weight", ramp({3})},
                                                   {"model.vision_tower.ln_pre.weight", ramp({3})},
                                                   {"lm_head.weight", ramp({4, 3})}});
  CheckpointDir m(modules.str());
  EXPECT_EQ(m.keep_text_model(), 1);
  EXPECT_EQ(m.names(), (std::vector<std::string>{"lm_head.weight", "model.norm.weight"}));

  // Both spellings of one tensor: which one is the model's is not for linnet to guess.
  ScratchDir both;
  save_safetensors(both / "model.safetensors", {{"model.language_model.norm.weight", ramp({3})},
                                                {"language_model.model.norm.weight", ramp({3})}});
  CheckpointDir b(both.str());
  EXPECT_THAT(error_of([&] { b.keep_text_model(); }),
              HasSubstr("are both the text model's 'model.norm.weight'"));
}

// transformers' fused experts ([E, R, C], read as E·R rows): a tensor of another shape is
// refused naming it, the shape it has and the rows it was read as.
TEST(CheckpointDir, FusedTensorOfTheWrongShapeIsRefusedByName) {
  ScratchDir dir;
  save_safetensors(dir / "model.safetensors", {{"model.layers.0.mlp.experts.gate_up_proj", ramp({2, 4, 3})},
                                               {"flat", ramp({6})}});
  CheckpointDir ck(dir.str());
  ck.expect_2d("model.layers.0.mlp.experts.gate_up_proj", {8, 3});
  EXPECT_EQ(ck.read_block("model.layers.0.mlp.experts.gate_up_proj", 5, 6, 0, 3).to_floats(),
            (std::vector<float>{15, 16, 17}));  // expert 1's row 1
  const std::string file = dir / "model.safetensors";
  EXPECT_THAT(error_of([&] { ck.expect_2d("model.layers.0.mlp.experts.gate_up_proj", {6, 4}); }),
              HasSubstr(file + ": tensor 'model.layers.0.mlp.experts.gate_up_proj' has shape [2, 4, 3], expected "
                               "[6, 4] (its rows: every dimension but the last)"));
  EXPECT_THAT(error_of([&] { ck.expect_2d("model.layers.0.mlp.experts.gate_up_proj", {4, 6}); }),
              HasSubstr("has shape [2, 4, 3], expected [4, 6]"));
  EXPECT_THAT(error_of([&] { ck.expect_2d("flat", {2, 3}); }), HasSubstr("tensor 'flat' has shape [6], expected [2, 3]"));
}
