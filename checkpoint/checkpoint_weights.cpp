#include "checkpoint/checkpoint_weights.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>


#include <spdlog/spdlog.h>

namespace linnet {

namespace {
// A host matrix [R, C] as [C, R]: gpt-oss's bf16 experts, every expert matrix once at load (20
// billion values for gpt-oss-20b), so by element type and in 64 × 64 tiles, the tiles across threads.
template <class E>
void transpose_tiles(const E* src, E* dst, int64_t r, int64_t c) {
  constexpr int64_t kTile = 64;
#pragma omp parallel for schedule(static) collapse(2) if (r * c > (int64_t{1} << 16))
  for (int64_t i0 = 0; i0 < r; i0 += kTile)
    for (int64_t j0 = 0; j0 < c; j0 += kTile)
      for (int64_t i = i0; i < std::min(r, i0 + kTile); ++i)
        for (int64_t j = j0; j < std::min(c, j0 + kTile); ++j) dst[j * r + i] = src[i * c + j];
}

Tensor transposed(const Tensor& t) {
  const int64_t r = t.dim(0), c = t.dim(1);
  Tensor out = Tensor::empty({c, r}, t.dtype());
  switch (dtype_size(t.dtype())) {
    case 1: transpose_tiles(static_cast<const uint8_t*>(t.data()), static_cast<uint8_t*>(out.data()), r, c); break;
    case 2: transpose_tiles(static_cast<const uint16_t*>(t.data()), static_cast<uint16_t*>(out.data()), r, c); break;
    case 4: transpose_tiles(static_cast<const uint32_t*>(t.data()), static_cast<uint32_t*>(out.data()), r, c); break;
    case 8: transpose_tiles(static_cast<const uint64_t*>(t.data()), static_cast<uint64_t*>(out.data()), r, c); break;
    default: throw Error(str("cannot transpose a tensor of ", dtype_name(t.dtype())));
  }
  return out;
}
}  // namespace

void expect_layers(const CheckpointDir& dir, int64_t layers) {
  int64_t held = 0;  // 1 + the largest layer index of a tensor
  const std::string prefix = "model.layers.";
  for (const auto& name : dir.names()) {
    if (name.rfind(prefix, 0) != 0) continue;
    int64_t i = 0;
    size_t at = prefix.size();
    for (; at < name.size() && std::isdigit(static_cast<unsigned char>(name[at])) && i < (int64_t{1} << 40); ++at)
      i = i * 10 + (name[at] - '0');
    if (at > prefix.size() && at < name.size() && name[at] == '.') held = std::max(held, i + 1);
  }
  if (layers > held)
    throw Error(str(dir.dir(), ": config.json's num_hidden_layers is ", layers, ", but the checkpoint's files hold ",
                    held == 0 ? std::string("no model.layers.<i> tensors") : str("layers 0…", held - 1, " only"),
                    " (model.layers.", held, ".* is missing)"));
}

void CheckpointWeights::expect_all(const std::vector<ParamSpec>& specs) const {
  for (const auto& p : specs) {
    const ParamSpec v = p.layout.dense() ? p : p.values_part();
    if (v.stored.rank()) dir_.expect_2d(v.hf_name, v.stored);  // a part: the fused tensor seen as 2-D
    else dir_.expect(v.hf_name, v.stored_shape());
    // A symmetric scheme has no zero points: one in the file says the config is not the files'.
    const std::string zero_points = p.hf_name + "_zero_point";
    if (!p.layout.dense() && !p.layout.zero_point_dtype && dir_.has(zero_points))
      throw Error(str(dir_.file_of(zero_points).path(), ": tensor '", zero_points, "' is a zero point, but "
                      "quantization_config says ", p.layout.describe(), " (symmetric: no zero points)"));
  }
}

Tensor CheckpointWeights::read(const ParamSpec& p, int64_t shard) {
  used_.insert(p.hf_name);
  if (p.stored.rank()) dir_.expect_2d(p.hf_name, p.stored);  // a part: the fused tensor seen as 2-D
  else dir_.expect(p.hf_name, p.stored_shape());
  const DType stored = dir_.info(p.hf_name).dtype;
  const std::string& path = dir_.file_of(p.hf_name).path();
  // E8M0 scales (MXFP4) are stored as F8_E8M0 or as U8 bytes (compressed-tensors, gpt-oss): the
  // same bits, read as E8M0.
  const bool e8m0_bytes = p.dtype == DType::f8_e8m0 && stored == DType::u8;
  if (p.dtype && !is_float(*p.dtype)) {
    // A quantized matrix's stored values: the dtype its format names.
    if (stored != *p.dtype && !e8m0_bytes)
      throw Error(str(path, ": tensor '", p.hf_name, "' is stored as ", dtype_name(stored), ", but quantization_config",
                      p.layout.dense() ? std::string() : str(" (", p.layout.describe(), ")"), " stores it as ",
                      dtype_name(*p.dtype), *p.dtype == DType::f8_e8m0 ? " (or U8 bytes)" : ""));
  } else if (!is_float(stored)) {
    throw Error(str(path, ": tensor '", p.hf_name, "' has dtype ", dtype_name(stored),
                    ", expected a float dtype (bf16, f16 or f32)"));
  } else if (!p.dtype && stored != declared_ && !(stored == DType::f32 && p.stored_shape().rank() == 1)) {
    // (A scale, p.dtype f32, may be stored in any float dtype: widened exactly. A vector — a
    // norm's weight, Qwen3.5's A_log — may be f32 beside a narrower torch_dtype: Qwen3.5's
    // checkpoints ship them so; WeightLoader keeps their f32 values.)
    throw Error(str(path, ": tensor '", p.hf_name, "' is stored as ", dtype_name(stored),
                    ", but config.json's torch_dtype says ", dtype_name(declared_)));
  }
  const auto [part_begin, part_end] = p.shard_range(shard);
  if (p.stored.rank() && p.transposed) {
    // Its slice of the stored block (a row slice of the part is a column slice there), transposed.
    const bool rows = p.split == Split::rows, cols = p.split == Split::columns;
    const int64_t r0 = p.row_offset + (cols ? part_begin : 0), r1 = p.row_offset + (cols ? part_end : p.full[1]);
    const int64_t c0 = rows ? part_begin : 0, c1 = rows ? part_end : p.full[0];
    if (c0 == 0 && c1 == p.stored[1]) {
      // Whole rows of the 2-D view (an expert's block, unsplit there): transposed straight from
      // the mapped file, not copied out first (one fresh buffer and its page faults fewer).
      const Tensor all = dir_.view(p.hf_name);
      const size_t offset = static_cast<size_t>(static_cast<const char*>(all.data()) -
                                                static_cast<const char*>(all.storage()->data)) +
                            static_cast<size_t>(r0 * p.stored[1]) * dtype_size(all.dtype());
      const Tensor t(all.storage(), offset, Shape{r1 - r0, p.stored[1]}, all.dtype());
      check_finite(p, t, r0, c0);
      return transposed(t);
    }
    Tensor t = dir_.read_block(p.hf_name, r0, r1, c0, c1, p.stored[1]);
    check_finite(p, t, r0, c0);
    return transposed(t);
  }
  if (p.stored.rank() && p.split != Split::rows) {
    // A part of a fused tensor held whole or split by columns (transformers' fused experts:
    // expert e's gate/up/down are row ranges of a 3-D tensor): its block of the 2-D view.
    const int64_t c0 = p.split == Split::columns ? part_begin : 0, c1 = p.split == Split::columns ? part_end : p.full[1];
    Tensor t = dir_.read_block(p.hf_name, p.row_offset, p.row_offset + p.full[0], c0, c1, p.stored[1]);
    check_finite(p, t, p.row_offset, c0);
    return e8m0_bytes ? Tensor(t.storage(), 0, t.shape(), DType::f8_e8m0) : t;  // (a fresh copy: offset 0)
  }
  if (p.row_block > 0) {
    // A strided part (Qwen3-Next's grouped in_proj_qkvz): its rows block by block.
    LINNET_CHECK(p.split == Split::rows && part_end - part_begin == p.per_shard, p.hf_name, ": a strided part split by rows");
    std::vector<Tensor> blocks;
    for (const auto& [r0, r1] : p.stored_row_ranges(part_begin, part_end)) {
      blocks.push_back(dir_.read_block(p.hf_name, r0, r1, 0, p.full[1], p.stored[1]));
      check_finite(p, blocks.back(), r0, 0);
    }
    return stack_rows(blocks);
  }
  // A part of a fused tensor (Phi-3's qkv_proj, gate_up_proj) reads its rows from the part's offset.
  const int64_t begin = part_begin + p.row_offset, end = part_end + p.row_offset;
  // A whole matrix: a view of the mapped file, no copy (the backend lays it out in its own
  // memory and gives the file's pages back as it goes: Tensor::drop_pages). A slice: only its
  // bytes are read. Vectors are copied, as a backend may hold them as they come.
  // An expert's tensor is read whole by its owner (expert sharding), as a mirrored one is.
  const bool mirrored = p.split == Split::mirrored || p.split == Split::expert;
  const bool whole = mirrored || (p.split == Split::rows && begin == 0 && end == p.stored_shape()[0] &&
                                                    end - begin == p.per_shard);
  Tensor t = whole && p.full.rank() == 2        ? dir_.view(p.hf_name)
             : mirrored                         ? dir_.read(p.hf_name)
             : p.split == Split::columns        ? dir_.read_cols(p.hf_name, begin, end)
             : p.stored.rank() > 0              ? dir_.read_block(p.hf_name, begin, end, 0, p.full[1], p.stored[1])
                                                : dir_.read_rows(p.hf_name, begin, end);
  if (e8m0_bytes) t = Tensor(t.storage(), static_cast<size_t>(static_cast<const char*>(t.data()) -
                                                              static_cast<const char*>(t.storage()->data)),
                             t.shape(), DType::f8_e8m0);
  check_finite(p, t, p.split == Split::columns ? 0 : begin, p.split == Split::columns ? begin : 0);
  if (whole || p.split == Split::columns) return t;
  Tensor rows = std::move(t);
  if (end - begin == p.per_shard) return rows;
  // lm_head's last shard when Vocab does not divide: zero rows pad it to ⌈Vocab/Shards⌉.
  Tensor padded = Tensor::zeros(p.shard_shape(), rows.dtype());
  std::memcpy(padded.data(), rows.data(), rows.nbytes());
  return padded;
}

// transformers would turn a NaN or Inf weight into NaN logits; linnet refuses the checkpoint,
// naming the element. The first one found is kept (the load goes on, so that every rank of a
// shard group reaches load_model's agreement instead of some waiting in a collective).
void CheckpointWeights::check_finite(const ParamSpec& p, const Tensor& t, int64_t row0, int64_t col0) {
  if (!non_finite_.empty()) return;
  const int64_t i = first_non_finite(t.data(), t.dtype(), t.numel());
  if (i < 0) return;
  const float value = t.reshape({t.numel()}).rows(i, i + 1).to_floats()[0];
  std::string where;
  if (t.rank() == 2) {
    const int64_t r = row0 + i / t.dim(1), c = col0 + i % t.dim(1);
    where = str("[", r, ", ", c, "] (flat index ", r * p.full[1] + c, ")");
  } else {
    where = str("[", row0 + i, "]");
  }
  non_finite_ = str(dir_.file_of(p.hf_name).path(), ": tensor '", p.hf_name, "' holds ",
                    std::isnan(value) ? "NaN" : value > 0 ? "+Inf" : "-Inf", " at ", where,
                    "; a checkpoint with non-finite weights computes NaN (transformers gives NaN logits) and is "
                    "refused");
}

std::vector<std::string> CheckpointWeights::unused(const ModelConfig& config, const std::vector<ParamSpec>& specs) const {
  std::vector<std::string> out;
  if (packed_.used()) return out;  // matrices came from the packed file, made from these
  std::set<std::string> expected;  // what other ranks read (their experts)
  for (const auto& p : specs) {
    expected.insert(p.hf_name);
    if (p.layout.dense()) continue;
    expected.insert(p.values_part().hf_name);
    for (const auto& c : p.companions()) expected.insert(c.hf_name);
    if (!p.layout.shape_suffix.empty()) expected.insert(p.hf_name + p.layout.shape_suffix);
  }
  for (const std::string& name : dir_.names()) {
    if (used_.count(name) || expected.count(name)) continue;
    // Buffers older exports carry and transformers ignores too; a tied lm_head.weight copy.
    if (name.ends_with("rotary_emb.inv_freq")) continue;
    if (name == "lm_head.weight" && config.tie_word_embeddings) continue;
    out.push_back(name);
  }
  return out;
}

}  // namespace linnet
