#!/usr/bin/env python3
"""Make golden reference fixtures for linnet from Hugging Face transformers.

For each case, writes tests/fixtures/golden/<case>/{config.json, model.safetensors,
golden.safetensors} plus tests/fixtures/golden/manifest.json.  See README.md beside
this file for the tensor list.

The cases named in SAVED also get a twin tests/fixtures/golden/<case>_saved/: the same
model written by transformers' own `save_pretrained` (v5 keys: `dtype`,
`rope_parameters`, generation_config.json, ...; nothing rewritten afterwards) with the
same golden.safetensors.

An existing golden.safetensors is kept byte for byte when the recomputed references
agree with it (integer tensors equal, float tensors within KEEP_REL): different CPUs
(AVX2 / AVX-512 / AMX kernels) change the last bits of float32 results, and such noise
is not worth a new binary.  Pass --rewrite to write the recomputed references anyway.

Run it with `python3 tools/golden/make_golden.py`: when not already inside
tools/golden/.venv it creates that virtual environment, installs the pinned packages
from PyPI (requirements.txt beside this file) and re-runs itself there.

Everything is deterministic: the weights and inputs come from seeded generators, and
torch runs on one CPU thread, so re-running reproduces the same files.
"""
import json
import os
import shutil
import subprocess
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
VENV = os.path.join(HERE, ".venv")
VENV_PY = os.path.join(VENV, "bin", "python")
OUT = os.path.join(ROOT, "tests", "fixtures", "golden")


def ensure_venv():
    """Re-exec inside tools/golden/.venv, creating and filling it when needed."""
    if os.path.abspath(sys.prefix) == os.path.abspath(VENV):
        return
    if not os.path.exists(VENV_PY):
        print(f"[golden] creating {VENV}", flush=True)
        subprocess.check_call([sys.executable, "-m", "venv", VENV])
    try:
        subprocess.check_call([VENV_PY, "-c", "import torch, transformers, safetensors, numpy, accelerate, compressed_tensors"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except subprocess.CalledProcessError:
        print("[golden] installing packages (torch is large; this can take minutes)", flush=True)
        subprocess.check_call([VENV_PY, "-m", "pip", "install", "-q", "--upgrade", "pip"])
        subprocess.check_call([VENV_PY, "-m", "pip", "install", "-r",
                               os.path.join(HERE, "requirements.txt")])
    os.execv(VENV_PY, [VENV_PY, os.path.abspath(__file__)] + sys.argv[1:])


# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------

BASE = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 256,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}

# Input sizes: B rows of S tokens for forward; packed runs as (length, start position);
# greedy prompt of S0 tokens then STEPS new tokens.
SHORT = {"S": 12, "runs": [(5, 0), (7, 0), (4, 0), (6, 3)], "S0": 5}
# scaled-RoPE cases: positions well past original_max_position_embeddings = 16
LONG = {"S": 24, "runs": [(5, 0), (20, 0), (4, 0), (8, 14)], "S0": 24}
B = 2
STEPS = 8


def case(name, note, inputs=SHORT, **over):
    cfg = dict(BASE)
    cfg.update(over)
    return {"name": name, "note": note, "config": cfg, "inputs": inputs}


CASES = [
    case("mha", "multi-head attention, KvHeads = Heads = 4"),
    case("gqa", "grouped-query attention, Heads 8, KvHeads 2 (group of 4), head dim 8",
         num_attention_heads=8, num_key_value_heads=2),
    case("rope_llama3", "llama3 RoPE scaling, factor 8, original_max_position_embeddings 16; "
         "positions up to 31", inputs=LONG, rope_theta=500000.0,
         rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
    case("rope_linear", "linear RoPE scaling, factor 4 (positions divided by 4); "
         "positions up to 31", inputs=LONG,
         rope_scaling={"rope_type": "linear", "factor": 4.0}),
    case("tied", "tie_word_embeddings: no lm_head.weight, logits use the embedding",
         tie_word_embeddings=True),
    case("qwen2_bias", "Qwen2ForCausalLM: q/k/v biases, no o_proj bias, GQA 4/2, eps 1e-6",
         architectures=["Qwen2ForCausalLM"], model_type="qwen2",
         num_key_value_heads=2, rms_norm_eps=1e-06, rope_theta=1000000.0,
         use_sliding_window=False, sliding_window=None, max_window_layers=2,
         attention_bias=None, mlp_bias=None),
    case("llama_biases", "attention_bias and mlp_bias: biases on q/k/v/o and gate/up/down",
         attention_bias=True, mlp_bias=True),
    case("eps_1e6", "rms_norm_eps 1e-6", rms_norm_eps=1e-06),
    case("bf16", "torch_dtype bfloat16: weights stored as bf16; reference is the f32 model "
         "on the same bf16-valued weights", torch_dtype="bfloat16"),
    case("odd_sizes", "head dim 48 (hidden 96, 2 heads), vocab 331 (odd prime, not a power "
         "of two, > 256, pads at any Shards > 1), intermediate 72 (not a multiple of 64)",
         hidden_size=96, num_attention_heads=2, num_key_value_heads=2, head_dim=48,
         vocab_size=331, intermediate_size=72),
    # Appended last: a case's seed is 1000 + its index, so earlier cases keep theirs.
    case("llama3_style", "Llama 3 shape: GQA 8/2 (head dim 8), tied embeddings, rope_theta 500000, "
         "llama3 RoPE scaling (factor 8, low 1, high 4, original_max_position_embeddings 16), "
         "positions up to 31, eos_token_id a list [2, 5, 7] as in Llama 3 Instruct",
         inputs=LONG, num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=True,
         rope_theta=500000.0,
         rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
         eos_token_id=[2, 5, 7]),
]

# Cases that also get a `<case>_saved` twin: the model as transformers' save_pretrained
# writes it (config.json, generation_config.json, model.safetensors), same references.
SAVED = ["mha", "gqa", "rope_llama3", "rope_linear", "tied", "qwen2_bias", "llama_biases",
         "bf16", "odd_sizes", "llama3_style"]
SAVED_SUFFIX = "_saved"

# --------------------------------------------------------------------------------------
# Families (issue 28): small random models of each family transformers 5 runs, written by
# its own save_pretrained (config.json in transformers 5's spelling: dtype, rope_parameters),
# one f32 and one bf16 model each. Appended after CASES: their seeds are 2000 + index, so
# the cases above keep theirs and their files stay byte-identical.
# --------------------------------------------------------------------------------------

FAMILY_BASE = {
    "vocab_size": 128,          # pads at Shards 3
    "hidden_size": 48,
    "intermediate_size": 48,    # divides by 2 and 3
    "num_hidden_layers": 2,
    "num_attention_heads": 12,  # GQA 12 / 6: Heads and KvHeads divide by 2 and 3
    "num_key_value_heads": 6,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-06,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": None,       # the families' defaults (Phi-3: 32000) lie outside this vocab
    "tie_word_embeddings": False,
}


def family(name, note, inputs=SHORT, **over):
    cfg = dict(FAMILY_BASE)
    cfg.update(over)
    return {"name": name, "note": note, "config": cfg, "inputs": inputs}


FAMILY_CASES = [
    family("mistral", "MistralForCausalLM: head_dim 8 apart from hidden 48 / 12 heads, sliding_window 4 on every "
           "layer, rope_theta 1e6", architectures=["MistralForCausalLM"], model_type="mistral", head_dim=8,
           sliding_window=4, rope_theta=1000000.0),
    family("qwen3", "Qwen3ForCausalLM: q_norm/k_norm per head, head_dim 8, sliding window 4 on layer 1 "
           "(use_sliding_window, max_window_layers 1), yarn RoPE factor 4 over original 16; positions up to 31",
           inputs=LONG, architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=8,
           use_sliding_window=True, sliding_window=4, max_window_layers=1, rope_theta=1000000.0,
           rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
           attention_bias=False),
    family("gemma2", "Gemma2ForCausalLM: RMSNorm (1 + w), embeddings x sqrt(48), GeGLU (gelu_pytorch_tanh), "
           "pre and post norms, query_pre_attn_scalar 16, attention soft-cap 2 and final soft-cap 3, "
           "layer 0 sliding (window 4), tied embeddings, head_dim 8",
           architectures=["Gemma2ForCausalLM"], model_type="gemma2", head_dim=8, query_pre_attn_scalar=16,
           sliding_window=4, attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
           hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True),
    family("gemma3", "Gemma3ForCausalLM (gemma3_text): q/k norms (1 + w), layer 0 sliding (window 4) with the "
           "local RoPE (rope_local_base_freq 1e4), layer 1 full with rope_theta 1e6 and linear scaling x8, "
           "query_pre_attn_scalar 16, tied embeddings, head_dim 8",
           architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", head_dim=8, query_pre_attn_scalar=16,
           sliding_window=4, layer_types=["sliding_attention", "full_attention"], rope_theta=1000000.0,
           rope_local_base_freq=10000.0, rope_scaling={"rope_type": "linear", "factor": 8.0},
           hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, final_logit_softcapping=None),
    family("phi3", "Phi3ForCausalLM (Phi-4-mini shape): fused qkv_proj and gate_up_proj, partial_rotary_factor "
           "0.75 (6 of 8 dims), longrope short/long factors over original 16 (max_position_embeddings 64), "
           "sliding_window 12 on every layer; positions up to 31", inputs=LONG,
           architectures=["Phi3ForCausalLM"], model_type="phi3", num_attention_heads=6, num_key_value_heads=6,
           partial_rotary_factor=0.75, original_max_position_embeddings=16, sliding_window=12,
           rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.25, 1.5],
                         "long_factor": [1.5, 3.0, 6.0]}),
    family("olmo2", "Olmo2ForCausalLM: post-norms only, q_norm/k_norm over the whole projection (its sum of "
           "squares crosses shards), head_dim 4", architectures=["Olmo2ForCausalLM"], model_type="olmo2",
           rms_norm_eps=1e-05, attention_bias=False),
    family("granite", "GraniteForCausalLM: embedding_multiplier 12, residual_multiplier 0.22, "
           "attention_multiplier 0.25, logits_scaling 4, head_dim 4", architectures=["GraniteForCausalLM"],
           model_type="granite", embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.25,
           logits_scaling=4.0),
    family("smollm3", "SmolLM3ForCausalLM: layer 1 without RoPE (no_rope_layers [1, 0]), dynamic NTK RoPE "
           "factor 2 past max_position_embeddings 16 (positions up to 31), tied embeddings, head_dim 4",
           inputs=LONG, architectures=["SmolLM3ForCausalLM"], model_type="smollm3", no_rope_layers=[1, 0],
           max_position_embeddings=16, rope_scaling={"rope_type": "dynamic", "factor": 2.0},
           tie_word_embeddings=True, use_sliding_window=False),
]
FAMILY_DTYPES = [("", "float32"), ("_bf16", "bfloat16")]

# --------------------------------------------------------------------------------------
# Mixtures of experts (issue 30): Mixtral, Qwen3-MoE (with a dense layer), OLMoE, written by
# save_pretrained (per-expert tensors: block_sparse_moe.experts.E.w1/w2/w3, or
# mlp.experts.E.gate_proj/up_proj/down_proj). 8 experts of inner 16 over hidden 32, 8 heads over
# 4 KV heads (head_dim 4): Heads, KvHeads, Experts and the experts' inner size all split over
# Shards 2 and 4. Seeds 3000 + index, after the families.
# --------------------------------------------------------------------------------------

MOE_BASE = dict(FAMILY_BASE, hidden_size=32, intermediate_size=16, num_attention_heads=8, num_key_value_heads=4)


def moe(name, note, router=None, **over):
    c = family(name, note, **dict(MOE_BASE, **over))
    c["config"] = dict(MOE_BASE, **over)
    c["router"] = router  # special router weights: ("zeros", layer) or ("tie", layer, e1, e2)
    return c


MOE_CASES = [
    moe("mixtral", "MixtralForCausalLM: 8 experts of inner 16, top-2 renormalised (softmax, topk, / sum), "
        "block_sparse_moe names, rope_theta 1e6", architectures=["MixtralForCausalLM"], model_type="mixtral",
        num_local_experts=8, num_experts_per_tok=2, rope_theta=1000000.0, sliding_window=None),
    moe("qwen3_moe", "Qwen3MoeForCausalLM: 3 layers, layer 1 dense (mlp_only_layers [1], intermediate 24), "
        "layers 0 and 2 of 8 experts (moe_intermediate_size 16) top-3 with norm_topk_prob, q/k norms per head; "
        "layer 2's router all zeros (every expert tied: torch.topk's tie order chooses 6, 5, 4)",
        router=("zeros", 2), architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", num_hidden_layers=3,
        intermediate_size=24, moe_intermediate_size=16, num_experts=8, num_experts_per_tok=3, norm_topk_prob=True,
        mlp_only_layers=[1], decoder_sparse_step=1, use_sliding_window=False, head_dim=4, attention_bias=False),
    moe("olmoe", "OlmoeForCausalLM: 8 experts of inner 16, top-2 without renormalising (norm_topk_prob false), "
        "q/k norms over the whole projection; layer 0's router rows 2 and 5 equal (those two experts always tie)",
        router=("tie", 0, 2, 5), architectures=["OlmoeForCausalLM"], model_type="olmoe", num_experts=8,
        num_experts_per_tok=2, norm_topk_prob=False, rms_norm_eps=1e-05, attention_bias=False, clip_qkv=None),
]


def moe_case(source, name, note_prefix, **over):
    """MOE_CASES' case `source` (its config, inputs and special router) under another name, its
    config with `over`."""
    c = next(m for m in MOE_CASES if m["name"] == source)
    return dict(c, name=name, note=note_prefix + c["note"], config=dict(c["config"], **over))


# --------------------------------------------------------------------------------------
# Issue 34: Phi-3's longrope past original_max_position_embeddings during decode (transformers'
# generate drops the cache at the crossing and recomputes every key with the long factors),
# shards beyond the KV heads (MQA, GQA-2 with OLMo 2's whole-projection q/k norms), and bf16
# greedy near ties (rounding the logits to bf16 would pick another token than f32 does).
# Seeds 4000 + index; `dtypes` says which of FAMILY_DTYPES each is written in; `steps` the
# generate steps. Written with `make_golden.py --only NAME …` without touching other cases.
# --------------------------------------------------------------------------------------

PHI3_LONGROPE = dict(architectures=["Phi3ForCausalLM"], model_type="phi3", num_attention_heads=6,
                     num_key_value_heads=6, partial_rotary_factor=0.75, original_max_position_embeddings=16,
                     rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.25, 1.5],
                                   "long_factor": [1.5, 3.0, 6.0]})

ISSUE34_CASES = [
    dict(family("phi3_longrope_decode", "Phi3ForCausalLM, longrope over original 16: a 10-token prompt and 16 "
                "greedy steps, so the sequence reaches 17 tokens at step 7, where transformers' generate drops its "
                "cache and recomputes every key with the long factors",
                inputs={"S": 12, "runs": [(5, 0), (7, 0), (4, 0), (6, 3)], "S0": 10}, **PHI3_LONGROPE),
         steps=16, dtypes=[("", "float32")]),
    dict(family("phi3_longrope_decode16", "Phi3ForCausalLM, longrope over original 16: a prompt of exactly 16 "
                "tokens, so the first decode step already crosses (16 cached, 17 in all)",
                inputs={"S": 16, "runs": [(5, 0), (7, 0), (4, 0), (6, 3)], "S0": 16}, **PHI3_LONGROPE),
         steps=12, dtypes=[("_bf16", "bfloat16")]),
    dict(family("mqa", "Qwen2ForCausalLM with one KV head (MQA: 8 q heads over 1 KV head) and q/k/v biases: at "
                "Shards 2 and 4 the KV head is replicated on every rank", architectures=["Qwen2ForCausalLM"],
                model_type="qwen2", num_attention_heads=8, num_key_value_heads=1, use_sliding_window=False),
         steps=8, dtypes=[("", "float32")]),
    dict(family("olmo2_kv2", "Olmo2ForCausalLM, 8 q heads over 2 KV heads: at Shards 4 each KV head is on two "
                "ranks, and the k norm's sum of squares (over the whole projection) counts each once",
                architectures=["Olmo2ForCausalLM"], model_type="olmo2", num_attention_heads=8, num_key_value_heads=2,
                rms_norm_eps=1e-05, attention_bias=False),
         steps=8, dtypes=[("", "float32")]),
    dict(family("bf16_near_ties", "LlamaForCausalLM in bfloat16, 40 greedy steps from prompts chosen so that at "
                "least one step's two best f32 logits round to one bf16 value with the lower id second (an argmax "
                "over bf16-rounded logits picks another token than transformers' f32 one), every f32 top-2 gap "
                "above 1e-4", architectures=["LlamaForCausalLM"], model_type="llama", num_attention_heads=8,
                num_key_value_heads=4, rope_theta=10000.0),
         steps=40, dtypes=[("_bf16", "bfloat16")], want_bf16_flip=True),
]


# --------------------------------------------------------------------------------------
# Issue 36: architectures added one file each under architectures/. OLMo 3: OLMo 2 with
# sliding-window layers; layer_types [sliding, full, sliding] within sliding_window 4 (the
# prompts and runs are longer); the top-level rope_theta 1e4 and linear scaling x4 reach the full
# layer only, the sliding ones keep Olmo3Config's base 500000. Seeds 5000 + index; written with
# `make_golden.py --only NAME …` like issue 34's cases.
# --------------------------------------------------------------------------------------

ISSUE36_CASES = [
    dict(family("olmo3", "Olmo3ForCausalLM: OLMo 2's post-norms and whole-projection q/k norms; 3 layers, layers "
                "0 and 2 sliding (window 4) with their own default RoPE of base 500000, layer 1 full with "
                "rope_theta 1e4 and linear scaling x4, head_dim 4", architectures=["Olmo3ForCausalLM"],
                model_type="olmo3", num_hidden_layers=3, sliding_window=4,
                layer_types=["sliding_attention", "full_attention", "sliding_attention"], rope_theta=10000.0,
                rope_scaling={"rope_type": "linear", "factor": 4.0}, rms_norm_eps=1e-05, attention_bias=False),
         steps=8, dtypes=FAMILY_DTYPES),
    dict(family("olmo3_kv2", "Olmo3ForCausalLM as olmo3, 8 q heads over 2 KV heads: runs at Shards 4 (each KV head "
                "on two ranks, the k norm's sum of squares counted once), windows and both RoPEs included",
                architectures=["Olmo3ForCausalLM"], model_type="olmo3", num_hidden_layers=3, sliding_window=4,
                num_attention_heads=8, num_key_value_heads=2,
                layer_types=["sliding_attention", "full_attention", "sliding_attention"], rope_theta=10000.0,
                rope_scaling={"rope_type": "linear", "factor": 4.0}, rms_norm_eps=1e-05, attention_bias=False),
         steps=8, dtypes=[("", "float32")]),
]


# --------------------------------------------------------------------------------------
# Issue 37: quantized checkpoints in Hugging Face's "fine-grained FP8" format (DeepSeek-V3,
# Qwen3-FP8): every decoder nn.Linear weight stored as F8_E4M3 with a float32
# `<name>_scale_inv` of one scale per [br, bc] block; embeddings, norms and lm_head stay bf16;
# config.json's quantization_config says so. transformers dequantizes on load (q * scale in
# f32); the references are the f32 model on those dequantized weights. Llama 64 / 128, 8 q heads
# over 4 KV heads (head_dim 8), blocks [8, 16]: every slice at Shards 1, 2 and 4 (q rows 64,
# k/v rows 32, o_proj and down_proj columns 64 and 128) falls on block boundaries. Seeds
# 6000 + index; written with `make_golden.py --only NAME …` like issue 34's cases.
# --------------------------------------------------------------------------------------

FP8_LLAMA = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=64, intermediate_size=128,
                 num_attention_heads=8, num_key_value_heads=4, rope_theta=10000.0)

# compressed-tensors (the format of llm-compressor, vLLM's quantizer; RedHatAI's "-FP8-dynamic" and
# "-FP8-block" models): config.json's quantization_config has quant_method "compressed-tensors",
# format "float-quantized" and one config group targeting "Linear" (lm_head ignored); each
# quantized layer stores `<linear>.weight` F8_E4M3 and `<linear>.weight_scale` in the model dtype
# (float32 here): [out, 1] for strategy "channel", [⌈out/br⌉, ⌈in/bc⌉] for "block". Written with
# compressed-tensors' own code (apply_quantization_config, its calculate_qparams on each weight's
# min/max as llm-compressor's min-max observer does, ModelCompressor.compress_model and
# update_config). transformers 5.24 loads it by default (no quantization_config argument) through
# compressed-tensors: the weights decompress on the first forward to e4m3(q) * scale in f32, and
# every quantized nn.Linear's forward (compressed_tensors.quantization.lifecycle.forward
# .set_forward_quantized) fake-quantizes its INPUT with a scale computed from that input
# (dynamic): per token (strategy "token": amax over the last dim) or per token and group of
# group_size columns ("group"): scale = amax|x| / 448 (2^-23 where amax is 0), x' = e4m3(clamp(x /
# scale, ±448)) * scale, all in f32; then F.linear(x', w). ct_linear_reference re-derives it.
CT_FP8_WEIGHTS = dict(num_bits=8, type="float", symmetric=True, dynamic=False)
CT_FP8_INPUTS = dict(num_bits=8, type="float", symmetric=True, dynamic=True)
CT_FP8_DYNAMIC = {"weights": dict(CT_FP8_WEIGHTS, strategy="channel"),
                  "input_activations": dict(CT_FP8_INPUTS, strategy="token")}
# compressed-tensors' FP8 scheme (llm-compressor's "FP8": RedHatAI's "-FP8" models before FP8_DYNAMIC):
# one weight_scale [1] per tensor, and input_activations static per tensor: each layer's
# input_scale [1] calibrated (static min-max over calibration inputs), x' = e4m3(clamp(x / s)) * s.
CT_FP8_STATIC = {"weights": dict(CT_FP8_WEIGHTS, strategy="tensor"),
                 "input_activations": dict(CT_FP8_INPUTS, strategy="tensor", dynamic=False)}
# compressed-tensors' int-quantized W8A8 with static activations (SmoothQuant-era "INT8 static"
# checkpoints): int8 weights per channel and each layer's input_scale [1] (static min-max / 127.5).
CT_W8A8_STATIC = {"weights": dict(num_bits=8, type="int", symmetric=True, dynamic=False, strategy="channel"),
                  "input_activations": dict(num_bits=8, type="int", symmetric=True, dynamic=False, strategy="tensor")}
CT_FP8_BLOCK = {"weights": dict(CT_FP8_WEIGHTS, strategy="block", block_structure=[8, 16]),
                "input_activations": dict(CT_FP8_INPUTS, strategy="group", group_size=16)}

