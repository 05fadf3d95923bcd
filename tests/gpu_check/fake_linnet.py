#!/usr/bin/env python3
"""A stand-in for linnet in scripts/gpu-check's dry run: `devices` (a GPU, or none with the CUDA
error when FAKE_NO_GPU=1) and `bench-sweep`, whose configurations behave as their labels say:
*crash* kills the process mid-run, *hang* never ends, *error* reports a failure; the others
write <label>.json with figures that are theirs alone (decode tokens/s = 1000 + 10 × their
place in the plan), so a label shown with another's numbers would be seen.
"""
import json
import os
import signal
import sys
import time


def devices():
    if os.environ.get("FAKE_NO_GPU") == "1":
        print("cpu: AVX-512 kernels, 16 threads")
        print("cuda: none (cudaGetDeviceCount: cudaErrorInsufficientDriver: CUDA driver version is insufficient "
              "for CUDA runtime version)")
        return 1
    print("cpu: AVX-512 kernels, 16 threads")
    print("cuda: 1 device")
    print("  0: NVIDIA H200 (fake), sm_90, 139.8 GiB, 132 SMs")
    return 0


def sweep(args):
    plan = out = None
    only = None
    i = 0
    while i < len(args):
        if args[i] == "--plan":
            plan = args[i + 1]
            i += 1
        elif args[i] == "--out":
            out = args[i + 1]
            i += 1
        elif args[i] == "--only":
            only = args[i + 1].split(",")
            i += 1
        i += 1
    with open(plan) as f:
        configs = json.load(f)
    os.makedirs(out, exist_ok=True)
    failed = 0
    for place, c in enumerate(configs):
        label = c["label"]
        if only is not None and label not in only:
            continue
        print("bench-sweep: begin %s (%d of %d): linnet %s" % (label, place + 1, len(configs), c.get("command", "bench")),
              flush=True)
        if "crash" in label:
            print("phase   median ... (a kernel fails)", flush=True)
            os.kill(os.getpid(), signal.SIGSEGV)
        if "hang" in label:
            time.sleep(1000)
        if "error" in label:
            report = {"status": "error", "error": "cuda: an illegal address (fake)", "exit_code": 1}
            failed += 1
        elif c.get("command") == "bench-engine":
            report = {"status": "ok", "prompts": 256, "generate": {"batched_tok_s": 5000.0 + place}}
        else:
            tok = 1000.0 + 10 * place
            report = {"status": "ok", "load_s": 1.5,
                      "decode": {"tokens_per_s": tok, "ms_per_step": 1000.0 / tok, "fraction_of_floor": 0.5},
                      "prefill": {"tokens_per_s": 20000.0 + place, "fraction_of_floor": 0.3},
                      "ceilings": {"bandwidth_GBps": 4300, "matmul_TFLOPs": 700},
                      "backend_counters": {"graph_replays": 60 + place}}
            print("decode %.1f tok/s" % tok)
        report.update(label=label, command=c.get("command", "bench"), args=c["args"], env=c.get("env", {}))
        with open(os.path.join(out, label + ".json"), "w") as f:
            json.dump(report, f)
        print("bench-sweep: end %s %s (0.1 s)" % (label, report["status"]), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "devices":
        sys.exit(devices())
    if len(sys.argv) > 1 and sys.argv[1] == "bench-sweep":
        sys.exit(sweep(sys.argv[2:]))
    sys.stderr.write("fake linnet: %s\n" % " ".join(sys.argv[1:]))
    sys.exit(2)
