#!/usr/bin/env bash
# scripts/gpu-check on a machine without a GPU, against stand-ins for the GPU binaries
# (fake_linnet.py, fake_gtest.py, a compute-sanitizer and an nvidia-smi written here): tests
# that pass, fail, crash, hang and skip, bench configurations that crash, hang and report, a
# sanitizer that hangs. Checks the files left in OUTDIR (at most 6), the verdicts (a timeout is
# never "ok" nor "0 reports"), the bench labels (each from its own JSON), the test names (from
# gtest's JSON, parameterised ones whole), the exit codes, and --rerun-failed; and, without
# prebuilt binaries, that nothing is built on a machine with no GPU (the preflight says so at
# once) and that a build is tried where a GPU is listed. verify.py holds the checks. Limits are
# cut to seconds so the whole runs in well under a minute.
#   dry_run.sh SOURCE_DIR WORK_DIR       exit 0 (pass), 1 (fail) or 77 (no python3: skipped)
set -uo pipefail
src=$1
work=$2
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }
rm -rf "$work"
mkdir -p "$work/bin"
here=$src/tests/gpu_check
bin=$work/bin
printf '#!/bin/sh\nexec python3 %s "$@"\n' "$here/fake_linnet.py" >"$bin/linnet"
printf '#!/bin/sh\nexec python3 %s "$@"\n' "$here/fake_gtest.py" >"$bin/linnet_tests"
printf '#!/bin/sh\nexit 0\n' >"$bin/mpi_comm_check"
cat >"$bin/nvidia-smi" <<'SMI'
#!/bin/sh
if [ "${FAKE_NO_GPU:-0}" = 1 ]; then echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."; exit 9; fi
case "$1" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-fake)";;
  --query-gpu=*) echo "NVIDIA H200, 580.00.00, 143771 MiB";;
  *) echo "| NVIDIA-SMI 580.00.00   Driver Version: 580.00.00   CUDA Version: 13.0 |";;
esac
SMI
# compute-sanitizer: memcheck finds one error in the failing Matmul test; racecheck hangs.
cat >"$bin/compute-sanitizer" <<'SAN'
#!/bin/sh
tool=$2
while [ "${1#--}" != "$1" ]; do shift 2; done  # --tool X [--report-api-errors no] --error-exitcode 9
if [ "$tool" = racecheck ] && [ "${FAKE_ALL_PASS:-0}" != 1 ]; then sleep 1000; fi
"$@"
rc=$?
case "$*" in
  *BackendOps.Matmul*) if [ "${FAKE_ALL_PASS:-0}" != 1 ]; then
      echo "========= Invalid __global__ read of size 16 bytes"; echo "========= ERROR SUMMARY: 1 error"; exit 9; fi;;