# compressed-tensors' int-quantized W8A8 (llm-compressor's W8A8 scheme: RedHatAI's
# "-quantized.w8a8" models): `<linear>.weight` I8 [out, in] with weight_scale [out, 1] (scale = amax /
# 127.5: calculate_qparams' half of the int8 range 127 - -128), and every quantized layer's input
# fake-quantized per token at run time: scale = amax|x| / 127.5, x' = round(clamp(x / scale, -128,
# 127)) * scale (torch.round: half to even).
CT_W8A8 = {"weights": dict(num_bits=8, type="int", symmetric=True, dynamic=False, strategy="channel"),
           "input_activations": dict(num_bits=8, type="int", symmetric=True, dynamic=True, strategy="token")}

CT_W4A16 = {"weights": dict(num_bits=4, type="int", symmetric=True, dynamic=False, strategy="group", group_size=16)}
# compressed-tensors' W8A16 (llm-compressor's W8A16: RedHatAI's "-quantized.w8a16" models): 8-bit
# weights packed four to an int32 (pack-quantized), a scale per group; activations unquantized.
CT_W8A16 = {"weights": dict(num_bits=8, type="int", symmetric=True, dynamic=False, strategy="group", group_size=16)}
CT_W4A16_ASYM = {"weights": dict(num_bits=4, type="int", symmetric=False, dynamic=False, strategy="group",
                                 group_size=16)}

# compressed-tensors' mxfp4-pack-quantized (its MXFP4A16 scheme, llm-compressor's MXFP4 weights):
# `<linear>.weight_packed` U8 [out, in/2] (two E2M1 codes a byte, the first in the low nibble) and
# `<linear>.weight_scale` U8 [out, in/32] of E8M0 exponents (scale 2^(e - 127): compressed-tensors'
# generate_mx_scales from each group's amax); activations unquantized.
CT_MXFP4A16 = {"weights": dict(num_bits=4, type="float", symmetric=True, dynamic=False, strategy="group", group_size=32,
                               scale_dtype="uint8", zp_dtype="uint8")}

# The quantized mixtures of experts' sizes: groups of 8 and words of 8 rows or columns fall whole on
# every slice at Shards 4 in both shardings (expert inner 32: 8 a shard).
QUANT_MOE = dict(hidden_size=64, head_dim=8, num_attention_heads=8, num_key_value_heads=4, intermediate_size=64,
                 moe_intermediate_size=32)


def quant_moe_case(name, note_prefix, dtypes, **fmt):
    """A quantized Qwen3-MoE case: qwen3_moe's at QUANT_MOE's sizes, 8 greedy steps, its format's
    keys (gptq=, awq=, ct=)."""
    return dict(moe_case("qwen3_moe", name, note_prefix, **QUANT_MOE), steps=8, dtypes=dtypes, **fmt)


ISSUE37_CASES = [
    dict(family("fp8_block", "LlamaForCausalLM in fine-grained FP8: q/k/v/o and gate/up/down weights F8_E4M3 "
                "with float32 weight_scale_inv per [8, 16] block (scale = amax / 448), embeddings, norms and "
                "lm_head bf16; quantization_config quant_method fp8, activation_scheme dynamic", **FP8_LLAMA),
         steps=8, dtypes=[("", "bfloat16"), ("_f32", "float32")], quant={"weight_block_size": [8, 16]}),
    # No ragged blocks ([16, 48] over 64 columns): transformers 5.24's Fp8Dequantize takes the
    # block as rows // scale_rows, cols // scale_cols, so it refuses down_proj (128 columns over
    # 3 scale columns) and reads 64 columns over 2 as blocks of 32 (columns 32..47 scaled wrongly).
    #
    # A mixture of experts: MOE_CASES' qwen3_moe (same config, same router tweak) stored as
    # Qwen/Qwen3-30B-A3B-FP8 ships: per-expert mlp.experts.E.{gate,up,down}_proj.weight F8_E4M3
    # with their weight_scale_inv, q/k/v/o and the dense layer's gate/up/down too; the routers
    # (mlp.gate, not an nn.Linear in transformers: never converted), embeddings, norms and
    # lm_head f32; modules_to_not_convert lm_head and each router. transformers 5.24 dequantizes
    # each expert's (q, scale) before fusing them into experts.gate_up_proj [E, 2I, H] and
    # experts.down_proj [E, H, I]. Blocks [2, 2]: the dense layer's inner 24 gives 6 rows of
    # gate/up and 6 columns of down at Shards 4, so no block wider or taller than 2 falls on
    # every slice; with it, q (8 rows), k/v (4), o_proj (8 columns), each expert's gate/up
    # (4 rows) and down (4 columns) under tensor sharding, and whole experts under expert
    # sharding, all fall on block boundaries at Shards 2 and 4.
    dict(moe_case("qwen3_moe", "fp8_qwen3_moe", "Qwen3MoeForCausalLM in fine-grained FP8 as Qwen3-30B-A3B-FP8 "
                  "ships it: per-expert experts.E.gate_proj/up_proj/down_proj, q/k/v/o and the dense layer 1's "
                  "gate/up/down weights F8_E4M3 with float32 weight_scale_inv per [2, 2] block (scale = amax / 448); "
                  "routers (mlp.gate), embeddings, norms and lm_head unquantized; modules_to_not_convert lm_head and "
                  "the routers. Otherwise qwen3_moe: "),
         steps=STEPS, dtypes=[("_f32", "float32")], quant={"weight_block_size": [2, 2]}),
    # compressed-tensors' FP8 as llm-compressor writes it (RedHatAI's "-FP8-dynamic" and "-FP8-block"
    # models): see CT_FP8_DYNAMIC and ct_quantize below. Its references fake-quantize every
    # quantized layer's input activations at run time as compressed-tensors does.
    dict(family("ct_fp8_dynamic", "LlamaForCausalLM in compressed-tensors FP8 (float-quantized, llm-compressor's "
                "FP8_DYNAMIC): q/k/v/o and gate/up/down weights F8_E4M3 with float32 weight_scale [out, 1] per "
                "output channel (scale = amax / 448); every quantized layer's input activations fake-quantized "
                "to E4M3 per token at run time (scale = amax / 448 over the token's inputs); embeddings, norms "
                "and lm_head (ignored) f32", **FP8_LLAMA),
         steps=8, dtypes=[("_f32", "float32")], ct=CT_FP8_DYNAMIC),
    dict(family("ct_fp8_block", "LlamaForCausalLM in compressed-tensors FP8 (float-quantized, llm-compressor's "
                "FP8_BLOCK with blocks [8, 16] and groups of 16): q/k/v/o and gate/up/down weights F8_E4M3 with "
                "float32 weight_scale per [8, 16] block (scale = amax / 448); every quantized layer's input "
                "activations fake-quantized to E4M3 per token and group of 16 columns at run time (scale = "
                "amax / 448 over the group); embeddings, norms and lm_head (ignored) f32", **FP8_LLAMA),
         steps=8, dtypes=[("_f32", "float32")], ct=CT_FP8_BLOCK),
    # compressed-tensors' pack-quantized W4A16 (llm-compressor's W4A16 and W4A16_ASYM schemes, the
    # format of its GPTQ and AWQ outputs): 4-bit weights in groups of 16 columns, a f32 scale per
    # group (and an int4 zero point, asymmetric); activations unquantized.
    dict(family("ct_w4a16", "LlamaForCausalLM in compressed-tensors W4A16 (pack-quantized, symmetric): q/k/v/o "
                "and gate/up/down weights 4-bit integers packed eight to an int32 (weight_packed), float32 "
                "weight_scale per group of 16 columns (min-max: scale = amax / 7.5 ...); embeddings, norms and "
                "lm_head (ignored) f32", **FP8_LLAMA),
         steps=8, dtypes=[("_f32", "float32")], ct=CT_W4A16),
    dict(family("ct_w4a16_asym", "LlamaForCausalLM in compressed-tensors W4A16_ASYM (pack-quantized, asymmetric): "
                "q/k/v/o and gate/up/down weights 4-bit integers packed eight to an int32 (weight_packed), float32 "
                "weight_scale and a 4-bit weight_zero_point (packed eight rows to an int32) per group of 16 "
                "columns; embeddings, norms and lm_head (ignored) f32", **FP8_LLAMA),
         steps=8, dtypes=[("_f32", "float32")], ct=CT_W4A16_ASYM),
    # GPTQ (quant_method gptq, checkpoint_format "gptq": AutoGPTQ's and GPTQModel's layout) written
    # here by round to nearest (no calibration) in that layout; see gptq_rewrite. Its reference is
    # transformers 5.24's f32 model with each layer's weight dequantized as gptqmodel 7.7.0 does
    # (checked against transformers + gptqmodel by tools/golden/check_gptq.py).
    dict(family("gptq", "LlamaForCausalLM in GPTQ (4 bits, groups of 16, sym, desc_act false, checkpoint_format "
                "gptq): q/k/v/o and gate/up/down as qweight (I32 [in/8, out]), qzeros (I32 [groups, out/8], "
                "zero - 1), scales (F16 [groups, out]), g_idx (I32 [in]); round to nearest; embeddings, norms and "
                "lm_head f16", **FP8_LLAMA),
         steps=8, dtypes=[("_f16", "float16")], gptq=dict(group=16, sym=True)),
    dict(family("gptq_asym", "LlamaForCausalLM in GPTQ (4 bits, groups of 16, sym false: a zero point per "
                "group, desc_act false, checkpoint_format gptq); otherwise as gptq", **FP8_LLAMA),
         steps=8, dtypes=[("_f16", "float16")], gptq=dict(group=16, sym=False)),
    dict(family("ct_w8a8", "LlamaForCausalLM in compressed-tensors W8A8 (int-quantized, llm-compressor's W8A8): "
                "q/k/v/o and gate/up/down weights int8 with float32 weight_scale [out, 1] per output channel "
                "(scale = amax / 127.5); every quantized layer's input activations fake-quantized to int8 per "
                "token at run time (scale = amax / 127.5 over the token's inputs, round half to even, clamp to "
                "[-128, 127]); embeddings, norms and lm_head (ignored) f32", **FP8_LLAMA),
         steps=8, dtypes=[("_f32", "float32")], ct=CT_W8A8),
    # AWQ (quant_method awq, version gemm: AutoAWQ's layout) written here by round to nearest with
    # zero points (AutoAWQ's pseudo_quantize grid, no activation-aware search); see awq_rewrite.
    # Hidden 128 so that groups of 32 fall whole on o_proj's columns at Shards 4. Reference as
    # GPTQ's (checked by tools/golden/check_gptq.py against transformers + gptqmodel).
    dict(family("awq", "LlamaForCausalLM in AWQ (gemm, 4 bits, groups of 32, zero points): q/k/v/o and "
                "gate/up/down as qweight (I32 [in, out/8], nibbles interleaved [0,2,4,6,1,3,5,7]), qzeros (I32 "
                "[groups, out/8], the same order), scales (F16 [groups, out]); round to nearest; embeddings, norms "
                "and lm_head f16", **dict(FP8_LLAMA, hidden_size=128, intermediate_size=256)),
         steps=8, dtypes=[("_f16", "float16")], awq=dict(group=32)),
    # MXFP4 (the format gpt-oss ships its experts in) on a dense Llama, as compressed-tensors writes
    # it; hidden 128 so that blocks of 32 fall whole on o_proj's and down_proj's columns at Shards 4.
    dict(family("ct_mxfp4", "LlamaForCausalLM in compressed-tensors MXFP4A16 (mxfp4-pack-quantized): q/k/v/o and "
                "gate/up/down weights E2M1 packed two to a byte (weight_packed U8 [out, in/2]) with an E8M0 "
                "weight_scale (U8 [out, in/32], 2^(e - 127)) per block of 32 columns; embeddings, norms and lm_head "
                "(ignored) f32", **dict(FP8_LLAMA, hidden_size=128, intermediate_size=256)),
         steps=8, dtypes=[("_f32", "float32")], ct=CT_MXFP4A16),
    # GPTQ and AWQ mixtures of experts as their Qwen3-MoE checkpoints ship (Qwen/Qwen3-30B-A3B-GPTQ-Int4,
    # the -AWQ ones): each expert's gate/up/down a quantized module of its own. Sizes chosen so that
    # groups of 8 and words of 8 rows or columns fall whole on every slice at Shards 4 in both
    # shardings (expert inner 32: 8 a shard).
    quant_moe_case("gptq_qwen3_moe", "Qwen3MoeForCausalLM in GPTQ (4 bits, groups of 8, sym, desc_act "
                  "false, checkpoint_format gptq) with per-expert experts.E.gate_proj/up_proj/down_proj, q/k/v/o and "
                  "the dense layer 1's gate/up/down as qweight/qzeros/scales/g_idx; routers (mlp.gate), embeddings, "
                  "norms and lm_head f16; hidden 64, 8 heads of 8 over 4 KV heads, intermediate 64, experts' inner "
                  "32. Otherwise qwen3_moe: ",
                   [("_f16", "float16")], gptq=dict(group=8, sym=True)),
    dict(moe_case("qwen3_moe", "awq_qwen3_moe", "Qwen3MoeForCausalLM in AWQ (gemm, 4 bits, groups of 8, zero "
                  "points) with per-expert experts.E.gate_proj/up_proj/down_proj, q/k/v/o and the dense layer 1's "
                  "gate/up/down as qweight/qzeros/scales; routers (mlp.gate), embeddings, norms and lm_head f16; "
                  "hidden 64, 8 heads of 8 over 4 KV heads, intermediate 64, experts' inner 32. Otherwise "
                  "qwen3_moe: ", hidden_size=64, head_dim=8, num_attention_heads=8, num_key_value_heads=4,
                  intermediate_size=64, moe_intermediate_size=32),
         steps=8, dtypes=[("_f16", "float16")], awq=dict(group=8)),
    # compressed-tensors W4A16 and MXFP4 mixtures of experts as llm-compressor writes them
    # (RedHatAI's Qwen3-30B-A3B-quantized.w4a16): each expert's gate/up/down a quantized layer
    # (weight_packed, weight_scale), the routers not.
    quant_moe_case("ct_w4a16_qwen3_moe", "Qwen3MoeForCausalLM in compressed-tensors W4A16 "
                  "(pack-quantized, symmetric, groups of 8) with per-expert experts.E.gate_proj/up_proj/down_proj, "
                  "q/k/v/o and the dense layer 1's gate/up/down as weight_packed/weight_scale/weight_shape; routers, "
                  "embeddings, norms and lm_head f32; hidden 64, 8 heads of 8 over 4 KV heads, intermediate 64, "
                  "experts' inner 32. Otherwise qwen3_moe: ",
                   [("_f32", "float32")], ct=dict(CT_W4A16, weights=dict(CT_W4A16["weights"], group_size=8))),
    dict(moe_case("qwen3_moe", "ct_mxfp4_qwen3_moe", "Qwen3MoeForCausalLM in compressed-tensors MXFP4A16 "
                  "(mxfp4-pack-quantized) with per-expert experts.E.gate_proj/up_proj/down_proj, q/k/v/o and the "
                  "dense layer 1's gate/up/down as weight_packed/weight_scale; routers, embeddings, norms and lm_head "
                  "f32; hidden 128, 8 heads of 16 over 4 KV heads, intermediate 128, experts' inner 128 (blocks of 32 "
                  "whole at Shards 4). Otherwise qwen3_moe: ", hidden_size=128, head_dim=16, num_attention_heads=8,
                  num_key_value_heads=4, intermediate_size=128, moe_intermediate_size=128),
         steps=8, dtypes=[("_f32", "float32")], ct=CT_MXFP4A16),
    dict(family("ct_w8a16", "LlamaForCausalLM in compressed-tensors W8A16 (pack-quantized, symmetric): q/k/v/o "
                "and gate/up/down weights 8-bit integers packed four to an int32 (weight_packed, each +128), float32 "
                "weight_scale per group of 16 columns; embeddings, norms and lm_head (ignored) f32", **FP8_LLAMA),
         steps=8, dtypes=[("_f32", "float32")], ct=CT_W8A16),
    # GPTQ 8 bits (Qwen's -GPTQ-Int8 models): four values a word, symmetric (zero 128).
    dict(family("gptq_int8", "LlamaForCausalLM in GPTQ (8 bits, groups of 16, sym, desc_act false, "
                "checkpoint_format gptq): q/k/v/o and gate/up/down as qweight (I32 [in/4, out]), qzeros (I32 "
                "[groups, out/4], zero - 1), scales (F16 [groups, out]), g_idx (I32 [in]); round to nearest; "
                "embeddings, norms and lm_head f16", **FP8_LLAMA),
         steps=8, dtypes=[("_f16", "float16")], gptq=dict(group=16, sym=True, bits=8)),
    # Generation past the boundaries on a quantized model: a sliding window with yarn RoPE at
    # positions past original_max_position_embeddings (Qwen3), and Phi-3's longrope crossing
    # original_max_position_embeddings during decode (its fused qkv_proj and gate_up_proj quantized
    # whole), both in compressed-tensors W4A16. Sizes so that groups of 16 fall whole at Shards 4.
    dict(family("ct_w4a16_qwen3", "Qwen3ForCausalLM in compressed-tensors W4A16 (pack-quantized, symmetric, groups "
                "of 16): q_norm/k_norm per head, head_dim 8, sliding window 4 on layer 1, yarn RoPE factor 4 over "
                "original 16, positions up to 31; hidden 64, 8 heads over 4 KV heads, intermediate 128",
                inputs=LONG, architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=8, hidden_size=64,
                intermediate_size=128, num_attention_heads=8, num_key_value_heads=4, use_sliding_window=True,
                sliding_window=4, max_window_layers=1, rope_theta=1000000.0,
                rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
                attention_bias=False),
         steps=8, dtypes=[("_f32", "float32")], ct=CT_W4A16),
    dict(family("ct_w4a16_phi3_longrope", "Phi3ForCausalLM in compressed-tensors W4A16 (pack-quantized, symmetric, "
                "groups of 16; the fused qkv_proj and gate_up_proj quantized whole), longrope over original 16: a "
                "10-token prompt and 16 greedy steps, so the sequence reaches 17 tokens at step 7, where "
                "transformers' generate drops its cache and recomputes every key with the long factors; hidden 64, "
                "8 heads, intermediate 128",
                inputs={"S": 12, "runs": [(5, 0), (7, 0), (4, 0), (6, 3)], "S0": 10},
                **dict(PHI3_LONGROPE, hidden_size=64, intermediate_size=128, num_attention_heads=8,
                       num_key_value_heads=8)),
         steps=16, dtypes=[("_f32", "float32")], ct=CT_W4A16),
    # GPTQ's desc_act ("act-order"): GPTQ quantizes a layer's input columns in the order of its
    # Hessian's diagonal, so each group holds columns from anywhere in the row and g_idx names each
    # column's group. Here the order is a seeded permutation per layer input (q/k/v share one, as
    # do gate/up: GPTQ gives layers with one input one Hessian), asymmetric so that every group has
    # its own zero point.
    dict(family("gptq_desc_act", "LlamaForCausalLM in GPTQ (4 bits, groups of 16, sym false, desc_act true, "
                "checkpoint_format gptq): each layer's input columns quantized in groups of 16 taken in a seeded "
                "random order (one order for q/k/v, one for gate/up, one each for o and down), g_idx [in] naming "
                "each column's group; otherwise as gptq_asym", **FP8_LLAMA),
         steps=8, dtypes=[("_f16", "float16")], gptq=dict(group=16, sym=False, desc_act=True)),
    # compressed-tensors' actorder "group" (llm-compressor's GPTQModifier with actorder="group",
    # RedHatAI's w4a16 models of 2024-2025): the same act-order groups, weight_g_idx naming each
    # column's group. compressed-tensors 0.20.1 no longer reads it (see CT_ACTORDER_REFERENCE), so
    # the checkpoint is written here with its quantizer and packer: ct_actorder_rewrite.
    dict(family("ct_w4a16_actorder", "LlamaForCausalLM in compressed-tensors W4A16 with actorder \"group\" "
                "(pack-quantized, symmetric, groups of 16): each layer's input columns quantized in groups of 16 "
                "taken in a seeded random order (one for q/k/v, one for gate/up, one each for o and down), "
                "weight_g_idx I32 [in] naming each column's group; embeddings, norms and lm_head (ignored) f32",
                **FP8_LLAMA),
         steps=8, dtypes=[("_f32", "float32")], ct_actorder=dict(group=16)),
    dict(family("gptq_int8_desc_act", "LlamaForCausalLM in GPTQ (8 bits, groups of 16, sym, desc_act true, "
                "checkpoint_format gptq): as gptq_int8 with gptq_desc_act's act order", **FP8_LLAMA),
         steps=8, dtypes=[("_f16", "float16")], gptq=dict(group=16, sym=True, bits=8, desc_act=True)),
    # compressed-tensors' config groups, each for its targets ("mixed-precision" where their formats
    # differ): every Linear in W4A16 but the attention's, which a re: target puts in FP8 dynamic
    # (compressed-tensors takes a module's most specific target: a pattern before the class Linear).
    dict(family("ct_mixed", "LlamaForCausalLM in compressed-tensors mixed-precision: group_0 targets Linear in W4A16 "
                "(pack-quantized, symmetric, groups of 16), group_1 targets re:.*self_attn\\..* in FP8 dynamic "
                "(float-quantized, channel weights, activations per token), so q/k/v/o take group_1 and gate/up/down "
                "group_0; lm_head ignored", **FP8_LLAMA),
         steps=8, dtypes=[("_f32", "float32")],
         ct={"groups": [dict(CT_W4A16, targets=["Linear"]), dict(CT_FP8_DYNAMIC, targets=[r"re:.*self_attn\..*"])]}),
    dict(family("ct_fp8_static", "LlamaForCausalLM in compressed-tensors FP8 (float-quantized, llm-compressor's FP8 "
                "scheme): q/k/v/o and gate/up/down weights F8_E4M3 with one float32 weight_scale [1] per tensor "
                "(amax / 448), and every quantized layer's input rounded to E4M3 with its static float32 input_scale "
                "[1] (static min-max over 4 random calibration sequences of 12 tokens: inputs beyond it clamp at "
                "448); embeddings, norms and lm_head (ignored) f32", **FP8_LLAMA),
         steps=8, dtypes=[("_f32", "float32")], ct=CT_FP8_STATIC),
    dict(family("ct_w8a8_static", "LlamaForCausalLM in compressed-tensors W8A8 with static activations "
                "(int-quantized): q/k/v/o and gate/up/down weights I8 with float32 weight_scale [out, 1] per "
                "channel, every quantized layer's input rounded to int8 with its static float32 input_scale [1] "
                "(static min-max / 127.5 over 4 random calibration sequences of 12 tokens; inputs beyond it clamp "
                "at -128 and 127); embeddings, norms and lm_head (ignored) f32", **FP8_LLAMA),
         steps=8, dtypes=[("_f32", "float32")], ct=CT_W8A8_STATIC),
    # compressed-tensors FP8 dynamic in a mixture of experts (RedHatAI's Qwen3-30B-A3B-FP8-dynamic):
    # every expert's gate/up/down rounds its input per token as a Linear does. transformers 5.24
    # fuses the experts into parameters, which compressed-tensors' hooks do not reach, so the
    # reference rounds them in ct_moe_rounding (compressed-tensors' forward on each expert's rows).
    quant_moe_case("ct_fp8_dynamic_qwen3_moe", "Qwen3MoeForCausalLM in compressed-tensors FP8 dynamic "
                  "(float-quantized, weights per channel, activations per token) with per-expert "
                  "experts.E.gate_proj/up_proj/down_proj, q/k/v/o and the dense layer 1's gate/up/down; routers, "
                  "embeddings, norms and lm_head f32; hidden 64, 8 heads of 8 over 4 KV heads, intermediate 64, "
                  "experts' inner 32. Otherwise qwen3_moe: ",
                   [("_f32", "float32")], ct=CT_FP8_DYNAMIC),
]

