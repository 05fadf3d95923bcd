#!/usr/bin/env python3
"""lm-evaluation-harness's numbers on a hybrid linear-attention model, for `linnet eval` (issue 40).

Writes tests/fixtures/lm_eval/model_qwen3_5: a Qwen3_5ForCausalLM (transformers 5.24's
qwen3_5_text) of tools/golden/make_golden.py's qwen3_5 shape — layers linear, full, linear,
linear; Gated DeltaNet of 4 key heads over 8 value heads of 8, conv kernel 4; gated attention of
8 heads over 4 KV heads of 16, partial rotary 0.25 — at the lm_eval fixture's vocabulary and 64
positions, with seeded weights (make_golden.py's issue40_init for the norms, the conv taps,
A_log and dt_bias; N(0, σ²) elsewhere, as its family cases), saved by the class's own
save_pretrained, beside tests/fixtures/lm_eval/model's tokenizer. Then runs lm-eval's CLI on it
offline, on one thread, with the two local tasks (make_fixture.py):

  lm_eval --model hf --model_args pretrained=tests/fixtures/lm_eval/model_qwen3_5,dtype=float32 \\
    --device cpu --tasks linnet_mc,linnet_rolling --include_path tools/lm_eval/tasks \\
    --log_samples --output_path <tmp> --batch_size 1

transformers runs each request (up to 64 tokens) by its chunked delta rule — a request of 64
tokens is one whole chunk, as linnet's aligned chunk at positions 0 … 63 — and writes what
lm-eval logged to tests/fixtures/lm_eval/expected_qwen3_5.json in make_quantized_fixture.py's
layout (each is-greedy flag with its continuation's least top-1 margin).

Run it with `python3 tools/lm_eval/make_hybrid_fixture.py` after make_fixture.py (it uses
tools/lm_eval/.venv). Deterministic: re-running writes the same files.
"""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_fixture as mf  # noqa: E402  (paths, tokenizer, offline environment, CLI runner)
import make_quantized_fixture as mq  # noqa: E402  (make_golden as a module, the margins, expected_<name>.json's layout)

NAME = "qwen3_5"
MODEL_OUT = os.path.join(mf.OUT, "model_" + NAME)
SEED = 9040


def make_model():
    """The checkpoint, by Qwen3_5ForCausalLM's own save_pretrained; returns the config."""
    import torch
    from transformers import AutoConfig
    mg = mq.golden()
    _, added, vocab_size = mf.tokenizer_specials()
    cfg = dict(mg.QWEN3_5, vocab_size=vocab_size, max_position_embeddings=mf.MAX_POS, torch_dtype="float32",
               bos_token_id=added[mf.BOS_TOKEN]["id"], eos_token_id=added[mf.EOS_TOKEN]["id"])
    tmp = tempfile.mkdtemp(prefix="linnet_hybrid_config_")
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f)
    hf_cfg = AutoConfig.from_pretrained(tmp)
    shutil.rmtree(tmp)
    model = mg.causal_lm(cfg).from_config(hf_cfg, dtype=torch.float32)
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            t = mg.issue40_init(pname, p.shape, gen)
            if t is None:
                if "embed_tokens" in pname:
                    t = 0.5 * torch.randn(p.shape, generator=gen)
                elif "lm_head" in pname:  # logits of std ~1.5, as make_fixture.py's Llama
                    t = 1.5 * p.shape[1] ** -0.5 * torch.randn(p.shape, generator=gen)
                else:
                    t = p.shape[-1] ** -0.5 * torch.randn(p.shape, generator=gen)
            p.copy_(t.to(torch.float32))
    if os.path.isdir(MODEL_OUT):
        shutil.rmtree(MODEL_OUT)
    model.save_pretrained(MODEL_OUT)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(os.path.join(mf.MODEL_DIR, f), os.path.join(MODEL_OUT, f))
    return cfg


def in_venv():
    if os.path.abspath(sys.prefix) == os.path.abspath(mf.VENV):
        return
    if not os.path.exists(mf.VENV_PY):
        raise SystemExit("run tools/lm_eval/make_fixture.py first (it makes tools/lm_eval/.venv)")
    os.execv(mf.VENV_PY, [mf.VENV_PY, os.path.abspath(__file__)] + sys.argv[1:])


def main():
    in_venv()
    tmp = tempfile.mkdtemp(prefix="linnet_lm_eval_hybrid_")
    env = mf.offline_env(tmp)
    os.environ.clear()
    os.environ.update(env)
    import importlib.metadata as md
    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    make_model()
    mf.MODEL_DIR = MODEL_OUT  # (run_cli's --model_args pretrained=)
    res, samples, _ = mf.run_cli(tmp)
    mc, rolling = mq.logged_numbers(res, samples, mq.greedy_margins(MODEL_OUT, tmp, samples["linnet_mc"]))
    expected = {
        "generator": "tools/lm_eval/make_hybrid_fixture.py",
        "versions": {p: md.version(p) for p in ("lm_eval", "torch", "transformers")},
        "command": (f"lm_eval --model hf --model_args pretrained=tests/fixtures/lm_eval/model_{NAME},dtype=float32 "
                    "--device cpu --tasks linnet_mc,linnet_rolling --include_path tools/lm_eval/tasks --log_samples "
                    "--output_path <tmp> --batch_size 1"),
        "model": f"tests/fixtures/lm_eval/model_{NAME}",
        "note": ("Qwen3_5ForCausalLM (qwen3_5_text), make_golden.py's qwen3_5 shape at this vocabulary and 64 "
                 "positions; transformers 5.24 runs every request by its chunked delta rule"),
        "reference": "transformers 5.24 loading the checkpoint",
        "mc": mc,
        "rolling": rolling,
    }
    mf.write_json(os.path.join(mf.OUT, f"expected_{NAME}.json"), expected, indent=1)
    print(f"[lm_eval] {NAME}: mc acc {expected['mc']['acc']}; rolling {expected['rolling']['aggregates']}", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