esac
if [ "$tool" = racecheck ]; then echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)";
else echo "========= ERROR SUMMARY: 0 errors"; fi
exit $rc
SAN
chmod +x "$bin"/*
cat >"$work/plan.json" <<'PLAN'
[{"label": "first", "args": ["--max-seq", "8192"]},
 {"label": "second-crash", "args": []},
 {"label": "third", "args": [], "env": {"LINNET_CUDA_GRAPHS": "0"}},
 {"label": "fourth-error", "args": []},
 {"label": "fifth-hang", "args": []},
 {"label": "sixth", "args": []},
 {"label": "engine", "command": "bench-engine", "args": []}]
PLAN
cat >"$work/quick.json" <<'PLAN'
[{"label": "quick", "args": []}, {"label": "quick-legacy", "args": [], "env": {"LINNET_CUDA_LEGACY": "1"}}]
PLAN
cat >"$work/pass-plan.json" <<'PLAN'
[{"label": "a", "args": []}, {"label": "engine", "command": "bench-engine", "args": []}]
PLAN

export PATH="$bin:$PATH" GPU_CHECK_BIN="$bin" GPU_CHECK_SANITIZER="$bin/compute-sanitizer"
export GPU_CHECK_SUITE_SECONDS=3 GPU_CHECK_CONFORMANCE_SECONDS=3 GPU_CHECK_SANITIZER_SECONDS=3 GPU_CHECK_BENCH_SECONDS=6
export GPU_CHECK_MPI_SECONDS=5
check() { python3 "$here/verify.py" "$@" || { echo "dry run: $1 FAILED"; exit 1; }; }

echo "== 1. a GPU run where things go wrong"
start=$(date +%s)
GPU_CHECK_SECONDS=80 GPU_CHECK_PLAN="$work/plan.json" FAKE_LOG="$work/first.calls" \
  bash "$src/scripts/gpu-check" "$work/out-first" >"$work/first.stdout" 2>&1
check first $? "$work/out-first" "$work/first.stdout" "$work/first.calls"
echo "   $(( $(date +%s) - start )) s"

echo "== 2. no GPU: the preflight's reason, exit 1"
FAKE_NO_GPU=1 GPU_CHECK_SECONDS=30 GPU_CHECK_PLAN="$work/plan.json" \
  bash "$src/scripts/gpu-check" "$work/out-nogpu" >"$work/nogpu.stdout" 2>&1
check nogpu $? "$work/out-nogpu" "$work/nogpu.stdout"

echo "== 3. --rerun-failed with the first run's results"
start=$(date +%s)
GPU_CHECK_SECONDS=60 GPU_CHECK_QUICK_PLAN="$work/quick.json" FAKE_LOG="$work/rerun.calls" \
  bash "$src/scripts/gpu-check" --rerun-failed "$work/out-first/results.json" "$work/out-rerun" >"$work/rerun.stdout" 2>&1
check rerun $? "$work/out-rerun" "$work/rerun.stdout" "$work/rerun.calls" "$work/out-first/results.json"
echo "   $(( $(date +%s) - start )) s"
bash "$src/scripts/gpu-check" --rerun-failed "$work/nothing.json" "$work/out-bad" >"$work/bad.stdout" 2>&1
[[ $? == 2 ]] || { echo "dry run: --rerun-failed without results should exit 2"; exit 1; }

echo "== 4. everything passes: exit 0"
FAKE_ALL_PASS=1 GPU_CHECK_SECONDS=60 GPU_CHECK_PLAN="$work/pass-plan.json" \
  bash "$src/scripts/gpu-check" "$work/out-pass" >"$work/pass.stdout" 2>&1
check pass $? "$work/out-pass" "$work/pass.stdout"
echo "== 5. no GPU and no prebuilt binaries: the preflight says so before any build, exit 1"
# (a build stand-in that records being run; no archive of binaries; no CUDA driver library)
printf '#!/bin/sh\necho built >>"%s"\nexit 1\n' "$work/build.calls" >"$work/fake-build"
start=$(date +%s)
env -u GPU_CHECK_BIN FAKE_NO_GPU=1 GPU_CHECK_SECONDS=60 GPU_CHECK_PACK="$work/no-pack.tar.xz" \
  GPU_CHECK_BUILD="$work/fake-build" GPU_CHECK_LIBCUDA="$work/no-libcuda.so" \
  bash "$src/scripts/gpu-check" "$work/out-nobuild" >"$work/nobuild.stdout" 2>&1
check nobuild $? "$work/out-nobuild" "$work/nobuild.stdout" "$work/build.calls" "$(( $(date +%s) - start ))"

echo "== 6. a GPU listed and no prebuilt binaries: they are built (here the build fails)"
env -u GPU_CHECK_BIN GPU_CHECK_SECONDS=60 GPU_CHECK_PACK="$work/no-pack.tar.xz" \
  GPU_CHECK_BUILD="$work/fake-build" GPU_CHECK_LIBCUDA="$work/no-libcuda.so" \
  bash "$src/scripts/gpu-check" "$work/out-build" >"$work/build.stdout" 2>&1
check builds $? "$work/out-build" "$work/build.stdout" "$work/build.calls"
echo "dry run: all passed"
