// config.json → ModelConfig. The keys every architecture shares are read here: sizes, head_dim,
// both spellings of RoPE transformers has written (the classic top-level `rope_theta` /
// `rope_scaling` and transformers 5's `rope_parameters`, also its per-layer-type form where
// transformers reads it: Gemma 3), the window, dtype and token ids; each architecture's own
// keys, defaults and refusals are in its file under architectures/. Every key that changes the
// model's math in a way linnet does not implement is refused (docs/config.md lists them), so
// a checkpoint never runs silently wrong.
#include "architectures/hf_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "architectures/architecture.h"

namespace linnet {

namespace {

using nlohmann::json;
using Reader = ConfigReader;

std::string family_list() {
  std::string s;
  for (const Architecture* a : architectures()) s += (s.empty() ? "" : ", ") + std::string(a->model_type);
  return s;
}

// The mixtures of experts: "mixtral, qwen3_moe, olmoe and glm4_moe".
std::string moe_family_list() {
  std::vector<std::string> names;
  for (const Architecture* a : architectures())
    if (a->experts) names.push_back(a->model_type);
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return s;
}

// ---- RoPE --------------------------------------------------------------------------------

bool same_scaling(const RopeScaling& a, const RopeScaling& b) {
  if (a.type != b.type) return false;
  if (a.type == RopeScaling::Type::none) return true;
  return a.factor == b.factor && a.low_freq_factor == b.low_freq_factor && a.high_freq_factor == b.high_freq_factor &&
         a.original_max_position == b.original_max_position && a.attention_factor == b.attention_factor &&
         a.beta_fast == b.beta_fast && a.beta_slow == b.beta_slow && a.mscale == b.mscale &&
         a.mscale_all_dim == b.mscale_all_dim && a.truncate == b.truncate && a.short_factor == b.short_factor &&
         a.long_factor == b.long_factor;
}

std::string describe(const RopeScaling& s) {
  switch (s.type) {
    case RopeScaling::Type::none: return "default";
    case RopeScaling::Type::linear: return str("linear (factor ", s.factor, ")");
    case RopeScaling::Type::llama3:
      return str("llama3 (factor ", s.factor, ", low_freq_factor ", s.low_freq_factor, ", high_freq_factor ",
                 s.high_freq_factor, ", original_max_position_embeddings ", s.original_max_position, ")");
    case RopeScaling::Type::dynamic: return str("dynamic (factor ", s.factor, ")");
    case RopeScaling::Type::yarn:
      return str("yarn (factor ", s.factor, ", original_max_position_embeddings ", s.original_max_position, ")");
    case RopeScaling::Type::longrope:
      return str("longrope (original_max_position_embeddings ", s.original_max_position, ")");
  }
  return "?";
}

// transformers fills what a scaled RoPE leaves out from the model: original_max_position_embeddings
// (Phi-3: its top-level key wins), yarn's and longrope's factor.
void complete(const Reader& r, RopeScaling& s, const ModelConfig& c, const Architecture& a, const std::string& key) {
  const bool scaled = s.type == RopeScaling::Type::yarn || s.type == RopeScaling::Type::longrope ||
                      s.type == RopeScaling::Type::llama3;
  if (!scaled) return;
  if (a.phi3_rope && !given(r.j, "original_max_position_embeddings")) {
    // Phi3Config always has the attribute (default 4096), and it replaces the RoPE's own.
    s.original_max_position = 4096;
  } else if (given(r.j, "original_max_position_embeddings")) {
    const int64_t top = r.positive("original_max_position_embeddings");
    if (a.phi3_rope) s.original_max_position = top;
    else if (s.original_max_position != 0 && s.original_max_position != top)
      r.fail(str("original_max_position_embeddings ", top, " and ", key, ".original_max_position_embeddings ",
                 s.original_max_position, " disagree"));
    else s.original_max_position = top;
  }
  if (s.original_max_position == 0) s.original_max_position = c.max_position;
  if ((s.type == RopeScaling::Type::yarn || s.type == RopeScaling::Type::longrope) && s.factor == 0)
    s.factor = static_cast<double>(c.max_position) / static_cast<double>(s.original_max_position);
  if (s.type == RopeScaling::Type::longrope) {
    const size_t half = static_cast<size_t>(c.rotary_dim() / 2);
    for (const auto* f : {&s.short_factor, &s.long_factor})
      if (f->size() != half)
        r.fail(str(key, ": longrope's ", f == &s.short_factor ? "short_factor" : "long_factor", " has ", f->size(),
                   " entries; the rotary dim ", c.rotary_dim(), " needs ", half));
  }
}

// rope_parameters in transformers' per-layer-type form {"full_attention": {...},
// "sliding_attention": {...}}: keys that are layer types of the config.
bool per_layer_type_form(const json& o) {
  return o.is_object() && !o.empty() && std::all_of(o.items().begin(), o.items().end(), [](const auto& kv) {
           return (kv.key() == "full_attention" || kv.key() == "sliding_attention") &&
                  (kv.value().is_object() || kv.value().is_null());
         });
}

// The model's RoPE(s) from whichever spellings are present; both present must agree.
void parse_rope(const Reader& r, ModelConfig& c, const Architecture& a) {
  const std::string& type = c.model_type;
  const bool per_layer_ropes = a.local_rope;  // Gemma 3: its sliding layers have a RoPE of their own
  RopeSpec classic;
  if (given(r.j, "rope_scaling")) classic = parse_rope_object(r, r.j["rope_scaling"], "rope_scaling", a.phi3_rope);
  if (classic.theta) r.fail("'rope_scaling' must not carry rope_theta (it is a top-level key)");
  if (given(r.j, "rope_theta")) {
    classic.theta = r.number("rope_theta", 0);
    if (!(*classic.theta > 0)) r.fail("'rope_theta' must be positive");
  }
  std::optional<double> local_theta;  // Gemma 3's classic rope_local_base_freq
  if (given(r.j, "rope_local_base_freq")) {
    if (!a.local_base_freq_key) r.fail(str("'rope_local_base_freq' = ", r.j["rope_local_base_freq"].dump(),
                            " is not supported (a per-layer-type RoPE transformers reads for gemma3_text only)"));
    local_theta = r.number("rope_local_base_freq", 0);
    if (!(*local_theta > 0)) r.fail("'rope_local_base_freq' must be positive");
  }
  std::optional<double> partial;
  if (given(r.j, "partial_rotary_factor")) partial = r.number("partial_rotary_factor", 1.0);

  RopeSpec spec = classic, local;
  bool has_local = per_layer_ropes;
  if (given(r.j, "rope_parameters")) {
    const json& o = r.j["rope_parameters"];
    if (!o.is_object()) r.fail(str("'rope_parameters' must be an object or null, got ", o.dump()));
    RopeSpec v5;
    if (per_layer_type_form(o)) {
      // transformers reads this form only for models whose layers have RoPEs of their own
      // (Gemma 3); any other model reads rope_parameters' own top-level keys, finds no
      // rope_type and runs default RoPE — so linnet would compute another model. Refused.
      if (!per_layer_ropes)
        r.fail(str("rope_parameters in the per-layer-type form (keys ", o.begin().key(),
                   ", …) is not read so by transformers for model_type '", type,
                   "' (it would run default RoPE): give one RoPE object {\"rope_type\", \"rope_theta\", …}"));
      if (given(o, "full_attention")) v5 = parse_rope_object(r, o["full_attention"], "rope_parameters.full_attention", a.phi3_rope);
      if (given(o, "sliding_attention"))
        local = parse_rope_object(r, o["sliding_attention"], "rope_parameters.sliding_attention", a.phi3_rope);
      if (local.theta && local_theta && *local.theta != *local_theta)
        r.fail(str("rope_local_base_freq ", *local_theta, " and rope_parameters.sliding_attention.rope_theta ",
                   *local.theta, " disagree"));
    } else {
      if (per_layer_ropes) r.fail(str("rope_parameters for ", type, " must be the per-layer-type form {\"full_attention\": {…}, "
                             "\"sliding_attention\": {…}}"));
      v5 = parse_rope_object(r, o, "rope_parameters", a.phi3_rope);
    }
    if (classic.theta && v5.theta && *classic.theta != *v5.theta)
      r.fail(str("rope_theta ", *classic.theta, " and rope_parameters.rope_theta ", *v5.theta, " disagree"));
    if (given(r.j, "rope_scaling") && !same_scaling(classic.scaling, v5.scaling))
      r.fail(str("rope_scaling (", describe(classic.scaling), ") and rope_parameters (", describe(v5.scaling),
                 ") disagree"));
    if (partial && v5.partial_rotary_factor && *partial != *v5.partial_rotary_factor)
      r.fail(str("partial_rotary_factor ", *partial, " and rope_parameters.partial_rotary_factor ",
                 *v5.partial_rotary_factor, " disagree"));
    spec.scaling = v5.scaling;
    if (v5.theta) spec.theta = v5.theta;
    if (v5.partial_rotary_factor) partial = v5.partial_rotary_factor;
  }
  // partial_rotary_factor: transformers' Phi-3 rotates that fraction of each head; the other
  // families' rotary code rotates whole heads (a fraction would break or be ignored there).
  c.partial_rotary_factor = partial.value_or(a.partial_rotary_default);
  if (c.partial_rotary_factor != 1.0 && !a.partial_rotary)
    r.fail(str(given(r.j, "partial_rotary_factor") ? "" : "rope_parameters.", "partial_rotary_factor ",
               c.partial_rotary_factor, " is not supported for model_type '", type,
               "' (transformers rotates the whole head there; phi3 reads it)"));
  if (!(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1))
    r.fail(str("partial_rotary_factor ", c.partial_rotary_factor, " must be in (0, 1]"));
  if (c.rotary_dim() % 2 != 0 || c.rotary_dim() == 0)
    r.fail(str("head dim ", c.head_dim(), " × partial_rotary_factor ", c.partial_rotary_factor, " = ", c.rotary_dim(),
               " rotary dims must be even for RoPE"));
  c.rope_theta = spec.theta.value_or(a.rope_theta);
  c.rope = spec.scaling;
  complete(r, c.rope, c, a, given(r.j, "rope_parameters") ? "rope_parameters" : "rope_scaling");
  if (has_local) {
    Rope l;
    l.theta = local.theta.value_or(local_theta.value_or(a.local_rope_theta));
    l.scaling = local.scaling;
    complete(r, l.scaling, c, a, "rope_parameters.sliding_attention");
    c.local_rope = l;
  }
}

// ---- layers: sliding windows and NoPE ------------------------------------------------------

// Each layer's kind and the window, as the architecture's transformers code decides them.
void parse_layers(const Reader& r, ModelConfig& c, const Architecture& a) {
  const std::string& type = c.model_type;
  c.layer_kinds.assign(static_cast<size_t>(c.layers), LayerKind{});
  LayerParse l{layer_types(r, c, a.linear_attention), window_key(r, a.sliding_window), std::vector<bool>(static_cast<size_t>(c.layers), false)};
  a.layers(r, c, l);
  if (given(r.j, "no_rope_layers") && !a.no_rope_layers)
    r.fail(str("'no_rope_layers' = ", r.j["no_rope_layers"].dump(),
               " is not supported for model_type '", type, "' (transformers reads it for smollm3)"));
  for (int64_t i = 0; i < c.layers; ++i) c.layer_kinds[static_cast<size_t>(i)].sliding = l.sliding[static_cast<size_t>(i)];
  if (c.any_sliding()) c.sliding_window = l.window;
}

// ---- what linnet does not implement ------------------------------------------------------

// Keys whose presence (with a value other than the neutral one) changes the model's math.
void refuse_unsupported(const Reader& r, const Architecture& a) {
  const std::string type = a.model_type;
  const json& j = r.j;
  auto refuse = [&](const char* key, const std::string& why) {
    r.fail(str("'", key, "' = ", j[key].dump(), " is not supported (", why, ")"));
  };
  if (!a.soft_caps)
    for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
      if (given(j, key)) refuse(key, "logit soft-capping is Gemma's (gemma2, gemma3_text)");
  if (given(j, "pretraining_tp") && !(j["pretraining_tp"].is_number_integer() && j["pretraining_tp"].get<int64_t>() <= 1))
    refuse("pretraining_tp", "transformers splits each projection into pretraining_tp slices; linnet runs 1");
  if (!a.experts)
    for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"})
      if (given(j, key) && !(j[key].is_number_integer() && j[key].get<int64_t>() == 0))
        refuse(key, str("mixture-of-experts layers are read for model_type ", moe_family_list(), ", not '", type,
                        "'"));
  if (a.refuse) a.refuse(r);
  if (given(j, "clip_qkv")) refuse("clip_qkv", "OLMo's clipping of q, k and v");
  for (const char* key : {"use_qk_norm", "qk_layernorm", "rope_interleaved"})
    if (given(j, key) && j[key] != false && !(a.qk_norm_key && std::string(key) == "use_qk_norm"))
      refuse(key, str("model_type '", type, "' has the q/k norms (or none) ", a.class_name,
                      " has, whatever the config says; RoPE rotates halves, not pairs"));
  if (given(j, "query_pre_attn_scalar") && !a.soft_caps)
    refuse("query_pre_attn_scalar", "Gemma's attention scale (gemma2, gemma3_text); attention is scaled by 1/sqrt(head_dim)");
  if (!a.multipliers)
    for (const char* key : {"embedding_multiplier", "logits_scaling", "residual_multiplier", "attention_multiplier"})
      if (given(j, key) && !(j[key].is_number() && j[key].get<double>() == 1.0))
        refuse(key, "scaling multipliers are Granite's (model_type granite)");
}

// The multimodal checkpoints whose text model linnet runs: their model_type, their text_config's
// default model_type, and their config class's tie_word_embeddings default.
struct Wrapper {
  const char* model_type;
  const char* text_model_type;
  bool tie_default;
};
constexpr Wrapper kWrappers[] = {
    {"mistral3", "mistral", true},               // Mistral Small 3.1/3.2; Mistral Small 4 (mistral4 text)
    {"qwen3_5", "qwen3_5_text", false},          // Qwen3.5 (Qwen3_5ForConditionalGeneration)
    {"qwen3_5_moe", "qwen3_5_moe_text", false},  // Qwen3.5-MoE (Qwen3_5MoeForConditionalGeneration)
};
const Wrapper* wrapper_of(const json& j) {
  if (!j.is_object() || !j.contains("model_type") || !j["model_type"].is_string()) return nullptr;
  for (const Wrapper& w : kWrappers)
    if (j["model_type"] == w.model_type) return &w;
  return nullptr;
}

// A multimodal checkpoint whose text model linnet runs (kWrappers). Its text_config is the
// model, with the keys transformers reads from the wrapper itself: tie_word_embeddings (the
// wrapper class's default), the dtype and quantization_config. The vision tower's tensors are set
// aside at load.
ModelConfig parse_text_model(const json& j, const std::string& source, const Wrapper& w) {
  Reader r{j, source};
  const std::string wrapper = w.model_type;
  if (!given(j, "text_config") || !j["text_config"].is_object())
    r.fail(str("model_type '", wrapper, "' (a multimodal checkpoint) needs its text_config object: the text model "
               "linnet runs"));
  json t = j["text_config"];
  if (!given(t, "model_type")) t["model_type"] = w.text_model_type;  // the wrapper's default text model
  if (t["model_type"] == wrapper) r.fail(str("text_config's model_type is '", wrapper, "' again"));
  t["tie_word_embeddings"] = given(j, "tie_word_embeddings") ? j["tie_word_embeddings"] : json(w.tie_default);
  for (const char* key : {"torch_dtype", "dtype", "quantization_config"})
    if (given(j, key)) {
      if (std::string(key) != "quantization_config") t.erase("torch_dtype"), t.erase("dtype");
      t[key] = j[key];
    }
  ModelConfig c = parse_hf_config(t, source + " text_config");
  c.multimodal = wrapper;
  return c;
}

}  // namespace

ModelConfig parse_hf_config(const json& j, const std::string& source) {
  // Multimodal checkpoints (Mistral 3's, Qwen3.5's): their text model (parse_text_model).
  if (const Wrapper* w = wrapper_of(j)) return parse_text_model(j, source, *w);
  if (!j.is_object()) throw Error(str(source, ": config must be a JSON object"));
  Reader r{j, source};
  ModelConfig c;
  c.model_type = r.string("model_type", "llama");
  // Kimi K2's published config.json says model_type kimi_k2 (its remote code); its network is
  // DeepSeek V3's (architectures: DeepseekV3ForCausalLM), as transformers reads it inside Kimi K2.5.
  if (c.model_type == "kimi_k2") c.model_type = "deepseek_v3";
  const Architecture* fam = find_architecture(c.model_type);
  if (!fam) {
    const std::string& t = c.model_type;
    if (t == "gemma3")
      r.fail("unsupported model_type 'gemma3' (Gemma 3 with its vision tower, Gemma3ForConditionalGeneration): linnet "
             "runs the text model, model_type gemma3_text (Gemma3ForCausalLM)");
    if (t == "deepseek_v32")
      r.fail(str("unsupported model_type 'deepseek_v32' (its sparse attention's indexer — index_n_heads, index_topk "
                 "— is not implemented; deepseek_v3's latent attention is; supported: ", family_list(), ")"));
    if (t.find("moe") != std::string::npos)
      r.fail(str("unsupported model_type '", t, "' (its mixture-of-experts layers are not implemented: linnet's are ",
                 moe_family_list(), "; supported: ", family_list(), ")"));
    r.fail(str("unsupported model_type '", t, "' (supported: ", family_list(), ")"));
  }
  const std::string& type = c.model_type;
  if (given(j, "architectures")) {
    if (!j["architectures"].is_array()) r.fail(str("'architectures' must be a list, got ", j["architectures"].dump()));
    for (const json& a : j["architectures"])
      if (a != fam->class_name)
        r.fail(str("unsupported architectures entry ", a.dump(), " for model_type '", type, "' (supported: ",
                   fam->class_name, ")"));
  }
  c.vocab = r.positive("vocab_size");
  c.hidden = r.positive("hidden_size");
  c.heads = r.positive("num_attention_heads");
  c.kv_heads = r.positive("num_key_value_heads", c.heads);
  c.inner = fam->every_layer_sparse ? 0 : r.positive("intermediate_size");  // (Qwen3.5-MoE: no dense MLP)
  c.layers = r.positive("num_hidden_layers");
  c.max_position = r.positive("max_position_embeddings", 2048);
  if (c.heads % c.kv_heads != 0)
    r.fail(str("num_attention_heads ", c.heads, " does not divide by num_key_value_heads ", c.kv_heads));
  // head_dim: the config's, else the family's default (Qwen 3: 128, Gemma: 256), else H / Heads.
  int64_t head_dim = fam->head_dim;
  if (given(j, "head_dim")) head_dim = r.positive("head_dim");
  if (head_dim == 0) {
    if (c.hidden % c.heads != 0)
      r.fail(str("hidden_size ", c.hidden, " does not divide by num_attention_heads ", c.heads,
                 " and no head_dim is given"));
    head_dim = c.hidden / c.heads;
  }
  c.head_size = c.hidden % c.heads == 0 && head_dim == c.hidden / c.heads ? 0 : head_dim;
  if (fam->attention) fam->attention(r, c);
  // Activation: Gemma reads hidden_activation (its hidden_act, when present, is not used).
  if (fam->gelu_tanh) {
    const std::string act = r.string("hidden_activation", "gelu_pytorch_tanh");
    if (act != "gelu_pytorch_tanh")
      r.fail(str("unsupported hidden_activation '", act, "' (supported: gelu_pytorch_tanh)"));
    c.activation = ModelConfig::Activation::gelu_tanh;
  } else {
    for (const char* key : {"hidden_act", "hidden_activation"}) {
      const std::string act = r.string(key, "silu");
      if (act != "silu" && act != "swish") r.fail(str("unsupported ", key, " '", act, "' (supported: silu)"));
    }
  }
  c.rms_norm_eps = r.number("rms_norm_eps", fam->rms_norm_eps);
  if (!(c.rms_norm_eps > 0)) r.fail("'rms_norm_eps' must be positive");
  parse_rope(r, c, *fam);
  refuse_unsupported(r, *fam);
  parse_layers(r, c, *fam);
  if (fam->moe) fam->moe(r, c);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", fam->tie_word_embeddings);
  // Biases, as each family's modules have them.
  const bool attention_bias = r.boolean("attention_bias", fam->attention_bias_default);
  if (fam->bias == Architecture::Bias::qkv_always) {
    c.qkv_bias = true;
  } else if (fam->bias == Architecture::Bias::none) {
    c.qkv_bias = c.o_bias = false;  // hard-wired off in transformers' modules
  } else if (fam->bias == Architecture::Bias::qkv_attention_bias) {
    c.qkv_bias = attention_bias;
  } else {
    c.qkv_bias = c.o_bias = attention_bias;
  }
  c.mlp_bias = fam->mlp_bias && r.boolean("mlp_bias", false);
  if (!fam->mlp_bias && r.boolean("mlp_bias", false))
    r.fail(str("'mlp_bias' = true is not supported for model_type '", type, "' (its MLP has no biases in transformers)"));
  if (fam->finish) fam->finish(r, c);
  c.definition = &fam->definition;
  c.quantization = parse_quantization_config(r, c);
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (!given(j, key)) continue;
    const std::string t = r.string(key, "");
    if (t == "bfloat16") c.dtype = DType::bf16;
    else if (t == "float16") c.dtype = DType::f16;
    else if (t == "float32") c.dtype = DType::f32;
    else r.fail(str("unsupported ", key, " '", t, "' (supported: bfloat16, float16, float32)"));
    break;
  }
  if (const auto bos = r.token_ids("bos_token_id", c.vocab); !bos.empty()) c.bos_token_id = bos[0];
  c.eos_token_ids = r.token_ids("eos_token_id", c.vocab);
  return c;
}

