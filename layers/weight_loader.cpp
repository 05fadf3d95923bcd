#include "layers/weight_loader.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/quantized_parts.h"

namespace linnet {

namespace {

// t in dt; a source converted is let go of (drop_pages: a mapped file's pages go back).
Tensor converted(const Tensor& t, DType dt) {
  if (t.dtype() == dt) return t;
  Tensor c = t.to(dt);
  t.drop_pages();
  return c;
}

}  // namespace

WeightLoader::WeightLoader(const ModelConfig& config, const Generics& g, WeightSource& weights, Backend& backend,
                           int64_t shard)
    : config_(config), g_(g), weights_(weights), be_(backend), shard_(shard),
      matrix_dtype_(backend.weight_dtype(g.t)), act_(backend.compute_dtype(g.t)) {
  for (auto& p : parameter_specs(config, g)) specs_.emplace(p.card_name, p);
}

const ParamSpec& WeightLoader::spec(const std::string& card_name) const {
  auto it = specs_.find(card_name);
  LINNET_CHECK(it != specs_.end(), "no parameter ", card_name, " in the model's table");
  return it->second;
}

Tensor WeightLoader::host(const std::string& card_name) {
  const ParamSpec& p = spec(card_name);
  LINNET_CHECK(p.held_by(shard_), card_name, " is held by shard ", p.owner, ", not ", shard_);
  // A quantized matrix goes with its scales (quantized_matrix), never widened alone.
  LINNET_CHECK(p.layout.dense(), card_name, " is stored ", p.layout.describe(), ": read with its scales");
  if (p.dtype == DType::f32) return converted(weights_.read(p, shard_), DType::f32);  // kept in f32 (DeepSeek's router)
  Tensor t = weights_.read(p, shard_);
  // A vector stored in f32 beside a narrower T (Qwen3.5's A_log and gated norm): its stored
  // values, as vLLM and SGLang keep them; every other tensor rounded to T first.
  if (!(t.rank() == 1 && t.dtype() == DType::f32)) t = converted(t, g_.t);
  return converted(t, t.rank() == 2 ? matrix_dtype_ : act_);
}

Tensor WeightLoader::up(const Tensor& t) {
  Tensor d = t.rank() == 2 ? be_.upload_matrix(t) : be_.upload(t);
  if (d.data() != t.data()) t.drop_pages();
  return d;
}

Tensor WeightLoader::param(const std::string& card_name) { return up(host(card_name)); }

Tensor WeightLoader::table(const std::string& card_name) {
  const ParamSpec& p = spec(card_name);
  return be_.upload(converted(converted(weights_.read(p, shard_), g_.t), act_));
}

Tensor WeightLoader::table(const std::vector<std::string>& card_names) {
  std::vector<Tensor> parts;
  for (const auto& n : card_names) parts.push_back(converted(converted(weights_.read(spec(n), shard_), g_.t), act_));
  return be_.upload(stack_rows(parts));
}

Tensor WeightLoader::stacked(const std::vector<std::string>& card_names) {
  std::vector<Tensor> parts;
  for (const auto& n : card_names) parts.push_back(host(n));
  if (parts[0].rank() != 2) return be_.upload(stack_rows(parts));  // biases
  Tensor d = be_.upload_matrix(parts);
  for (const auto& p : parts) p.drop_pages();
  return d;
}

RmsNorm WeightLoader::norm(const std::string& card_name) {
  const float eps = static_cast<float>(config_.rms_norm_eps);
  if (!config_.norm_plus_one) return RmsNorm{param(card_name), eps};
  Tensor w = weights_.read(spec(card_name), shard_).to(g_.t).to(DType::f32);  // rounded to T first
  for (int64_t i = 0; i < w.numel(); ++i) w.ptr<float>()[i] = 1.0f + w.ptr<float>()[i];
  return RmsNorm{be_.upload(w), eps};
}

namespace {
// A group index (GPTQ's g_idx, compressed-tensors' weight_g_idx: each input column's group) as
// the backend takes it: undefined where it is the groups' plain order (column c in group
// c / group); else, checked, each column's group — a desc_act ("act-order") checkpoint, whose
// columns the backend puts in their groups' order (core/cpu/group_order.h). A group outside
// the matrix's is refused, naming the tensor and column. (A shard's g_idx is its columns'
// slice: `first` is its first column.)
Tensor group_index(const ParamSpec& g_idx, const Tensor& t, int64_t group, int64_t cols, int64_t shard) {
  const int64_t first = g_idx.split == Split::rows ? g_idx.shard_range(shard).first : 0;
  const int64_t whole = group >= WeightLayout::kWhole, groups = whole ? 1 : (cols + group - 1) / group;
  const auto v = t.to_ints();
  bool in_order = true;
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t c = first + static_cast<int64_t>(i);
    if (v[i] < 0 || v[i] >= groups)
      throw Error(str(g_idx.hf_name, ": column ", c, " is in group ", v[i], ", outside the matrix's ", groups,
                      " groups [0, ", groups, ") of ", whole ? cols : group, " columns"));
    in_order = in_order && v[i] == (whole ? 0 : c / group);
  }
  return in_order ? Tensor() : Tensor::from_ints({static_cast<int64_t>(v.size())}, v, DType::i32);
}

bool same_ints(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  return !a.defined() || a.to_ints() == b.to_ints();
}
}  // namespace

