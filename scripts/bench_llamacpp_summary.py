#!/usr/bin/env python3
"""Summarises scripts/bench-llamacpp's raw outputs: per run kind, the median over rounds of
each figure (tok/s, peak RSS, load time), and linnet's ratios to llama.cpp's best of bf16/f16."""
import pathlib
import re
import statistics
import sys

out = pathlib.Path(sys.argv[1])
runs = {}  # kind → list of dicts
for f in sorted(out.glob("*.txt")):
    kind = f.stem.rsplit("-", 1)[0]
    text = f.read_text(errors="replace")
    d = {}
    if m := re.search(r"peak_rss_kib (\d+)", text):
        d["peak_GiB"] = int(m.group(1)) / 2**20
    if kind.startswith(("linnet", "prev")):
        if m := re.search(r"^decode\s+([\d.]+) ms", text, re.M):  # tok/s from the ms: bench rounds its tok/s
            batch = int(re.search(r"Batch (\d+)", text).group(1))
            d["decode_ms"], d["decode_tok_s"] = float(m.group(1)), batch * 1000 / float(m.group(1))
        if m := re.search(r"^prefill\s+([\d.]+) ms", text, re.M):
            prompt = 512 if "-p512" in kind else 4
            d["prefill_tok_s"] = int(re.search(r"Batch (\d+)", text).group(1)) * prompt * 1000 / float(m.group(1))
        if m := re.search(r"^load: ([\d.]+) s", text, re.M):
            d["load_s"] = float(m.group(1))
    elif "-b16" in kind:  # llama-batched-bench: S_TG t/s of the 16 parallel sequences
        rows = [line for line in text.splitlines() if re.match(r"\|\s+\d+ \|", line)]
        if rows:
            cells = [c.strip() for c in rows[-1].strip("|").split("|")]
            d["decode_tok_s"] = float(cells[7])
        # llama.cpp's own log clock when the benchmark starts: model load and context set-up.
        before = text.split("llama_batched_bench: n_kv_max")[0]
        if stamps := re.findall(r"^(\d+)\.(\d+)\.(\d+)\.(\d+) ", before, re.M):
            mi, s, ms, us = map(int, stamps[-1])  # llama.cpp's log clock: M.SS.mmm.uuu
            d["load_s"] = mi * 60 + s + ms / 1e3 + us / 1e6
    else:  # llama-bench: pp512 and tg16 rows
        for test, key in (("pp512", "prefill_tok_s"), ("tg16", "decode_tok_s")):
            if m := re.search(rf"\|\s+{test} \|\s+([\d.]+) ±", text):
                d[key] = float(m.group(1))
    runs.setdefault(kind, []).append(d)

med = {}
for kind, ds in sorted(runs.items()):
    keys = sorted({k for d in ds for k in d})
    med[kind] = {k: statistics.median([d[k] for d in ds if k in d]) for k in keys}
    print(f"{kind:22s} " + "  ".join(f"{k} {v:.3g}" for k, v in med[kind].items()) + f"  ({len(ds)} runs)")

def best(kind_of, key):
    vals = [med[k][key] for k in kind_of if k in med and key in med[k]]
    return max(vals) if vals else None

print()
for label, ours, theirs, key in (
    ("decode batch 1", "linnet-b1", ["llama-bf16-b1", "llama-f16-b1"], "decode_tok_s"),
    ("prefill 512", "linnet-p512", ["llama-bf16-b1", "llama-f16-b1"], "prefill_tok_s"),
    ("decode batch 16", "linnet-b16", ["llama-bf16-b16", "llama-f16-b16"], "decode_tok_s"),
):
    b = best(theirs, key)
    if ours in med and key in med[ours] and b:
        print(f"{label:16s} linnet {med[ours][key]:.3g} tok/s, llama.cpp best {b:.3g}: {med[ours][key] / b:.2f}x")
if "linnet-b1" in med and "llama-bf16-b1" in med:
    print(f"peak memory      linnet {med['linnet-b1']['peak_GiB']:.2f} GiB, llama.cpp bf16 {med['llama-bf16-b1']['peak_GiB']:.2f} GiB: "
          f"{med['linnet-b1']['peak_GiB'] / med['llama-bf16-b1']['peak_GiB']:.2f}x")
ours = [d["load_s"] for k, ds in runs.items() if k.startswith("linnet") for d in ds if "load_s" in d]
theirs = {t: med.get(f"llama-{t}-b16", {}).get("load_s") for t in ("bf16", "f16")}
if ours and all(theirs.values()):
    print(f"load             linnet {statistics.median(ours):.2f} s (median of {len(ours)} runs), llama.cpp bf16 "
          f"{theirs['bf16']:.2f} s (mapped, read on first use), f16 {theirs['f16']:.2f} s (repacked)")
for phase, key in (("b1", "decode_tok_s"), ("b16", "decode_tok_s"), ("b64", "decode_tok_s"), ("p512", "prefill_tok_s")):
    a, b = med.get(f"linnet-{phase}", {}).get(key), med.get(f"prev-{phase}", {}).get(key)
    if a and b:
        print(f"invariant vs previous ({phase}): {a:.3g} vs {b:.3g} tok/s: {a / b:.2f}x")
