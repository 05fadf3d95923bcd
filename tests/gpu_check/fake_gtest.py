#!/usr/bin/env python3
"""A stand-in for linnet_tests in scripts/gpu-check's dry run (tests/gpu_check/dry_run.sh): it
lists, filters and runs made-up GPU tests as GoogleTest does (the same output lines, the same
--gtest_output=json file, written only when the run ends normally), and each test does what
its name says: passes, fails with an assertion, crashes the process, hangs, or skips.

  FAKE_ALL_PASS=1   every test passes
  FAKE_LOG=FILE     each run's filter and environment switches appended to FILE
A test named *Matmul* fails unless LINNET_CUDA_MATMUL=simt (a tensor-core failure, as the
reruns should tell).
"""
import fnmatch
import json
import os
import signal
import sys
import time

TESTS = [
    ("BackendOps", "Matmul"), ("BackendOps", "Argmax"), ("BackendOps", "AttentionCache"),
    ("Cuda", "DeviceCountIsSafeWithoutGpu"), ("Cuda", "MatmulKernelChoice"),
    ("CudaBatchInvariance", "MatmulRowAloneEqualsAmongOthers"), ("CudaBatchInvariance", "CrashHere"),
    ("CudaBatchInvariance", "AfterTheCrash"),
    ("CudaModel", "HangsForever"), ("CudaModel", "AfterTheHang"),
    ("CudaPaths", "SkipsItself"),
    ("Backends/BatchInvariance", "PagedEntries/cuda_bf16"), ("Backends/BatchInvariance", "LogProbsPacked/cuda_f32"),
    ("Backends/BatchInvariance", "PagedEntries/cpu_f32"),
    ("Golden/Conformance", "OneRankMatchesTransformers/tiny"), ("Golden/Conformance", "TwoRanksHang/tiny"),
    ("Jinja", "NotAGpuTest"),
]


def matches(name, flt):
    pos, _, neg = flt.partition("-")
    ok = any(fnmatch.fnmatchcase(name, p) for p in pos.split(":") if p) if pos else True
    return ok and not any(fnmatch.fnmatchcase(name, p) for p in neg.split(":") if p)


def behaviour(name):
    if os.environ.get("FAKE_ALL_PASS") == "1":
        return "pass"
    if "Skips" in name:
        return "skip"
    if "Crash" in name and "After" not in name:
        return "crash"
    if "Hang" in name and "After" not in name:
        return "hang"
    if name.endswith("PagedEntries/cuda_bf16"):
        return "fail"
    if name.endswith(".Matmul"):
        return "pass" if os.environ.get("LINNET_CUDA_MATMUL") == "simt" else "fail"
    return "pass"


def main(argv):
    flt, out, listing = "*", None, False
    for a in argv:
        if a.startswith("--gtest_filter="):
            flt = a.split("=", 1)[1]
        elif a.startswith("--gtest_output=json:"):
            out = a.split(":", 1)[1]
        elif a == "--gtest_list_tests":
            listing = True
    chosen = [(s, t) for s, t in TESTS if matches(s + "." + t, flt)]
    if listing:
        last = None
        for s, t in chosen:
            if s != last:
                print(s + ".")
                last = s
            print("  " + t + ("  # GetParam() = (\"cuda\", bf16)" if "/" in t else ""))
        return 0
    if os.environ.get("FAKE_LOG"):
        with open(os.environ["FAKE_LOG"], "a") as f:
            f.write(json.dumps({"filter": flt, "simt": os.environ.get("LINNET_CUDA_MATMUL") == "simt",
                                "legacy": os.environ.get("LINNET_CUDA_LEGACY") == "1",
                                "backend": os.environ.get("LINNET_TEST_BACKEND", "")}) + "\n")
    print("[==========] Running %d tests from the fake suite." % len(chosen), flush=True)
    suites, failed = {}, []
    for s, t in chosen:
        name = s + "." + t
        print("[ RUN      ] " + name, flush=True)
        b = behaviour(name)
        entry = {"name": t, "status": "RUN", "result": "COMPLETED", "time": "0.001s", "classname": s}
        if b == "crash":
            print("about to touch an illegal address", flush=True)
            os.kill(os.getpid(), signal.SIGSEGV)
        if b == "hang":
            print("waiting for a kernel that never ends", flush=True)
            time.sleep(1000)
        if b == "fail":
            print("tests/fake_test.cpp:42: Failure\nExpected equality of these values:\n  got\n    Which is: 1\n"
                  "  want\n    Which is: 2\n%s: the fake mismatch" % name)
            print("[  FAILED  ] %s (1 ms)" % name, flush=True)
            entry["failures"] = [{"failure": "tests/fake_test.cpp:42\nExpected equality of these values:\n  got\n"
                                             "    Which is: 1\n  want\n    Which is: 2\n%s: the fake mismatch" % name,
                                  "type": ""}]
            failed.append(name)
        elif b == "skip":
            print("tests/fake_test.cpp:7: Skipped\nno CUDA device is visible: the fake says so\n")
            print("[  SKIPPED ] %s (0 ms)" % name, flush=True)
            entry["result"] = "SKIPPED"
        else:
            print("[       OK ] %s (0 ms)" % name, flush=True)
        suites.setdefault(s, []).append(entry)
    print("[==========] %d tests ran." % len(chosen))
    for n in failed:  # the summary lines that once fooled the old script: a comma after the name
        print("[  FAILED  ] %s, where GetParam() = (\"cuda\", bf16)" % n if "/" in n else "[  FAILED  ] " + n)
    if out:
        with open(out, "w") as f:
            json.dump({"tests": len(chosen), "testsuites": [{"name": s, "testsuite": e} for s, e in suites.items()]}, f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
