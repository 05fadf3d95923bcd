#!/usr/bin/env python3
"""lm-evaluation-harness's numbers on quantized checkpoints, for `linnet eval` (issue 37).

Quantizes tests/fixtures/lm_eval/model (made by make_fixture.py) with compressed-tensors 0.20.1's
own code, in each scheme of SCHEMES (round to nearest, min-max scales, lm_head kept):
  w4a16        pack-quantized W4A16, symmetric, groups of 32 (llm-compressor's W4A16);
  fp8_dynamic  float-quantized FP8, a scale per channel, activations FP8 per token at run time
               (llm-compressor's FP8_DYNAMIC);
  w8a8         int-quantized int8, a scale per channel, activations int8 per token at run time
               (llm-compressor's W8A8);
and in the layouts transformers 5.24 reads without a compressed-tensors forward (written by
tools/golden/make_golden.py's own writers, as the golden fixtures are):
  mxfp4        compressed-tensors MXFP4A16 (mxfp4-pack-quantized: E2M1 values, an E8M0 scale per 32
               columns; compressed-tensors' own code);
  gptq         GPTQ 4-bit, symmetric, groups of 32, act-order (desc_act, g_idx);
  awq          AWQ gemm 4-bit, zero points, groups of 32;
  fp8_block    Hugging Face's fine-grained FP8, blocks of 16 × 32;
into tests/fixtures/lm_eval/model_<scheme>, runs lm-eval's CLI on it with the same two local
tasks, offline and on one thread:

  lm_eval --model hf --model_args pretrained=tests/fixtures/lm_eval/model_<scheme>,dtype=float32 \\
    --device cpu --tasks linnet_mc,linnet_rolling --include_path tools/lm_eval/tasks \\
    --log_samples --output_path <tmp> --batch_size 1

(transformers 5.24 loads the checkpoint through compressed-tensors: it decompresses every layer
to its f32 weights, and rounds the activations of the fp8_dynamic and w8a8 schemes at run time).
The other four run lm-eval on the checkpoint's dense twin instead: the same model with each
layer's weights as the format's own reader dequantizes them (compressed-tensors' decompression
for MXFP4 — transformers 5.24 decompresses it to bf16 and its f32 forward then fails —, the
dequantization of GPTQ, AWQ and FP8 blocks that make_golden.py checks against their libraries;
their transformers loaders need GPU kernels or libraries this CPU run does not install). Those
are the weights transformers multiplies by, and none of the four rounds its activations.
It
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
# Run on a dense twin (see the docstring): compressed-tensors' MXFP4A16, and the layouts written by
# make_golden.py's writers — each (writer's options, how expected_<scheme>.json says it).
SCHEMES["mxfp4"] = (dict(num_bits=4, type="float", symmetric=True, dynamic=False, strategy="group", group_size=32,
                         scale_dtype="uint8", zp_dtype="uint8"), None, "mxfp4-pack-quantized",
                    "compressed-tensors MXFP4A16 (mxfp4-pack-quantized, E8M0 scales per 32 columns")
WRITTEN = {
    "gptq": (dict(group=32, sym=True, desc_act=True), "GPTQ 4-bit (symmetric, groups of 32, act-order"),
    "awq": (dict(group=32), "AWQ gemm 4-bit (zero points, groups of 32"),
    # (16 rows: k_proj's 32 rows split whole at --tp 2)
    "fp8_block": (dict(weight_block_size=[16, 32]), "Hugging Face fine-grained FP8 (blocks of 16 x 32"),
}
TWINS = {"mxfp4", *WRITTEN}
ALL = list(SCHEMES) + list(WRITTEN)


def quantized_dir(scheme):
    return os.path.join(FIXTURE, "model_" + scheme)


def in_venv():
    if os.path.abspath(sys.prefix) == os.path.abspath(VENV):
        return
    if not os.path.exists(VENV_PY):
        raise SystemExit("run tools/lm_eval/make_fixture.py first (it makes tools/lm_eval/.venv)")
    os.execv(VENV_PY, [VENV_PY, os.path.abspath(__file__)] + sys.argv[1:])


def golden():
    """tools/golden/make_golden.py as a module (its writers and dequantizations)."""
    sys.path.insert(0, os.path.join(ROOT, "tools", "golden"))
    import make_golden
    return make_golden


def linears():
    from safetensors.torch import load_file
    st = load_file(os.path.join(DENSE, "model.safetensors"))
    return {k for k in st if k.endswith("_proj.weight")}


def write(scheme):
    """The dense fixture in one of WRITTEN's layouts by make_golden.py's writer. Returns (layers,
    {weight name: its dequantized f32 weight})."""
    mg = golden()
    out = quantized_dir(scheme)
    if os.path.isdir(out):
        shutil.rmtree(out)
    shutil.copytree(DENSE, out)
    opts, names = WRITTEN[scheme][0], linears()
    if scheme == "gptq":
        want = mg.gptq_rewrite(out, names, opts)
    elif scheme == "awq":
        want = mg.awq_rewrite(out, names, opts)
    else:
        mg.ROOT = tempfile.mkdtemp(prefix="linnet_fp8_source_")  # (fp8_rewrite keeps the source model there)
        fp8 = mg.fp8_rewrite(out, names, opts)
        shutil.rmtree(mg.ROOT, ignore_errors=True)
        block = opts["weight_block_size"]
        want = {k: q.float() * mg.fp8_expand(sc, block, q.shape) for k, (q, sc) in fp8.items()}
    return len(want), want


def decompressed(scheme):
    """{weight name: f32 weight} of model_<scheme> (mxfp4) as compressed-tensors decompresses it."""
    from safetensors.torch import load_file
    from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    import torch
    weights = SCHEMES[scheme][0]
    args = QuantizationArgs(**{k: getattr(torch, v) if k in ("scale_dtype", "zp_dtype") else v for k, v in weights.items()})
    qs = QuantizationScheme(targets=["Linear"], weights=args)
    saved, want = load_file(os.path.join(quantized_dir(scheme), "model.safetensors")), {}
    for k in saved:
        if k.endswith(".weight_packed"):
            base = k[:-len("weight_packed")]
            local = {n[len(base):]: t for n, t in saved.items() if n.startswith(base) and n[len(base):].startswith("weight")}
            want[base + "weight"] = MXFP4PackedCompressor.decompress(local, qs)["weight"].float()
    return want


def twin(want, scheme):
    """The dense fixture with `want`'s weights in place (config.json without quantization_config),
    beside the fixtures for the run (run_cli names the model by its path under the repository;
    make removes it)."""
    from safetensors.torch import load_file, save_file
    d = os.path.join(FIXTURE, "twin_" + scheme)
    if os.path.isdir(d):
        shutil.rmtree(d)
    shutil.copytree(DENSE, d)
    st = load_file(os.path.join(d, "model.safetensors"))
    assert set(want) <= set(st), sorted(set(want) - set(st))
    for k, v in want.items():
        assert v.shape == st[k].shape, (k, v.shape, st[k].shape)
        st[k] = v.contiguous()
    save_file(st, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    return d


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


def logged_numbers(res, samples, margins):
    """What lm-eval logged, as expected_<name>.json keeps it: the multiple-choice requests (each
    is-greedy flag with its margin) and the rolling documents with their aggregates."""
    mc = []
    for s in samples["linnet_mc"]:
        reqs = [{"loglikelihood": float(r[0][0]), "is_greedy": mf.as_bool(r[0][1]), "greedy_margin": g}
                for r, g in zip(s["resps"], margins[s["doc"]["id"]])]
        mc.append({"id": s["doc"]["id"], "requests": reqs})
    rolling = [{"id": s["doc"]["id"], "loglikelihood": float(s["resps"][0][0])} for s in samples["linnet_rolling"]]
    agg = res["results"]["linnet_rolling"]
    return ({"acc": res["results"]["linnet_mc"].get("acc,none"), "docs": mc},
            {"aggregates": {"word_perplexity": agg["word_perplexity,none"],
                            "byte_perplexity": agg["byte_perplexity,none"],
                            "bits_per_byte": agg["bits_per_byte,none"]},
             "docs": rolling})


def make(scheme, tmp):
    import importlib.metadata as md
    if scheme in WRITTEN:
        layers, want = write(scheme)
    else:
        layers = quantize(scheme)
        want = decompressed(scheme) if scheme in TWINS else None
    out = quantized_dir(scheme)
    ref = twin(want, scheme) if want is not None else out
    mf.MODEL_DIR = ref  # (run_cli's --model_args pretrained=)
    try:
        res, samples, _ = mf.run_cli(tmp)
        margins = greedy_margins(ref, tmp, samples["linnet_mc"])
    finally:
        if ref != out:
            shutil.rmtree(ref, ignore_errors=True)
    mc, rolling = logged_numbers(res, samples, margins)
    versions = {p: md.version(p) for p in ("lm_eval", "torch", "transformers", "compressed-tensors")}
    described = WRITTEN[scheme][1] if scheme in WRITTEN else SCHEMES[scheme][3]
    model_arg = f"tests/fixtures/lm_eval/model_{scheme}" if want is None else "<its dense twin>"
    expected = {
        "generator": "tools/lm_eval/make_quantized_fixture.py",
        "versions": versions,
        "command": (f"lm_eval --model hf --model_args pretrained={model_arg},dtype=float32 "
                    "--device cpu --tasks linnet_mc,linnet_rolling --include_path tools/lm_eval/tasks --log_samples "
                    "--output_path <tmp> --batch_size 1"),
        "model": f"tests/fixtures/lm_eval/model_{scheme}",
        "quantization": f"{described}, min-max scales, "
                        f"round to nearest) of tests/fixtures/lm_eval/model: {layers} linear layers, lm_head kept",
        "reference": ("transformers 5.24 loading the checkpoint" if want is None else
                      "transformers 5.24 on the checkpoint's dense twin: each layer's weights as the format's reader "
                      "dequantizes them (tools/lm_eval/make_quantized_fixture.py)"),
        "mc": mc,
        "rolling": rolling,
    }
    mf.write_json(os.path.join(FIXTURE, f"expected_{scheme}.json"), expected, indent=1)
    print(f"[lm_eval] {scheme}: {layers} layers; mc acc {expected['mc']['acc']}; rolling {expected['rolling']['aggregates']}",
          flush=True)


def main():
    in_venv()
    schemes = sys.argv[1:] or ALL
    unknown = [s for s in schemes if s not in ALL]
    if unknown:
        raise SystemExit(f"unknown scheme(s) {unknown}: expected some of {ALL}")
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
