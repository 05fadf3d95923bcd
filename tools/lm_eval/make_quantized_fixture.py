#!/usr/bin/env python3
"""lm-evaluation-harness's numbers on a quantized checkpoint, for `linnet eval` (issue 37).

Quantizes tests/fixtures/lm_eval/model (made by make_fixture.py) to compressed-tensors W4A16
(pack-quantized, symmetric, groups of 32: llm-compressor's W4A16 scheme with min-max scales,
written by compressed-tensors 0.20.1's own code) into tests/fixtures/lm_eval/model_w4a16, runs
lm-eval's CLI on it with the same two local tasks, offline and on one thread:

  lm_eval --model hf --model_args pretrained=tests/fixtures/lm_eval/model_w4a16,dtype=float32 \\
    --device cpu --tasks linnet_mc,linnet_rolling --include_path tools/lm_eval/tasks \\
    --log_samples --output_path <tmp> --batch_size 1

(transformers 5.24 loads the checkpoint through compressed-tensors and decompresses every
layer to (q) * scale in f32), and writes what it logged, per request and per document, to
tests/fixtures/lm_eval/expected_w4a16.json. Each is-greedy flag is kept with the margin of its
continuation's tokens over the runner-up (from a direct forward of the same model on lm-eval's
token ids), so that the test knows which flags are near ties.

Run it with `python3 tools/lm_eval/make_quantized_fixture.py` after make_fixture.py; it uses
tools/lm_eval/.venv (requirements.txt beside this file, compressed-tensors included).
Deterministic: the quantization is round to nearest; re-running writes the same files.
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixture as mf  # noqa: E402  (its paths, offline environment and CLI runner)

HERE, ROOT, VENV, VENV_PY = mf.HERE, mf.ROOT, mf.VENV, mf.VENV_PY
FIXTURE = mf.OUT
DENSE = mf.MODEL_DIR
QUANTIZED = os.path.join(FIXTURE, "model_w4a16")
GROUP = 32


def in_venv():
    if os.path.abspath(sys.prefix) == os.path.abspath(VENV):
        return
    if not os.path.exists(VENV_PY):
        raise SystemExit("run tools/lm_eval/make_fixture.py first (it makes tools/lm_eval/.venv)")
    os.execv(VENV_PY, [VENV_PY, os.path.abspath(__file__)] + sys.argv[1:])


def quantize():
    """The dense fixture in W4A16 by compressed-tensors' own code, as ct_quantize in
    tools/golden/make_golden.py: every Linear but lm_head, scales from calculate_qparams on each
    group's min and max, then compress_model and save_pretrained."""
    import torch
    from transformers import AutoModelForCausalLM
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (QuantizationArgs, QuantizationConfig, QuantizationScheme,
                                                 apply_quantization_config)
    from compressed_tensors.quantization.utils import calculate_qparams
    model = AutoModelForCausalLM.from_pretrained(DENSE, dtype=torch.float32)
    args = QuantizationArgs(num_bits=4, type="int", symmetric=True, dynamic=False, strategy="group", group_size=GROUP)
    config = QuantizationConfig(config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=args)},
                                ignore=["lm_head"], quantization_status="frozen")
    apply_quantization_config(model, config, show_progress=False)
    layers = 0
    for _, m in model.named_modules():
        if getattr(m, "quantization_scheme", None) is None:
            continue
        w = m.weight.data
        groups = w.reshape(w.shape[0], w.shape[1] // GROUP, GROUP)
        scale, zp = calculate_qparams(groups.amin(-1), groups.amax(-1), args)
        m.weight_scale.data.copy_(scale)
        m.weight_zero_point.data.copy_(zp)
        layers += 1
    compressor = ModelCompressor.from_pretrained_model(model)
    assert compressor.quantization_config.format == "pack-quantized", compressor.quantization_config.format
    compressor.compress_model(model)
    if os.path.isdir(QUANTIZED):
        shutil.rmtree(QUANTIZED)
    model.save_pretrained(QUANTIZED)
    compressor.update_config(QUANTIZED)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(os.path.join(DENSE, f), os.path.join(QUANTIZED, f))
    return layers


def greedy_margins(model_dir, tmp, samples):
    """For each multiple-choice request: the least margin, over its continuation's tokens, of the
    token's logit over the best other one (negative where it is not the argmax)."""
    import torch
    from transformers import AutoModelForCausalLM
    from lm_eval.models.huggingface import HFLM
    lm = HFLM(pretrained=model_dir, dtype="float32", device="cpu", batch_size=1)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    out = {}
    for s in samples:
        margins = []
        for i in range(len(s["arguments"])):
            a = s["arguments"][f"gen_args_{i}"]
            context, continuation = a["arg_0"], a["arg_1"]
            if context == "":
                cont = lm.tok_encode(continuation, add_special_tokens=False)
                ctx = [lm.prefix_token_id] if lm.prefix_token_id != cont[0] else cont[:1]
                cont = cont if lm.prefix_token_id != cont[0] else cont[1:]
            else:
                ctx, cont = lm._encode_pair(context, continuation)
            ids = (ctx + cont)[-(lm.max_length + 1):][:-1]
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0, -len(cont):].float()
            m = float("inf")
            for t, row in zip(cont, logits):
                other = torch.cat([row[:t], row[t + 1:]]).max()
                m = min(m, float(row[t] - other))
            margins.append(m)
        out[s["doc"]["id"]] = margins
    return out


