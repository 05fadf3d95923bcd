#!/usr/bin/env python3
"""The checks of scripts/gpu-check's dry run (dry_run.sh), one scenario per call:
    verify.py first|nogpu|rerun|pass EXIT_CODE OUTDIR STDOUT [CALLS] [PREVIOUS_RESULTS]
    verify.py nobuild EXIT_CODE OUTDIR STDOUT BUILD_CALLS SECONDS
    verify.py builds EXIT_CODE OUTDIR STDOUT BUILD_CALLS
Prints what failed and exits 1, else exits 0."""
import json
import os
import sys
import tarfile

errors = []


def expect(cond, what):
    if not cond:
        errors.append(what)


def outdir_files(out):
    files = []
    for folder, _, names in os.walk(out):
        files += [os.path.relpath(os.path.join(folder, n), out) for n in names]
    return sorted(files)


def common(rc, out, stdout_path):
    files = outdir_files(out)
    expect(len(files) <= 6, "at most 6 files in OUTDIR, got %d: %s" % (len(files), files))
    expect(set(files) == {"summary.txt", "results.json", "logs.tar.gz"}, "OUTDIR holds %s" % files)
    with open(os.path.join(out, "results.json")) as f:
        res = json.load(f)
    with open(stdout_path, errors="replace") as f:
        stdout = f.read()
    with open(os.path.join(out, "summary.txt")) as f:
        summary = f.read()
    expect(summary.strip() in stdout, "the summary is printed last on stdout")
    expect(len(summary) < 12000, "the summary fits the device tool's 12,000 characters: %d" % len(summary))
    expect(res["exit_code"] == rc, "results.json's exit_code %s is the exit status %s" % (res["exit_code"], rc))
    with tarfile.open(os.path.join(out, "logs.tar.gz")) as tar:
        names = tar.getnames()
    expect(any(n.endswith("env.log") for n in names), "logs.tar.gz holds env.log: %s" % names[:10])
    steps = {s["name"]: s["verdict"] for s in res["steps"]}
    tests = {t["name"]: t for t in res["tests"]}
    bench = {b["label"]: b for b in res["bench"]}
    return res, steps, tests, bench, stdout, names