// LINNET_QUANT_ROUNDING (read once): "format" (the default) rounds each dequantized weight as
// its format's reference does — to f16 for GPTQ and AWQ, to a 16-bit compressed-tensors
// model's scale dtype —; "f32" keeps it in f32, one rounding of (q − zero) · scale: faster
// where the CPU converts to f16 or rounds to bf16 in several instructions (AVX2), within the
// 16-bit models' bound of the reference but not its bits (docs/quantization.md).
namespace {
bool dequantize_in_f32() {
  static const bool f32 = [] {
    const char* v = std::getenv("LINNET_QUANT_ROUNDING");
    if (!v || std::string(v) == "format") return false;
    if (std::string(v) == "f32") return true;
    throw Error(str("LINNET_QUANT_ROUNDING=", v, ": expected format or f32"));
  }();
  return f32;
}
}  // namespace

Tensor WeightLoader::quantized_matrix(const std::vector<std::string>& parts) {
  auto [q, rounded] = quantized_parts(parts);
  return be_.upload_quantized_matrix(q, rounded);
}

std::pair<std::vector<Backend::QuantizedPart>, WeightLayout> WeightLoader::quantized_parts(
    const std::vector<std::string>& parts) {
  // The parts of one matrix are stored alike, checked before anything is read.
  const ParamSpec& first = spec(*std::find_if(parts.begin(), parts.end(),
                                              [&](const std::string& n) { return !spec(n).layout.dense(); }));
  const WeightLayout& layout = first.layout;
  for (const auto& n : parts)
    if (spec(n).layout.describe() != layout.describe())
      throw Error(str(spec(n).hf_name, " is stored ", spec(n).layout.describe(), ", but ", first.hf_name,
                      " (one matrix with it) ", layout.describe(), ": quantization_config must convert both or neither"));
  std::vector<Backend::QuantizedPart> q;
  std::string first_order_name, first_scale_name;
  std::optional<DType> stored_scales;  // the first part's scales' dtype as stored
  for (const auto& n : parts) {
    const ParamSpec& p = spec(n);
    LINNET_CHECK(p.held_by(shard_), n, " is held by shard ", p.owner, ", not ", shard_);
    Backend::QuantizedPart part;
    part.data = weights_.read(p.values_part(), shard_);
    part.cols = p.shard_shape()[1];
    const std::vector<ParamSpec> companions = p.companions();
    const std::vector<WeightCompanion> roles = layout.companions_of(p.full);
    // The group index first: one that reorders the groups puts any group in a shard's columns,
    // so a row-parallel shard then reads every group's scales and zero points.
    std::string order_name = p.hf_name, scale_name;  // (its g_idx's and input_scale's names, for an error)
    for (size_t i = 0; i < companions.size(); ++i)
      if (roles[i].role == PartRole::group_index) {
        part.group_index = group_index(companions[i], weights_.read(companions[i], shard_), layout.block_cols,
                                       p.full[1], shard_);
        order_name = companions[i].hf_name;
      }
    for (size_t i = 0; i < companions.size(); ++i) {
      if (roles[i].role == PartRole::group_index) continue;
      ParamSpec c = companions[i];
      if (part.group_index.defined() && p.split == Split::columns) c.split = Split::mirrored, c.per_shard = 0, c.replicas = 1;
      Tensor t = weights_.read(c, shard_);
      switch (roles[i].role) {
        // Any float widened exactly; E8M0 exponents (MXFP4) as stored, a byte each.
        case PartRole::scales:
          if (!stored_scales) stored_scales = t.dtype();
          part.scales = t.dtype() == DType::f8_e8m0 ? t : converted(t, DType::f32);
          break;
        case PartRole::zero_points: part.zero_points = t; break;
        case PartRole::input_scale:
          scale_name = c.hf_name;
          part.input_scale = converted(t, DType::f32);
          if (!(part.input_scale.ptr<float>()[0] > 0))
            throw Error(str(c.hf_name, " is ", part.input_scale.ptr<float>()[0],
                            ": a static activation scale must be positive (x is divided by it)"));
          break;
        default: throw Error(str(companions[i].hf_name, ": an unexpected part of ", layout.describe()));
      }
    }
    // Stacked parts (q|k|v, gate|up, the experts) are one matrix: one column order. GPTQ gives
    // layers that share an input the same one (their Hessians are the same).
    if (!q.empty() && !same_ints(part.group_index, q[0].group_index))
      throw Error(str(order_name, " orders the columns' groups unlike ", first_order_name,
                      ", stacked with it into one matrix: its parts must share one column order (experts reordered "
                      "each their own way by desc_act are not read yet)"));
    if (q.empty()) first_order_name = order_name, first_scale_name = scale_name;
    // Static activations: one rounding of the matrix's input, so one input_scale (the parts share
    // the input, and llm-compressor calibrates each on it).
    if (!q.empty() && part.input_scale.defined() &&
        part.input_scale.ptr<float>()[0] != q[0].input_scale.ptr<float>()[0])
      throw Error(str(scale_name, " is ", part.input_scale.ptr<float>()[0], ", but ", first_scale_name, " is ",
                      q[0].input_scale.ptr<float>()[0],
                      ": layers stacked into one matrix round their one input with one static scale"));
    q.push_back(std::move(part));
  }
  WeightLayout rounded = layout;
  if (layout.dequant_in_scale_dtype && stored_scales && (*stored_scales == DType::bf16 || *stored_scales == DType::f16))
    rounded.dequant_dtype = *stored_scales;  // (a 16-bit model's weights, rounded as its reference rounds them)
  if (dequantize_in_f32()) rounded.dequant_dtype.reset();
  return {std::move(q), rounded};
}

