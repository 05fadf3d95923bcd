"""Cross-checks the GPTQ and AWQ golden fixtures against transformers 5.24 loading them as a user does
(from_pretrained through optimum and GPTQModel), in a venv made from requirements-gptq.txt:

    python3 -m venv /tmp/gptq-venv && /tmp/gptq-venv/bin/pip install -r tools/golden/requirements-gptq.txt
    /tmp/gptq-venv/bin/python tools/golden/check_gptq.py

make_golden.py writes each fixture's reference from its own reading of the files (gptq_dequantize);
this loads the same folder with transformers + GPTQModel in f32 (its torch kernel pinned:
backend "gptq_torch" — the automatic choice on the CPU refuses groups of 16, and on a CPU with
AVX512-BF16 it would compute in bf16), runs the fixture's forward tokens and compares the logits
with golden.safetensors' forward_logits. The result goes into the fixture's manifest entry
(checks.transformers_gptqmodel_forward_logits_*) and is printed; it fails if they differ by
more than 1e-6 (relative)."""
import json
import os
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AwqConfig, GPTQConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "fixtures", "golden")


def check(name):
    d = os.path.join(GOLDEN, name)
    g = load_file(os.path.join(d, "golden.safetensors"))
    with open(os.path.join(d, "config.json")) as f:
        q = json.load(f)["quantization_config"]
    if q["quant_method"] == "awq":
        # transformers' AwqConfig cannot name gptqmodel's f32 kernel (awq_torch_aten); "auto" picks it
        # for f32 input on a CPU without AVX512-BF16 (torch_awq computes in f16, the fused one in
        # bf16): the kernel taken is recorded and checked below.
        config = AwqConfig(bits=q["bits"], group_size=q["group_size"], version=q["version"], backend="auto")
    else:
        config = GPTQConfig(bits=q["bits"], group_size=q["group_size"], sym=q["sym"], desc_act=q["desc_act"],
                            backend="gptq_torch")
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                                                 quantization_config=config)
    model.eval()
    kernel = type(model.get_submodule("model.layers.0.self_attn.q_proj")).__name__
    toks = g["forward_tokens"].long()
    with torch.no_grad():
        logits = model(input_ids=toks, attention_mask=torch.ones_like(toks)).logits.float()
    want = g["forward_logits"]
    diff = float((logits - want).abs().max())
    rel = float((logits - want).norm() / want.norm())
    print(f"{name}: transformers + gptqmodel ({kernel}) vs golden forward_logits: max |d| {diff:.3g}, rel {rel:.3g}")
    return {"transformers_gptqmodel_forward_logits_max_abs_diff": diff,
            "transformers_gptqmodel_forward_logits_rel": rel, "transformers_gptqmodel_kernel": kernel}


def main():
    with open(os.path.join(GOLDEN, "manifest.json")) as f:
        manifest = json.load(f)
    names = sys.argv[1:] or [c["name"] for c in manifest["cases"] if c["name"].startswith(("gptq", "awq"))]
    import gptqmodel, optimum.version, transformers
    versions = f"transformers {transformers.__version__}, optimum {optimum.version.__version__}, gptqmodel {gptqmodel.__version__}"
    bad = []
    for c in manifest["cases"]:
        if c["name"] in names:
            res = check(c["name"])  # (the GPTQ and AWQ fixtures alike)
            c["checks"].update(res, transformers_gptqmodel_versions=versions)
            if res["transformers_gptqmodel_forward_logits_rel"] > 1e-6:
                bad.append(c["name"])
    with open(os.path.join(GOLDEN, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")
    if bad:
        sys.exit(f"differ from transformers + gptqmodel: {bad}")


if __name__ == "__main__":
    main()