def calls(path):
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def first(rc, out, stdout_path, calls_path):
    res, steps, tests, bench, stdout, names = common(rc, out, stdout_path)
    expect(rc == 1, "exit 1 when tests fail, got %d" % rc)
    expect(steps.get("preflight", "").startswith("ok"), "preflight ok: %s" % steps.get("preflight"))
    # tests: names from gtest's JSON (parameterised whole, no comma), verdicts from facts
    want = {
        "BackendOps.Matmul": "failed", "BackendOps.Argmax": "passed", "CudaBatchInvariance.CrashHere": "crashed",
        "CudaBatchInvariance.AfterTheCrash": "passed", "CudaModel.HangsForever": "timed out",
        "CudaModel.AfterTheHang": "passed", "CudaPaths.SkipsItself": "skipped",
        "Backends/BatchInvariance.PagedEntries/cuda_bf16": "failed",
        "Backends/BatchInvariance.LogProbsPacked/cuda_f32": "passed",
        "Golden/Conformance.OneRankMatchesTransformers/tiny": "passed",
        "Golden/Conformance.TwoRanksHang/tiny": "timed out"}
    for name, verdict in want.items():
        expect(tests.get(name, {}).get("verdict") == verdict,
               "%s: %s, want %s" % (name, tests.get(name, {}).get("verdict"), verdict))
    expect("Backends/BatchInvariance.PagedEntries/cpu_f32" not in tests, "a CPU instance is not a GPU test")
    expect("Jinja.NotAGpuTest" not in tests, "Jinja is not a GPU test")
    expect(not any(n.endswith(",") for n in tests), "no name with a trailing comma: %s" % list(tests))
    m = tests.get("BackendOps.Matmul", {})
    expect("Expected equality" in m.get("failure", ""), "Matmul's failure text from the JSON: %r" % m.get("failure"))
    expect(m.get("reruns", {}).get("simt") == "passed", "Matmul passes alone on the SIMT matmul: %s" % m.get("reruns"))
    expect(m.get("reruns", {}).get("alone") == "failed", "Matmul fails alone too: %s" % m.get("reruns"))
    p = tests.get("Backends/BatchInvariance.PagedEntries/cuda_bf16", {})
    expect(p.get("reruns", {}).get("simt") == "failed", "the parameterised test was rerun on SIMT: %s" % p.get("reruns"))
    expect(tests.get("CudaModel.HangsForever", {}).get("reruns", {}).get("alone") == "timed out",
           "a hang rerun alone is timed out: %s" % tests.get("CudaModel.HangsForever", {}).get("reruns"))
    expect(steps.get("gpu-tests", "").startswith("FAILED"), "gpu-tests FAILED: %s" % steps.get("gpu-tests"))
    expect(steps.get("conformance", "").startswith("FAILED") and "timed out" in steps.get("conformance", ""),
           "a conformance timeout is not ok: %s" % steps.get("conformance"))
    # the first assertion line on stdout
    expect("tests/fake_test.cpp:42" in stdout and "Which is: 1" in stdout, "the failed test's assertion on stdout")
    # bench: each label's figures from its own JSON
    expect(bench.get("first", {}).get("figures", {}).get("decode_tok_s") == 1000.0, "first: its own figures")
    expect(bench.get("second-crash", {}).get("verdict", "").startswith("crashed"),
           "a crashed configuration: %s" % bench.get("second-crash"))
    expect("figures" not in bench.get("second-crash", {}), "no figures under a crashed configuration")
    expect(bench.get("third", {}).get("figures", {}).get("decode_tok_s") == 1020.0,
           "third (run by a fresh process after the crash): its own figures: %s" % bench.get("third"))
    expect(bench.get("fourth-error", {}).get("verdict", "").startswith("failed: cuda: an illegal address"),
           "a configuration reporting an error: %s" % bench.get("fourth-error"))
    expect(bench.get("fifth-hang", {}).get("verdict", "").startswith("timed out"),
           "a configuration killed at the limit: %s" % bench.get("fifth-hang"))
    expect("figures" not in bench.get("fifth-hang", {}), "no figures under a killed configuration")
    expect(bench.get("sixth", {}).get("verdict") == "not run", "after the hang: not run: %s" % bench.get("sixth"))
    expect(steps.get("bench", "").startswith("FAILED"), "bench FAILED: %s" % steps.get("bench"))
    third_line = [line for line in stdout.splitlines() if line.strip().startswith("third ")]
    expect(third_line and "1020.0" in third_line[0], "third's line shows its own figures: %s" % third_line)
    hang_line = [line for line in stdout.splitlines() if line.strip().startswith("fifth-hang")]
    expect(hang_line and "timed out" in hang_line[0] and "10" not in hang_line[0].split("timed out")[0],
           "the killed configuration's line shows no numbers: %s" % hang_line)
    # sanitizer: memcheck on the failed test first; a racecheck timeout is "timed out"
    san = {(s["tool"], s["what"]): s["verdict"] for s in res["sanitizer"]}
    expect(san.get(("memcheck", "failed: BackendOps.Matmul")) == "1 reports", "memcheck of the failed test: %s" % san)
    expect(san.get(("racecheck", "shared memory")) == "timed out", "racecheck that hangs is timed out: %s" % san)
    expect(steps.get("sanitizer", "").startswith("FAILED"), "sanitizer FAILED: %s" % steps.get("sanitizer"))
    expect(list(san)[0] == ("memcheck", "failed: BackendOps.Matmul") or list(san)[0][1].startswith("failed: "),
           "memcheck on the failed tests first: %s" % list(san))
    # each suite in its own process; the unfinished tests again in a fresh one
    runs = calls(calls_path)
    suite_runs = [c for c in runs if not c["simt"] and not c["legacy"] and c["backend"] != "cuda"]
    expect(any(c["filter"] == "CudaBatchInvariance.AfterTheCrash" for c in suite_runs),
           "the tests after a crash run again in a fresh process")
    expect(not any("BackendOps." in c["filter"] and "Cuda." in c["filter"] for c in suite_runs),
           "one process per suite")
    expect(res["mode"] == "first", "mode first")
    expect(res["commit"] != "", "a commit is recorded")


