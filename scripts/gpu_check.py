#!/usr/bin/env python3
"""The GPU run (docs/gpu.md, "The GPU runs"); scripts/gpu-check starts this.

    scripts/gpu-check OUTDIR                          the first run: figures first, then every test
    scripts/gpu-check --rerun-failed [RESULTS] OUTDIR the second: the first run's failures again

OUTDIR gets three files, rewritten after every step (a run cut short still leaves the last):
  summary.txt    the table printed at the end (also to stdout, with the failed tests' first
                 assertion lines: the device tool returns the last 12,000 characters)
  results.json   every step, test, rerun, sanitizer run and bench figure, with the commit
  logs.tar.gz    every log and report (each file cut to 4 MB: its head and its tail)

Verdicts come from facts: each step's exit status; a process killed at its limit is "timed
out", never "ok" nor "0 reports"; a bench configuration's figures are read from its own JSON
(linnet bench-sweep writes <label>.json with the label inside); test names and results from
gtest's JSON output, or, for a process that died before writing it, from its own log.

Steps of the first run, each cut to what is left of GPU_CHECK_SECONDS (400):
  env         the machine, the CUDA libraries, the binaries (gpu-bin/linnet-gpu.tar.xz; where
              they do not start, they are built here, up to 30 minutes — but only when
              nvidia-smi lists a GPU or the CUDA driver counts one: else the preflight fails
              at once, naming what it saw, and nothing is built)
  preflight   linnet devices; without a usable GPU nothing else runs and the exit is 1
  gpu-tests   one process per test suite, GPU_CHECK_SUITE_SECONDS (60) each; a process that
              dies or hangs: the tests it did not finish again in a fresh one
  conformance the transformers fixtures on the CUDA backend (120 s)
  bench       linnet bench-sweep over scripts/gpu-bench-plan.json: one process, one model's
              weights made once on the GPU, every configuration (GPU_CHECK_BENCH_SECONDS, 180)
  reruns      each failed test alone: as it was, on the SIMT matmul, with every earlier path
              (LINNET_CUDA_LEGACY=1)
  sanitizer   compute-sanitizer memcheck on the failed tests first, then on the kernels'
              tests; racecheck on the shared-memory kernels

The second run's extras: GPU_CHECK_RERUN_TESTS=all runs every GPU test again, not only the
first run's failures; GPU_CHECK_SANITIZE_AGAIN="racecheck=A.B,C.D;memcheck=E.F" runs those tests
under the sanitizer again (a run the first call cut short).

Environment for tests of this script (tests/gpu_check/dry_run.sh): GPU_CHECK_BIN (a folder
with linnet, linnet_tests, mpi_comm_check: no unpacking), GPU_CHECK_SANITIZER (the
compute-sanitizer to use, or "none"), GPU_CHECK_PLAN / GPU_CHECK_QUICK_PLAN (bench plans),
GPU_CHECK_PACK (the prebuilt binaries' archive), GPU_CHECK_BUILD (the script that builds them
here; scripts/build-here-gpu), GPU_CHECK_LIBCUDA (the CUDA driver library the device query
opens; libcuda.so.1).
"""
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# In order of dependence (issue 43): the ops, the backend, its paths, the dense model, its entries,
# the batch-invariance and non-finite cases, the one-rank NCCL group. The suites run in this order.
GPU_SUITES = ["BackendOps.*", "Cuda.*", "CudaBatchInvariance.*", "CudaPaths.*", "CudaModel.*", "CudaEntries.*",
              "Backends/BatchInvariance.*/cuda_*", "Backends/NonFinite.*/cuda*", "NcclOneRank.*"]
GPU_FILTER = ":".join(GPU_SUITES)
CONFORMANCE_FILTER = "Golden/Conformance.*"
MEMCHECK_TESTS = ["BackendOps.Matmul", "BackendOps.QuantizedMatmul", "BackendOps.NarrowerKvCache", "BackendOps.AttentionPacked", "BackendOps.AttentionCache", "BackendOps.KvWrite",
                  "BackendOps.GatherRows", "BackendOps.CopyHeads", "BackendOps.ScaleByPosition", "BackendOps.Argmax", "BackendOps.GumbelMax", "BackendOps.LogitStats",
                  "CudaPaths.AttentionCachePrefetchEqualsTheEarlierKernel", "CudaPaths.SplitRowsEqualOneBlockRows"]
RACECHECK_TESTS = ["BackendOps.AttentionPacked", "BackendOps.AttentionCache", "Cuda.MatmulKernelChoice",
                   "CudaPaths.AttentionCachePrefetchEqualsTheEarlierKernel"]
LOG_CAP = 4 << 20  # bytes of one log in logs.tar.gz
NOT_PASSED = ("failed", "crashed", "timed out", "not run")


def env_seconds(name, default):
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return float(default)