# --------------------------------------------------------------------------------------
# Issue 38: DeepSeek's experts. GLM-4.5 (Glm4MoeForCausalLM): sigmoid routing with
# e_score_correction_bias (drawn N(0, 0.1) here: transformers initializes it to zeros, which
# would leave the bias untested), group-limited choice, shared experts, first dense layers,
# partial rotary 0.5. Hidden 32, 8 q heads of 8 over 4 KV heads, 8 experts of inner 16: every
# count splits at Shards 2 and 4 in both shardings. Seeds 7000 + index; written with
# `make_golden.py --only NAME …` like issue 34's cases.
# --------------------------------------------------------------------------------------

# 128 positions: greedy runs of 48 steps from 24-token prompts (longer than a page of 16).
GLM4_MOE = dict(MOE_BASE, max_position_embeddings=128, architectures=["Glm4MoeForCausalLM"], model_type="glm4_moe", head_dim=8,
                n_routed_experts=8, moe_intermediate_size=16, num_nextn_predict_layers=0, rope_theta=10000.0)

GLM4_MOE_NOTE = ("Glm4MoeForCausalLM: 3 layers, layer 0 dense (first_k_dense_replace 1, intermediate 24), layers 1-2 "
                 "of 8 experts (inner 16) top-3 among n_group 4 groups of 2 (topk_group 2: each group scored by its "
                 "two best sigmoid + bias), norm_topk_prob, routed_scaling_factor 2.5, one shared expert, q/k norms "
                 "per head (use_qk_norm), q/k/v biases (attention_bias; o_proj none), head_dim 8 with half rotated "
                 "(partial_rotary_factor 0.5)")
GLM4_MOE_GROUPED = dict(GLM4_MOE, num_hidden_layers=3, intermediate_size=24, first_k_dense_replace=1,
                        num_experts_per_tok=3, n_group=4, topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5,
                        n_shared_experts=1, use_qk_norm=True, attention_bias=True)

DEEPSEEK_V3 = dict(MOE_BASE, max_position_embeddings=128, architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", num_attention_heads=8,
                   num_key_value_heads=8, q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4,
                   v_head_dim=6, n_routed_experts=8, moe_intermediate_size=16, num_nextn_predict_layers=0,
                   rope_theta=10000.0, num_hidden_layers=3, intermediate_size=24, first_k_dense_replace=1,
                   num_experts_per_tok=3, n_group=4, topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5,
                   n_shared_experts=1, attention_bias=False, rope_interleave=True,
                   rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                                 "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1})
DEEPSEEK_V3_NOTE = ("DeepseekV3ForCausalLM: multi-head latent attention (8 heads, q_lora_rank 24, kv_lora_rank 16, "
                    "qk_nope 8 + qk_rope 4, v_head_dim 6, rope_interleave), yarn RoPE factor 4 over original 16 with "
                    "mscale = mscale_all_dim = 1 (softmax scale x mscale^2); 24-token prompts (a page is 16), 48 greedy steps (positions up to 71); 3 layers, layer 0 "
                    "dense (intermediate 24), layers 1-2 of 8 experts (inner 16) top-3 among n_group 4 groups of 2 "
                    "(topk_group 2), norm_topk_prob, routed_scaling_factor 2.5, one shared expert")
DEEPSEEK_V3_NOLORA = dict(DEEPSEEK_V3, q_lora_rank=None, rope_interleave=False, num_hidden_layers=2,
                          first_k_dense_replace=0, num_experts_per_tok=2, n_group=1, topk_group=1,
                          norm_topk_prob=False, routed_scaling_factor=1.0, n_shared_experts=2, attention_bias=True,
                          rope_scaling=None)

DEEPSEEK_V2 = dict(MOE_BASE, max_position_embeddings=128, architectures=["DeepseekV2ForCausalLM"], model_type="deepseek_v2", num_attention_heads=8,
                   num_key_value_heads=8, q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4,
                   v_head_dim=6, n_routed_experts=8, moe_intermediate_size=16, rope_theta=10000.0,
                   num_hidden_layers=3, intermediate_size=24, first_k_dense_replace=1, num_experts_per_tok=3,
                   topk_method="group_limited_greedy", n_group=4, topk_group=2, norm_topk_prob=False,
                   routed_scaling_factor=2.0, n_shared_experts=2, attention_bias=False)
DEEPSEEK_V2_NOTE = ("DeepseekV2ForCausalLM: multi-head latent attention (8 heads, q_lora_rank 24, kv_lora_rank 16, "
                    "qk_nope 8 + qk_rope 4, v_head_dim 6; complex rotation of pairs); 3 layers, layer 0 dense "
                    "(intermediate 24), layers 1-2 of 8 experts (inner 16): softmax router, top-3 by "
                    "group_limited_greedy among n_group 4 groups of 2 (topk_group 2, each group scored by its best), "
                    "routed_scaling_factor 2, two shared experts")
DEEPSEEK_V2_LITE = dict(DEEPSEEK_V2, q_lora_rank=None, num_hidden_layers=2, first_k_dense_replace=0,
                        num_experts_per_tok=2, topk_method="greedy", n_group=None, topk_group=None,
                        routed_scaling_factor=1.0, n_shared_experts=1,
                        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                                      "mscale": 0.707, "mscale_all_dim": 0.707, "beta_fast": 32, "beta_slow": 1})

MISTRAL4 = dict(MOE_BASE, max_position_embeddings=128, architectures=["Mistral4ForCausalLM"], model_type="mistral4",
                num_attention_heads=8, num_key_value_heads=8, q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8,
                qk_rope_head_dim=4, v_head_dim=6, n_routed_experts=8, moe_intermediate_size=16, num_hidden_layers=3,
                intermediate_size=24, first_k_dense_replace=1, num_experts_per_tok=2, n_group=1, topk_group=1,
                norm_topk_prob=True, routed_scaling_factor=1.5, n_shared_experts=1, attention_bias=False,
                rope_interleave=True,
                rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                 "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0,
                                 "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1,
                                 "partial_rotary_factor": 4 / 12})
MISTRAL4_NOTE = ("Mistral4ForCausalLM: latent attention (8 heads, q_lora_rank 24, kv_lora_rank 16, qk_nope 8 + "
                 "qk_rope 4, v_head_dim 6, rope_interleave), yarn factor 4 over 16 with mscale = mscale_all_dim = 1, "
                 "Llama 4's query scaling (llama_4_scaling_beta 0.1 over 16 positions); 3 layers, layer 0 dense, "
                 "8 experts top-2 by the softmax in the model's dtype, renormalised, scale 1.5, one shared expert; "
                 "24-token prompts, 48 greedy steps")
MISTRAL4_GROUPS = dict(MISTRAL4, q_lora_rank=None, rope_interleave=False, num_hidden_layers=2, first_k_dense_replace=0,
                       num_experts_per_tok=3, n_group=4, topk_group=2, attention_bias=True,
                       rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0,
                                        "original_max_position_embeddings": 8, "beta_fast": 32.0, "beta_slow": 1.0,
                                        "llama_4_scaling_beta": 0.2, "partial_rotary_factor": 4 / 12})

ISSUE38_CASES = [
    dict(family("glm4_moe", GLM4_MOE_NOTE, inputs=LONG, **GLM4_MOE_GROUPED),
         router=None, router_bias=True, steps=48, dtypes=[("", "float32"), ("_bf16", "bfloat16")]),
    dict(family("glm4_moe_shared2", "Glm4MoeForCausalLM: 2 layers, both of 8 experts (first_k_dense_replace 0), "
                "top-2 of all (n_group 1), no renormalising (norm_topk_prob false), routed_scaling_factor 1, two "
                "shared experts (inner 32), no q/k norms, no biases",
                **dict(GLM4_MOE, num_hidden_layers=2, first_k_dense_replace=0, num_experts_per_tok=2, n_group=1,
                       topk_group=1, norm_topk_prob=False, routed_scaling_factor=1.0, n_shared_experts=2,
                       use_qk_norm=False, attention_bias=False), inputs=LONG),
         router=None, router_bias=True, steps=48, dtypes=[("", "float32"), ("_bf16", "bfloat16")]),
    # The glm4_moe case in fine-grained FP8 as GLM-4.5-FP8 and DeepSeek-V3 ship their weights: every
    # decoder nn.Linear (q/k/v/o, the dense layer's and the shared experts' gate/up/down) and each
    # routed expert's gate/up/down F8_E4M3 with a float32 weight_scale_inv per [2, 2] block; the
    # routers (mlp.gate, not an nn.Linear) and e_score_correction_bias, embeddings, norms and
    # lm_head f32. Blocks of 2 fall on every slice at Shards 2 and 4 (the dense inner 24: 6 rows).
    dict(family("fp8_glm4_moe", "Glm4MoeForCausalLM in fine-grained FP8 ([2, 2] blocks; routers, biases, "
                "embeddings, norms and lm_head unquantized). Otherwise glm4_moe: " + GLM4_MOE_NOTE, inputs=LONG,
                **GLM4_MOE_GROUPED),
         router=None, router_bias=True, steps=48, dtypes=[("_f32", "float32")], quant={"weight_block_size": [2, 2]}),
    dict(family("deepseek_v3", DEEPSEEK_V3_NOTE, inputs=LONG, **DEEPSEEK_V3),
         router=None, router_bias=True, steps=48, dtypes=[("", "float32"), ("_bf16", "bfloat16")]),
    dict(family("deepseek_v3_nolora", "DeepseekV3ForCausalLM: q_proj (q_lora_rank null), rotary halves "
                "(rope_interleave false), default RoPE, q_a/kv_a/o biases (attention_bias); 2 layers of 8 experts "
                "(first_k_dense_replace 0), top-2 of all, no renormalising, two shared experts; otherwise deepseek_v3's "
                "latent sizes", inputs=LONG, **DEEPSEEK_V3_NOLORA),
         router=None, router_bias=True, steps=48, dtypes=[("", "float32"), ("_bf16", "bfloat16")]),
    dict(family("deepseek_v2", DEEPSEEK_V2_NOTE, inputs=LONG, **DEEPSEEK_V2),
         router=None, router_bias=False, steps=48, dtypes=[("", "float32"), ("_bf16", "bfloat16")]),
    dict(family("deepseek_v2_lite", "DeepseekV2ForCausalLM as V2-Lite: q_proj (q_lora_rank null), greedy top-2 of "
                "the softmax over 8 experts, one shared expert, 2 layers of experts, yarn RoPE factor 4 over original 16 "
                "with mscale = mscale_all_dim = 0.707, positions up to 71; otherwise deepseek_v2's sizes",
                inputs=LONG, **DEEPSEEK_V2_LITE),
         router=None, router_bias=False, steps=48, dtypes=[("", "float32"), ("_bf16", "bfloat16")]),
    # The deepseek_v3 case in fine-grained FP8 as DeepSeek-V3 ships it: every nn.Linear of the
    # decoder (q_a/q_b, kv_a_proj_with_mqa, kv_b_proj, o_proj, the dense MLP, shared and routed
    # experts) F8_E4M3 with a float32 weight_scale_inv per [2, 2] block.
    dict(family("fp8_deepseek_v3", "DeepseekV3ForCausalLM in fine-grained FP8 ([2, 2] blocks; routers, "
                "e_score_correction_bias, embeddings, norms and lm_head unquantized). Otherwise deepseek_v3: "
                + DEEPSEEK_V3_NOTE, inputs=LONG, **DEEPSEEK_V3),
         router=None, router_bias=True, steps=48, dtypes=[("_f32", "float32")], quant={"weight_block_size": [2, 2]}),
    # Routers N(0, 1): Mistral 4's router rounds its logits and probabilities to the model's
    # dtype, so bf16 probabilities closer than bf16's step tie, and which of two tied experts
    # transformers takes depends on its bf16 activations' last bits — spread the probabilities
    # so that no choice in the run is that close.
    dict(family("mistral4", MISTRAL4_NOTE, inputs=LONG, **MISTRAL4),
         router=None, router_bias=False, router_std=1.0, min_greedy_gap=2e-3, steps=48,
         dtypes=[("", "float32"), ("_bf16", "bfloat16")]),
    dict(family("mistral4_groups", "Mistral4ForCausalLM: q_proj (q_lora_rank null), rotary halves, yarn factor 2 "
                "over 8 (mscale defaults), query scaling 0.2 over 8 positions, q_a/kv_a/o biases; 2 layers of 8 experts top-3 among n_group 4 "
                "groups of 2 (topk_group 2, groups scored by their two best probabilities, the others 0)",
                inputs=LONG, **MISTRAL4_GROUPS),
         router=None, router_bias=False, steps=48, dtypes=[("", "float32")]),
    # Mistral Small 4 as it ships: Mistral 3's multimodal wrapper (Mistral3ForConditionalGeneration)
    # around the mistral4 text model, its tensors saved under language_model.model.* beside a
    # (tiny) pixtral vision tower and projector; the wrapper's tie_word_embeddings (default true)
    # is the one transformers applies, so lm_head is the embedding here.
    dict({"name": "mistral3_mistral4", "inputs": LONG,
          "note": "Mistral3ForConditionalGeneration around mistral4's text model (mistral4_groups' sizes with "
                  "q_lora_rank 24, one dense layer), tied lm_head by the wrapper's default, a one-layer pixtral vision "
                  "tower and projector in the checkpoint (not run: text only)",
          "config": {"model_type": "mistral3", "architectures": ["Mistral3ForConditionalGeneration"],
                     "text_config": {k: v for k, v in dict(MISTRAL4_GROUPS, q_lora_rank=24, num_hidden_layers=3,
                                                          first_k_dense_replace=1).items()
                                     if k != "architectures" and k != "tie_word_embeddings"},
                     "vision_config": {"model_type": "pixtral", "hidden_size": 16, "intermediate_size": 32,
                                       "num_hidden_layers": 1, "num_attention_heads": 2, "head_dim": 8,
                                       "image_size": 32, "patch_size": 16},
                     "spatial_merge_size": 2}},
         router=None, router_bias=False, steps=48, dtypes=[("", "float32")]),
]


GPT_OSS = dict(MOE_BASE, architectures=["GptOssForCausalLM"], model_type="gpt_oss", num_attention_heads=8,
               num_key_value_heads=4, head_dim=8, intermediate_size=16, num_local_experts=8, num_experts_per_tok=2,
               num_hidden_layers=3, sliding_window=4, max_position_embeddings=128, attention_bias=True,
               swiglu_alpha=1.702, swiglu_limit=0.4, rms_norm_eps=1e-05,
               layer_types=["sliding_attention", "full_attention", "sliding_attention"],
               rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0,
                                "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0,
                                "truncate": False})
GPT_OSS_NOTE = ("GptOssForCausalLM: 8 heads over 4 KV heads of 8, q/k/v/o biases, a sink logit per head N(0, 1), "
                "layers sliding (window 4), full, sliding; yarn RoPE ×4 over 16 (truncate false, θ 150000); every "
                "layer 8 experts top-2 (router with its bias; softmax over the chosen logits), gate_up interleaved "
                "with biases, the clamped SwiGLU at limit 0.4 (the clamp bites on both sides), down with biases; "
                "24-token prompts, 48 greedy steps")

GPT_OSS_MXFP4 = dict(GPT_OSS, intermediate_size=128)

ISSUE39_CASES = [
    # Routers N(0, 1) and inputs drawn until every greedy step's top-two gap is ≥ 2e-3 (as
    # mistral4's): transformers takes the top-k of bf16 logits computed from bf16 activations,
    # so logits closer than bf16's step choose by its activations' last bits.
    dict(family("gpt_oss", GPT_OSS_NOTE, inputs=LONG, **GPT_OSS),
         router=None, router_std=1.0, min_greedy_gap=2e-3, steps=48,
         dtypes=[("", "float32"), ("_bf16", "bfloat16")]),
    # gpt-oss as it ships: its experts in MXFP4 (…_blocks, …_scales; quant_method mxfp4), the
    # rest as stored. Inner 128: down's 128 inputs are 4 blocks of 32, one a shard at Shards 4.
    dict(family("mxfp4_gpt_oss", "GptOssForCausalLM with its experts in MXFP4 as gpt-oss ships them "
                "(gate_up_proj_blocks U8 [E, 2I, H/32, 16], gate_up_proj_scales U8 [E, 2I, H/32], down alike; "
                "quant_method mxfp4, modules_to_not_convert as gpt-oss-20b's); inner 128; otherwise gpt_oss. "
                + GPT_OSS_NOTE, inputs=LONG, **GPT_OSS_MXFP4),
         router=None, router_std=1.0, min_greedy_gap=2e-3, steps=48, gpt_oss_mxfp4=True,
         dtypes=[("_f32", "float32")]),
]


# --------------------------------------------------------------------------------------
# Issue 40: Qwen3.5's text model — Gated DeltaNet (linear attention) layers beside gated full
# attention. Prompts past two of transformers' chunks of 64 (its chunked rule runs prompts, the
# recurrent one decoded tokens; linnet runs the recurrent form for both), 96 greedy steps.
# Linear key heads 4 < value heads 8 split over Shards 2 and 4; attention 8 heads over 4 KV heads
# of 16, rotary 4 (partial_rotary_factor 0.25). Seeds 9000 + index.
# --------------------------------------------------------------------------------------

LONG_CHUNKS = {"S": 140, "runs": [(70, 0), (100, 0), (5, 0), (30, 10)], "S0": 130}
QWEN3_5 = dict(FAMILY_BASE, architectures=["Qwen3_5ForCausalLM"], model_type="qwen3_5_text", num_hidden_layers=4,
               num_attention_heads=8, num_key_value_heads=4, head_dim=16, max_position_embeddings=256,
               linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=8, linear_value_head_dim=8,
               linear_conv_kernel_dim=4, attention_bias=False,
               layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
               rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                "mrope_section": [1, 1, 0], "mrope_interleaved": True})
QWEN3_5_NOTE = ("Qwen3_5ForCausalLM (qwen3_5_text): layers linear, full, linear, linear; Gated DeltaNet of 4 key heads "
                "(dk 8) over 8 value heads (dv 8), conv kernel 4; gated attention (q_proj per head [q | gate]) of 8 "
                "heads over 4 KV heads of 16, q/k norms (1 + w), partial rotary 0.25 (4 dims); RMSNorms (1 + w), the "
                "gated norm plain; 140-token forward rows, packed runs of 70 and 100 (past transformers' chunks of "
                "64), a 130-token prompt, 96 greedy steps")

QWEN3_5_MOE = dict({k: v for k, v in QWEN3_5.items() if k != "intermediate_size"},
                   architectures=["Qwen3_5MoeForCausalLM"], model_type="qwen3_5_moe_text", num_experts=8,
                   num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=24)
QWEN3_5_MOE_NOTE = ("Qwen3_5MoeForCausalLM (qwen3_5_moe_text): qwen3_5's layers with every MLP a mixture of 8 experts "
                    "(inner 16) top-2, renormalised, routers N(0, 1), and a shared expert (inner 24) scaled by "
                    "sigmoid(shared_expert_gate(x)); " + QWEN3_5_NOTE.split(": ", 1)[1])

QWEN3_NEXT = dict(QWEN3_5, architectures=["Qwen3NextForCausalLM"], model_type="qwen3_next", num_experts=8,
                  num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=24,
                  decoder_sparse_step=1, mlp_only_layers=[2], norm_topk_prob=True,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25})
QWEN3_NEXT_NOTE = ("Qwen3NextForCausalLM (qwen3_next): qwen3_5's layers with the DeltaNet projections grouped per key "
                   "head (in_proj_qkvz [q | k | v_group | z_group], in_proj_ba [b | a]), layers 0, 1, 3 a mixture of 8 "
                   "experts (inner 16) top-2 renormalised with a gated shared expert (inner 24), layer 2 a dense MLP "
                   "(mlp_only_layers [2], inner 48), routers N(0, 1)")

ISSUE40_CASES = [
    dict(family("qwen3_5", QWEN3_5_NOTE, inputs=LONG_CHUNKS, **QWEN3_5), steps=96,
         dtypes=[("", "float32"), ("_bf16", "bfloat16")]),
    dict(family("qwen3_5_moe", QWEN3_5_MOE_NOTE, inputs=LONG_CHUNKS, **QWEN3_5_MOE), steps=96,
         router=None, router_std=1.0, min_greedy_gap=2e-3, dtypes=[("", "float32"), ("_bf16", "bfloat16")]),
    # Qwen3.5 as it ships: Qwen3_5ForConditionalGeneration around the text model, its tensors under
    # model.language_model.* beside a (tiny) vision tower (model.visual.*), not run: text only.
    dict({"name": "qwen3_5_vl", "inputs": LONG_CHUNKS,
          "note": "Qwen3_5ForConditionalGeneration (qwen3_5) around qwen3_5's text model, a one-block vision tower "
                  "in the checkpoint (model.visual.*, set aside: text only)",
          "config": {"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"],
                     "text_config": {k: v for k, v in QWEN3_5.items() if k != "architectures"},
                     "vision_config": {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2,
                                       "out_hidden_size": 48, "patch_size": 4, "spatial_merge_size": 2,
                                       "temporal_patch_size": 2, "num_position_embeddings": 16},
                     "tie_word_embeddings": False}},
         steps=96, dtypes=[("", "float32")]),
    dict(family("qwen3_next", QWEN3_NEXT_NOTE, inputs=LONG_CHUNKS, **QWEN3_NEXT), steps=96,
         router=None, router_std=1.0, min_greedy_gap=2e-3, dtypes=[("", "float32"), ("_bf16", "bfloat16")]),
    # A quantized hybrid: qwen3_5's model in fine-grained FP8 (as Qwen3.5-*-FP8 ship: block-scaled
    # F8_E4M3 with weight_scale_inv), every decoder nn.Linear converted — the Gated DeltaNet's
    # in_proj_qkv / in_proj_z / in_proj_b / in_proj_a / out_proj, the gated q_proj, k/v/o, the MLP
    # — in blocks of [2, 2] (in_proj_b/a's 8 rows give 2 a shard at Shards 4); norms, conv, A_log,
    # dt_bias, embeddings and lm_head f32.
    dict(family("fp8_qwen3_5", "Qwen3_5ForCausalLM in fine-grained FP8: every decoder nn.Linear (Gated DeltaNet "
                "in_proj_qkv/z/b/a and out_proj, gated q_proj, k/v/o, gate/up/down) F8_E4M3 with float32 "
                "weight_scale_inv per [2, 2] block (scale = amax / 448); norms, conv, A_log, dt_bias, embeddings "
                "and lm_head f32. Otherwise " + QWEN3_5_NOTE, inputs=LONG_CHUNKS, **QWEN3_5), steps=96,
         dtypes=[("_f32", "float32")], quant={"weight_block_size": [2, 2]}),
    # Qwen3-Next in fine-grained FP8 (as Qwen3-Next-80B-A3B-*-FP8 ship): the grouped in_proj_qkvz /
    # in_proj_ba F8_E4M3 with their scales — each part (q, k, v, z; b, a) strided through them in
    # whole blocks of 2 rows — beside the experts, the dense layer's MLP and the attention; the
    # routers and shared_expert_gate (one row) unquantized.
    dict(family("fp8_qwen3_next", "Qwen3NextForCausalLM in fine-grained FP8: the grouped in_proj_qkvz and "
                "in_proj_ba, out_proj, q/k/v/o, the experts', shared experts' and dense layer's gate/up/down F8_E4M3 "
                "with float32 weight_scale_inv per [2, 2] block (scale = amax / 448); routers, shared_expert_gate, "
                "norms, conv, A_log, dt_bias, embeddings and lm_head f32. Otherwise " + QWEN3_NEXT_NOTE,
                inputs=LONG_CHUNKS, **QWEN3_NEXT), steps=96, router=None, router_std=1.0, min_greedy_gap=2e-3,
         dtypes=[("_f32", "float32")], quant={"weight_block_size": [2, 2],
                                             "not_converted": ["mlp.shared_expert_gate"]}),
]


