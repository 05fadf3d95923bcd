#!/usr/bin/env python3
"""Writes a Llama safetensors checkpoint (as `linnet init` makes one) as a GGUF file for
llama.cpp, for scripts/bench-llamacpp: the same weights in both programs, side by side.

Not a general converter (llama.cpp's convert_hf_to_gguf.py is; it needs PyTorch, which this
machine cannot install): Llama architecture only, matrices in bf16 or f16 (--outtype), norms
in f32, q/k rows permuted to llama.cpp's rope layout as its converter does. The vocabulary is
a SentencePiece model's (--tokenizer), padded with [PAD i] entries up to vocab_size; the
llama3 rope scaling factors (rope_freqs) are left out — they change no timing.

Needs numpy, sentencepiece and gguf (llama.cpp's gguf-py) in the Python that runs it.
"""
import argparse
import json
import pathlib
import struct

import gguf
import numpy as np
import sentencepiece as spm


def safetensors(path):
    """name → (dtype, shape, np.memmap of raw little-endian values)."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    (n,) = struct.unpack("<Q", bytes(raw[:8]))
    header = json.loads(bytes(raw[8 : 8 + n]))
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        view = raw[8 + n + b : 8 + n + e]
        dt = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}[info["dtype"]]
        out[name] = (info["dtype"], info["shape"], view.view(dt).reshape(info["shape"]))
    return out


def as_f32(dtype, a):
    if dtype == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


def permute(w, heads):  # Hugging Face's rotate_half rows → llama.cpp's interleaved pairs
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("out")
    ap.add_argument("--outtype", choices=["bf16", "f16"], default="bf16")
    ap.add_argument("--tokenizer", required=True, help="a SentencePiece tokenizer.model")
    args = ap.parse_args()
    ckpt = pathlib.Path(args.checkpoint)
    cfg = json.loads((ckpt / "config.json").read_text())
    tensors = {}
    for f in sorted(ckpt.glob("*.safetensors")):
        tensors.update(safetensors(f))

    heads, kv_heads, hidden = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"]
    head_dim = cfg.get("head_dim") or hidden // heads
    w = gguf.GGUFWriter(args.out, "llama")
    w.add_context_length(min(cfg["max_position_embeddings"], 8192))
    w.add_embedding_length(hidden)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_rope_dimension_count(head_dim)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if args.outtype == "bf16" else gguf.LlamaFileType.MOSTLY_F16)

    sp = spm.SentencePieceProcessor(model_file=args.tokenizer)
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        tokens.append(sp.id_to_piece(i).encode())
        scores.append(sp.get_score(i))
        types.append(gguf.TokenType.CONTROL if sp.is_control(i) else gguf.TokenType.UNKNOWN if sp.is_unknown(i)
                     else gguf.TokenType.BYTE if sp.is_byte(i) else gguf.TokenType.NORMAL)
    for i in range(len(tokens), cfg["vocab_size"]):
        tokens.append(f"[PAD{i}]".encode())
        scores.append(-1000.0)
        types.append(gguf.TokenType.USER_DEFINED)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())

    def matrix(name, key, rows_permuted_by=None):
        dtype, _, a = tensors[key]
        if rows_permuted_by:
            a = permute(a, rows_permuted_by)
        if args.outtype == "bf16" and dtype == "BF16":
            w.add_tensor(name, np.ascontiguousarray(a), raw_dtype=gguf.GGMLQuantizationType.BF16)
        elif args.outtype == "bf16":
            bits = as_f32(dtype, a).view(np.uint32)
            w.add_tensor(name, ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16),
                         raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(name, as_f32(dtype, a).astype(np.float16))

    def vector(name, key):
        dtype, _, a = tensors[key]
        w.add_tensor(name, as_f32(dtype, a))

    matrix("token_embd.weight", "model.embed_tokens.weight")
    vector("output_norm.weight", "model.norm.weight")
    if "lm_head.weight" in tensors and not cfg.get("tie_word_embeddings", False):
        matrix("output.weight", "lm_head.weight")
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        vector(f"blk.{i}.attn_norm.weight", p + "input_layernorm.weight")
        matrix(f"blk.{i}.attn_q.weight", p + "self_attn.q_proj.weight", heads)
        matrix(f"blk.{i}.attn_k.weight", p + "self_attn.k_proj.weight", kv_heads)
        matrix(f"blk.{i}.attn_v.weight", p + "self_attn.v_proj.weight")
        matrix(f"blk.{i}.attn_output.weight", p + "self_attn.o_proj.weight")
        vector(f"blk.{i}.ffn_norm.weight", p + "post_attention_layernorm.weight")
        matrix(f"blk.{i}.ffn_gate.weight", p + "mlp.gate_proj.weight")
        matrix(f"blk.{i}.ffn_up.weight", p + "mlp.up_proj.weight")
        matrix(f"blk.{i}.ffn_down.weight", p + "mlp.down_proj.weight")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