# ---- processes ----------------------------------------------------------------------------------
def process_tree(root):
    """root and every descendant, read from /proc before anything is killed (mpirun's ranks sit
    in process groups of their own: killing one group would orphan them)."""
    parent = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
            parent[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    tree, i = [root], 0
    while i < len(tree):
        tree += [p for p, pp in parent.items() if pp == tree[i] and p not in tree]
        i += 1
    return tree


def kill_tree(pid):
    for p in process_tree(pid):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


class Result:
    def __init__(self, rc, timed_out, seconds):
        self.rc, self.timed_out, self.seconds = rc, timed_out, seconds

    def verdict(self):
        """How the process ended, in words: 'ok', 'timed out', 'crashed (SIGSEGV)', 'exit 1'."""
        if self.timed_out:
            return "timed out"
        if self.rc == 0:
            return "ok"
        if self.rc < 0 or self.rc > 128:
            sig = -self.rc if self.rc < 0 else self.rc - 128
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = "signal %d" % sig
            return "crashed (%s)" % name
        return "exit %d" % self.rc


def run(cmd, log, limit, env=None):
    """cmd with stdout and stderr appended to `log`, killed with its whole tree past `limit` s."""
    t0 = time.time()
    with open(log, "ab") as out:
        out.write(("\n$ %s   (limit %d s)\n" % (" ".join(cmd), limit)).encode())
        out.flush()
        if limit <= 0:
            out.write(b"not run: no time left\n")
            return Result(-1, True, 0.0)
        try:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                 start_new_session=True)
        except OSError as e:
            out.write(("cannot start: %s\n" % e).encode())
            return Result(127, False, 0.0)
        timed_out = False
        try:
            rc = p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_tree(p.pid)
            rc = p.wait()
        try:  # whatever it left in its group
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        seconds = time.time() - t0
        out.write(("[gpu-check] %s after %.1f s (exit status %d)\n"
                   % ("killed at its limit" if timed_out else "ended", seconds, rc)).encode())
    return Result(rc, timed_out, seconds)