def issue40_init(pname, shape, gen):
    """Qwen3.5's parameters where family_case's defaults would not fit them, else None: its (1 + w)
    norms around 0 (the gated one, a plain weight, around 1), the conv taps and the decay's
    A_log / dt_bias of a trained model's size."""
    import torch
    if pname.endswith("linear_attn.norm.weight"):
        return 1.0 + 0.1 * torch.randn(shape, generator=gen)
    if pname.endswith("norm.weight"):
        return 0.1 * torch.randn(shape, generator=gen)
    if pname.endswith("conv1d.weight"):
        return 0.3 * torch.randn(shape, generator=gen)
    if pname.endswith("A_log"):
        return torch.log(torch.rand(shape, generator=gen) * 3.0 + 0.5)
    if pname.endswith("dt_bias"):
        return 0.5 * torch.randn(shape, generator=gen)
    return None


def deepseek_tweak(case):
    """moe_tweak's routers, and e_score_correction_bias N(0, 0.1) (a buffer transformers keeps in f32; its
    values in the stored dtype, so that the checkpoint holds them exactly)."""
    routers = moe_tweak(case)

    def tweak(state, cfg, gen, store_dtype, checks):
        import torch
        routers(state, cfg, gen, store_dtype, checks)
        n = 0
        for k in sorted(state):
            if k.endswith("mlp.gate.weight"):
                b = k[:-len("weight")] + "e_score_correction_bias"
                state[b] = (0.1 * torch.randn(state[k].shape[0], generator=gen)).to(store_dtype).to(torch.float32)
                n += 1
        checks["router_biases"] = n
    return tweak


FP8_MAX = 448.0  # largest finite float8_e4m3fn


