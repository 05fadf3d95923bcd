"""A gpt-oss checkpoint of random weights with its experts in MXFP4 as gpt-oss ships them, for
`linnet bench` (random weights of a quantized config are not made by linnet itself): the
config.json of a preset (gpt-oss-20b's by default) cut to --layers layers, every bf16 tensor
N(0, 0.02), each expert's `…_blocks` random E2M1 codes with `…_scales` 2^(e − 127) for e in
[118, 122]. Numbers mean nothing; the bytes and shapes are the real model's.

  python3 random_gpt_oss_mxfp4.py OUT_DIR [--layers 2] [--experts 32] [--bf16-experts]

--bf16-experts writes the experts as transformers' bf16 gpt-oss stores them instead
(gate_up_proj [E, H, 2I], down_proj [E, I, H]: the transpose of the matrices linnet holds) and no
quantization_config: the load's transpose measured against MXFP4's.
"""
import argparse
import json
import os

import numpy as np

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--layers", type=int, default=2)
p.add_argument("--experts", type=int, default=32)  # gpt-oss-20b: 32; 120b: 128
p.add_argument("--bf16-experts", action="store_true")
a = p.parse_args()
H, I, V, Q, KV, D = 2880, 2880, 201088, 64, 8, 64
rng = np.random.default_rng(0)


def bf16(*shape):
    # float32 → bf16 bits (truncated), stored as uint16 then viewed by safetensors as BF16
    x = (rng.standard_normal(shape, dtype=np.float32) * 0.02).view(np.uint32)
    return (x >> 16).astype(np.uint16)


tensors, dtypes = {}, {}
def put(name, t, dtype="BF16"):
    tensors[name] = t
    dtypes[name] = dtype


put("model.embed_tokens.weight", bf16(V, H))
put("lm_head.weight", bf16(V, H))
put("model.norm.weight", bf16(H))
for l in range(a.layers):
    m = f"model.layers.{l}."
    for n in ("input_layernorm", "post_attention_layernorm"):
        put(m + n + ".weight", bf16(H))
    for n, rows in (("q_proj", Q * D), ("k_proj", KV * D), ("v_proj", KV * D)):
        put(m + f"self_attn.{n}.weight", bf16(rows, H))
        put(m + f"self_attn.{n}.bias", bf16(rows))
    put(m + "self_attn.o_proj.weight", bf16(H, Q * D))
    put(m + "self_attn.o_proj.bias", bf16(H))
    put(m + "self_attn.sinks", bf16(Q))
    put(m + "mlp.router.weight", bf16(a.experts, H))
    put(m + "mlp.router.bias", bf16(a.experts))
    for n, out, inn in (("gate_up_proj", 2 * I, H), ("down_proj", H, I)):
        if a.bf16_experts:  # random small bf16 bits (exponents 117..121), stored [E, in, out]
            bits = rng.integers(0, 1 << 16, (a.experts, inn, out), dtype=np.uint16)
            put(m + f"mlp.experts.{n}", (bits & 0x807F) | (((bits >> 7) % 5 + 117).astype(np.uint16) << 7))
            continue
        put(m + f"mlp.experts.{n}_blocks", rng.integers(0, 256, (a.experts, out, inn // 32, 16), dtype=np.uint8), "U8")
        put(m + f"mlp.experts.{n}_scales", rng.integers(118, 123, (a.experts, out, inn // 32), dtype=np.uint8), "U8")
    put(m + "mlp.experts.gate_up_proj_bias", bf16(a.experts, 2 * I))
    put(m + "mlp.experts.down_proj_bias", bf16(a.experts, H))
os.makedirs(a.out, exist_ok=True)
# safetensors.numpy has no bf16: the file written here (its header, then the bytes), bf16 as its bits.
path = os.path.join(a.out, "model.safetensors")
header, offset = {"__metadata__": {"format": "pt"}}, 0
for k, t in tensors.items():
    header[k] = {"dtype": dtypes[k], "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
    offset += t.nbytes
raw = json.dumps(header, separators=(",", ":")).encode()
raw += b" " * (-len(raw) % 8)
with open(path, "wb") as f:
    f.write(len(raw).to_bytes(8, "little"))
    f.write(raw)
    for t in tensors.values():
        f.write(np.ascontiguousarray(t).tobytes())
cfg = {"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "vocab_size": V, "hidden_size": H,
       "intermediate_size": I, "num_hidden_layers": a.layers, "num_attention_heads": Q, "num_key_value_heads": KV,
       "head_dim": D, "num_local_experts": a.experts, "num_experts_per_tok": 4, "attention_bias": True,
       "sliding_window": 128, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 150000,
       "swiglu_limit": 7.0, "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                            "original_max_position_embeddings": 4096, "rope_type": "yarn",
                                            "truncate": False},
       "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
           "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]},
       "tie_word_embeddings": False, "torch_dtype": "bfloat16", "eos_token_id": 200002}
if a.bf16_experts:
    del cfg["quantization_config"]
with open(os.path.join(a.out, "config.json"), "w") as f:
    json.dump(cfg, f, indent=2)
print(path)