def capture(cmd, limit, env=None):
    """stdout+stderr of a short command, or '' when it cannot run."""
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              timeout=limit, env=env).stdout.decode(errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        return ""


# ---- is there a GPU at all (before anything is built) ---------------------------------------------
# The CUDA driver API asked directly (ctypes, in a process of its own: a broken driver cannot take
# this script down): cuInit, then cuDeviceGetCount. Prints what it found; exit 0 with a device.
DEVICE_QUERY = r'''
import ctypes, sys
try:
    cuda = ctypes.CDLL(sys.argv[1])
except OSError as e:
    print("no CUDA driver (%s)" % e)
    sys.exit(1)
def name(rc):
    s = ctypes.c_char_p()
    cuda.cuGetErrorName(rc, ctypes.byref(s))
    return s.value.decode() if s.value else "error %d" % rc
rc = cuda.cuInit(0)
if rc:
    print("cuInit: " + name(rc))
    sys.exit(1)
n = ctypes.c_int()
rc = cuda.cuDeviceGetCount(ctypes.byref(n))
if rc:
    print("cuDeviceGetCount: " + name(rc))
    sys.exit(1)
print("the CUDA driver counts %d device(s)" % n.value)
sys.exit(0 if n.value > 0 else 1)
'''


def gpu_seen():
    """(whether this machine has a GPU, what said so): nvidia-smi -L lists one, or the CUDA driver
    counts one. A few seconds, where building the binaries takes up to 30 minutes."""
    smi = capture(["nvidia-smi", "-L"], 30).strip()
    if any(line.startswith("GPU ") for line in smi.splitlines()):
        return True, "nvidia-smi: " + smi.splitlines()[0]
    query = capture([sys.executable, "-c", DEVICE_QUERY, os.environ.get("GPU_CHECK_LIBCUDA", "libcuda.so.1")], 30).strip()
    said = "nvidia-smi: %s; %s" % ((smi.splitlines() or ["not found"])[0][:200], (query.splitlines() or ["no answer"])[-1][:200])
    return "counts" in query and not query.rstrip().endswith("counts 0 device(s)"), said


# ---- gtest --------------------------------------------------------------------------------------
def list_tests(binary, gtest_filter, env):
    """Full test names ('Suite.Name', 'Backends/BatchInvariance.PagedEntries/cuda_bf16') by suite, in order."""
    text = capture([binary, "--gtest_list_tests", "--gtest_filter=" + gtest_filter], 60, env)
    suites, suite = {}, None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            suite = line.split()[0].rstrip(".")
            if line.split()[0].endswith("."):
                suites.setdefault(suite, [])
            else:
                suite = None
        elif suite is not None:
            suites[suite].append(suite + "." + line.split()[0])  # "  Name/cuda_bf16  # GetParam() = …"
    return suites


RESULT_LINE = re.compile(r"^\[ *(OK|FAILED|SKIPPED) *\] (\S+) \(\d+ ms\)$")
RUN_LINE = re.compile(r"^\[ RUN +\] (\S+)$")


def from_gtest_json(path):
    """{full name: (verdict, seconds, failure text)} from gtest's --gtest_output=json file."""
    with open(path) as f:
        j = json.load(f)
    out = {}
    for suite in j.get("testsuites", []):
        for t in suite.get("testsuite", []):
            name = suite["name"] + "." + t["name"]
            seconds = float(str(t.get("time", "0s")).rstrip("s") or 0)
            failures = t.get("failures", [])
            if t.get("status") == "NOTRUN":
                verdict = "not run"
            elif failures:
                verdict = "failed"
            elif t.get("result") == "SKIPPED":
                verdict = "skipped"
            else:
                verdict = "passed"
            text = "\n".join(f.get("failure", "") for f in failures)
            if verdict == "skipped" and not text:
                text = t.get("skipped", {}).get("message", "") if isinstance(t.get("skipped"), dict) else ""
            out[name] = (verdict, seconds, text)
    return out


def from_gtest_log(text):
    """The same from a log (a process that died before writing its JSON): finished tests, and the
    one it was running when it ended (None when it ended between tests)."""
    out, running, lines_of = {}, None, {}
    for line in text.splitlines():
        m = RUN_LINE.match(line)
        if m:
            running = m.group(1)
            lines_of[running] = []
            continue
        m = RESULT_LINE.match(line)
        if m and m.group(2) == running:
            verdict = {"OK": "passed", "FAILED": "failed", "SKIPPED": "skipped"}[m.group(1)]
            out[running] = (verdict, 0.0, "\n".join(lines_of.get(running, [])) if verdict != "passed" else "")
            running = None
            continue
        if running is not None:
            lines_of[running].append(line)
    return out, running, ("\n".join(lines_of.get(running, [])) if running else "")


def first_assertion(text, lines=4):
    """The first assertion of a failure text: from the first 'Failure' line (or the start), a few
    lines, each cut to 200 characters."""
    rows = [r for r in text.splitlines() if r.strip()]
    for i, r in enumerate(rows):
        if "Failure" in r or "error" in r.lower() or "Skipped" in r:
            rows = rows[i:]
            break
    return "\n".join(r[:200] for r in rows[:lines])


# ---- the run ------------------------------------------------------------------------------------
class Check:
    def __init__(self, out, rerun_from=None):
        self.out = out
        self.rerun_from = rerun_from
        self.mode = "rerun" if rerun_from is not None else "first"
        self.t0 = time.time()
        self.budget = env_seconds("GPU_CHECK_SECONDS", 185 if self.mode == "rerun" else 400)
        self.work = tempfile.mkdtemp(prefix="gpu-check.")
        self.steps = []  # [name, verdict, seconds]
        self.tests = {}  # full name -> dict
        self.bench = []
        self.sanitizer = []
        self.info = {"mode": self.mode, "budget_s": self.budget, "commit": "unknown", "device": "none",
                     "binaries": "none"}
        self.bin = None
        self.env = dict(os.environ)
        self.gpu_listed = False
        self.previous = None

    # -- time
    def left(self):
        return self.t0 + self.budget - time.time()

    def cap(self, limit, reserve=8):
        return int(max(0, min(limit, self.left() - reserve)))

    def say(self, msg):
        print("[gpu-check %3ds] %s" % (time.time() - self.t0, msg), flush=True)

    def log(self, name):
        return os.path.join(self.work, name)

    def step(self, name, verdict, seconds):
        for s in self.steps:
            if s[0] == name:
                s[1], s[2] = verdict, s[2] + seconds
                break
        else:
            self.steps.append([name, verdict, seconds])
        self.say("%s: %s" % (name, verdict))
        self.write()

    # -- outputs
    def results(self):
        return dict(self.info, elapsed_s=round(time.time() - self.t0, 1),
                    steps=[{"name": n, "verdict": v, "seconds": round(s, 1)} for n, v, s in self.steps],
                    tests=[dict(v, name=k) for k, v in sorted(self.tests.items())], bench=self.bench,
                    sanitizer=self.sanitizer, exit_code=self.exit_code())

    def exit_code(self):
        # "info": a step that reports without judging (the reruns of failed tests).
        return 0 if self.steps and all(v.startswith(("ok", "info")) for _, v, _ in self.steps) else 1

    def summary(self):
        r = []
        r.append("==================== gpu-check summary (%s run) ====================" % self.mode)
        r.append("commit:  %s" % self.info["commit"])
        r.append("device:  %s" % self.info["device"])
        r.append("%-12s %7s  %s" % ("step", "seconds", "verdict"))
        for n, v, s in self.steps:
            r.append("%-12s %7d  %s" % (n, s, v))
        if self.bench:
            r.append("bench figures (each from its own JSON; decode: Batch 1 tokens/s and share of the HBM floor):")
            r.append("  %-22s %10s %8s %7s %11s %7s %7s %8s" % ("label", "decode/s", "ms/tok", "floor", "prefill/s",
                                                                  "floor", "load s", "graphs"))
            for b in self.bench:
                f = b.get("figures", {})
                if b["verdict"] != "ok":
                    r.append("  %-22s %s" % (b["label"], b["verdict"]))
                elif "decode_tok_s" in f:
                    r.append("  %-22s %10.1f %8.3f %6.0f%% %11.0f %6.0f%% %7.1f %8s" % (
                        b["label"], f["decode_tok_s"], f["decode_ms"], 100 * f["decode_of_floor"], f["prefill_tok_s"],
                        100 * f["prefill_of_floor"], f.get("load_s", 0), f.get("graph_replays", "-")))
                elif "engine_tok_s" in f:
                    r.append("  %-22s engine: %.1f tok/s generated (%d prompts)" % (b["label"], f["engine_tok_s"],
                                                                                     f.get("prompts", 0)))
        bad = [(k, v) for k, v in sorted(self.tests.items()) if v["verdict"] in ("failed", "crashed", "timed out")]
        counts = {}
        for v in self.tests.values():
            counts[v["verdict"]] = counts.get(v["verdict"], 0) + 1
        if self.tests:
            r.append("tests: " + ", ".join("%d %s" % (n, k) for k, n in sorted(counts.items())))
        if bad:
            # The device tool returns the last 12,000 characters: details for the first eight,
            # names for the next thirty, the rest in results.json.
            r.append("failed tests (first assertion lines; reruns alone; memcheck):")
            for k, v in bad[:8]:
                r.append("  %s: %s" % (k, v["verdict"]))
                for line in first_assertion(v.get("failure", ""), 5).splitlines():
                    r.append("      " + line[:150])
                extra = ["%s: %s" % (what, res) for what, res in v.get("reruns", {}).items()]
                if v.get("memcheck"):
                    extra.append("memcheck: " + v["memcheck"])
                if extra:
                    r.append("    " + "; ".join(extra))
            for k, v in bad[8:38]:
                r.append("  %s: %s" % (k, v["verdict"]))
            if len(bad) > 38:
                r.append("  … and %d more (results.json)" % (len(bad) - 38))
        skipped = [k for k, v in self.tests.items() if v["verdict"] == "skipped"]
        if skipped:
            why = first_assertion(self.tests[skipped[0]].get("failure", ""), 2).replace("\n", " ")
            r.append("skipped: %d (%s …)%s" % (len(skipped), ", ".join(sorted(skipped)[:3]),
                                               ("; because: " + why) if why else ""))
        for s in self.sanitizer:
            if s["verdict"] != "clean":
                r.append("sanitizer %s %s: %s" % (s["tool"], s["what"], s["verdict"]))
        r.append("time:    %d s of %d; results.json and logs.tar.gz beside summary.txt; exit %d"
                 % (time.time() - self.t0, self.budget, self.exit_code()))
        return "\n".join(r) + "\n"

    def write(self, summary=None):
        """summary.txt, results.json and logs.tar.gz into OUTDIR, each replaced whole."""
        def put(name, data, mode="w"):
            tmp = os.path.join(self.out, "." + name + ".tmp")
            with open(tmp, mode) as f:
                f.write(data)
            os.replace(tmp, os.path.join(self.out, name))
        put("results.json", json.dumps(self.results(), indent=1) + "\n")
        put("summary.txt", summary or self.summary())
        tmp = os.path.join(self.out, ".logs.tar.gz.tmp")
        with tarfile.open(tmp, "w:gz", compresslevel=6) as tar:
            for folder, _, files in sorted(os.walk(self.work)):
                for name in sorted(files):
                    path = os.path.join(folder, name)
                    arc = os.path.join("logs", os.path.relpath(path, self.work))
                    try:
                        size = os.path.getsize(path)
                        if size <= LOG_CAP:
                            tar.add(path, arcname=arc)
                            continue
                        with open(path, "rb") as f:  # its head and its tail
                            head = f.read(LOG_CAP // 4)
                            f.seek(size - (LOG_CAP - LOG_CAP // 4))
                            tail = f.read()
                        data = head + b"\n[... cut by gpu-check ...]\n" + tail
                        info = tarfile.TarInfo(arc)
                        info.size = len(data)
                        info.mtime = int(time.time())
                        tar.addfile(info, io.BytesIO(data))
                    except OSError:
                        continue
        os.replace(tmp, os.path.join(self.out, "logs.tar.gz"))

    # -- 1. environment and binaries
    def environment(self):
        t0 = time.time()
        log = self.log("env.log")
        with open(log, "w") as f:
            f.write("date: %s\n%s\n" % (time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                                         capture(["uname", "-a"], 10)))
            f.write("nproc: %d\n" % os.cpu_count())
            f.write(capture(["nvidia-smi"], 30))
        self.gpu_listed = "GPU" in capture(["nvidia-smi", "-L"], 30)
        smi = capture(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"], 30)
        self.info["device"] = smi.strip().splitlines()[0] if smi.strip() and "," in smi else "none listed by nvidia-smi"
        # CUDA's own libraries from this machine: its toolkit, else PyTorch's nvidia-* wheels.
        dirs = [d for d in ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
                            "/usr/lib/x86_64-linux-gnu")
                if os.path.exists(d + "/libcudart.so.13") or os.path.exists(d + "/libcublas.so.13")]
        wheels = capture(["python3", "-c", "import glob, site; print(' '.join(sorted({p.rsplit('/', 1)[0] for s in "
                          "site.getsitepackages() for p in glob.glob(s + '/nvidia/*/lib/lib*.so*')})))"], 30)
        dirs += wheels.split()
        with open(log, "a") as f:
            f.write("CUDA library folders: %s\n" % (":".join(dirs) or "none"))
        given = os.environ.get("GPU_CHECK_BIN")
        pack = os.environ.get("GPU_CHECK_PACK", os.path.join(ROOT, "gpu-bin", "linnet-gpu.tar.xz"))
        note = ""
        if given:
            self.bin, note = given, "given (GPU_CHECK_BIN=%s)" % given
        elif os.path.exists(pack):
            unpacked = os.path.join(self.work, "..", os.path.basename(self.work) + "-bin")
            os.makedirs(unpacked, exist_ok=True)
            if run(["tar", "-C", unpacked, "-xJf", pack], log, self.cap(120)).rc == 0:
                self.env = self.sourced(os.path.join(unpacked, "env.sh"))
                manifest = os.path.join(unpacked, "manifest.txt")
                if os.path.exists(manifest):
                    with open(manifest) as f:
                        text = f.read()
                    with open(log, "a") as f:
                        f.write(text)
                    m = re.search(r"commit: (.*)", text)
                    self.info["commit"] = (m.group(1) if m else "unknown") + " (" + text.splitlines()[-1].strip() + ")"
                self.bin, note = os.path.join(unpacked, "bin"), "prebuilt"
        if dirs:
            self.env["LD_LIBRARY_PATH"] = ":".join(filter(None, [self.env.get("LD_LIBRARY_PATH", "")] + dirs))
        if self.bin and not self.binaries_start(log):
            self.say("the prebuilt binaries do not start here (env.log): building instead")
            self.bin = None
        if not self.bin:
            # Building takes up to 30 minutes: first make sure there is a GPU to run them on.
            seen, said = gpu_seen()
            with open(log, "a") as f:
                f.write("before building: %s\n" % said)
            if not seen:
                self.step("env", "ok (no prebuilt binaries that start here; none built: no GPU)", time.time() - t0)
                self.step("preflight", "FAILED: no GPU on this machine, so nothing was built (%s)" % said, 0)
                return False
            here = os.path.join(ROOT, "build-gpu-here")
            env = dict(os.environ, LINNET_GPU_BUILD=here)
            build = os.environ.get("GPU_CHECK_BUILD", os.path.join(ROOT, "scripts", "build-here-gpu"))
            if run(["bash", build], log, self.cap(1800), env).rc == 0:
                self.env = self.sourced(os.path.join(here, "pack", "env.sh"))
                if dirs:
                    self.env["LD_LIBRARY_PATH"] = ":".join(filter(None, [self.env.get("LD_LIBRARY_PATH", "")] + dirs))
                self.bin, note = os.path.join(here, "pack", "bin"), "built here"
        if self.info["commit"] == "unknown":
            c = capture(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], 10).strip()
            if re.fullmatch(r"[0-9a-f]{4,40}", c):
                self.info["commit"] = c + " (the tree's; no manifest)"
        if not self.bin:
            self.step("env", "FAILED: no binaries that start here and none could be built (env.log)", time.time() - t0)
            return False
        self.info["binaries"] = note
        for k, v in {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                     "OMPI_MCA_rmaps_base_oversubscribe": "1", "LINNET_TEST_SOURCE_DIR": ROOT,
                     "LINNET_TEST_BINARY": os.path.join(self.bin, "linnet"),
                     "LINNET_TEST_MPI_COMM_CHECK": os.path.join(self.bin, "mpi_comm_check"),
                     "LINNET_TEST_CACHE": os.path.join(self.work, "..", "linnet-test-cache"),
                     "LINNET_TEST_MPI_TIMEOUT": str(int(env_seconds("GPU_CHECK_MPI_SECONDS", 60)))}.items():
            self.env.setdefault(k, v)
        os.makedirs(self.env["LINNET_TEST_CACHE"], exist_ok=True)
        self.step("env", "ok (%s binaries; GPU listed by nvidia-smi: %s)" % (note, "yes" if self.gpu_listed else "no"),
                  time.time() - t0)
        return True

    def sourced(self, env_sh):
        text = capture(["bash", "-c", 'source "$0" && env -0', env_sh], 30)
        env = dict(os.environ)
        for item in text.split("\0"):
            if "=" in item:
                k, v = item.split("=", 1)
                env[k] = v
        return env

    def binaries_start(self, log):
        ldd = ""
        for name in ("linnet", "linnet_tests", "mpi_comm_check", "liblinnet_cuda.so"):
            path = os.path.join(self.bin, name)
            if os.path.exists(path):
                ldd += capture(["ldd", path], 30, self.env)
        with open(log, "a") as f:
            f.write(ldd)
        if "not found" in ldd:
            return False
        return run([os.path.join(self.bin, "linnet_tests"), "--gtest_list_tests", "--gtest_filter=Cuda.*"], log,
                   self.cap(60), self.env).rc == 0

    # -- 2. preflight
    def preflight(self):
        log = self.log("preflight.log")
        r = run([os.path.join(self.bin, "linnet"), "devices"], log, self.cap(60), self.env)
        with open(log) as f:
            text = f.read()
        reason = next((line.strip() for line in text.splitlines() if line.startswith("cuda")), "")
        if r.rc == 0 and not r.timed_out:
            self.step("preflight", "ok: " + (reason or "linnet devices exit 0"), r.seconds)
            return True
        self.step("preflight", "FAILED (%s): %s" % (r.verdict(), reason or "no line about CUDA (preflight.log)"), r.seconds)
        return False

    # -- 3. bench
    def bench_sweep(self, plan_path, limit):
        t0 = time.time()
        with open(plan_path) as f:
            plan = json.load(f)
        labels = [c["label"] for c in plan]
        folder = os.path.join(self.work, "bench")
        os.makedirs(folder, exist_ok=True)
        log = self.log("bench.log")
        outcome = {}  # label -> how the sweep process ended while it ran (crashed / timed out)
        todo = list(labels)
        attempts = 0
        while todo and attempts < 3:
            attempts += 1
            cmd = [os.path.join(self.bin, "linnet"), "bench-sweep", "--plan", plan_path, "--out", folder]
            if todo != labels:
                cmd += ["--only", ",".join(todo)]
            r = run(cmd, log, self.cap(limit - (time.time() - t0)), self.env)
            with open(log) as f:
                text = f.read()
            begun = re.findall(r"^bench-sweep: begin (\S+)", text, re.M)
            ended = re.findall(r"^bench-sweep: end (\S+)", text, re.M)
            unfinished = [b for b in begun if b not in ended and b not in outcome]
            if r.rc != 0 and unfinished and not os.path.exists(os.path.join(folder, unfinished[-1] + ".json")):
                # the configuration that was running when the process ended: its verdict, no figures
                outcome[unfinished[-1]] = r.verdict()
            todo = [lb for lb in labels if lb not in outcome and not os.path.exists(os.path.join(folder, lb + ".json"))]
            if r.timed_out or self.cap(limit - (time.time() - t0)) < min(30, limit / 3):
                break  # too little left to start the model again
        self.bench = []
        ok = 0
        for lb in labels:
            entry = {"label": lb}
            path = os.path.join(folder, lb + ".json")
            if os.path.exists(path):
                try:
                    with open(path) as f:
                        j = json.load(f)
                except (OSError, ValueError) as e:
                    j = {"status": "error", "error": "unreadable report: %s" % e}
                if j.get("label") != lb:
                    entry["verdict"] = "failed: its JSON names label %r" % j.get("label")
                elif j.get("status") == "ok":
                    entry["verdict"] = "ok"
                    entry["figures"] = figures(j)
                    entry["env"] = j.get("env", {})
                    entry["report"] = j
                    ok += 1
                else:
                    entry["verdict"] = "failed: " + str(j.get("error", "status %s" % j.get("status")))[:300]
            elif lb in outcome:
                entry["verdict"] = outcome[lb] + " while it ran (no report)"
            else:
                entry["verdict"] = "not run"
            self.bench.append(entry)
        verdict = ("ok: %d of %d configurations" % (ok, len(labels)) if ok == len(labels)
                   else "FAILED: %d of %d configurations gave figures (bench.log)" % (ok, len(labels)))
        self.step("bench", verdict, time.time() - t0)

    # -- 4. tests, one process per suite
    def run_tests(self, names_by_suite, step, limit_per_suite, env=None, tag=""):
        """Runs each suite's tests in a process of its own, again for what a dead process left."""
        t0 = time.time()
        env = env or self.env
        folder = os.path.join(self.work, "tests")
        os.makedirs(folder, exist_ok=True)
        for suite, names in names_by_suite.items():
            safe = re.sub(r"[^A-Za-z0-9._-]", "_", suite) + tag
            todo, attempt = list(names), 0
            while todo:
                attempt += 1
                log = os.path.join(folder, "%s.%d.log" % (safe, attempt))
                js = os.path.join(folder, "%s.%d.json" % (safe, attempt))
                limit = self.cap(limit_per_suite)
                if limit < min(5, limit_per_suite):
                    for n in todo:
                        self.record(n, "not run", "", 0, note="the budget was spent")
                    break
                self.say("%s: %s (%d tests, at most %d s)" % (step, suite, len(todo), limit))
                r = run([os.path.join(self.bin, "linnet_tests"), "--gtest_filter=" + ":".join(todo),
                         "--gtest_output=json:" + js], log, limit, env)
                results = {}
                if os.path.exists(js) and not r.timed_out:
                    try:
                        results = from_gtest_json(js)
                    except (OSError, ValueError):
                        results = {}
                running = None
                with open(log, errors="replace") as f:
                    from_log, running, running_text = from_gtest_log(f.read())
                if results:  # gtest's JSON has no skip message: the log's lines give it
                    for n, (verdict, seconds, text) in list(results.items()):
                        if not text and verdict != "passed" and n in from_log:
                            results[n] = (verdict, seconds, from_log[n][2])
                    running = None
                    if r.rc not in (0, 1):  # the JSON was written, then the process died (teardown)
                        self.tests.setdefault(suite + " (process)", {}).update(
                            verdict="crashed", seconds=round(r.seconds, 1),
                            failure="the test process ended with %s after its results" % r.verdict())
                else:
                    results = from_log
                    if running:
                        results[running] = ("timed out" if r.timed_out else "crashed", r.seconds,
                                            running_text + "\n(the process: %s)" % r.verdict())
                for n, (verdict, seconds, text) in results.items():
                    if n in todo:
                        self.record(n, verdict, text, seconds, log=os.path.relpath(log, self.work))
                done = set(results)
                if running is None and r.rc not in (0, 1) and not done:
                    for n in todo:  # it died before its first test
                        self.record(n, "crashed" if not r.timed_out else "timed out",
                                    "the process ended with %s before its first test" % r.verdict(), 0)
                    break
                todo = [n for n in todo if n not in done]
                if todo and attempt >= 20:
                    for n in todo:
                        self.record(n, "not run", "", 0, note="left after 20 processes")
                    break
            self.write()
        return time.time() - t0

    def record(self, name, verdict, failure, seconds, log=None, note=None):
        t = self.tests.setdefault(name, {})
        t.update(verdict=verdict, seconds=round(seconds, 2), failure=failure.strip()[-4000:])
        if log:
            t["log"] = log
        if note:
            t["note"] = note

    def gpu_tests(self, wanted=None):
        listed = list_tests(os.path.join(self.bin, "linnet_tests"), GPU_FILTER, self.env)
        if wanted is not None:  # the rerun: these names only, by suite
            listed = {s: [n for n in names if n in wanted] for s, names in listed.items()}
            listed = {s: names for s, names in listed.items() if names}
            missing = sorted(set(wanted) - {n for names in listed.values() for n in names})
            for n in missing:
                if n.startswith(("Golden/", "CudaModule")) or n.endswith(" (process)"):
                    continue
                self.record(n, "not run", "", 0, note="not among this build's GPU tests")
        def rank(suite):  # the suite's place in GPU_SUITES ("Backends/BatchInvariance.*/cuda_*" → its suite)
            heads = [pattern.split(".")[0] for pattern in GPU_SUITES]
            return heads.index(suite) if suite in heads else len(heads)
        listed = dict(sorted(listed.items(), key=lambda kv: rank(kv[0])))
        if not listed:
            self.step("gpu-tests", "FAILED: no GPU tests listed by linnet_tests", 0)
            return
        seconds = self.run_tests(listed, "gpu-tests", env_seconds("GPU_CHECK_SUITE_SECONDS", 60))
        names = [n for ns in listed.values() for n in ns]
        counts = {}
        for n in names:
            v = self.tests.get(n, {}).get("verdict", "not run")
            counts[v] = counts.get(v, 0) + 1
        text = ", ".join("%d %s" % (c, v) for v, c in sorted(counts.items()))
        bad = sum(counts.get(v, 0) for v in NOT_PASSED) + sum(
            1 for k, v in self.tests.items() if k.endswith(" (process)") and v["verdict"] == "crashed")
        if bad == 0 and counts.get("skipped", 0) == 0 and counts.get("passed", 0) > 0:
            verdict = "ok: " + text
        elif bad == 0 and self.gpu_listed:
            verdict = "FAILED: nvidia-smi lists a GPU, yet %s" % text
        else:
            verdict = "FAILED: " + text
        self.step("gpu-tests", verdict, seconds)

    # -- 5. failed tests again, alone
    def reruns(self):
        t0 = time.time()
        # (the conformance tests are run again by their own step, with the CUDA backend chosen)
        bad = [n for n, v in sorted(self.tests.items()) if v["verdict"] in ("failed", "crashed", "timed out")
               and not n.endswith(" (process)") and not n.startswith("Golden/")][:10]
        if not bad:
            self.step("reruns", "ok: nothing failed", 0)
            return
        ways = [("alone", {}), ("simt", {"LINNET_CUDA_MATMUL": "simt"}), ("legacy", {"LINNET_CUDA_LEGACY": "1"})]
        each = env_seconds("GPU_CHECK_SUITE_SECONDS", 60)
        for what, extra in ways:
            for n in bad:
                if self.cap(each) < min(10, each):
                    self.tests[n].setdefault("reruns", {})[what] = "not run (budget)"
                    continue
                log = self.log(os.path.join("reruns", re.sub(r"[^A-Za-z0-9._-]", "_", n) + "." + what + ".log"))
                os.makedirs(os.path.dirname(log), exist_ok=True)
                js = log[:-4] + ".json"
                r = run([os.path.join(self.bin, "linnet_tests"), "--gtest_filter=" + n, "--gtest_output=json:" + js],
                        log, self.cap(each), dict(self.env, **extra))
                verdict = r.verdict()
                if os.path.exists(js) and not r.timed_out:
                    try:
                        verdict = from_gtest_json(js).get(n, (verdict,))[0]
                    except (OSError, ValueError):
                        pass
                elif not r.timed_out:
                    verdict = "crashed" if r.rc not in (0, 1) else verdict
                self.tests[n].setdefault("reruns", {})[what] = verdict
            self.write()
        fixed = [n for n in bad if "passed" in self.tests[n]["reruns"].values()]
        self.step("reruns", "info: %d failed test(s) run alone, on the SIMT matmul and on every earlier path; %d pass "
                  "one way or another (failed tests, below)" % (len(bad), len(fixed)), time.time() - t0)

    # -- 6. conformance
    def conformance(self):
        env = dict(self.env, LINNET_TEST_BACKEND="cuda")
        listed = list_tests(os.path.join(self.bin, "linnet_tests"), CONFORMANCE_FILTER, env)
        if not listed:
            self.step("conformance", "FAILED: no conformance tests listed", 0)
            return
        seconds = self.run_tests(listed, "conformance", env_seconds("GPU_CHECK_CONFORMANCE_SECONDS", 120), env,
                                 tag=".cuda")
        names = [n for ns in listed.values() for n in ns]
        counts = {}
        for n in names:
            v = self.tests.get(n, {}).get("verdict", "not run")
            counts[v] = counts.get(v, 0) + 1
        text = ", ".join("%d %s" % (c, v) for v, c in sorted(counts.items()))
        # A fixture that does not split over 3 or 4 shards skips there, as on the CPU; any other skip
        # (no GPU, say) is not a pass.
        by_design = re.compile(r"do(es)? not split over \d+ shards|Shards 4 is run for")
        odd_skips = [n for n in names if self.tests.get(n, {}).get("verdict") == "skipped"
                     and not by_design.search(self.tests[n].get("failure", ""))]
        ok = counts.get("passed", 0) > 0 and not odd_skips and counts.get("passed", 0) + counts.get("skipped", 0) == len(names)
        self.step("conformance", ("ok: " if ok else "FAILED: ") + text + " (1 to 4 ranks on the one GPU; a fixture that does not split over 3 or 4 shards skips there, as on the CPU)",
                  seconds)

    # -- 7. compute-sanitizer
    def sanitize(self, include_lists=True):
        t0 = time.time()
        tool = os.environ.get("GPU_CHECK_SANITIZER") or shutil.which("compute-sanitizer", path=self.env.get("PATH")) or (
            "/usr/local/cuda/bin/compute-sanitizer" if os.path.exists("/usr/local/cuda/bin/compute-sanitizer") else "")
        if not tool or tool == "none":
            self.step("sanitizer", "not run: no compute-sanitizer", 0)
            return
        failed = [n for n, v in sorted(self.tests.items())
                  if v["verdict"] in ("failed", "crashed", "timed out") and not n.endswith(" (process)")
                  and not n.startswith("Golden/")][:6]
        each = env_seconds("GPU_CHECK_SANITIZER_SECONDS", 90)
        runs = [("memcheck", "failed: " + n, [n], each) for n in failed]
        if include_lists:
            runs += [("memcheck", "kernels", MEMCHECK_TESTS, each * 4 / 3), ("racecheck", "shared memory", RACECHECK_TESTS, each)]
        # A sanitizer run cut short before (a test's `[ OK ]` lines in its log say which it finished):
        # GPU_CHECK_SANITIZE_AGAIN="racecheck=A.B,C.D;memcheck=E.F" runs those tests again under it.
        for item in filter(None, os.environ.get("GPU_CHECK_SANITIZE_AGAIN", "").split(";")):
            tool_name, _, names = item.partition("=")
            runs.append((tool_name.strip(), "again: " + names.strip(), names.strip().split(","), each * 4 / 3))
        for tool_name, what, tests, limit in runs:
            log = self.log(os.path.join("sanitizer", "%s.%s.log" % (tool_name, re.sub(r"[^A-Za-z0-9._-]", "_", what))))
            os.makedirs(os.path.dirname(log), exist_ok=True)
            js = log[:-4] + ".json"
            lim = self.cap(limit)
            if lim < min(15, each):
                self.sanitizer.append({"tool": tool_name, "what": what, "verdict": "not run (budget)"})
                continue
            self.say("sanitizer: %s on %s (at most %d s)" % (tool_name, what, lim))
            # API errors are not memcheck's business here: linnet checks every CUDA call and throws,
            # and NCCL (PyTorch's wheel on the H200 image) probes kernels it has no sm_90 image for
            # at init, each probe an "API error" report (16 in the first memcheck of NcclOneRank).
            api = ["--report-api-errors", "no"] if tool_name == "memcheck" else []
            r = run([tool, "--tool", tool_name] + api + ["--error-exitcode", "9", os.path.join(self.bin, "linnet_tests"),
                     "--gtest_filter=" + ":".join(tests), "--gtest_output=json:" + js], log, lim, self.env)
            with open(log, errors="replace") as f:
                text = f.read()
            # memcheck ends "ERROR SUMMARY: N errors", racecheck "RACECHECK SUMMARY: H hazards displayed
            # (N errors, W warnings)".
            m = re.findall(r"ERROR SUMMARY: (\d+) error", text) or re.findall(r"RACECHECK SUMMARY: .*\((\d+) error", text)
            if r.timed_out:
                verdict = "timed out"
            elif r.rc == 9 or (m and int(m[-1]) > 0):
                verdict = "%s reports" % (m[-1] if m else "error exit 9:")
            elif not m:
                verdict = "no ERROR SUMMARY (%s)" % r.verdict()
            elif r.rc == 0:
                verdict = "clean"
            else:
                verdict = "0 reports, but the tests failed under it (%s)" % r.verdict()
            finished = [n for n in tests if re.search(r"^\[ +OK \] %s \(" % re.escape(n), text, re.M)]
            self.sanitizer.append({"tool": tool_name, "what": what, "verdict": verdict, "seconds": round(r.seconds, 1),
                                   "finished": finished, "log": os.path.relpath(log, self.work)})
            if what.startswith("failed: "):
                self.tests[what[len("failed: "):]]["memcheck"] = verdict
            self.write()
        bad = [s for s in self.sanitizer if s["verdict"] != "clean"]
        verdict = ("ok: %d runs clean" % len(self.sanitizer) if not bad else
                   "FAILED: %d of %d runs not clean (below)" % (len(bad), len(self.sanitizer)))
        self.step("sanitizer", verdict, time.time() - t0)


def figures(j):
    """The few numbers a bench report is read for."""
    f = {}
    if "decode" in j and "prefill" in j:
        f["decode_tok_s"] = j["decode"].get("tokens_per_s", 0)
        f["decode_ms"] = j["decode"].get("ms_per_step", 0)
        f["decode_of_floor"] = j["decode"].get("fraction_of_floor", 0)
        f["prefill_tok_s"] = j["prefill"].get("tokens_per_s", 0)
        f["prefill_of_floor"] = j["prefill"].get("fraction_of_floor", 0)
        f["load_s"] = j.get("load_s", 0)
        f["bandwidth_GBps"] = j.get("ceilings", {}).get("bandwidth_GBps", 0)
        f["matmul_TFLOPs"] = j.get("ceilings", {}).get("matmul_TFLOPs", 0)
        counters = j.get("backend_counters", {})
        if counters:
            f["graph_replays"] = counters.get("graph_replays", 0)
    elif "generate" in j:
        f["engine_tok_s"] = j["generate"].get("batched_tok_s", 0)
        f["prompts"] = j.get("prompts", 0)
    return f


def main(argv):
    args = list(argv)
    rerun = None
    if args and args[0] == "--rerun-failed":
        args.pop(0)
        rerun = os.path.join(ROOT, "gpu-bin", "last-results.json")
        if len(args) == 2:
            rerun = args.pop(0)
    if len(args) != 1 or args[0].startswith("-"):
        sys.stderr.write("usage: scripts/gpu-check [--rerun-failed [RESULTS.json]] OUTDIR\n")
        return 2
    out = os.path.abspath(args[0])
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(out):  # this run's files only
        path = os.path.join(out, name)
        if os.path.isfile(path) and name in ("summary.txt", "results.json", "logs.tar.gz"):
            os.remove(path)
    previous = None
    if rerun is not None:
        try:
            with open(rerun) as f:
                previous = json.load(f)
        except (OSError, ValueError) as e:
            sys.stderr.write("gpu-check --rerun-failed: cannot read the first run's results %s: %s\n"
                             "(copy the first run's results.json to gpu-bin/last-results.json, or name it)\n" % (rerun, e))
            return 2
    c = Check(out, rerun)
    c.previous = previous
    if previous is not None:
        c.info["previous"] = {"commit": previous.get("commit"), "exit_code": previous.get("exit_code")}
    try:
        if c.environment() and c.preflight():
            if rerun is None:
                # The proof first (issue 43: the dense path, then the figures): the GPU tests in
                # order of dependence, the transformers fixtures, then the bench on what is left.
                c.gpu_tests()
                c.conformance()
                c.bench_sweep(os.environ.get("GPU_CHECK_PLAN", os.path.join(ROOT, "scripts", "gpu-bench-plan.json")),
                              env_seconds("GPU_CHECK_BENCH_SECONDS", 180))
                c.reruns()
                c.sanitize()
            else:
                wanted = [t["name"] for t in previous.get("tests", []) if t.get("verdict") in NOT_PASSED]
                conformance = any(n.startswith("Golden/") for n in wanted)
                wanted = [n for n in wanted if not n.startswith("Golden/")]
                if os.environ.get("GPU_CHECK_RERUN_TESTS") == "all":  # every GPU test again (new ones too)
                    c.gpu_tests()
                elif wanted:
                    c.gpu_tests(wanted)
                else:
                    c.step("gpu-tests", "ok: the first run left no test to run again", 0)
                c.bench_sweep(os.environ.get("GPU_CHECK_QUICK_PLAN", os.path.join(ROOT, "scripts",
                                                                                  "gpu-bench-quick.json")),
                              env_seconds("GPU_CHECK_BENCH_SECONDS", 60))
                if conformance:
                    c.conformance()
                c.reruns()
                c.sanitize(include_lists=False)
        else:
            no_gpu = c.bin or any(s[0] == "preflight" for s in c.steps)
            for name in (["bench", "gpu-tests", "reruns", "conformance", "sanitizer"] if rerun is None
                         else ["gpu-tests", "bench", "reruns", "sanitizer"]):
                if not any(s[0] == name for s in c.steps):
                    c.steps.append([name, "not run: no usable GPU (preflight)" if no_gpu else "not run: no binaries", 0])
    except KeyboardInterrupt:
        c.steps.append(["interrupted", "FAILED: interrupted", 0])
    finally:
        text = c.summary()
        c.write(text)
        sys.stdout.write("\n" + text)
        sys.stdout.flush()
    return c.exit_code()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