std::string not_a_checkpoint(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (!fs::exists(p, ec)) return str(path, ": no such checkpoint directory");
  if (!fs::is_directory(p, ec)) {
    const std::string ext = p.extension().string();
    std::string why = str(path, ": a checkpoint is a directory (config.json + *.safetensors, as Hugging Face saves it), "
                                "not a file");
    if (ext == ".bin" || ext == ".pt")
      why += str("; for a llama2.c model (such as stories15M.bin), `linnet import-llama2c --input ", path,
                 " --out DIR` makes one");
    else if (ext == ".safetensors")
      why += str("; give the directory that holds it with its config.json (", p.has_parent_path() ? p.parent_path().string() : ".", "?)");
    else if (ext == ".gguf")
      why += "; GGUF files are llama.cpp's: linnet reads the Hugging Face checkpoint they were made from";
    return why;
  }
  if (fs::exists(p / "config.json", ec)) return "";
  std::vector<std::string> inside;
  for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec) && fs::exists(it->path() / "config.json", ec)) inside.push_back(it->path().filename().string());
  std::sort(inside.begin(), inside.end());
  if (inside.empty()) return str(path, ": not a checkpoint: it holds no config.json");
  std::string list;
  for (size_t i = 0; i < inside.size() && i < 8; ++i) list += (i ? ", " : "") + inside[i];
  if (inside.size() > 8) list += str(", … (", inside.size() - 8, " more)");
  return str(path, ": not a checkpoint (no config.json), but its subfolder", inside.size() > 1 ? "s " : " ", list,
             inside.size() > 1 ? " are checkpoints: give one of them" : " is one: give it",
             " (e.g. --checkpoint ", (p / inside[0]).string(), ")");
}