def nogpu(rc, out, stdout_path):
    res, steps, tests, bench, stdout, names = common(rc, out, stdout_path)
    expect(rc == 1, "no GPU: exit 1, got %d" % rc)
    expect("cudaErrorInsufficientDriver" in steps.get("preflight", ""), "the preflight's reason: %s" % steps)
    expect("cudaErrorInsufficientDriver" in stdout, "the reason on stdout")
    expect(all(steps.get(s, "").startswith("not run") for s in ("bench", "gpu-tests", "conformance", "sanitizer")),
           "nothing else runs: %s" % steps)
    expect(not tests and not bench, "no tests nor figures without a GPU")


def rerun(rc, out, stdout_path, calls_path, previous_path):
    res, steps, tests, bench, stdout, names = common(rc, out, stdout_path)
    with open(previous_path) as f:
        prev = json.load(f)
    bad = {t["name"] for t in prev["tests"] if t["verdict"] in ("failed", "crashed", "timed out", "not run")}
    expect(res["mode"] == "rerun", "mode rerun")
    expect(rc == 1, "the failures are still there: exit 1, got %d" % rc)
    ran = set()
    for c in calls(calls_path):
        if not c["simt"] and not c["legacy"] and c["backend"] != "cuda":
            ran |= set(c["filter"].split(":"))
    expect(ran and ran <= bad, "only the first run's failures run again: %s, not within %s" % (ran - bad, bad))
    expect("BackendOps.Argmax" not in tests, "a test that passed is not run again")
    expect(tests.get("BackendOps.Matmul", {}).get("verdict") == "failed", "Matmul still fails")
    expect(tests.get("CudaBatchInvariance.CrashHere", {}).get("verdict") == "crashed", "the crash again")
    expect(set(bench) == {"quick", "quick-legacy"} and all(b["verdict"] == "ok" for b in bench.values()),
           "the quick bench: %s" % bench)
    expect(res.get("previous", {}).get("commit") == prev.get("commit"), "the first run's commit is recorded")
    expect(res["elapsed_s"] <= 60, "within its budget: %s s" % res["elapsed_s"])


def nobuild(rc, out, stdout_path, build_calls, seconds):
    res, steps, tests, bench, stdout, names = common(rc, out, stdout_path)
    expect(rc == 1, "no GPU: exit 1, got %d" % rc)
    expect(not os.path.exists(build_calls), "nothing is built on a machine without a GPU")
    pre = steps.get("preflight", "")
    expect(pre.startswith("FAILED: no GPU") and "couldn't communicate with the NVIDIA driver" in pre
           and "no CUDA driver" in pre, "the preflight names what it saw: %s" % steps)
    expect("FAILED: no GPU" in stdout, "the reason on stdout")
    expect(all(steps.get(s, "").startswith("not run: no usable GPU") for s in ("bench", "gpu-tests", "conformance",
                                                                             "sanitizer")), "nothing else runs: %s" % steps)
    expect(int(seconds) <= 20, "at once: %s s" % seconds)


def builds(rc, out, stdout_path, build_calls):
    res, steps, tests, bench, stdout, names = common(rc, out, stdout_path)
    expect(rc == 1, "the build fails: exit 1, got %d" % rc)
    expect(os.path.exists(build_calls), "with a GPU listed, the binaries are built")
    expect(steps.get("env", "").startswith("FAILED"), "env FAILED: %s" % steps)


def passing(rc, out, stdout_path):
    res, steps, tests, bench, stdout, names = common(rc, out, stdout_path)
    expect(rc == 0, "everything passed: exit 0, got %d (%s)" % (rc, steps))
    expect(all(v.startswith("ok") for v in steps.values()), "every step ok: %s" % steps)
    expect(tests and all(t["verdict"] == "passed" for t in tests.values()), "every test passed")
    expect(all(b["verdict"] == "ok" for b in bench.values()), "every configuration ok")


if __name__ == "__main__":
    scenario, rc = sys.argv[1], int(sys.argv[2])
    rest = sys.argv[3:]
    try:
        {"first": first, "nogpu": nogpu, "rerun": rerun, "pass": passing, "nobuild": nobuild,
         "builds": builds}[scenario](rc, *rest)
    except Exception as e:  # a missing file or key: that is a failure too
        errors.append("%s: %r" % (type(e).__name__, e))
    for e in errors:
        print("  FAIL: " + e)
    print("%s: %s" % (scenario, "ok" if not errors else "%d check(s) failed" % len(errors)))
    sys.exit(1 if errors else 0)