def main():
    in_venv()
    tmp = tempfile.mkdtemp(prefix="linnet_lm_eval_q_")
    env = mf.offline_env(tmp)
    os.environ.clear()
    os.environ.update(env)
    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    import importlib.metadata as md

    layers = quantize()
    mf.MODEL_DIR = QUANTIZED  # (run_cli's --model_args pretrained=)
    res, samples, _ = mf.run_cli(tmp)
    margins = greedy_margins(QUANTIZED, tmp, samples["linnet_mc"])
    mc = []
    for s in samples["linnet_mc"]:
        reqs = [{"loglikelihood": float(r[0][0]), "is_greedy": mf.as_bool(r[0][1]), "greedy_margin": g}
                for r, g in zip(s["resps"], margins[s["doc"]["id"]])]
        mc.append({"id": s["doc"]["id"], "requests": reqs})
    rolling = [{"id": s["doc"]["id"], "loglikelihood": float(s["resps"][0][0])} for s in samples["linnet_rolling"]]
    agg = res["results"]["linnet_rolling"]
    versions = {p: md.version(p) for p in ("lm_eval", "torch", "transformers", "compressed-tensors")}
    expected = {
        "generator": "tools/lm_eval/make_quantized_fixture.py",
        "versions": versions,
        "command": ("lm_eval --model hf --model_args pretrained=tests/fixtures/lm_eval/model_w4a16,dtype=float32 "
                    "--device cpu --tasks linnet_mc,linnet_rolling --include_path tools/lm_eval/tasks --log_samples "
                    "--output_path <tmp> --batch_size 1"),
        "model": "tests/fixtures/lm_eval/model_w4a16",
        "quantization": f"compressed-tensors W4A16 (pack-quantized, symmetric, groups of {GROUP}, min-max scales, "
                        f"round to nearest) of tests/fixtures/lm_eval/model: {layers} linear layers, lm_head kept",
        "mc": {"acc": res["results"]["linnet_mc"].get("acc,none"), "docs": mc},
        "rolling": {"aggregates": {"word_perplexity": agg["word_perplexity,none"],
                                   "byte_perplexity": agg["byte_perplexity,none"],
                                   "bits_per_byte": agg["bits_per_byte,none"]},
                    "docs": rolling},
    }
    mf.write_json(os.path.join(FIXTURE, "expected_w4a16.json"), expected, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"[lm_eval] {layers} layers in W4A16; mc acc {expected['mc']['acc']}; rolling {expected['rolling']['aggregates']}",
          flush=True)


if __name__ == "__main__":
    main()
