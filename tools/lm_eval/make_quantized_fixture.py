#!/usr/bin/env python3
"""lm-evaluation-harness's numbers on quantized checkpoints, for `linnet eval` (issue 37).

Quantizes tests/fixtures/lm_eval/model (made by make_fixture.py) with compressed-tensors 0.20.1's
own code, in each scheme of SCHEMES (round to nearest, min-max scales, lm_head kept):
  w4a16        pack-quantized W4A16, symmetric, groups of 32 (llm-compressor's W4A16);
  fp8_dynamic  float-quantized FP8, a scale per channel, activations FP8 per token at run time
               (llm-compressor's FP8_DYNAMIC);
  w8a8         int-quantized int8, a scale per channel, activations int8 per token at run time
               (llm-compressor's W8A8);
into tests/fixtures/lm_eval/model_<scheme>, runs lm-eval's CLI on it with the same two local
tasks, offline and on one thread:

  lm_eval --model hf --model_args pretrained=tests/fixtures/lm_eval/model_<scheme>,dtype=float32 \\
    --device cpu --tasks linnet_mc,linnet_rolling --include_path tools/lm_eval/tasks \\
    --log_samples --output_path <tmp> --batch_size 1

(transformers 5.24 loads the checkpoint through compressed-tensors: it decompresses every layer
to its f32 weights, and rounds the activations of the fp8_dynamic and w8a8 schemes at run time),
and writes what it logged, per request and per document, to
tests/fixtures/lm_eval/expected_<scheme>.json. Each is-greedy flag is kept with the margin of its
continuation's tokens over the runner-up (from a direct forward of the same model on lm-eval's
token ids), so that the test knows which flags are near ties.

Run it with `python3 tools/lm_eval/make_quantized_fixture.py [SCHEME…]` (default: all) after
make_fixture.py; it uses tools/lm_eval/.venv (requirements.txt beside this file,
compressed-tensors included). Deterministic: re-running writes the same files.
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
# Each scheme: compressed-tensors' QuantizationArgs of its weights and input activations (None:
# unquantized), the format compress_model must choose, and how expected_<scheme>.json says it.
SCHEMES = {
    "w4a16": (dict(num_bits=4, type="int", symmetric=True, dynamic=False, strategy="group", group_size=32), None,
              "pack-quantized", "compressed-tensors W4A16 (pack-quantized, symmetric, groups of 32"),
    "fp8_dynamic": (dict(num_bits=8, type="float", symmetric=True, dynamic=False, strategy="channel"),
                    dict(num_bits=8, type="float", symmetric=True, dynamic=True, strategy="token"),
                    "float-quantized", "compressed-tensors FP8 dynamic (float-quantized, a scale per channel, "
                    "activations FP8 per token"),
    "w8a8": (dict(num_bits=8, type="int", symmetric=True, dynamic=False, strategy="channel"),
             dict(num_bits=8, type="int", symmetric=True, dynamic=True, strategy="token"),
             "int-quantized", "compressed-tensors W8A8 (int-quantized, a scale per channel, activations int8 per token"),
}
# (Not MXFP4A16: lm-eval's hf backend cannot run it in f32 — transformers 5.24 decompresses its
# weights to bf16 and the f32 forward then fails: "expected m1 and m2 to have the same dtype".)


def quantized_dir(scheme):
    return os.path.join(FIXTURE, "model_" + scheme)


def in_venv():
    if os.path.abspath(sys.prefix) == os.path.abspath(VENV):
        return
    if not os.path.exists(VENV_PY):
        raise SystemExit("run tools/lm_eval/make_fixture.py first (it makes tools/lm_eval/.venv)")
    os.execv(VENV_PY, [VENV_PY, os.path.abspath(__file__)] + sys.argv[1:])


def quantize(scheme):
    """The dense fixture in `scheme` by compressed-tensors' own code, as ct_quantize in
    tools/golden/make_golden.py: every Linear but lm_head, scales from calculate_qparams on each
    group's or channel's min and max, then compress_model and save_pretrained."""
    import torch
    from transformers import AutoModelForCausalLM
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (QuantizationArgs, QuantizationConfig, QuantizationScheme,
                                                 apply_quantization_config)
    from compressed_tensors.quantization.utils import calculate_qparams
    weights, acts, fmt, _ = SCHEMES[scheme]
    model = AutoModelForCausalLM.from_pretrained(DENSE, dtype=torch.float32)
    args = QuantizationArgs(**{k: getattr(torch, v) if k in ("scale_dtype", "zp_dtype") else v for k, v in weights.items()})
    scheme_args = QuantizationScheme(targets=["Linear"], weights=args,
                                     input_activations=QuantizationArgs(**acts) if acts else None)
    config = QuantizationConfig(config_groups={"group_0": scheme_args}, ignore=["lm_head"], quantization_status="frozen")
    apply_quantization_config(model, config, show_progress=False)
    layers = 0
    for _, m in model.named_modules():
        if getattr(m, "quantization_scheme", None) is None:
            continue
        w = m.weight.data
        if args.strategy == "group":
            groups = w.reshape(w.shape[0], w.shape[1] // args.group_size, args.group_size)
            mn, mx = groups.amin(-1), groups.amax(-1)
        else:
            mn, mx = w.amin(1, keepdim=True), w.amax(1, keepdim=True)
        scale, zp = calculate_qparams(mn, mx, args)
        m.weight_scale.data.copy_(scale)
        m.weight_zero_point.data.copy_(zp)
        layers += 1
    compressor = ModelCompressor.from_pretrained_model(model)
    assert compressor.quantization_config.format == fmt, compressor.quantization_config.format
    compressor.compress_model(model)
    out = quantized_dir(scheme)
    if os.path.isdir(out):
        shutil.rmtree(out)
    model.save_pretrained(out)
    compressor.update_config(out)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(os.path.join(DENSE, f), os.path.join(out, f))
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


def make(scheme, tmp):
    import importlib.metadata as md
    layers = quantize(scheme)
    out = quantized_dir(scheme)
    mf.MODEL_DIR = out  # (run_cli's --model_args pretrained=)
    res, samples, _ = mf.run_cli(tmp)
    margins = greedy_margins(out, tmp, samples["linnet_mc"])
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
        "command": (f"lm_eval --model hf --model_args pretrained=tests/fixtures/lm_eval/model_{scheme},dtype=float32 "
                    "--device cpu --tasks linnet_mc,linnet_rolling --include_path tools/lm_eval/tasks --log_samples "
                    "--output_path <tmp> --batch_size 1"),
        "model": f"tests/fixtures/lm_eval/model_{scheme}",
        "quantization": f"{SCHEMES[scheme][3]}, min-max scales, "
                        f"round to nearest) of tests/fixtures/lm_eval/model: {layers} linear layers, lm_head kept",
        "mc": {"acc": res["results"]["linnet_mc"].get("acc,none"), "docs": mc},
        "rolling": {"aggregates": {"word_perplexity": agg["word_perplexity,none"],
                                   "byte_perplexity": agg["byte_perplexity,none"],
                                   "bits_per_byte": agg["bits_per_byte,none"]},
                    "docs": rolling},
    }
    mf.write_json(os.path.join(FIXTURE, f"expected_{scheme}.json"), expected, indent=1)
    print(f"[lm_eval] {scheme}: {layers} layers; mc acc {expected['mc']['acc']}; rolling {expected['rolling']['aggregates']}",
          flush=True)


def main():
    in_venv()
    schemes = sys.argv[1:] or list(SCHEMES)
    unknown = [s for s in schemes if s not in SCHEMES]
    if unknown:
        raise SystemExit(f"unknown scheme(s) {unknown}: expected some of {list(SCHEMES)}")
    tmp = tempfile.mkdtemp(prefix="linnet_lm_eval_q_")
    env = mf.offline_env(tmp)
    os.environ.clear()
    os.environ.update(env)
    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for scheme in schemes:
        os.makedirs(os.path.join(tmp, scheme))
        make(scheme, os.path.join(tmp, scheme))  # (lm-eval's results of each in a folder of their own)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