Tensor WeightLoader::matrix(const std::string& name, const std::vector<std::string>& parts, const Shape& shape) {
  // Any part quantized: all of them must be, alike (quantized_matrix refuses a mix by name).
  if (std::any_of(parts.begin(), parts.end(), [&](const std::string& n) { return !spec(n).layout.dense(); })) {
    Tensor m = quantized_matrix(parts);
    matrices_.emplace_back(name, m);
    return m;
  }
  Tensor m;
  if (g_.shards == 1 && !be_.packed_format().empty())
    m = weights_.packed(name, be_.packed_format(), matrix_dtype_, shape);
  m = m.defined() ? be_.upload_matrix(m) : parts.size() == 1 ? param(parts[0]) : stacked(parts);
  matrices_.emplace_back(name, m);
  return m;
}

std::pair<Tensor, Tensor> WeightLoader::absorbed_kv_b(const std::string& card_name, int64_t heads, int64_t nope,
                                                      int64_t v, int64_t kv_lora) {
  const ParamSpec& p = spec(card_name);
  std::vector<float> kvb;
  if (p.layout.dense()) {
    kvb = converted(weights_.read(p, shard_), g_.t).to_floats();  // rounded to T, as held
  } else {
    // Quantized (DeepSeek's FP8 blocks): dequantized as the product would (its format's
    // rounding), then rounded to T below — held in T, as vLLM holds its absorbed W_UK and W_UV.
    auto [q, rounded] = quantized_parts({card_name});
    kvb = dequantize_rows(read_quantized_parts(q, rounded, "latent attention"));
  }
  const int64_t w = nope + v;
  LINNET_CHECK(static_cast<int64_t>(kvb.size()) == heads * w * kv_lora, card_name, ": ", kvb.size(), " values, not ",
               heads, "·", w, "·", kv_lora);
  std::vector<float> uk(static_cast<size_t>(heads * kv_lora * nope)), uv(static_cast<size_t>(heads * v * kv_lora));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < nope; ++r)
      for (int64_t c = 0; c < kv_lora; ++c)
        uk[static_cast<size_t>((h * kv_lora + c) * nope + r)] = kvb[static_cast<size_t>((h * w + r) * kv_lora + c)];
    for (int64_t r = 0; r < v; ++r)
      for (int64_t c = 0; c < kv_lora; ++c)
        uv[static_cast<size_t>((h * v + r) * kv_lora + c)] = kvb[static_cast<size_t>((h * w + nope + r) * kv_lora + c)];
  }
  // To T (exact for a dense kv_b_proj, whose values are T's; a dequantized one is rounded here,
  // once), then as the backend holds a matrix.
  const Tensor tk = Tensor::from_floats({heads * kv_lora, nope}, uk).to(g_.t);
  const Tensor tv = Tensor::from_floats({heads * v, kv_lora}, uv).to(g_.t);
  return {be_.upload_matrix(converted(tk, matrix_dtype_)), be_.upload_matrix(converted(tv, matrix_dtype_))};
}

}  // namespace linnet