ModelConfig load_hf_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool dir = fs::is_directory(path, ec);
  // A checkpoint folder, or a config file itself (*.json): anything else is named for what it is.
  if (dir || fs::path(path).extension() != ".json")
    if (const std::string why = not_a_checkpoint(path); !why.empty()) throw Error(why);
  const std::string file = dir ? (fs::path(path) / "config.json").string() : path;
  ModelConfig c = parse_hf_config(read_json_file(file, "config"), file);
  // generation_config.json may name more end-of-sequence ids (and the bos id); keep them all.
  const fs::path gen = fs::path(dir ? path : fs::path(path).parent_path().string()) / "generation_config.json";
  if (fs::exists(gen, ec)) {
    const json g = read_json_file(gen.string(), "generation config");
    if (!g.is_object()) throw Error(str(gen.string(), ": generation config must be a JSON object"));
    Reader r{g, gen.string()};
    for (int64_t id : r.token_ids("eos_token_id", c.vocab))
      if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end())
        c.eos_token_ids.push_back(id);
    if (const auto bos = r.token_ids("bos_token_id", c.vocab); !c.bos_token_id && !bos.empty()) c.bos_token_id = bos[0];
  }
  return c;
}

json to_hf_config(const ModelConfig& c) {
  const Architecture* fam = find_architecture(c.model_type);
  if (!fam) fam = architectures()[0];
  json j = {
      {"architectures", {fam->class_name}},
      {"model_type", c.model_type},
      {"hidden_size", c.hidden},
      {"intermediate_size", c.inner},
      {"num_hidden_layers", c.layers},
      {"num_attention_heads", c.heads},
      {"num_key_value_heads", c.kv_heads},
      {"head_dim", c.head_dim()},
      {"vocab_size", c.vocab},
      {"max_position_embeddings", c.max_position},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"torch_dtype", c.dtype == DType::bf16 ? "bfloat16" : c.dtype == DType::f16 ? "float16" : "float32"},
  };
  if (fam->gelu_tanh) j["hidden_activation"] = "gelu_pytorch_tanh";
  else j["hidden_act"] = "silu";
  if (fam->bias == Architecture::Bias::attention_bias) j["attention_bias"] = c.o_bias;
  if (fam->bias == Architecture::Bias::qkv_attention_bias) j["attention_bias"] = c.qkv_bias;
  if (fam->mlp_bias) j["mlp_bias"] = c.mlp_bias;
  j["rope_scaling"] = rope_json(c.rope);
  if (c.partial_rotary_factor != 1.0) j["partial_rotary_factor"] = c.partial_rotary_factor;
  if (c.local_rope) {
    j["rope_local_base_freq"] = c.local_rope->theta;
    if (c.local_rope->scaling.type != RopeScaling::Type::none || !fam->local_base_freq_key) {
      // Only the per-layer-type form can carry a scaled local RoPE.
      j.erase("rope_scaling");
      j.erase("rope_theta");
      j.erase("rope_local_base_freq");
      json full = c.rope.type == RopeScaling::Type::none ? json{{"rope_type", "default"}} : rope_json(c.rope);
      full["rope_theta"] = c.rope_theta;
      json local = rope_json(c.local_rope->scaling);
      local["rope_theta"] = c.local_rope->theta;
      j["rope_parameters"] = {{"full_attention", full}, {"sliding_attention", local}};
    }
  }
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  // Layers: the window and each layer's type.
  if (!c.layer_kinds.empty() && fam->writes_layer_types) {
    json types = json::array();
    for (int64_t i = 0; i < c.layers; ++i)
      types.push_back(c.layer_kind(i).linear ? "linear_attention"
                      : c.layer_kind(i).sliding ? "sliding_attention"
                                                : "full_attention");
    j["layer_types"] = types;
  }
  j["sliding_window"] = c.sliding_window ? json(*c.sliding_window) : json(nullptr);
  if (fam->writes_use_sliding_window) j["use_sliding_window"] = c.sliding_window.has_value();
  if (fam->write) fam->write(j, c);
  if (c.unapplied_window) {
    j["sliding_window"] = *c.unapplied_window;
    j["use_sliding_window"] = true;
  }
  return j;
}

}  // namespace linnet