def fp8_quantize(w, block):
    """(q, scale) of a 2-D weight as DeepSeek's and llm-compressor's block quantizers make them:
    per [br, bc] block scale = amax|w| / 448 (1 for an all-zero block), q = w / scale clamped to
    ±448 in float8_e4m3fn; scale is float32 [⌈rows/br⌉, ⌈cols/bc⌉] (a last partial block has its own)."""
    import torch
    br, bc = block
    R, C = w.shape
    nr, nc = -(-R // br), -(-C // bc)
    w = w.float()
    padded = torch.nn.functional.pad(w, (0, nc * bc - C, 0, nr * br - R))
    amax = padded.abs().reshape(nr, br, nc, bc).amax(dim=(1, 3))
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    q = (w / fp8_expand(scale, block, w.shape)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.contiguous(), scale.contiguous()


def fp8_expand(scale, block, shape):
    """The per-block scales spread to every element of a weight of `shape`."""
    return scale.repeat_interleave(block[0], 0)[:shape[0]].repeat_interleave(block[1], 1)[:, :shape[1]]


def fp8_rewrite(d, linears, quant):
    """Rewrites d/model.safetensors and d/config.json (as save_pretrained wrote them) into the
    fine-grained FP8 format: each weight in `linears` becomes F8_E4M3 plus `<name>_scale_inv`,
    everything else keeps its dtype. Returns {weight name: (q, scale)}."""
    from safetensors.torch import save_file, load_file
    path = os.path.join(d, "model.safetensors")
    # The model before quantization, kept for `linnet quantize`'s test (it must write these
    # very bytes: tests/quantize_test.cpp); not for a mixture of experts (linnet quantize refuses those).
    import re
    if not any(re.match(FP8_EXPERT_WEIGHT, k) for k in linears):
        source = os.path.join(ROOT, "tests", "fixtures", "quantize", os.path.basename(d) + "_source")
        os.makedirs(source, exist_ok=True)
        for f in ("config.json", "model.safetensors"):
            shutil.copyfile(os.path.join(d, f), os.path.join(source, f))
    st = load_file(path)
    assert linears and linears <= set(st), sorted(linears - set(st))
    block, out, fp8 = quant["weight_block_size"], {}, {}
    for k, v in st.items():
        if k in linears:
            q, scale = fp8_quantize(v, block)
            out[k], out[k + "_scale_inv"], fp8[k] = q, scale, (q, scale)
        else:
            out[k] = v
    save_file(out, path, metadata={"format": "pt"})
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = fp8_config(quant)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    return fp8


def fp8_config(quant):
    """config.json's quantization_config: the keys FineGrainedFP8Config reads, lm_head named as
    left unquantized (as Qwen3-FP8 and llm-compressor's exports do), and a mixture of experts'
    routers after it (as Qwen3-30B-A3B-FP8 names each model.layers.N.mlp.gate)."""
    return {"quant_method": "fp8", "activation_scheme": "dynamic",
            "weight_block_size": list(quant["weight_block_size"]),
            "modules_to_not_convert": list(quant.get("modules_to_not_convert", ["lm_head"]))}


def gptq_quantize(w, group, sym, bits=4):
    """(q [in, out] 0..15, zero [groups, out] 0..15, scale f16 [groups, out]) of a weight w [out, in]
    by round to nearest per group of `group` input columns, as GPTQ's quantizer sets its grid
    (gptqmodel's Quantizer.find_params without the GPTQ error feedback): sym: scale = 2 amax / 15,
    zero 8; asym: scale = (max(w, 0) - min(w, 0)) / 15, zero = round(-min / scale); q =
    clamp(round(w / scale) + zero, 0, 15) with the f16 scale. 8 bits: maxq 255 for 15, zero 128
    for 8."""
    import torch
    out_f, in_f = w.shape
    maxq = (1 << bits) - 1
    g = w.float().t().reshape(in_f // group, group, out_f)  # [groups, group, out]
    if sym:
        amax = g.abs().amax(1)
        scale = (2 * amax / maxq).half()
        zero = torch.full_like(amax, float((maxq + 1) // 2))
    else:
        lo, hi = g.amin(1).clamp(max=0), g.amax(1).clamp(min=0)
        scale = ((hi - lo) / maxq).half()
        zero = torch.round(-lo / scale.float()).clamp(0, maxq)
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    q = (torch.round(g / scale.float().unsqueeze(1)) + zero.unsqueeze(1)).clamp(0, maxq)
    return q.reshape(in_f, out_f).to(torch.int64), zero.to(torch.int64), scale


def gptq_pack(q, zero, bits=4):
    """GPTQ's words: qweight I32 [in/8, out] (eight input rows a word from the low bits), qzeros
    I32 [groups, out/8] (eight output columns a word). The "gptq" v1 format stores zero - 1 as
    gptqmodel writes it: the word of zero points minus 0x11111111, borrows and all (so a zero of
    0 survives its reading, which adds 0x11111111 back). 8 bits: four a word, 0x01010101."""
    import torch
    per, one = 32 // bits, (0x11111111 if bits == 4 else 0x01010101)
    qw = torch.zeros(q.shape[0] // per, q.shape[1], dtype=torch.int64)
    for k in range(per):
        qw |= q[k::per] << (bits * k)
    zw = torch.zeros(zero.shape[0], zero.shape[1] // per, dtype=torch.int64)
    for k in range(per):
        zw |= zero[:, k::per] << (bits * k)
    zw = (zw - one) & 0xFFFFFFFF
    as_i32 = lambda t: torch.from_numpy(t.numpy().astype("uint32").view("int32"))
    return as_i32(qw), as_i32(zw)


def gptq_dequantize(qweight, qzeros, scales, g_idx, bits=4):
    """A layer's weight [out, in] as gptqmodel 7.7.0 dequantizes GPTQ v1 (verified bit for bit
    against its TorchQuantLinear): q from each qweight word's nibbles along the input rows; each
    qzeros word + 0x11111111 (one integer add on the word, carries and all) read as eight zero
    points; W = f16(scales[g_idx] * (q - zero[g_idx])), the product rounded to f16."""
    import numpy as np
    import torch
    per, one, mask = 32 // bits, (0x11111111 if bits == 4 else 0x01010101), (1 << bits) - 1
    qw = qweight.numpy().view(np.uint32).astype(np.int64)
    q = np.stack([(qw >> (bits * k)) & mask for k in range(per)], 1).reshape(-1, qw.shape[1])  # [in, out]
    zw = (qzeros.numpy().view(np.uint32).astype(np.int64) + one) & 0xFFFFFFFF
    z = np.stack([(zw >> (bits * k)) & mask for k in range(per)], 2).reshape(zw.shape[0], -1)  # [groups, out]
    gi = g_idx.numpy().astype(np.int64)
    diff = torch.from_numpy((q - z[gi]).astype(np.float32))
    return (scales[gi].float() * diff).half().float().t().contiguous()


def act_order(module, cols):
    """(perm, place) of a layer's act order for a fixture: a permutation of its input columns seeded
    by the layer's input (q/k/v share one, as do gate/up: GPTQ gives layers with one input one
    Hessian, whose diagonal sets the order), and place[c], where column c comes in it."""
    import re
    import zlib
    import torch
    key = re.sub(r"\.(q_proj|k_proj|v_proj)$", ".qkv", re.sub(r"\.(gate_proj|up_proj)$", ".gate_up", module))
    perm = torch.randperm(cols, generator=torch.Generator().manual_seed(zlib.crc32(key.encode())))
    return perm, torch.argsort(perm)


def ct_actorder_rewrite(d, linears, opts):
    """Rewrites d/model.safetensors and d/config.json into compressed-tensors' pack-quantized W4A16
    (symmetric) with actorder "group": each weight in `linears` becomes <linear>.weight_packed,
    .weight_scale [out, groups], .weight_shape and .weight_g_idx [in]. The groups are `group`
    columns in act_order's order; their scales are compressed-tensors' calculate_qparams on each
    group's min and max and q its quantize (round, clamp to [-8, 7]), on the columns in that order;
    q is then stored in the original column order, packed by compressed-tensors' pack_to_int32.
    Returns {weight name: q * weight_scale[:, g_idx]} (f32), the dequantization compressed-tensors
    did for actorder group before it dropped it."""
    import torch
    from safetensors.torch import save_file, load_file
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import quantize
    from compressed_tensors.quantization.utils import calculate_qparams
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32
    group = opts["group"]
    args = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=group)
    path = os.path.join(d, "model.safetensors")
    st = load_file(path)
    assert linears and linears <= set(st), sorted(linears - set(st))
    out, want = {}, {}
    for k, v in st.items():
        if k not in linears:
            out[k] = v
            continue
        perm, place = act_order(k[:-len(".weight")], v.shape[1])
        wp = v.float()[:, perm].contiguous()
        (R, C) = wp.shape
        groups = wp.reshape(R, C // group, group)
        scale, zp = calculate_qparams(groups.amin(-1), groups.amax(-1), args)
        qp = quantize(wp, scale, zp, args, dtype=torch.int8)
        q = qp[:, place].contiguous()
        g_idx = (place // group).to(torch.int32)
        out[k + "_packed"] = pack_to_int32(q, 4)
        out[k + "_scale"] = scale.contiguous()
        out[k + "_shape"] = torch.tensor([R, C], dtype=torch.int64)
        out[k + "_g_idx"] = g_idx
        want[k] = q.float() * scale[:, g_idx.long()]
        # (the order undone: the same weights as compressed-tensors' dequantization in its order)
        assert torch.equal(want[k][:, perm], q.float()[:, perm] * scale.repeat_interleave(group, 1))
    save_file(out, path, metadata={"format": "pt"})
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    weights = {"actorder": "group", "block_structure": None, "dynamic": False, "group_size": group, "num_bits": 4,
               "observer": "minmax", "observer_kwargs": {}, "strategy": "group", "symmetric": True, "type": "int"}
    cfg["quantization_config"] = {
        "config_groups": {"group_0": {"format": "pack-quantized", "input_activations": None, "output_activations": None,
                                      "targets": ["Linear"], "weights": weights}},
        "format": "pack-quantized", "global_compression_ratio": None, "ignore": ["lm_head"], "kv_cache_scheme": None,
        "quant_method": "compressed-tensors", "quantization_status": "compressed", "sparsity_config": {},
        "version": "0.10.2"}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    return want


def gptq_rewrite(d, linears, gptq):
    """Rewrites d/model.safetensors and d/config.json into GPTQ's layout: each weight in `linears`
    becomes <module>.qweight, .qzeros, .scales, .g_idx. Returns {weight name: its dequantized f32
    weight} (gptq_dequantize of what was written)."""
    import torch
    from safetensors.torch import save_file, load_file
    path = os.path.join(d, "model.safetensors")
    st = load_file(path)
    assert linears and linears <= set(st), sorted(linears - set(st))
    out, want, group = {}, {}, gptq["group"]
    for k, v in st.items():
        if k not in linears:
            out[k] = v
            continue
        module = k[:-len(".weight")]
        bits = gptq.get("bits", 4)
        if gptq.get("desc_act"):
            # act-order: groups of `group` columns taken in a permuted order (GPTQ's is the Hessian
            # diagonal's, descending), q un-permuted to the stored column order, g_idx[c] = the
            # group of c's place in the order. One order per input (q/k/v, gate/up share theirs).
            perm, place = act_order(module, v.shape[1])
            q, zero, scale = gptq_quantize(v[:, perm], group, gptq["sym"], bits)
            q = q[place]
            g_idx = (place // group).to(torch.int32)
        else:
            q, zero, scale = gptq_quantize(v, group, gptq["sym"], bits)
            g_idx = (torch.arange(v.shape[1]) // group).to(torch.int32)
        qweight, qzeros = gptq_pack(q, zero, bits)
        out[module + ".qweight"], out[module + ".qzeros"] = qweight, qzeros
        out[module + ".scales"], out[module + ".g_idx"] = scale.contiguous(), g_idx
        want[k] = gptq_dequantize(qweight, qzeros, scale, g_idx, bits)
        rq = (scale.float()[g_idx.long()] * (q - zero[g_idx.long()]).float()).half().float().t()
        assert torch.equal(want[k], rq), f"{k}: the written words do not read back"
    save_file(out, path, metadata={"format": "pt"})
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": gptq.get("bits", 4), "group_size": group,
                                  "desc_act": bool(gptq.get("desc_act", False)),
                                  "sym": gptq["sym"], "true_sequential": True, "damp_percent": 0.01,
                                  "static_groups": False, "lm_head": False, "checkpoint_format": "gptq",
                                  "meta": {"quantizer": ["linnet make_golden.py: round to nearest"]}}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    return want


AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # nibble k of a word holds column 8c + AWQ_ORDER[k]


def awq_quantize(w, group):
    """(q [in, out] 0..15, zero [groups, out] 0..15, scale f16 [groups, out]) of w [out, in] on
    AutoAWQ's grid (pseudo_quantize_tensor with zero_point): per group of `group` input columns,
    scale = max(max - min, 1e-5) / 15, zero = clamp(-round(min / scale), 0, 15), q = clamp(round(w /
    scale) + zero, 0, 15), with the f16 scale."""
    import torch
    out_f, in_f = w.shape
    g = w.float().t().reshape(in_f // group, group, out_f)
    lo, hi = g.amin(1), g.amax(1)
    scale = ((hi - lo).clamp(min=1e-5) / 15).half()
    zero = (-torch.round(lo / scale.float())).clamp(0, 15)
    q = (torch.round(g / scale.float().unsqueeze(1)) + zero.unsqueeze(1)).clamp(0, 15)
    return q.reshape(in_f, out_f).to(torch.int64), zero.to(torch.int64), scale


def awq_pack(x):
    """[n, out] values 0..15 -> I32 [n, out/8], nibble k of word c holding column 8c + AWQ_ORDER[k]."""
    import torch
    w = torch.zeros(x.shape[0], x.shape[1] // 8, dtype=torch.int64)
    for k, o in enumerate(AWQ_ORDER):
        w |= x[:, o::8] << (4 * k)
    return torch.from_numpy(w.numpy().astype("uint32").view("int32"))


def awq_dequantize(qweight, qzeros, scales, group):
    """A layer's weight [out, in] as gptqmodel 7.7.0 dequantizes AWQ gemm (checked by the GPTQ/AWQ
    probe against its kernels): each word's nibbles in AWQ_ORDER along the output columns, zero
    points as stored; W = f16(scales[i // group] * (q - zero)), the product rounded to f16."""
    import numpy as np
    import torch
    def unpack(t):
        v = t.numpy().view(np.uint32).astype(np.int64)
        out = np.zeros((v.shape[0], v.shape[1] * 8), np.int64)
        for k, o in enumerate(AWQ_ORDER):
            out[:, o::8] = (v >> (4 * k)) & 15
        return out
    q, z = unpack(qweight), unpack(qzeros)  # [in, out], [groups, out]
    gi = np.arange(q.shape[0]) // group
    diff = torch.from_numpy((q - z[gi]).astype(np.float32))
    return (scales[torch.from_numpy(gi)].float() * diff).half().float().t().contiguous()


def awq_rewrite(d, linears, awq):
    """Rewrites d's files into AWQ's gemm layout: each weight in `linears` becomes <module>.qweight,
    .qzeros, .scales. Returns {weight name: its dequantized f32 weight}."""
    import torch
    from safetensors.torch import save_file, load_file
    path = os.path.join(d, "model.safetensors")
    st = load_file(path)
    assert linears and linears <= set(st), sorted(linears - set(st))
    out, want, group = {}, {}, awq["group"]
    for k, v in st.items():
        if k not in linears:
            out[k] = v
            continue
        module = k[:-len(".weight")]
        q, zero, scale = awq_quantize(v, group)
        out[module + ".qweight"], out[module + ".qzeros"] = awq_pack(q), awq_pack(zero)
        out[module + ".scales"] = scale.contiguous()
        want[k] = awq_dequantize(out[module + ".qweight"], out[module + ".qzeros"], scale, group)
        gi = torch.arange(v.shape[1]) // group
        rq = (scale.float()[gi] * (q - zero[gi]).float()).half().float().t()
        assert torch.equal(want[k], rq), f"{k}: the written words do not read back"
    save_file(out, path, metadata={"format": "pt"})
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": group, "version": "gemm",
                                  "zero_point": True, "modules_to_not_convert": None}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    return want


def dense_reference(d, weights):
    """The f32 transformers model of checkpoint `d` (its quantization_config left out) with each
    quantized layer's weight given dequantized in `weights`, the rest as saved (upcast)."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.from_pretrained(d)
    del cfg.quantization_config
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="eager")
    state = {k: v.float() for k, v in load_file(os.path.join(d, "model.safetensors")).items()
             if not k.endswith((".qweight", ".qzeros", ".scales", ".g_idx",  # (GPTQ's, AWQ's parts)
                                ".weight_packed", ".weight_scale", ".weight_shape", ".weight_g_idx"))}
    state.update(weights)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    if "lm_head.weight" in missing:
        model.tie_weights()
    return model


# A mixture of experts' per-expert weights as save_pretrained writes them (and the FP8 checkpoints
# ship them): model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight.
FP8_EXPERT_WEIGHT = r"^(.*\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$"


def ct_groups(ct):
    """A case's compressed-tensors groups: ct["groups"] (each its targets, weights and
    input_activations: a mixed-precision checkpoint) or the one group ct describes, targets ["Linear"]."""
    return ct["groups"] if "groups" in ct else [dict(ct, targets=["Linear"])]


def ct_quantization_config(ct):
    """compressed-tensors' QuantizationConfig of a case: its groups (ct_groups), lm_head ignored."""
    from compressed_tensors.quantization import QuantizationArgs, QuantizationConfig, QuantizationScheme
    import torch
    config_groups = {}
    for i, g in enumerate(ct_groups(ct)):
        acts = g.get("input_activations")
        # (dtypes named by their torch attribute: "uint8" -> torch.uint8)
        weights = {k: getattr(torch, v) if k in ("scale_dtype", "zp_dtype") else v for k, v in g["weights"].items()}
        config_groups[f"group_{i}"] = QuantizationScheme(targets=g["targets"], weights=QuantizationArgs(**weights),
                                                         input_activations=QuantizationArgs(**acts) if acts else None)
    return QuantizationConfig(config_groups=config_groups, ignore=["lm_head"], quantization_status="frozen")


def ct_acts_of(ct, module):
    """The input_activations of the scheme compressed-tensors gave `module` (its quantization_scheme
    as ct_quantize left it, by the module's name: ct_q's keys)."""
    return CT_MODULE_ACTS.get(module, ct.get("input_activations"))


CT_MODULE_ACTS = {}  # module name -> its scheme's input_activations (a dict or None), set by ct_quantize
CT_INPUT_SCALES = {}  # module name -> its static input_scale (compressed-tensors' "FP8"), set by ct_quantize


def ct_calibrate_inputs(model, ct, samples=4, length=12, seed=77):
    """{module name: (min, max)} of every nn.Linear's input over `samples` random token sequences
    (llm-compressor's static min-max observer over its calibration set), or {} when no group's
    input_activations are static."""
    import torch
    if not any((g.get("input_activations") or {}).get("dynamic") is False for g in ct_groups(ct)):
        return {}
    seen, hooks = {}, []
    def observe(name):
        def hook(mod, inputs):
            x = inputs[0].detach()
            lo, hi = seen.get(name, (x.min(), x.max()))
            seen[name] = (torch.minimum(lo, x.min()), torch.maximum(hi, x.max()))
        return hook
    for n, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) and n != "lm_head":
            hooks.append(m.register_forward_pre_hook(observe(n)))
    gen = torch.Generator().manual_seed(seed)
    try:
        with torch.no_grad():
            for _ in range(samples):
                model(input_ids=torch.randint(0, model.config.vocab_size, (1, length), generator=gen))
    finally:
        for h in hooks:
            h.remove()
    return seen


def ct_quantize(model, ct):
    """Quantizes `model` in place as llm-compressor does with compressed-tensors' own code: the
    scheme applied to every nn.Linear but lm_head, each weight's scale from compressed-tensors'
    calculate_qparams on its per-channel or per-block min and max (llm-compressor's min-max
    observer), then ModelCompressor's compress_model (weight -> F8_E4M3). Returns the compressor
    (its update_config writes config.json's quantization_config after save_pretrained) and
    {weight name: (q, scale)}, each q checked against round-to-nearest E4M3 of clamp(w / scale)."""
    import torch
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import apply_quantization_config
    from compressed_tensors.quantization.utils import calculate_qparams
    observed = ct_calibrate_inputs(model, ct)  # (before the scheme's hooks: the dense model's inputs)
    apply_quantization_config(model, ct_quantization_config(ct), show_progress=False)
    quantized, dense = {}, {}
    for n, m in model.named_modules():
        if getattr(m, "quantization_scheme", None) is None:
            continue
        args, w = m.quantization_scheme.weights, m.weight.data
        if args.strategy == "tensor":
            mn, mx = w.amin().reshape(1), w.amax().reshape(1)
        elif args.strategy == "channel":
            mn, mx = w.amin(1, keepdim=True), w.amax(1, keepdim=True)
        elif args.strategy == "group":
            (R, C), gs = w.shape, args.group_size
            assert C % gs == 0, (n, tuple(w.shape), gs)
            groups = w.reshape(R, C // gs, gs)
            mn, mx = groups.amin(-1), groups.amax(-1)
        else:
            assert args.strategy == "block", args.strategy
            (br, bc), (R, C) = args.block_structure, w.shape
            assert R % br == 0 and C % bc == 0, (n, tuple(w.shape), args.block_structure)
            blocks = w.reshape(R // br, br, C // bc, bc)
            mn, mx = blocks.amin(dim=(1, 3)), blocks.amax(dim=(1, 3))
        scale, zp = calculate_qparams(mn, mx, args)
        assert scale.shape == m.weight_scale.shape and scale.dtype == m.weight_scale.dtype == w.dtype
        m.weight_scale.data.copy_(scale)
        m.weight_zero_point.data.copy_(zp)
        acts = m.quantization_scheme.input_activations
        if acts is not None and acts.dynamic is False:  # a static input_scale from the calibration
            lo, hi = observed[n]
            s_in, zp_in = calculate_qparams(lo.reshape(1), hi.reshape(1), acts)
            assert s_in.shape == m.input_scale.shape, (n, s_in.shape, m.input_scale.shape)
            m.input_scale.data.copy_(s_in)
            m.input_zero_point.data.copy_(zp_in)
            CT_INPUT_SCALES[n] = s_in.clone()
        quantized[n], dense[n] = m, w.clone()
    assert quantized and not any(n == "lm_head" for n in quantized)
    compressor = ModelCompressor.from_pretrained_model(model)
    if "groups" in ct:  # mixed precision: each module as its own scheme says
        return compressor, ct_quantize_mixed(compressor, model, quantized, dense)
    int8 = ct["weights"]["type"] == "int" and ct["weights"]["num_bits"] == 8 and bool(ct.get("input_activations"))
    if ct_is_mxfp4(ct):
        assert compressor.quantization_config.format == "mxfp4-pack-quantized", compressor.quantization_config.format
        compressor.compress_model(model)
        return compressor, {n + ".weight": ct_mxfp4_unpack(m) for n, m in quantized.items()}
    if ct["weights"]["type"] == "int" and not int8:
        assert compressor.quantization_config.format == "pack-quantized", compressor.quantization_config.format
        compressor.compress_model(model)
        return compressor, {n + ".weight": ct_int4_unpack(m, ct["weights"]["num_bits"]) for n, m in quantized.items()}
    want_format = "int-quantized" if int8 else "float-quantized"
    assert compressor.quantization_config.format == want_format, compressor.quantization_config.format
    compressor.compress_model(model)
    out = {}
    for n, m in quantized.items():
        q, scale = m.weight.data, m.weight_scale.data
        if int8:  # int8 values, no zero point kept for a symmetric scheme
            assert q.dtype == torch.int8 and getattr(m, "weight_zero_point", None) is None, (n, q.dtype)
            mine = torch.round((dense[n] / ct_expand(scale, q.shape)).clamp(-128, 127)).to(torch.int8)
            assert torch.equal(mine, q), f"{n}: not round(clamp(w / scale, -128, 127))"
        else:
            assert q.dtype == torch.float8_e4m3fn and not hasattr(m, "weight_zero_point"), n
            mine = (dense[n] / ct_expand(scale, q.shape)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
            assert torch.equal(mine.view(torch.uint8), q.view(torch.uint8)), f"{n}: not e4m3(clamp(w / scale))"
        out[n + ".weight"] = (q.clone(), scale.clone())
    return compressor, out


def ct_quantize_mixed(compressor, model, quantized, dense):
    """ct_quantize's parts of a mixed-precision model (several config groups, each its format):
    each module unpacked or checked as its own scheme's format is, its input_activations recorded
    in CT_MODULE_ACTS."""
    import torch
    assert compressor.quantization_config.format == "mixed-precision", compressor.quantization_config.format
    compressor.compress_model(model)
    out = {}
    for n, m in quantized.items():
        args, acts = m.quantization_scheme.weights, m.quantization_scheme.input_activations
        CT_MODULE_ACTS[n] = acts.model_dump(exclude_none=True, mode="json") if acts is not None else None
        if args.type == "int" and acts is None:  # pack-quantized
            out[n + ".weight"] = ct_int4_unpack(m, args.num_bits)
            continue
        assert args.type == "float" and args.num_bits == 8, (n, args)
        q, scale = m.weight.data, m.weight_scale.data
        assert q.dtype == torch.float8_e4m3fn and not hasattr(m, "weight_zero_point"), n
        mine = (dense[n] / ct_expand(scale, q.shape)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        assert torch.equal(mine.view(torch.uint8), q.view(torch.uint8)), f"{n}: not e4m3(clamp(w / scale))"
        out[n + ".weight"] = (q.clone(), scale.clone())
    return out


def ct_is_mxfp4(ct):
    if "groups" in ct:
        return False
    return ct["weights"]["type"] == "float" and ct["weights"]["num_bits"] == 4


E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


GPT_OSS_MXFP4_NOT_CONVERTED = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]


def gpt_oss_mxfp4_rewrite(d):
    """Rewrites d/model.safetensors' experts (gate_up_proj [E, H, 2I], down_proj [E, I, H]) as
    gpt-oss ships them in MXFP4: each expert's matrix with its rows the outputs (the transpose),
    in blocks of 32 inputs — an E8M0 exponent per block (the smallest 2^k ≥ amax / 6), the E2M1
    code nearest each value / 2^k (the first on ties), two codes a byte with the first in the low
    nibble: `…_blocks` U8 [E, out, in/32, 16], `…_scales` U8 [E, out, in/32] — and config.json's
    quantization_config as gpt-oss-20b's. Returns {parameter: its dequantized value as
    transformers holds it, [E, in, out]}."""
    import torch
    from safetensors.torch import load_file, save_file
    path = os.path.join(d, "model.safetensors")
    sd = load_file(path)
    lut = torch.tensor(E2M1)
    want = {}
    for k in sorted(sd):
        if not (k.endswith("mlp.experts.gate_up_proj") or k.endswith("mlp.experts.down_proj")):
            continue
        w = sd.pop(k).float().transpose(1, 2).contiguous()  # [E, out, in]
        E, out, inn = w.shape
        assert inn % 32 == 0, (k, tuple(w.shape))
        b = w.reshape(E, out, inn // 32, 32)
        amax = b.abs().amax(-1)
        e = torch.ceil(torch.log2(torch.clamp(amax / 6.0, min=2.0 ** -126))).clamp(-127, 127)
        scale = torch.pow(2.0, e)
        x = b / scale[..., None]
        code = (x.abs()[..., None] - lut[:8]).abs().argmin(-1) + 8 * (x < 0).long()
        q = code.to(torch.uint8)
        sd[k + "_blocks"] = (q[..., 0::2] | (q[..., 1::2] << 4)).contiguous()
        sd[k + "_scales"] = (e + 127).to(torch.uint8).contiguous()
        want[k] = (lut[code] * scale[..., None]).reshape(E, out, inn).transpose(1, 2).contiguous()
    save_file(sd, path, metadata={"format": "pt"})
    cfg_path = os.path.join(d, "config.json")
    with open(cfg_path) as f:
        saved = json.load(f)
    saved["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": GPT_OSS_MXFP4_NOT_CONVERTED}
    with open(cfg_path, "w") as f:
        json.dump(saved, f, indent=2)
    return want


def ct_mxfp4_unpack(m):
    """(values, scale) of an mxfp4-pack-quantized layer, unpacked here as linnet reads the files
    (not with compressed-tensors' unpack): weight_packed uint8 [out, in/2], element 2j in the low
    nibble of byte j, each nibble an E2M1 code (bit 3 the sign); weight_scale uint8 [out, in/32]
    E8M0, 2^(e - 127), none 255 (NaN). Their product is checked against compressed-tensors' own
    decompression of every layer (the reference's weights)."""
    import torch
    packed, e = m.weight_packed.data, m.weight_scale.data
    assert packed.dtype == torch.uint8 and e.dtype == torch.uint8, (packed.dtype, e.dtype)
    rows, cols = packed.shape[0], packed.shape[1] * 2
    assert e.shape == (rows, cols // 32) and int(e.max()) < 255, (tuple(e.shape), int(e.max()))
    lut = torch.tensor(E2M1)
    q = torch.stack([lut[(packed & 15).long()], lut[(packed >> 4).long()]], -1).flatten(1)
    scale = torch.pow(2.0, e.double() - 127).float()
    return q.clone(), scale.clone()


def ct_quantize_experts(d, ct):
    """Rewrites d/model.safetensors' per-expert weights (FP8_EXPERT_WEIGHT) as compressed-tensors
    0.20.1 compresses a layer of the case's scheme: each weight's scale (and zero point) from its
    calculate_qparams on the per-group min and max, then the format's compressor (`compress` of
    PackedQuantizationCompressor or MXFP4PackedCompressor on the layer's state dict). Returns
    {weight name: unpacked parts} as ct_quantize does."""
    import re
    from types import SimpleNamespace
    import torch
    from safetensors.torch import load_file, save_file
    from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.compressors.naive_quantized.base import FloatQuantizationCompressor
    from compressed_tensors.quantization.utils import calculate_qparams
    fp8 = ct["weights"]["type"] == "float" and ct["weights"]["num_bits"] == 8
    assert (ct["weights"]["strategy"] == "group" and not ct.get("input_activations")) or \
        (fp8 and ct["weights"]["strategy"] == "channel"), ct
    scheme = ct_quantization_config(ct).config_groups["group_0"]
    args, gs = scheme.weights, ct["weights"].get("group_size")
    compressor = (FloatQuantizationCompressor if fp8 else
                  MXFP4PackedCompressor if ct_is_mxfp4(ct) else PackedQuantizationCompressor)
    path = os.path.join(d, "model.safetensors")
    st, out, parts = load_file(path), {}, {}
    for k, w in st.items():
        if not re.match(FP8_EXPERT_WEIGHT, k):
            out[k] = w
            continue
        R, C = w.shape
        if fp8:  # per channel
            scale, zp = calculate_qparams(w.amin(1, keepdim=True), w.amax(1, keepdim=True), args)
        else:
            assert C % gs == 0, (k, tuple(w.shape), gs)
            groups = w.reshape(R, C // gs, gs)
            scale, zp = calculate_qparams(groups.amin(-1), groups.amax(-1), args)
        local = {"weight": w, "weight_scale": scale, "weight_zero_point": zp}
        packed = compressor.compress(local, scheme)
        base = k[:-len("weight")]
        for n, t in packed.items():
            out[base + n] = t.contiguous()
        if fp8:
            q = packed["weight"]
            mine = (w / ct_expand(scale, q.shape)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
            assert torch.equal(mine.view(torch.uint8), q.view(torch.uint8)), f"{k}: not e4m3(clamp(w / scale))"
            parts[k] = (q.clone(), packed["weight_scale"].clone())
            continue
        m = SimpleNamespace(**{n: SimpleNamespace(data=t) for n, t in packed.items()})
        parts[k] = ct_mxfp4_unpack(m) if ct_is_mxfp4(ct) else ct_int4_unpack(m)
    assert parts, "no per-expert weights"
    save_file(out, path, metadata={"format": "pt"})
    return parts


def ct_int4_unpack(m, bits=4):
    """(q, scale, zero point) of a pack-quantized layer, unpacked here as linnet reads the files
    (not with compressed-tensors' unpack): weight_packed int32 [out, in/8] holds eight 4-bit values
    a word from the low bits, each stored +8 (8 bits: four a word, each +128); weight_zero_point
    (asymmetric, 4 bits) int32 [out/8, groups] packs eight rows a word alike. q and zero point
    int32, scale [out, groups]."""
    import torch
    packed, scale = m.weight_packed.data, m.weight_scale.data
    rows, cols = (int(v) for v in m.weight_shape.data)
    per, mask, offset = 32 // bits, (1 << bits) - 1, 1 << (bits - 1)
    assert packed.dtype == torch.int32 and packed.shape == (rows, (cols + per - 1) // per), (packed.dtype, packed.shape)
    shifts = torch.arange(0, 32, bits, dtype=torch.int32)
    q = ((packed.unsqueeze(-1) >> shifts) & mask).flatten(1)[:, :cols] - offset
    zp = getattr(m, "weight_zero_point", None)
    if zp is None:
        z = torch.zeros_like(scale, dtype=torch.int32)
    else:
        zp = zp.data
        assert zp.dtype == torch.int32 and zp.shape == ((rows + 7) // 8, scale.shape[1]), (zp.dtype, zp.shape)
        z = ((zp.unsqueeze(1) >> shifts.view(1, 8, 1)) & 15).flatten(0, 1)[:rows] - 8
    return q.clone(), scale.clone(), z.clone()


GPTQ_REFERENCE = (
    "transformers 5.24's LlamaForCausalLM in f32 with each GPTQ layer's weight dequantized as gptqmodel 7.7.0 "
    "dequantizes the saved qweight, qzeros, scales and g_idx (make_golden.py gptq_dequantize, checked bit for bit "
    "against gptqmodel's TorchQuantLinear; tools/golden/check_gptq.py loads the fixture with transformers 5.24 + "
    "gptqmodel and compares the logits)")


AWQ_REFERENCE = (
    "transformers 5.24's LlamaForCausalLM in f32 with each AWQ layer's weight dequantized as gptqmodel 7.7.0 "
    "dequantizes the saved qweight, qzeros and scales (make_golden.py awq_dequantize); tools/golden/check_gptq.py "
    "loads the fixture with transformers 5.24 + gptqmodel (its awq_torch_aten kernel, f32) and compares the logits")


CT_ACTORDER_REFERENCE = (
    "transformers 5.24's LlamaForCausalLM in f32 with each layer's weight dequantized as compressed-tensors read "
    "actorder \"group\" checkpoints (q * weight_scale[:, weight_g_idx], make_golden.py ct_actorder_rewrite): "
    "compressed-tensors 0.20.1 dropped actorder group (its QuantizationArgs: \"removed 2026/08/27\") and no "
    "longer reads weight_g_idx, and transformers 5.24 refuses the checkpoint (\"actorder='group' has been removed\"); "
    "the values are compressed-tensors' own quantize and calculate_qparams on each group's columns")


CT_ASYM_REFERENCE = (
    "compressed-tensors 0.20.1's own decompression (PackedQuantizationCompressor.decompress of each layer's "
    "weight_packed, weight_scale, weight_zero_point, weight_shape as saved) loaded into transformers 5.24's "
    "model class in f32: transformers 5.24 cannot load an asymmetric pack-quantized checkpoint (it expects "
    "weight_zero_point unpacked, [out, groups], and refuses the saved [out/8, groups] as a size mismatch)")


CT_MXFP4_REFERENCE = (
    "compressed-tensors 0.20.1's own decompression (MXFP4PackedCompressor.decompress of each layer's weight_packed "
    "and weight_scale as saved) loaded into transformers 5.24's model class in f32: transformers 5.24 loads the "
    "checkpoint, but its decompressed weights are bf16 in an f32 model and the first forward fails (\"expected m1 "
    "and m2 to have the same dtype\"). Every MXFP4 value times its power-of-two scale is exact in bf16 and f32")


CT_MOE_ROUNDING_REFERENCE = (
    "transformers 5.24's default load (compressed-tensors 0.20.1 decompressing every layer, its hooks rounding each "
    "Linear's input to FP8 per token) with each fused experts module's forward made to round every expert's inputs "
    "alike before its gate_up and down products (make_golden.py ct_moe_rounding): transformers 5.24 fuses the "
    "per-expert checkpoint tensors into parameters, which compressed-tensors' hooks do not reach, so its own "
    "forward would leave the experts' inputs unrounded, unlike the format (per-expert Linear layers) and vLLM")


CT_MOE_REFERENCE = (
    "; each expert's decompressed gate/up/down fused into experts.gate_up_proj / experts.down_proj as transformers "
    "5.24 fuses per-expert checkpoint tensors")


def ct_decompressed_reference(d, ct):
    """The model of checkpoint `d` with every pack-quantized layer decompressed by compressed-tensors
    itself, in a plain f32 transformers model (no quantization_config)."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM
    from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    compressor = MXFP4PackedCompressor if ct_is_mxfp4(ct) else PackedQuantizationCompressor
    cfg = AutoConfig.from_pretrained(d)
    del cfg.quantization_config
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="eager")
    scheme = ct_quantization_config(ct).config_groups["group_0"]
    saved, state = load_file(os.path.join(d, "model.safetensors")), {}
    for k, v in saved.items():
        if k.endswith(".weight_packed"):
            base = k[:-len("weight_packed")]
            local = {n[len(base):]: t for n, t in saved.items() if n.startswith(base) and n[len(base):].startswith("weight")}
            state[base + "weight"] = compressor.decompress(local, scheme)["weight"]
        elif not any(k.endswith(sfx) for sfx in ("weight_scale", "weight_zero_point", "weight_shape")):
            state[k] = v
    state = fuse_experts(state)  # (a mixture of experts' per-expert weights, as transformers fuses them)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    if "lm_head.weight" in missing:
        model.tie_weights()
    return model


def ct_dequantized(t):
    """What compressed-tensors' decompression gives a layer: e4m3(q) * scale (FP8) or (q - zero) *
    scale (int4, the group's scale and zero point), in the scale's dtype (f32 here)."""
    if len(t) == 2:
        q, scale = t
        return q.float() * ct_expand(scale, q.shape)
    q, scale, z = t
    gs = q.shape[1] // scale.shape[1]
    return (q.float() - z.float().repeat_interleave(gs, 1)) * scale.repeat_interleave(gs, 1)


def ct_expand(scale, shape):
    """A compressed-tensors weight_scale ([1] per tensor, [out, 1] or one per block) spread to every element."""
    if scale.ndim == 1:
        return scale.reshape(1, 1).expand(shape)
    if scale.shape[1] == 1:
        return scale.expand(shape)
    return fp8_expand(scale, (shape[0] // scale.shape[0], shape[1] // scale.shape[1]), shape)


def ct_round_inputs(x, act):
    """x [..., in] rounded per token as compressed-tensors' dynamic input_activations round a
    Linear's input (ct_linear_reference's rounding; any number of leading dimensions)."""
    import torch
    assert act["strategy"] == "token" and act.get("dynamic", True), act
    s = x.abs().amax(-1, keepdim=True) / (FP8_MAX if act["type"] == "float" else 127.5)
    s = torch.where(s == 0, torch.tensor(torch.finfo(torch.float32).eps), s)
    v = x / s
    CT_ROUNDED_MARGIN[0] = min(CT_ROUNDED_MARGIN[0], e4m3_rounding_margin(v[v.abs() < FP8_MAX])
                               if act["type"] == "float" else int_rounding_margin(v))
    if act["type"] == "float":
        return v.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).to(torch.float32) * s
    return torch.round(v.clamp(-128, 127)) * s


CT_ROUNDED_MARGIN = [float("inf")]  # the least rounding margin of ct_round_inputs' values (ct_margin_hooks)


def ct_moe_rounding(ref, act):
    """Each fused experts module of `ref` (transformers 5.24's Qwen3MoeExperts: its gate_up_proj and
    down_proj parameters, which compressed-tensors' Linear hooks do not reach) made to round each
    expert's inputs per token before its two products (ct_round_inputs), as compressed-tensors
    rounds them on per-expert Linear layers (transformers 4, vLLM). Its forward otherwise as
    transformers 5.24 writes it."""
    import types
    import torch
    from torch import nn

    def forward(self, hidden_states, top_k_index, top_k_weights):
        final_hidden_states = torch.zeros_like(hidden_states)
        with torch.no_grad():
            expert_mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts + 1)
            expert_mask = expert_mask.permute(2, 1, 0)
            expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            expert_idx = expert_idx[0]
            if expert_idx == self.num_experts:
                continue
            top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
            current_state = ct_round_inputs(hidden_states[token_idx], act)
            gate, up = nn.functional.linear(current_state, self.gate_up_proj[expert_idx]).chunk(2, dim=-1)
            current_hidden_states = ct_round_inputs(self.act_fn(gate) * up, act)
            current_hidden_states = nn.functional.linear(current_hidden_states, self.down_proj[expert_idx])
            current_hidden_states = current_hidden_states * top_k_weights[token_idx, top_k_pos, None]
            final_hidden_states.index_add_(0, token_idx, current_hidden_states.to(final_hidden_states.dtype))
        return final_hidden_states

    n = 0
    for m in ref.modules():
        if type(m).__name__ == "Qwen3MoeExperts":
            m.forward = types.MethodType(forward, m)
            n += 1
    assert n, "no fused experts to round"
    return n


def ct_linear_reference(x, q, scale, act, s_static=None):
    """One quantized nn.Linear's output as compressed-tensors 0.20.1 computes it in an f32 model,
    re-derived here: the input fake-quantized per token (strategy "token") or per token and group
    of group_size columns ("group") with scale = amax|x| / 448 (f32 eps where amax is 0), x' =
    e4m3(clamp(x / scale, ±448)) * scale (FP8); for int8 scale = amax|x| / 127.5, x' =
    round(clamp(x / scale, -128, 127)) * scale; the weight q * its scale; then F.linear."""
    import torch
    xs = x.unflatten(-1, (x.shape[-1] // act["group_size"], act["group_size"])) if act["strategy"] == "group" else x
    assert act["strategy"] in ("token", "group", "tensor") and x.ndim == 3, (act, tuple(x.shape))
    half = FP8_MAX if act["type"] == "float" else 127.5
    if act["strategy"] == "tensor":  # static: the layer's calibrated input_scale
        s = s_static
    else:
        s = xs.abs().amax(-1, keepdim=True) / half
        s = torch.where(s == 0, torch.tensor(torch.finfo(torch.float32).eps), s)
    if act["type"] == "float":
        xq = (xs / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).to(torch.float32) * s
    else:
        xq = torch.round((xs / s).clamp(-128, 127)) * s
    return torch.nn.functional.linear(xq.flatten(-2) if xs is not x else xq, q.float() * ct_expand(scale, q.shape))


def ct_checks(ref, ct, ct_q, d, toks, logits):
    """Every quantized layer's output in a forward over `toks` equals ct_linear_reference on its
    input bit for bit; and how far the reference logits are from transformers' weight-only
    dequantization (CompressedTensorsConfig(dequantize=True): no activation quantization)."""
    import torch
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig
    import re
    seen, hooks = {}, []
    linears = [k for k in ct_q if not re.match(FP8_EXPERT_WEIGHT, k)]  # (experts: fused, ct_moe_rounding)
    for k in linears:
        m = ref.get_submodule(k[:-len(".weight")])
        hooks.append(m.register_forward_hook(lambda mod, i, o, k=k: seen.setdefault(k, []).append((i[0], o))))
    try:
        again = ref(input_ids=toks, attention_mask=torch.ones_like(toks)).logits.float()
    finally:
        for h in hooks:
            h.remove()
    assert torch.equal(again, logits)
    assert sorted(seen) == sorted(linears), sorted(set(linears) - set(seen))
    margin = float("inf")
    for k, calls in seen.items():
        act = ct_acts_of(ct, k[:-len(".weight")])
        for x, y in calls:
            if act is None:  # (a weight-only layer of a mixed-precision model)
                assert torch.equal(y, torch.nn.functional.linear(x, ct_dequantized(ct_q[k]))), k
                continue
            s_static = CT_INPUT_SCALES.get(k[:-len(".weight")])
            want = ct_linear_reference(x, *ct_q[k], act, s_static)
            assert torch.equal(want, y), f"{k}: not the re-derived fake-quantized linear (rel {rel(y, want):.3g})"
            v = ct_scaled_inputs(x, act) if s_static is None else x / s_static
            margin = min(margin, e4m3_rounding_margin(v[v.abs() < FP8_MAX]) if act["type"] == "float"
                         else int_rounding_margin(v))
    r = None
    if "groups" not in ct:  # (transformers 5.24's dequantize=True load fails on a mixed-precision checkpoint)
        with warnings.catch_warnings():  # "the quantization_config from the model will be used" (and dequantize ours)
            warnings.simplefilter("ignore", UserWarning)
            wo = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                                                      quantization_config=CompressedTensorsConfig(dequantize=True))
        wo.eval()
        weight_only = wo(input_ids=toks, attention_mask=torch.ones_like(toks)).logits.float()
        r = round(rel(weight_only, logits), 6)
        assert r > 1e-3, f"activation quantization changed the logits by only {r:.3g}"
    noise = {}
    if (ct.get("input_activations") or {}).get("type") == "int":
        # How far the reference's own logits move when every quantized layer's input is off by
        # float noise (relative 1e-7, three draws): int8 rounding flips, the scale conformance
        # holds these fixtures to (tests/conformance_test.cpp kInt8ActivationBound).
        gen, worst = torch.Generator().manual_seed(0), 0.0
        for _ in range(3):
            hooks = [ref.get_submodule(k[:-len(".weight")]).register_forward_pre_hook(
                lambda mod, i: (i[0] * (1 + 1e-7 * torch.randn(i[0].shape, generator=gen)),)) for k in ct_q]
            try:
                worst = max(worst, rel(ref(input_ids=toks, attention_mask=torch.ones_like(toks)).logits.float(), logits))
            finally:
                for h in hooks:
                    h.remove()
        noise["ct_int8_forward_logits_rel_under_1e-7_input_noise"] = float(f"{worst:.3g}")
    return {"ct_linear_outputs_rederived_bit_exact": len(seen),
            # the smallest relative distance of any x / s of the forward from an E4M3 rounding
            # boundary: inputs off by less than half of it (relative) round to the same E4M3 values
            "ct_forward_activation_min_rel_margin": float(f"{margin:.3g}"),
            **({"ct_forward_logits_rel_vs_weight_only_dequantized": r} if r is not None else {}), **noise}


def ct_scaled_inputs(x, act):
    """x / s of ct_linear_reference: the values compressed-tensors rounds to E4M3 (before the clamp)."""
    import torch
    xs = x.unflatten(-1, (x.shape[-1] // act["group_size"], act["group_size"])) if act["strategy"] == "group" else x
    s = xs.abs().amax(-1, keepdim=True) / (FP8_MAX if act["type"] == "float" else 127.5)
    return xs / torch.where(s == 0, torch.tensor(torch.finfo(torch.float32).eps), s)


# The smallest distance (relative) of any int8-rounded activation from a rounding boundary that
# an int8 fixture keeps: linnet's f32 inputs differ from torch's by ~1e-7 relative.
CT_INT8_MIN_MARGIN = 1.5e-6
# The smallest top-two gap of an int8 fixture's greedy steps: flips move its logits by ~1e-2 of
# their scale, so greedy tokens are compared where the gap is above this
# (tests/conformance_test.cpp greedy_tie_gap).
CT_INT8_MIN_GREEDY_GAP = 0.02


class ct_margin_hooks:
    """Forward hooks on every quantized layer of `ref` recording the smallest int_rounding_margin
    of its inputs' x / s (ct_scaled_inputs) over every call until reset()."""

    def __init__(self, ref, ct, ct_q):
        import re
        self.act, self.least = ct["input_activations"], float("inf")
        # (a mixture's experts are fused: ct_round_inputs records theirs in CT_ROUNDED_MARGIN)
        self.hooks = [ref.get_submodule(k[:-len(".weight")]).register_forward_hook(self.seen) for k in ct_q
                      if not re.match(FP8_EXPERT_WEIGHT, k)]
        CT_ROUNDED_MARGIN[0] = float("inf")

    def seen(self, mod, inputs, output):
        x = inputs[0]
        if self.act.get("dynamic") is False:  # static: the layer's input_scale, values past it clamped
            v = x / mod.input_scale
            self.least = min(self.least, e4m3_rounding_margin(v[v.abs() < FP8_MAX]) if self.act["type"] == "float"
                             else int_rounding_margin(v))
            return
        v = ct_scaled_inputs(x if x.ndim == 3 else x.unsqueeze(0), self.act)
        self.least = min(self.least, int_rounding_margin(v) if self.act["type"] == "int"
                         else e4m3_rounding_margin(v[v.abs() < FP8_MAX]))

    def smallest(self):
        return min(self.least, CT_ROUNDED_MARGIN[0])

    def reset(self):
        self.least = float("inf")
        CT_ROUNDED_MARGIN[0] = float("inf")

    def remove(self):
        for h in self.hooks:
            h.remove()


def int_rounding_margin(v):
    """min over the nonzero elements of v of the distance from |v| to the nearest half integer
    (where rounding to an integer changes its result), relative to |v|; values clamped to 127
    (|v| > 127) do not count."""
    a = v.abs().flatten().double()
    a = a[(a > 0) & (a < 127)]
    if a.numel() == 0:
        return float("inf")
    d = (a - (a - 0.5).round() - 0.5).abs()
    return float((d / a).min())


def e4m3_rounding_margin(v):
    """min over the nonzero elements of v (|v| <= 448) of the distance from |v| to the nearest
    midpoint between two adjacent E4M3 magnitudes (where round to nearest changes its result),
    relative to |v|."""
    import torch
    a = v.abs().flatten().double()
    a = a[a > 0]
    if a.numel() == 0:
        return float("inf")
    mags = torch.arange(127, dtype=torch.uint8).view(torch.float8_e4m3fn).double()  # 0 ... 448
    mids = (mags[:-1] + mags[1:]) / 2
    i = torch.searchsorted(mids, a).clamp(1, len(mids) - 1)
    d = torch.minimum((a - mids[i - 1]).abs(), (a - mids[i]).abs())
    d = torch.minimum(d, (a - mids[(i + 1).clamp(max=len(mids) - 1)]).abs())
    return float((d / a).min())


def fp8_expected(fp8, block, state):
    """transformers' dequantized parameters, computed here: {model parameter: e4m3(q) * scale in f32}.
    Per-expert checkpoint tensors are fused the way transformers 5.24's conversion for qwen2_moe /
    qwen3_moe does it: experts.gate_up_proj [E, 2I, H] (expert e: gate rows, then up rows) and
    experts.down_proj [E, H, I]."""
    deq = {k: q.float() * fp8_expand(s, block, q.shape) for k, (q, s) in fp8.items()}
    want = fuse_experts(deq)
    for k, w in want.items():
        assert k in state and state[k].shape == w.shape, (k, tuple(w.shape), tuple(state[k].shape) if k in state else None)
    return want


def fuse_experts(deq):
    """{checkpoint weight: dequantized f32} -> {model parameter: dequantized f32}: per-expert
    checkpoint tensors fused the way transformers 5.24's conversion for qwen2_moe / qwen3_moe does
    it, experts.gate_up_proj [E, 2I, H] (expert e: gate rows, then up rows) and experts.down_proj
    [E, H, I]; every other weight as it is."""
    import re
    import torch
    want, experts = {}, {}
    for k, w in deq.items():
        m = re.match(FP8_EXPERT_WEIGHT, k)
        if m is None:
            want[k] = w
        else:
            experts.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = w
    for pre, ws in experts.items():
        n = 1 + max(e for e, _ in ws)
        assert len(ws) == 3 * n, f"{pre}: not every expert's gate/up/down is quantized"
        want[pre + ".gate_up_proj"] = torch.stack(
            [torch.cat([ws[(e, "gate_proj")], ws[(e, "up_proj")]], 0) for e in range(n)])
        want[pre + ".down_proj"] = torch.stack([ws[(e, "down_proj")] for e in range(n)])
    return want


class LogCapture:
    """transformers' warnings while loading a quantized case (verbosity is error elsewhere),
    so that a load report (missing, unexpected, unconverted keys) fails the case."""
    def __init__(self, enabled):
        self.enabled, self.records = enabled, []

    def __enter__(self):
        import logging
        import transformers
        if not self.enabled:
            return self
        self.logger = transformers.utils.logging.get_logger("transformers")
        self.level = transformers.utils.logging.get_verbosity()
        self.handler = logging.Handler(logging.WARNING)
        self.handler.emit = lambda r: self.records.append(f"{r.levelname}: {r.getMessage()}")
        self.logger.addHandler(self.handler)
        transformers.utils.logging.set_verbosity_warning()
        return self

    def __exit__(self, *exc):
        import transformers
        if not self.enabled:
            return
        self.logger.removeHandler(self.handler)
        transformers.utils.logging.set_verbosity(self.level)


def bf16_flip(dec):
    """Per row: whether argmax over the bf16-rounded logits differs from the f32 argmax at some step."""
    import torch
    return (dec.to(torch.bfloat16).float().argmax(-1) != dec.argmax(-1)).any(-1)


def moe_tweak(case):
    """The routers of a MoE case: N(0, 0.2) (logits of spread ~1 over 32 dims), and the case's
    special router (all zeros, or two equal rows) — checked to tie exactly in torch."""
    spread = case.get("router_std", 0.2)

    def tweak(state, cfg, gen, store_dtype, checks):
        import torch
        routers = sorted(k for k in state if k.endswith("mlp.gate.weight") or k.endswith("mlp.router.weight"))
        assert routers, "no router weights"
        for k in routers:
            state[k] = (spread * torch.randn(state[k].shape, generator=gen)).to(store_dtype).to(torch.float32)
        r = case.get("router")
        if r is not None:
            k = f"model.layers.{r[1]}.mlp.gate.weight"
            if r[0] == "zeros":
                state[k] = torch.zeros_like(state[k])
            else:
                state[k][r[3]] = state[k][r[2]]
            x = torch.randn(64, cfg["hidden_size"], generator=gen)
            logits = torch.nn.functional.linear(x, state[k])
            probs = torch.softmax(logits, -1)
            if r[0] == "zeros":
                assert torch.all(probs == probs[:, :1]), "a zero router should tie every expert"
                checks["router_tied_experts"] = "all"
                checks["topk_of_ties"] = torch.topk(probs[:1], cfg["num_experts_per_tok"], -1).indices[0].tolist()
            else:
                assert torch.equal(logits[:, r[2]], logits[:, r[3]]), "equal router rows should tie exactly"
                checks["router_tied_experts"] = [r[2], r[3]]
    return tweak



def reset_rope(ref):
    """Dynamic NTK keeps state between calls in transformers (frequencies grown past
    max_position_embeddings stay until a short call resets them); the references here are
    each call on its own: the state as loaded before every call."""
    re = getattr(ref.model, "language_model", ref.model).rotary_emb  # (a multimodal model's text model)
    if hasattr(re, "original_inv_freq") and hasattr(re, "original_max_seq_len"):
        re.register_buffer("inv_freq", re.original_inv_freq.clone(), persistent=False)
        re.max_seq_len_cached = re.original_max_seq_len


def text_config(cfg):
    """The text model's config: a multimodal wrapper's text_config (Mistral 3), else the config."""
    return cfg.get("text_config", cfg)


def causal_lm(cfg):
    """AutoModelForCausalLM, or the config's own class where transformers' auto map has none for
    its model_type (Mistral4ForCausalLM in 5.24: mistral4 ships inside Mistral 3's multimodal
    class, its text model has no AutoModelForCausalLM entry)."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    if cfg["architectures"][0].endswith("ForConditionalGeneration"):  # (Qwen3.5's: the auto map has its text model)
        return getattr(transformers, cfg["architectures"][0])
    if cfg["model_type"] in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return transformers.AutoModelForCausalLM
    return getattr(transformers, cfg["architectures"][0])


def family_case(index, c, dtype_suffix, dtype_name, rewrite, seed_base=2000, tweak=None):
    """Writes tests/fixtures/golden/<family><suffix>/: the model as save_pretrained writes it
    (config.json, generation_config.json, model.safetensors untouched) and golden.safetensors
    with the tensors of README.md plus decode_logits (transformers' generate, KV cache)."""
    import numpy as np
    import torch
    from safetensors.torch import save_file, load_file
    from transformers import AutoConfig, AutoModelForCausalLM
    name, cfg, inp = c["name"] + dtype_suffix, dict(c["config"]), c["inputs"]
    print(f"[golden] {name}", flush=True)
    d = os.path.join(OUT, name)
    seed = seed_base + index
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    store_dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype_name, torch.float32)
    cfg["torch_dtype"] = dtype_name
    tmp = os.path.join(OUT, "." + name + ".config")
    os.makedirs(tmp, exist_ok=True)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    hf_cfg = AutoConfig.from_pretrained(tmp)
    shutil.rmtree(tmp)
    cls = causal_lm(cfg)
    model = (cls.from_config(hf_cfg, dtype=torch.float32) if hasattr(cls, "from_config")
             else cls._from_config(hf_cfg, dtype=torch.float32))
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for pname, p in model.named_parameters():
        special = (issue40_init(pname, p.shape, gen) if cfg["model_type"].startswith(("qwen3_5", "qwen3_next"))
                   else None)
        if special is not None:
            t = special
        elif pname.endswith("norm.weight"):
            # Gemma's norms scale by (1 + w): around 0 there, around 1 elsewhere.
            base = 0.0 if cfg["model_type"].startswith("gemma") else 1.0
            t = base + 0.1 * torch.randn(p.shape, generator=gen)
        elif pname.endswith("self_attn.sinks"):
            t = torch.randn(p.shape, generator=gen)  # gpt-oss's sinks: as large as the scores
        elif pname.endswith(".bias"):
            t = 0.05 * torch.randn(p.shape, generator=gen)
        elif "embed_tokens" in pname:
            t = 0.2 * torch.randn(p.shape, generator=gen)
        elif "lm_head" in pname or any(s in pname for s in ("q_proj", "k_proj", "qkv_proj")):
            t = 0.1 * torch.randn(p.shape, generator=gen)
        else:  # v/o/gate/up/down
            t = 0.08 * torch.randn(p.shape, generator=gen)
        state[pname] = t.to(store_dtype).to(torch.float32).contiguous()
    checks = {}
    if tweak is not None:  # the mixtures of experts' routers (moe_tweak)
        tweak(state, cfg, gen, store_dtype, checks)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    if os.path.isdir(d):
        shutil.rmtree(d)
    model.to(store_dtype)
    ct, ct_q, compressor = c.get("ct"), {}, None
    if ct is not None:  # issue 37: compressed-tensors FP8, written by compressed-tensors itself
        assert dtype_name == "float32", "compressed-tensors cases are f32 (scales in the model dtype)"
        if ("weights" in ct and (ct["weights"]["symmetric"] or ct["weights"]["num_bits"] == 4)
                and ct["weights"]["strategy"] in ("channel", "group")
                and not ct_is_mxfp4(ct)
                and c["config"].get("model_type") == "llama"  # (the Llamas linnet quantize's test reads)
                and (ct["weights"]["num_bits"] == 4 or ct.get("input_activations"))):
            # The model before quantization, kept for `linnet quantize --scheme fp8-channel|w8a8|w4a16|w4a16-asym`'s
            # test (it must write what compressed-tensors writes: tests/quantize_test.cpp).
            source = os.path.join(ROOT, "tests", "fixtures", "quantize", os.path.basename(d) + "_source")
            shutil.rmtree(source, ignore_errors=True)
            model.save_pretrained(source)
        compressor, ct_q = ct_quantize(model, ct)
    model.save_pretrained(d)
    if compressor is not None:
        compressor.update_config(d)
    if ct is not None and "router" in c:
        # a mixture of experts: its per-expert tensors compressed as compressed-tensors compresses a
        # layer (transformers 5.24's experts are fused parameters, not nn.Linear, so
        # apply_quantization_config leaves them out)
        ct_q.update(ct_quantize_experts(d, ct))
    quant, fp8, load_args, want = c.get("quant"), {}, {}, {}
    if ct_q:
        # transformers decompresses each weight to e4m3(q) * scale (f32) on the first forward
        # (the experts fused as transformers fuses them)
        want = fuse_experts({k: ct_dequantized(t) for k, t in ct_q.items()})
    if quant is not None:  # issue 37: the decoder layers' nn.Linear weights in fine-grained FP8
        import re
        from safetensors import safe_open
        linears = {n + ".weight" for n, m in model.named_modules()
                   if isinstance(m, torch.nn.Linear) and ".layers." in n}
        with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
            # and a mixture of experts' per-expert weights, as the checkpoint stores them
            linears |= {k for k in f.keys() if re.match(FP8_EXPERT_WEIGHT, k)}
        # the routers (model.layers.N.mlp.gate, no nn.Linear in transformers) stay unquantized
        routers = sorted(k[:-len(".weight")] for k in state if k.endswith(".mlp.gate.weight"))
        assert not any(r + ".weight" in linears for r in routers), routers
        # and the modules a case names (Qwen3-Next's one-row shared_expert_gate)
        kept = sorted(n for n in (k[:-len(".weight")] for k in linears)
                      if any(n.endswith(m) for m in quant.get("not_converted", [])))
        linears -= {n + ".weight" for n in kept}
        quant = {k: v for k, v in quant.items() if k != "not_converted"}
        if routers or kept:
            quant = dict(quant, modules_to_not_convert=["lm_head"] + routers + kept)
        fp8 = fp8_rewrite(d, linears, quant)
        want = fp8_expected(fp8, quant["weight_block_size"], state)
        # Dequantize on load whatever the machine (with a GPU transformers would keep FP8Linear).
        from transformers import FineGrainedFP8Config
        load_args["quantization_config"] = FineGrainedFP8Config(dequantize=True, **{
            k: v for k, v in fp8_config(quant).items() if k not in ("quant_method",)})
    if c.get("gpt_oss_mxfp4"):  # issue 39: gpt-oss's experts in MXFP4 as it ships them
        want = gpt_oss_mxfp4_rewrite(d)
        from transformers import Mxfp4Config
        load_args["quantization_config"] = Mxfp4Config(dequantize=True,
                                                       modules_to_not_convert=GPT_OSS_MXFP4_NOT_CONVERTED)
        checks["mxfp4_expert_parameters"] = sorted(want)
        checks["mxfp4_weight_rel_error_max"] = round(max(rel(want[k], state[k]) for k in want), 6)
    gptq, gptq_w = c.get("gptq") or c.get("awq") or c.get("ct_actorder"), {}
    if gptq is not None:  # issue 37: the decoder layers' nn.Linear weights in GPTQ's or AWQ's layout
        import re
        from safetensors import safe_open
        linears = {n + ".weight" for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and ".layers." in n}
        with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
            # a mixture of experts' per-expert weights, as GPTQ's and AWQ's MoE checkpoints store them
            linears |= {k for k in f.keys() if re.match(FP8_EXPERT_WEIGHT, k)}
        gptq_w = (gptq_rewrite(d, linears, gptq) if c.get("gptq") else
                  ct_actorder_rewrite(d, linears, gptq) if c.get("ct_actorder") else awq_rewrite(d, linears, gptq))
        gptq_w = fuse_experts(gptq_w)  # (the model's parameters: experts fused as transformers fuses them)
        want = dict(gptq_w)
    del model

    by_decompression = bool(ct_q) and "weights" in ct and (
        (ct["weights"]["type"] == "int" and not ct["weights"]["symmetric"]) or ct_is_mxfp4(ct))
    if by_decompression:
        ref = ct_decompressed_reference(d, ct)
        checks["reference"] = CT_MXFP4_REFERENCE if ct_is_mxfp4(ct) else CT_ASYM_REFERENCE
        if "router" in c:
            checks["reference"] += CT_MOE_REFERENCE
    elif gptq_w:
        ref = dense_reference(d, gptq_w)
        checks["reference"] = (AWQ_REFERENCE if c.get("awq") else
                               CT_ACTORDER_REFERENCE if c.get("ct_actorder") else GPTQ_REFERENCE)
        if "router" in c:  # (a mixture of experts: the model class is the case's, its experts fused)
            checks["reference"] = (checks["reference"].replace("LlamaForCausalLM", cfg["architectures"][0]) +
                                   "; each expert's dequantized gate/up/down fused into experts.gate_up_proj and "
                                   "experts.down_proj as transformers 5.24 fuses per-expert checkpoint tensors")
    else:
        with LogCapture(quant is not None or ct is not None) as log:
            ref, info = causal_lm(cfg).from_pretrained(
                d, dtype=torch.float32, attn_implementation="eager", output_loading_info=True, **load_args)
        assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
        assert not log.records and not info.get("error_msgs"), (log.records, info)  # no load report
    ref.eval()
    if ct_q and not by_decompression:
        # compressed-tensors' decompression (what the first forward's hook does), done now so that
        # the weights can be checked; the layers keep their activation-quantizing forward
        ref.hf_quantizer.compressor.decompress_model(ref)
    if ct_q and "router" in c and ct.get("input_activations"):
        checks["ct_fused_experts_inputs_rounded"] = ct_moe_rounding(ref, ct["input_activations"])
        checks["reference"] = CT_MOE_ROUNDING_REFERENCE
    sd = ref.state_dict()
    for k, v in state.items():
        if k in want:
            # transformers' dequantization is exactly fp8 -> f32 times the f32 block scale
            # (experts: each expert's, then fused)
            if c.get("gpt_oss_mxfp4"):  # (dequantized by transformers into bf16: exact, MXFP4's values are)
                assert torch.equal(sd[k].float(), want[k]), f"{name}: {k} not e2m1(q) * 2^(e - 127)"
            else:
                assert sd[k].dtype == torch.float32 and torch.equal(sd[k], want[k]), f"{name}: {k} not q * scale"
        else:
            assert torch.equal(sd[k], v), f"{name}: {k} not loaded as saved"
    if fp8:
        assert not any(k.endswith("_scale_inv") for k in sd), "weight_scale_inv kept as a parameter"
        checks["fp8_quantized_tensors"] = len(fp8)
        checks["dequantized_equals_q_times_scale"] = True
        fused = sorted(k for k in want if k not in fp8)
        if fused:  # per-expert tensors transformers fused on load, each checked whole
            checks["fp8_fused_expert_parameters"] = fused
        # how far the FP8 weights are from the bf16 ones they were made from (largest relative L2)
        checks["fp8_weight_rel_error_max"] = round(max(rel(sd[k], state[k]) for k in want), 6)
    if gptq_w:
        which = "ct" if c.get("ct_actorder") else "gptq"
        checks[which + "_quantized_tensors"] = len(gptq_w)
        checks[which + "_weight_rel_error_max"] = round(max(rel(sd[k], state[k]) for k in gptq_w), 6)
    if ct_q:
        import re
        assert by_decompression or all(sd[k[:-len("weight")] + "weight_scale"].dtype == torch.float32 for k in ct_q
                                       if not re.match(FP8_EXPERT_WEIGHT, k))  # (experts: fused, no scales kept)
        checks["ct_quantized_tensors"] = len(ct_q)
        checks["dequantized_equals_q_times_scale"] = True
        checks["ct_weight_rel_error_max"] = round(max(rel(sd[k], state[k]) for k in want), 6)
    ref.generation_config.eos_token_id = None
    ref.generation_config.pad_token_id = 0
    V, H = text_config(cfg)["vocab_size"], text_config(cfg)["hidden_size"]
    S, S0, runs = inp["S"], inp["S0"], inp["runs"]
    steps = c.get("steps", STEPS)
    # compressed-tensors' int8 activations: a value within float noise of a rounding boundary
    # would round one way in torch and the other in any other f32 implementation (a step of
    # amax/127.5 in that input). Such inputs are drawn again until every quantized layer's input
    # of the forward, the packed runs and the greedy run is CT_INT8_MIN_MARGIN (relative) away
    # from a boundary (ct_margin_hooks). Static FP8 activations alike: one E4M3 step of one value
    # moved a packed run's hidden states by 1.3e-2 (relative) on ct_fp8_static_f32's first draw.
    acts = ct.get("input_activations") or {} if ct_q else {}
    # A mixture of experts with FP8 activations alike (its fused experts' rounding, ct_moe_rounding:
    # the first draw had a flip, 1.5e-5 in the forward's logits).
    margins = (ct_margin_hooks(ref, ct, ct_q) if acts.get("type") == "int" or acts.get("dynamic") is False
               or (acts and "router" in c) else None)
    # A case's min_greedy_gap: inputs drawn again until every greedy step's two best logits are
    # that far apart (a bf16 router whose rounding ties experts moves logits by more than float
    # noise: Mistral 4's).
    min_gap = c.get("min_greedy_gap", 0.0)
    for draw in range(2000 if margins or min_gap else 1):
        g = {}
        with torch.no_grad():
            toks = torch.from_numpy(rng.integers(0, V, size=(B, S))).long()
            for attempt in range(200 if c.get("want_bf16_flip") else 0):
                # Prompts drawn until a row's greedy run has a step that bf16 rounding would
                # decide otherwise, with no f32 near-tie that float noise could flip.
                p = toks[:, :S0]
                o = ref.generate(input_ids=p, attention_mask=torch.ones_like(p), do_sample=False, max_new_tokens=steps,
                                 min_new_tokens=0, eos_token_id=None, pad_token_id=0, output_logits=True,
                                 return_dict_in_generate=True)
                dec = torch.stack([x.float() for x in o.logits], 1)
                top2 = dec.topk(2, -1).values
                if bool(bf16_flip(dec).any()) and float((top2[..., 0] - top2[..., 1]).min()) > 1e-4:
                    checks["bf16_flip_rows"] = bf16_flip(dec).int().tolist()
                    checks["prompt_attempts"] = attempt + 1
                    break
                toks = torch.from_numpy(rng.integers(0, V, size=(B, S))).long()
            else:
                assert not c.get("want_bf16_flip"), f"{name}: no prompts with a bf16 near tie found"
            reset_rope(ref)
            logits = ref(input_ids=toks, attention_mask=torch.ones_like(toks)).logits.float()
            g["forward_tokens"] = toks.int()
            g["forward_logits"] = logits
            if ct_q and any(g.get("input_activations") for g in ct_groups(ct)):
                checks.update(ct_checks(ref, ct, ct_q, d, toks, logits))
            p_tok, p_pos, p_seg, p_tgt, p_lp, p_hid, p_logits = [], [], [], [], [], [], []
            for si, (ln, start) in enumerate(runs):
                t = torch.from_numpy(rng.integers(0, V, size=(1, ln))).long()
                if si == 1:
                    t = toks[:1, :ln].clone() if ln <= S else t
                pos = torch.arange(start, start + ln).unsqueeze(0)
                reset_rope(ref)
                out = ref.model(input_ids=t, position_ids=pos)
                hid = out.last_hidden_state[0].float()
                reset_rope(ref)
                lg = ref(input_ids=t, position_ids=pos).logits[0].float()  # with the family's logit transforms
                lsm = torch.log_softmax(lg, dim=-1)
                tgt = torch.full((ln,), -100, dtype=torch.long)
                tgt[:-1] = t[0, 1:]
                lp = torch.zeros(ln)
                lp[:-1] = lsm[torch.arange(ln - 1), tgt[:-1]]
                p_tok.append(t[0]); p_pos.append(pos[0]); p_seg.append(torch.full((ln,), si))
                p_tgt.append(tgt); p_lp.append(lp); p_hid.append(hid); p_logits.append(lg)
            tokens = torch.cat(p_tok); positions = torch.cat(p_pos); segments = torch.cat(p_seg)
            targets = torch.cat(p_tgt); log_probs = torch.cat(p_lp); hidden = torch.cat(p_hid)
            packed_logits = torch.cat(p_logits)
            weights = (targets >= 0).float()
            valid = torch.nonzero(targets >= 0).flatten()
            weights[valid[1]] = 0.5
            weights[valid[len(valid) // 2]] = 0.0
            loss = (weights.double() * -log_probs.double()).sum() / weights.sum().double()
            g["packed_tokens"] = tokens.int()
            g["packed_positions"] = positions.int()
            g["packed_segments"] = segments.int()
            g["packed_targets"] = targets.long()
            g["packed_weights"] = weights
            g["log_probs"] = log_probs
            g["loss"] = loss.float().reshape(())
            g["hidden"] = hidden
            # greedy generation with transformers' KV cache; its per-step logits are the
            # reference for prefill + decode.
            prompt = toks[:, :S0].clone()
            reset_rope(ref)
            outg = ref.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                max_new_tokens=steps, min_new_tokens=0, eos_token_id=None, pad_token_id=0,
                                output_logits=True, return_dict_in_generate=True)
            greedy = outg.sequences[:, S0:]
            dec = torch.stack([x.float() for x in outg.logits], 1)  # [B, Steps, V]
            assert greedy.shape == (B, steps) and dec.shape == (B, steps, V)
            assert torch.equal(dec.argmax(-1), greedy), "greedy tokens are not the logits' argmax"
            g["greedy_prompt"] = prompt.int()
            g["greedy_tokens"] = greedy.int()
            top2 = dec.topk(2, -1).values
            g["greedy_top2_gap"] = (top2[..., 0] - top2[..., 1]).float()
            g["decode_logits"] = dec
            by_length = (cfg.get("rope_scaling") or {}).get("rope_type") in ("dynamic", "longrope")
            checks["decode_step0_vs_forward"] = rel(dec[:, 0], logits[:, S0 - 1])
            assert margins or checks["decode_step0_vs_forward"] < 1e-5, checks  # (int8: drawn again below)
            if not by_length:  # run 1 is forward row 0's prefix; by-length RoPEs differ by design
                off1, ln1 = runs[0][0], runs[1][0]
                checks["packed_run1_vs_forward"] = rel(packed_logits[off1:off1 + ln1], logits[0, :ln1])
                assert margins or checks["packed_run1_vs_forward"] < 1e-5, checks
            ce = torch.nn.functional.cross_entropy(packed_logits, torch.where(weights == 1, targets, -100))
            assert abs(float(ce) - float(-log_probs[weights == 1].mean())) < 1e-5
        # (torch's own prefill and forward differ where an activation rounds both ways)
        if margins is None and float(g["greedy_top2_gap"].min()) >= min_gap:
            break
        if margins is not None and (margins.smallest() >= CT_INT8_MIN_MARGIN and checks["decode_step0_vs_forward"] < 1e-5
                                    and checks.get("packed_run1_vs_forward", 0) < 1e-5
                                    and float(g["greedy_top2_gap"].min()) >= CT_INT8_MIN_GREEDY_GAP):
            break
        if margins is not None:
            margins.reset()
        rng = np.random.default_rng(seed + 7919 * (draw + 1))
    else:
        raise AssertionError(f"{name}: no inputs clear of rounding boundaries (int8 activations) or near-ties "
                             f"(min_greedy_gap {min_gap})")
    if min_gap:
        checks["min_greedy_gap"] = min_gap
        checks["input_draws"] = draw + 1
    if margins is not None:
        margins.remove()
        which = ("int8" if acts.get("type") == "int" else "fp8") + ("_static" if acts.get("dynamic") is False else "")
        which += "_moe" if "router" in c else ""
        checks[f"ct_{which}_activation_min_rel_margin"] = float(f"{margins.smallest():.3g}")
        checks[f"ct_{which}_input_draws"] = draw + 1
    g = {k: v.contiguous() for k, v in g.items()}
    golden_path = os.path.join(d, "golden.safetensors")
    save_file(g, golden_path, metadata={"format": "pt"})
    with open(os.path.join(d, "config.json")) as f:
        saved_cfg = json.load(f)
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    entry = {
        "name": name,
        "note": c["note"] + f" ({dtype_name}; written by save_pretrained)",
        "saved": True,
        "family": True,
        "architecture": cfg["architectures"][0],
        "model_type": cfg["model_type"],
        "torch_dtype": dtype_name,
        "shapes": {"B": B, "S": S, "P": int(tokens.numel()), "runs_len_start": runs, "S0": S0, "Steps": steps},
        "greedy_min_top2_gap": round(float(g["greedy_top2_gap"].min()), 6),
        "checks": checks,
        "config": saved_cfg,
        "files": sorted(os.listdir(d)),
        "bytes": size,
    }
    if fp8:
        entry["fp8"] = {"weight_block_size": quant["weight_block_size"], "weight_dtype": "F8_E4M3",
                        "scale_dtype": "F32", "tensors": sorted(fp8)}
    int8_ct = ct_q and "weights" in ct and ct["weights"]["type"] == "int" and ct["weights"]["num_bits"] == 8 and \
        ct.get("input_activations")
    if ct_q and "groups" in ct:
        entry["compressed_tensors"] = {
            "format": "mixed-precision", "groups": ct["groups"], "ignore": ["lm_head"],
            "schemes (by module)": {k: "float-quantized FP8" if len(t) == 2 else "pack-quantized"
                                    for k, t in sorted(ct_q.items())}}
    elif int8_ct:
        layout = {n: [list(q.shape), list(s.shape)] for n, (q, s) in ct_q.items()}
        entry["compressed_tensors"] = {
            "format": "int-quantized", "weights": ct["weights"], "input_activations": ct["input_activations"],
            "ignore": ["lm_head"], "weight_dtype": "I8", "scale_dtype": "F32",
            "weight_and_scale_shapes": dict(sorted(layout.items())),
            "activations": ("every quantized layer's input x fake-quantized with its static input_scale s: x' = "
                            "round_half_even(clamp(x / s, -128, 127)) * s; y = x' @ (q * weight_scale)^T"
                            if ct["input_activations"].get("dynamic") is False else
                            "every quantized layer's input x fake-quantized at run time per token: s = amax|x| / "
                            "127.5 in f32 (2^-23 where amax is 0), x' = round_half_even(clamp(x / s, -128, 127)) * s; "
                            "y = x' @ (q * weight_scale)^T")}
    elif ct_q and ct_is_mxfp4(ct):
        layout = {n: [list(q.shape), list(sc.shape)] for n, (q, sc) in ct_q.items()}
        entry["compressed_tensors"] = {
            "format": "mxfp4-pack-quantized", "weights": ct["weights"], "ignore": ["lm_head"],
            "weight_packed_dtype": "U8", "scale_dtype": "U8 (E8M0)",
            "weight_and_scale_shapes (unpacked)": dict(sorted(layout.items())),
            "dequantized": "e2m1(q) * 2^(e - 127) per block of 32 columns; two E2M1 codes a byte, the first in the "
                           "low nibble; exact in bf16 and f32"}
    elif ct_q and ct["weights"]["type"] == "int":
        layout = {n: [list(t[0].shape), list(t[1].shape)] for n, t in ct_q.items()}
        entry["compressed_tensors"] = {
            "format": "pack-quantized", "weights": ct["weights"], "ignore": ["lm_head"],
            "weight_packed_dtype": "I32", "scale_dtype": "F32",
            "zero_point": "none (symmetric)" if ct["weights"]["symmetric"] else "I32 [out/8, groups], 8 rows a word",
            "weight_and_scale_shapes (unpacked)": dict(sorted(layout.items())),
            "dequantized": "(q - zero_point) * weight_scale per group of group_size columns, in f32; q and zero "
                           "point 4-bit signed, packed +8 eight a word from the low bits" if ct["weights"]["num_bits"] == 4
                           else "q * weight_scale per group of group_size columns, in f32; q 8-bit signed, packed +128 "
                                "four a word from the low bits"}
    elif ct_q:
        layout = {n: [list(q.shape), list(s.shape)] for n, (q, s) in ct_q.items()}
        entry["compressed_tensors"] = {
            "format": "float-quantized", "weights": ct["weights"], "input_activations": ct["input_activations"],
            "ignore": ["lm_head"], "weight_dtype": "F8_E4M3", "scale_dtype": "F32",
            "weight_and_scale_shapes": dict(sorted(layout.items())),
            "activations": "every quantized layer's input x fake-quantized at run time: per token (strategy token) "
                           "or per token and group of group_size columns (group): s = amax|x| / 448 in f32 "
                           "(2^-23 where amax is 0), x' = e4m3_rne(clamp(x / s, -448, 448)) * s; "
                           "y = x' @ (e4m3(q) * weight_scale)^T"}
    print(f"[golden]   ok: {size} bytes, loss={float(g['loss']):.6f}", flush=True)
    return entry


# Existing references are kept when the recomputed ones are this close (relative L2 per
# float tensor; integer tensors must be equal).  Last-bit CPU noise is ~1e-7 to 3e-6.
KEEP_REL = 1e-5


def hf_config_dict(cfg):
    """config.json as written: classic Hugging Face keys (torch_dtype, rope_scaling)."""
    out = {}
    for k, v in cfg.items():
        if v is None and k in ("attention_bias", "mlp_bias"):
            continue  # Qwen2 configs have no such flags
        out[k] = v
    return out


# --------------------------------------------------------------------------------------
# Generation of weights, inputs, references
# --------------------------------------------------------------------------------------

def main():
    import numpy as np
    import torch
    import transformers
    from safetensors.torch import save_file, load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    rewrite = "--rewrite" in sys.argv[1:]
    if "--only" in sys.argv[1:]:
        return write_only(sys.argv[sys.argv.index("--only") + 1:])
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT, exist_ok=True)
    assert all(n in [c["name"] for c in CASES] for n in SAVED), SAVED

    manifest = {
        "generator": "tools/golden/make_golden.py",
        "reference": "transformers AutoModelForCausalLM (LlamaForCausalLM / Qwen2ForCausalLM), "
                     "float32, attn_implementation=eager, CPU",
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                     "safetensors": __import__("safetensors").__version__,
                     "numpy": np.__version__, "python": sys.version.split()[0]},
        "error_metric": "||out - ref||_2 / ||ref||_2 over all elements",
        "bounds": {"float32": 1e-4, "bfloat16": 2e-2},
        "saved_cases": {n + SAVED_SUFFIX: n for n in SAVED},
        "cases": [],
    }

    for ci, c in enumerate(CASES):
        name, cfg, inp = c["name"], c["config"], c["inputs"]
        print(f"[golden] {name}", flush=True)
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        seed = 1000 + ci
        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)

        # ---- config.json (classic HF format) -----------------------------------------
        cfg_json = hf_config_dict(cfg)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg_json, f, indent=2)
            f.write("\n")

        # ---- random checkpoint ----------------------------------------------------------
        hf_cfg = AutoConfig.from_pretrained(d)
        model = AutoModelForCausalLM.from_config(hf_cfg, dtype=torch.float32)
        gen = torch.Generator().manual_seed(seed)
        state = {}
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                t = 1.0 + 0.1 * torch.randn(p.shape, generator=gen)
            elif pname.endswith(".bias"):
                t = 0.05 * torch.randn(p.shape, generator=gen)
            elif "embed_tokens" in pname:
                t = 0.2 * torch.randn(p.shape, generator=gen)
            elif "lm_head" in pname:
                t = 0.1 * torch.randn(p.shape, generator=gen)
            elif any(s in pname for s in ("q_proj", "k_proj")):
                t = 0.1 * torch.randn(p.shape, generator=gen)
            else:  # v/o/gate/up/down
                t = 0.08 * torch.randn(p.shape, generator=gen)
            state[pname] = t.contiguous()
        if cfg["tie_word_embeddings"]:
            state.pop("lm_head.weight", None)
        store_dtype = torch.bfloat16 if cfg["torch_dtype"] == "bfloat16" else torch.float32
        state = {k: v.to(store_dtype).contiguous() for k, v in sorted(state.items())}
        save_file(state, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})

        # ---- reference model: loaded back from the fixture folder, in float32 -------------
        ref, info = AutoModelForCausalLM.from_pretrained(
            d, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
        ref.eval()
        missing = [k for k in info["missing_keys"] if not (cfg["tie_word_embeddings"] and k == "lm_head.weight")]
        assert not missing and not info["unexpected_keys"] and not info["mismatched_keys"], info
        sd = ref.state_dict()
        for k, v in state.items():
            assert torch.equal(sd[k], v.to(torch.float32)), f"{name}: {k} not loaded as saved"
        if cfg["tie_word_embeddings"]:
            assert torch.equal(sd["lm_head.weight"], sd["model.embed_tokens.weight"])
        else:
            assert "lm_head.weight" in state
        check_config(ref, cfg)
        ref.generation_config.eos_token_id = None  # greedy never stops early
        ref.generation_config.pad_token_id = 0

        V, H = cfg["vocab_size"], cfg["hidden_size"]
        S, S0, runs = inp["S"], inp["S0"], inp["runs"]
        assert S0 + STEPS <= cfg["max_position_embeddings"]

        g = {}
        with torch.no_grad():
            # ---- forward -----------------------------------------------------------------
            toks = torch.from_numpy(rng.integers(0, V, size=(B, S))).long()
            logits = ref(input_ids=toks, attention_mask=torch.ones_like(toks)).logits.float()
            assert logits.shape == (B, S, V)
            g["forward_tokens"] = toks.int()
            g["forward_logits"] = logits

            # ---- packed ------------------------------------------------------------------
            p_tok, p_pos, p_seg, p_tgt, p_lp, p_hid, p_logits = [], [], [], [], [], [], []
            for si, (ln, start) in enumerate(runs):
                t = torch.from_numpy(rng.integers(0, V, size=(1, ln))).long()
                if si == 1:  # run 1 is a prefix of forward row 0: cross-checked below
                    t = toks[:1, :ln].clone() if ln <= S else t
                pos = torch.arange(start, start + ln).unsqueeze(0)
                assert start + ln <= cfg["max_position_embeddings"]
                out = ref.model(input_ids=t, position_ids=pos)
                hid = out.last_hidden_state[0].float()
                lg = ref.lm_head(out.last_hidden_state)[0].float()
                lsm = torch.log_softmax(lg, dim=-1)
                tgt = torch.full((ln,), -100, dtype=torch.long)
                tgt[:-1] = t[0, 1:]
                lp = torch.zeros(ln)
                lp[:-1] = lsm[torch.arange(ln - 1), tgt[:-1]]
                p_tok.append(t[0]); p_pos.append(pos[0]); p_seg.append(torch.full((ln,), si))
                p_tgt.append(tgt); p_lp.append(lp); p_hid.append(hid); p_logits.append(lg)
            tokens = torch.cat(p_tok); positions = torch.cat(p_pos); segments = torch.cat(p_seg)
            targets = torch.cat(p_tgt); log_probs = torch.cat(p_lp); hidden = torch.cat(p_hid)
            packed_logits = torch.cat(p_logits)
            P = tokens.numel()
            weights = (targets >= 0).float()
            valid = torch.nonzero(targets >= 0).flatten()
            weights[valid[1]] = 0.5
            weights[valid[len(valid) // 2]] = 0.0
            wsum = weights.sum()
            # loss in float64 from the f32 log-probs, stored f32
            loss = (weights.double() * -log_probs.double()).sum() / wsum.double()
            g["packed_tokens"] = tokens.int()
            g["packed_positions"] = positions.int()
            g["packed_segments"] = segments.int()
            g["packed_targets"] = targets.long()
            g["packed_weights"] = weights
            g["log_probs"] = log_probs
            g["loss"] = loss.float().reshape(())
            g["hidden"] = hidden

            # ---- greedy ------------------------------------------------------------------
            prompt = toks[:, :S0].clone() if S0 <= S else \
                torch.from_numpy(rng.integers(0, V, size=(B, S0))).long()
            outg = ref.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                                do_sample=False, max_new_tokens=STEPS, min_new_tokens=0,
                                eos_token_id=None, pad_token_id=0)
            greedy = outg[:, S0:]
            assert greedy.shape == (B, STEPS), greedy.shape
            g["greedy_prompt"] = prompt.int()
            g["greedy_tokens"] = greedy.int()
            # top-1 minus top-2 logit at each greedy step (f32 reference): where it is
            # smaller than a run's logit error, that run may legitimately pick the other
            # token (and diverge afterwards).
            g["greedy_top2_gap"] = greedy_gaps(ref, prompt, greedy).float()

            # ---- independent checks ------------------------------------------------------
            checks = independent_checks(ref, cfg, g, packed_logits, runs, S0)

        g = {k: v.contiguous() for k, v in g.items()}
        fresh = g
        golden_path = os.path.join(d, "golden.safetensors")
        kept = None if rewrite else keep_existing(golden_path, g)
        if kept is not None:
            g, kept_rel = kept
        else:
            save_file(g, golden_path, metadata={"format": "pt"})
        back = load_file(golden_path)
        assert sorted(back) == sorted(g)
        for k, v in g.items():
            assert back[k].dtype == v.dtype and torch.equal(back[k], v), k

        gaps = g["greedy_top2_gap"]
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        entry = {
            "name": name,
            "note": c["note"],
            "saved": False,
            "architecture": cfg["architectures"][0],
            "torch_dtype": cfg["torch_dtype"],
            "vocab_size": V, "hidden_size": H,
            "num_attention_heads": cfg["num_attention_heads"],
            "num_key_value_heads": cfg["num_key_value_heads"],
            "head_dim": H // cfg["num_attention_heads"],
            "intermediate_size": cfg["intermediate_size"],
            "num_hidden_layers": cfg["num_hidden_layers"],
            "max_position_embeddings": cfg["max_position_embeddings"],
            "rms_norm_eps": cfg["rms_norm_eps"],
            "rope_theta": cfg["rope_theta"],
            "rope_scaling": cfg["rope_scaling"],
            "tie_word_embeddings": cfg["tie_word_embeddings"],
            "eos_token_id": cfg["eos_token_id"],
            "biases": sorted({k.split(".")[-2] for k in state if k.endswith(".bias")}),
            "shapes": {"B": B, "S": S, "P": P, "runs_len_start": runs, "S0": S0, "Steps": STEPS},
            "greedy_min_top2_gap": round(float(gaps.min()), 6),
            "checks": checks,
            # 0 when golden.safetensors holds exactly what was recomputed here; else the
            # largest relative difference of the kept file's float tensors (< KEEP_REL)
            "references_vs_recomputed": float(f"{kept_rel:.2e}") if kept is not None else 0.0,
            "config_keys": list(cfg_json),
            "files": sorted(os.listdir(d)),
            "bytes": size,
        }
        manifest["cases"].append(entry)
        print(f"[golden]   ok: {size} bytes, P={P}, loss={float(g['loss']):.6f}, "
              f"min greedy top-2 gap {float(gaps.min()):.4g}, "
              + ("references recomputed within KEEP_REL: kept the file" if kept is not None
                 else "references written"),
              flush=True)

        if name in SAVED:
            manifest["cases"].append(
                saved_twin(c, d, entry, g, fresh, packed_logits, store_dtype, ref))

    for fi, fc in enumerate(FAMILY_CASES):
        for di, (suffix, dtype_name) in enumerate(FAMILY_DTYPES):
            manifest["cases"].append(family_case(2 * fi + di, fc, suffix, dtype_name, rewrite))

    for mi, mc in enumerate(MOE_CASES):
        for di, (suffix, dtype_name) in enumerate(FAMILY_DTYPES):
            entry = family_case(2 * mi + di, mc, suffix, dtype_name, rewrite, seed_base=3000, tweak=moe_tweak(mc))
            entry["moe"] = True
            manifest["cases"].append(entry)

    manifest["total_bytes"] = sum(c["bytes"] for c in manifest["cases"])
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    print(f"[golden] wrote {len(manifest['cases'])} cases ({len(SAVED)} of them save_pretrained "
          f"twins), {manifest['total_bytes']} bytes in all", flush=True)


def case_writers(cases, write):
    """(name, writer) of every case in every dtype it is written in; write(c, i, di, suffix,
    dtype_name) writes one and returns its manifest entry."""
    out = []
    for i, c in enumerate(cases):
        for di, (suffix, dtype_name) in enumerate(c["dtypes"]):
            out.append((c["name"] + suffix,
                        lambda c=c, i=i, di=di, suffix=suffix, dtype_name=dtype_name:
                        write(c, i, di, suffix, dtype_name)))
    return out


def issue34_cases():
    """(name, writer) of every issue-34 case in every dtype it is written in."""
    return case_writers(ISSUE34_CASES, lambda c, i, di, suffix, dtype_name:
                        family_case(2 * i + di, c, suffix, dtype_name, False, seed_base=4000))


def issue36_cases():
    """(name, writer) of every issue-36 case in every dtype it is written in."""
    return case_writers(ISSUE36_CASES, lambda c, i, di, suffix, dtype_name:
                        family_case(2 * i + di, c, suffix, dtype_name, False, seed_base=5000))


def issue37_cases():
    """(name, writer) of every issue-37 case in every dtype it is written in."""
    def write(c, i, di, suffix, dtype_name):
        moe = "router" in c  # a mixture of experts (moe_case): its routers as MOE_CASES make them
        entry = family_case(2 * i + di, c, suffix, dtype_name, False, seed_base=6000,
                            tweak=moe_tweak(c) if moe else None)
        if moe:
            entry["moe"] = True
        return entry
    return case_writers(ISSUE37_CASES, write)


def issue38_cases():
    """(name, writer) of every issue-38 case in every dtype it is written in."""
    def write(c, i, di, suffix, dtype_name):
        tweak = deepseek_tweak(c) if c.get("router_bias") else moe_tweak(c)  # V2: no e_score_correction_bias
        entry = family_case(2 * i + di, c, suffix, dtype_name, False, seed_base=7000, tweak=tweak)
        entry["moe"] = True
        return entry
    return case_writers(ISSUE38_CASES, write)


def issue39_cases():
    """(name, writer) of every issue-39 case in every dtype it is written in."""
    def write(c, i, di, suffix, dtype_name):
        entry = family_case(2 * i + di, c, suffix, dtype_name, False, seed_base=8000, tweak=moe_tweak(c))
        entry["moe"] = True
        return entry
    return case_writers(ISSUE39_CASES, write)


def issue40_cases():
    """(name, writer) of every issue-40 case in every dtype it is written in."""
    def write(c, i, di, suffix, dtype_name):
        moe = "router" in c
        entry = family_case(2 * i + di, c, suffix, dtype_name, False, seed_base=9000,
                            tweak=moe_tweak(c) if moe else None)
        if moe:
            entry["moe"] = True
        return entry
    return case_writers(ISSUE40_CASES, write)


def write_only(names):
    """Writes the named cases (issue 34's, 36's and 37's) and replaces their entries in
    manifest.json; every other case and its files stay as they are."""
    import torch
    import transformers
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    writers = dict(issue34_cases())
    issue36 = dict(issue36_cases())
    issue37 = dict(issue37_cases())
    issue38 = dict(issue38_cases())
    issue39 = dict(issue39_cases())
    issue40 = dict(issue40_cases())
    writers.update(issue40)
    writers.update(issue36)
    writers.update(issue37)
    writers.update(issue38)
    writers.update(issue39)
    unknown = [n for n in names if n not in writers]
    assert names and not unknown, f"--only takes these cases: {sorted(writers)}; not {unknown}"
    path = os.path.join(OUT, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    for n in names:
        entry = writers[n]()
        entry["issue40" if n in issue40 else "issue39" if n in issue39 else "issue38" if n in issue38 else "issue37" if n in issue37 else "issue36" if n in issue36
              else "issue34"] = True
        manifest["cases"] = [e for e in manifest["cases"] if e["name"] != n] + [entry]
    manifest["total_bytes"] = sum(e["bytes"] for e in manifest["cases"])
    with open(path, "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")


def keep_existing(path, g):
    """The references already on disk, when they agree with the recomputed ones `g`:
    same names, dtypes and shapes, integer tensors equal, float tensors within KEEP_REL.
    Returns (tensors on disk, largest relative difference) or None."""
    import torch
    from safetensors.torch import load_file
    if not os.path.exists(path):
        return None
    try:
        old = load_file(path)
    except Exception:  # unreadable: rewrite it
        return None
    if sorted(old) != sorted(g):
        return None
    worst = 0.0
    for k, v in g.items():
        o = old[k]
        if o.dtype != v.dtype or o.shape != v.shape:
            return None
        if v.is_floating_point():
            r = float((o.double() - v.double()).norm() / max(float(v.double().norm()), 1e-30))
            if not r <= KEEP_REL:
                return None
            worst = max(worst, r)
        elif not torch.equal(o, v):
            return None
    return {k: old[k].contiguous() for k in g}, worst


def saved_twin(c, classic_dir, classic_entry, g, fresh, packed_logits, store_dtype, classic_ref):
    """Writes <case>_saved/: the classic model loaded with from_pretrained and written back
    with transformers' own save_pretrained (its config.json, generation_config.json and
    model.safetensors, untouched), plus the classic twin's golden.safetensors.  Checks
    that the saved folder loads to the same weights and the same outputs."""
    import torch
    from safetensors.torch import save_file, load_file
    from transformers import AutoModelForCausalLM
    name, cfg, inp = c["name"] + SAVED_SUFFIX, c["config"], c["inputs"]
    print(f"[golden] {name}", flush=True)
    d = os.path.join(OUT, name)
    if os.path.isdir(d):
        shutil.rmtree(d)  # nothing stale from an earlier transformers version
    model = AutoModelForCausalLM.from_pretrained(classic_dir, dtype=store_dtype)
    model.save_pretrained(d)
    del model
    save_file(g, os.path.join(d, "golden.safetensors"), metadata={"format": "pt"})
    back = load_file(os.path.join(d, "golden.safetensors"))
    assert all(torch.equal(back[k], v) and back[k].dtype == v.dtype for k, v in g.items())

    with open(os.path.join(d, "config.json")) as f:
        saved_cfg = json.load(f)
    gen_path = os.path.join(d, "generation_config.json")
    gen_cfg = None
    if os.path.exists(gen_path):
        with open(gen_path) as f:
            gen_cfg = json.load(f)
    classic_cfg = hf_config_dict(cfg)
    # The saved weights are the classic ones, bit for bit, under the same names.
    saved_w = load_file(os.path.join(d, "model.safetensors"))
    classic_w = load_file(os.path.join(classic_dir, "model.safetensors"))
    assert sorted(saved_w) == sorted(classic_w), (sorted(saved_w), sorted(classic_w))
    for k, v in classic_w.items():
        assert saved_w[k].dtype == v.dtype and torch.equal(saved_w[k], v), f"{name}: {k}"

    # ---- self-check: the saved folder loads to the same model and the same outputs ---------
    ref, info = AutoModelForCausalLM.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    ref.eval()
    missing = [k for k in info["missing_keys"] if not (cfg["tie_word_embeddings"] and k == "lm_head.weight")]
    assert not missing and not info["unexpected_keys"] and not info["mismatched_keys"], info
    sd, sd0 = ref.state_dict(), classic_ref.state_dict()
    assert sorted(sd) == sorted(sd0)
    for k in sd0:
        assert torch.equal(sd[k], sd0[k]), f"{name}: {k} differs from the classic twin"
    check_config(ref, cfg)
    assert torch.equal(ref.model.rotary_emb.inv_freq, classic_ref.model.rotary_emb.inv_freq)
    checks = {}
    with torch.no_grad():
        toks = g["forward_tokens"].long()
        logits = ref(input_ids=toks, attention_mask=torch.ones_like(toks)).logits.float()
        checks["forward_logits_vs_classic"] = rel(logits, fresh["forward_logits"])
        off, lg_runs, hid_runs = 0, [], []
        for ln, start in inp["runs"]:
            t = g["packed_tokens"][off:off + ln].long()[None]
            pos = g["packed_positions"][off:off + ln].long()[None]
            out = ref.model(input_ids=t, position_ids=pos)
            hid_runs.append(out.last_hidden_state[0].float())
            lg_runs.append(ref.lm_head(out.last_hidden_state)[0].float())
            off += ln
        checks["packed_logits_vs_classic"] = rel(torch.cat(lg_runs), packed_logits)
        checks["hidden_vs_classic"] = rel(torch.cat(hid_runs), fresh["hidden"])
        prompt = g["greedy_prompt"].long()
        outg = ref.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                            do_sample=False, max_new_tokens=STEPS, min_new_tokens=0,
                            eos_token_id=None, pad_token_id=0)
        assert torch.equal(outg[:, prompt.shape[1]:], fresh["greedy_tokens"].long()), "greedy differs"
    # Same weights and the same modelling code: expected bit-equal.
    assert all(v == 0.0 for v in checks.values()), checks

    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    entry = dict(classic_entry)
    entry.update({
        "name": name,
        "note": f"{c['name']} as written by transformers {__import__('transformers').__version__} "
                "save_pretrained (config.json, generation_config.json, model.safetensors "
                "untouched); references identical to " + c["name"],
        "saved": True,
        "twin": c["name"],
        "checks": checks,
        "config_keys": list(saved_cfg),
        "config_keys_not_in_classic": {k: saved_cfg[k] for k in saved_cfg if k not in classic_cfg},
        "classic_keys_not_in_config": [k for k in classic_cfg if k not in saved_cfg],
        "config_values_changed": {k: {"classic": classic_cfg[k], "saved": saved_cfg[k]}
                                  for k in saved_cfg if k in classic_cfg
                                  and saved_cfg[k] != classic_cfg[k]},
        "generation_config": gen_cfg,
        "files": sorted(os.listdir(d)),
        "bytes": size,
    })
    print(f"[golden]   ok: {size} bytes, {len(saved_cfg)} config keys, same logits as "
          f"{c['name']}", flush=True)
    return entry


def check_config(ref, cfg):
    """HF must have read config.json the way the C++ side will (classic keys)."""
    import numpy as np
    import torch
    c = ref.config
    assert c.hidden_size == cfg["hidden_size"] and c.vocab_size == cfg["vocab_size"]
    assert c.num_key_value_heads == cfg["num_key_value_heads"]
    assert abs(c.rms_norm_eps - cfg["rms_norm_eps"]) == 0, (c.rms_norm_eps, cfg["rms_norm_eps"])
    assert bool(c.tie_word_embeddings) == cfg["tie_word_embeddings"]
    assert c.eos_token_id == cfg["eos_token_id"] and c.bos_token_id == cfg["bos_token_id"]
    D = cfg["hidden_size"] // cfg["num_attention_heads"]
    assert getattr(c, "head_dim", D) == D
    # RoPE inverse frequencies computed here from the classic keys, independently of HF.
    theta = cfg["rope_theta"]
    inv = 1.0 / theta ** (np.arange(0, D, 2, dtype=np.float64) / D)
    rs = cfg["rope_scaling"]
    if rs is None:
        pass
    elif rs["rope_type"] == "linear":
        inv = inv / rs["factor"]
    elif rs["rope_type"] == "llama3":
        f, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], \
            rs["original_max_position_embeddings"]
        wl = 2 * np.pi / inv
        out = np.where(wl > old / lo, inv / f, inv)
        smooth = (old / wl - lo) / (hi - lo)
        mid = (wl >= old / hi) & (wl <= old / lo)
        out = np.where(mid, (1 - smooth) * inv / f + smooth * inv, out)
        inv = out
    else:
        raise ValueError(rs)
    hf_inv = ref.model.rotary_emb.inv_freq.double().numpy()
    assert np.allclose(hf_inv, inv, rtol=1e-6, atol=0), (hf_inv, inv)
    assert ref.model.rotary_emb.attention_scaling == 1.0


def own_forward(ref, cfg, tokens, positions, segments):
    """A from-scratch Llama forward over a packed batch (float64), independent of HF's
    modelling code: same weights, block-diagonal causal mask by segment.  Returns
    (hidden after final norm, logits)."""
    import torch
    sd = {k: v.double() for k, v in ref.state_dict().items()}
    H, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = H // nh
    eps = cfg["rms_norm_eps"]
    P = tokens.numel()
    inv = ref.model.rotary_emb.inv_freq.double()
    ang = positions.double()[:, None] * inv[None, :]
    cos, sin = torch.cos(torch.cat([ang, ang], -1)), torch.sin(torch.cat([ang, ang], -1))

    def rope(x):  # x [heads, P, D]; rotate_half pairs i with i + D/2
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def rms(x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w

    def lin(x, pre):
        y = x @ sd[pre + ".weight"].T
        return y + sd[pre + ".bias"] if pre + ".bias" in sd else y

    i = torch.arange(P)
    allowed = (segments[:, None] == segments[None, :]) & (positions[None, :] <= positions[:, None]) \
        & (i[None, :] <= i[:, None])
    x = sd["model.embed_tokens.weight"][tokens.long()]
    for l in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{l}."
        h = rms(x, sd[pre + "input_layernorm.weight"])
        q = lin(h, pre + "self_attn.q_proj").view(P, nh, D).transpose(0, 1)
        k = lin(h, pre + "self_attn.k_proj").view(P, nkv, D).transpose(0, 1)
        v = lin(h, pre + "self_attn.v_proj").view(P, nkv, D).transpose(0, 1)
        q, k = rope(q), rope(k)
        k = k.repeat_interleave(nh // nkv, 0)
        v = v.repeat_interleave(nh // nkv, 0)
        s = q @ k.transpose(1, 2) / D ** 0.5
        s = s.masked_fill(~allowed, float("-inf"))
        a = torch.softmax(s, -1) @ v
        x = x + lin(a.transpose(0, 1).reshape(P, H), pre + "self_attn.o_proj")
        h = rms(x, sd[pre + "post_attention_layernorm.weight"])
        gte = lin(h, pre + "mlp.gate_proj")
        x = x + lin(torch.nn.functional.silu(gte) * lin(h, pre + "mlp.up_proj"), pre + "mlp.down_proj")
    hid = rms(x, sd["model.norm.weight"])
    return hid, hid @ sd["lm_head.weight"].T


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def independent_checks(ref, cfg, g, packed_logits, runs, S0):
    """Cross-check the references by other routes; returns the measured differences."""
    import torch
    res = {}
    V = cfg["vocab_size"]
    tok, pos, seg = g["packed_tokens"], g["packed_positions"], g["packed_segments"]
    tgt, w, lp = g["packed_targets"], g["packed_weights"], g["log_probs"]

    # 1. greedy step 1 = argmax of forward logits at the prompt's last position (prompt is
    #    a prefix of forward_tokens), and greedy = a plain argmax loop over full forwards.
    S = g["forward_tokens"].shape[1]
    if S0 <= S:
        assert torch.equal(g["forward_logits"][:, S0 - 1].argmax(-1), g["greedy_tokens"][:, 0].long())
    seq = g["greedy_prompt"].long()
    for _ in range(STEPS):
        nxt = ref(input_ids=seq).logits[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], 1)
    assert torch.equal(seq[:, S0:], g["greedy_tokens"].long()), "greedy != argmax loop"

    # 2. packed run 1 (a prefix of forward row 0, positions 0..) = forward logits there.
    off1 = runs[0][0]
    ln1 = runs[1][0]
    res["packed_run1_vs_forward"] = rel(packed_logits[off1:off1 + ln1], g["forward_logits"][0, :ln1])
    assert torch.equal(tok[off1:off1 + ln1], g["forward_tokens"][0, :ln1])
    assert res["packed_run1_vs_forward"] < 1e-5, res

    # 3. whole pack at once through HF with a 4-D block-diagonal mask and position_ids.
    P = tok.numel()
    allowed = (seg[:, None] == seg[None, :]) & (torch.arange(P)[None, :] <= torch.arange(P)[:, None])
    mask4 = torch.zeros(1, 1, P, P).masked_fill(~allowed, torch.finfo(torch.float32).min)
    try:
        out = ref(input_ids=tok.long()[None], position_ids=pos.long()[None], attention_mask=mask4)
        res["packed_4d_mask_vs_runs"] = rel(out.logits[0], packed_logits)
        assert res["packed_4d_mask_vs_runs"] < 1e-5, res
    except (TypeError, ValueError, RuntimeError) as e:  # mask API differs across versions
        res["packed_4d_mask_vs_runs"] = f"skipped: {type(e).__name__}"

    # 4. own float64 implementation vs HF: hidden and logits, rope layout, biases, GQA.
    hid64, lg64 = own_forward(ref, cfg, tok, pos, seg)
    res["own_f64_hidden"] = rel(g["hidden"], hid64)
    res["own_f64_logits"] = rel(packed_logits, lg64)
    assert res["own_f64_hidden"] < 1e-5 and res["own_f64_logits"] < 1e-5, res

    # 5. log_probs from the f64 logits; loss = weighted mean of -log_probs.
    lsm = torch.log_softmax(lg64, -1)
    lp64 = torch.where(tgt >= 0, lsm[torch.arange(P), tgt.clamp(min=0)], torch.zeros((), dtype=torch.float64))
    res["own_f64_log_probs"] = rel(lp, lp64)
    assert res["own_f64_log_probs"] < 1e-5, res
    assert torch.all(lp[tgt < 0] == 0) and torch.all(lp[tgt >= 0] < 0)
    assert torch.all(w[tgt < 0] == 0) and (w == 0.5).sum() == 1 and ((w == 0) & (tgt >= 0)).sum() == 1
    loss64 = (w.double() * -lp64).sum() / w.double().sum()
    res["own_f64_loss"] = abs(float(g["loss"]) - float(loss64)) / abs(float(loss64))
    assert res["own_f64_loss"] < 1e-5, res
    # HF's own cross-entropy on the same f32 logits, weights 0/1 → mean CE of weight-1 tokens
    ce = torch.nn.functional.cross_entropy(packed_logits, torch.where(w == 1, tgt, -100))
    ones = (w == 1)
    assert abs(float(ce) - float(-lp[ones].mean())) < 1e-5

    # 6. packing rules of docs/entries.md "The entries" hold for the fixture itself
    for s in seg.unique():
        idx = torch.nonzero(seg == s).flatten()
        assert torch.equal(idx, torch.arange(int(idx[0]), int(idx[-1]) + 1)), "run not contiguous"
        assert torch.all(pos[idx][1:] > pos[idx][:-1]), "positions not increasing"
    assert any(int(p) > 0 for p in pos[torch.nonzero(torch.diff(seg, prepend=torch.tensor([-1])) != 0).flatten()]), \
        "no run starts at a nonzero position"
    assert int(tok.max()) < V and int(tok.min()) >= 0
    return {k: (round(v, 12) if isinstance(v, float) else v) for k, v in res.items()}


def greedy_gaps(ref, prompt, greedy):
    import torch
    seq = torch.cat([prompt.long(), greedy.long()], 1)
    with torch.no_grad():
        lg = ref(input_ids=seq).logits[:, prompt.shape[1] - 1:-1]
    top2 = lg.topk(2, -1).values
    return top2[..., 0] - top2[..., 1]


if __name__ == "__main__":
    ensure_venv()
    main()
