#!/usr/bin/env python3
"""The 4-bit twins of a bench checkpoint that `linnet quantize` does not write, for
scripts/bench-quantized (docs/benchmarks.md): GPTQ (4 bits, groups of 128, symmetric, v1),
AWQ (gemm, groups of 128, zero points) and MXFP4 (compressed-tensors' mxfp4-pack-quantized,
blocks of 32). Each by round to nearest, with the writers the conformance fixtures use
(tools/golden/make_golden.py: gptq_rewrite, awq_rewrite, ct_quantize with compressed-tensors'
own code), so the files have the layouts the fixtures check against transformers. Speed
depends on the layout, not on how the values were chosen.

    tools/golden/.venv/bin/python scripts/bench_twins.py BF16_DIR OUT_ROOT [gptq awq mxfp4]

Writes OUT_ROOT/<format>/ for each format whose model.safetensors is not there yet.
"""
import json
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "golden"))
import make_golden as mg  # noqa: E402

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def linear_weights(d):
    from safetensors import safe_open
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        return {k for k in f.keys() if k.endswith(".weight") and k.split(".")[-2] in LINEARS}


def copy_checkpoint(src, dst):
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)


def write_mxfp4(src, dst):
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
    compressor, _ = mg.ct_quantize(model, mg.CT_MXFP4A16)
    shutil.rmtree(dst, ignore_errors=True)
    model.save_pretrained(dst)
    compressor.update_config(dst)
    with open(os.path.join(dst, "config.json")) as f:
        assert json.load(f)["quantization_config"]["format"] == "mxfp4-pack-quantized"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    for fmt in sys.argv[3:] or ["gptq", "awq", "mxfp4"]:
        d = os.path.join(out, fmt)
        if os.path.exists(os.path.join(d, "model.safetensors")):
            continue
        print(f"bench_twins: writing {d}", file=sys.stderr)
        if fmt == "gptq":
            copy_checkpoint(src, d)
            mg.gptq_rewrite(d, linear_weights(d), {"group": 128, "sym": True})
        elif fmt == "awq":
            copy_checkpoint(src, d)
            mg.awq_rewrite(d, linear_weights(d), {"group": 128})
        elif fmt == "mxfp4":
            write_mxfp4(src, d)
        else:
            sys.exit(f"bench_twins: unknown format {fmt!r} (gptq, awq, mxfp4)")


if __name__ == "__main__":
    main()
