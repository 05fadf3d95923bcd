#!/usr/bin/env bash
# The slurm/ scripts submitted with sbatch to a real SLURM (scripts/slurm-cluster: two nodes
# on this host), CPU backend, checked against the same job under plain mpirun; then faults.
#   tests/slurm_test.sh CASE LINNET_BINARY SOURCE_DIR WORK_DIR
# CASE: scripts outside node nodes pipeline mpirun sweep mismatch kill-srun kill-mpirun scancel-step resume requeue serve batch
# Exit 77 (ctest: skipped) when no cluster is up (SLURM_CONF unset), with the reason; `scripts`
# and `outside` need no cluster.
set -uo pipefail
case_=$1 linnet=$(readlink -f "$2") src=$(readlink -f "$3") work=$(mkdir -p "$4" && readlink -f "$4")
fail() {
  echo "FAILED: $*"
  exit 1
}
if [[ $case_ == scripts ]]; then
  for f in "$src"/slurm/*.sbatch "$src"/slurm/*.sh "$src"/scripts/slurm-cluster; do
    bash -n "$f" || fail "$f does not parse"
  done
  command -v shellcheck >/dev/null || { echo "shellcheck is not installed (scripts/deps --test)"; exit 77; }
  (cd "$src" && shellcheck -x slurm/*.sbatch slurm/*.sh scripts/slurm-cluster) || fail "shellcheck"
  echo "ok: bash -n and shellcheck"
  exit 0
fi
if [[ $case_ == outside ]]; then
  # Run with bash outside an allocation (no SLURM_* at all), from another folder: each script
  # ends at once with linnet-job.sh's message and exit 1, never a shell error.
  cd "$work" || exit 1
  for f in node nodes pipeline batch sweep; do
    out=$(env -i PATH="$PATH" HOME="${HOME:-/}" bash "$src/slurm/$f.sbatch" generate --checkpoint x 2>&1)
    rc=$?
    [[ $rc == 1 ]] || fail "slurm/$f.sbatch outside an allocation exited $rc: $out"
    [[ $out == "linnet job: not inside a SLURM allocation (submit with sbatch)" ]] ||
      fail "slurm/$f.sbatch outside an allocation said: $out"
  done
  echo "ok: outside an allocation, each script says so and exits 1"
  exit 0
fi
if [[ -z ${SLURM_CONF:-} ]] || ! sinfo -h >/dev/null 2>&1; then
  echo "no SLURM cluster is up (SLURM_CONF unset or sinfo fails; scripts/test starts one: scripts/slurm-cluster)"
  exit 77
fi
export PATH="$PATH:/usr/sbin"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo  # the two nodes share one host
export LINNET_BIN=$linnet LINNET_BACKEND=cpu LINNET_THREADS=1
d="$work/slurm_$case_"
rm -rf "$d"
mkdir -p "$d"
cd "$d" || exit 1

# The model: stories15M where it can be had, else the small random model with a real tokenizer.
if stories=$(bash "$src/scripts/fetch-stories15M" "$work/models/stories15M" 2>/dev/null); then
  ckpt="$work/slurm-stories15M"
  [[ -f $ckpt/model.safetensors ]] || "$linnet" import-llama2c --input "$stories/stories15M.bin" --out "$ckpt" >/dev/null 2>&1
  echo "model: stories15M"
  words=9  # prompts of up to 60 words (MaxSeq 256)
else
  ckpt="$src/tests/fixtures/lm_eval/model"
  echo "model: tests/fixtures/lm_eval/model (stories15M not to be had)"
  words=3  # its MaxSeq is 64: prompts of up to 24 words and 8 new tokens fit
fi
prompts() {  # N prompts of mixed lengths
  local n=$1 i
  for ((i = 0; i < n; ++i)); do
    printf '{"id": "p%d", "text": "Once upon a time there was a %s"}\n' "$i" "$(head -c $((i % 7 * words + 3)) /dev/zero | tr '\0' 'b' | sed 's/b/big /g')"
  done
}
docs() {
  local n=$1 i
  for ((i = 0; i < n; ++i)); do
    printf '{"id": "d%d", "text": "The cat sat on the mat. %s"}\n' "$i" "$(head -c $((i * 5 + 1)) /dev/zero | tr '\0' 'x' | sed 's/x/It rained again. /g')"
    printf '{"id": "c%d", "context": "Lily saw a", "continuation": [" dog", " cat", " big red ball"]}\n' "$i"
  done
}
# sbatch --wait, the job's log on stdout; returns the job's exit code.
submit() {
  local log=$1
  shift
  sbatch --wait --quiet -o "$log" "$@"
  local rc=$?
  cat "${log//%a/*}" 2>/dev/null
  return $rc
}
reference() {  # the same job under plain mpirun: reference NP TP SUBCOMMAND ARGS…
  local np=$1 tp=$2
  shift 2
  mpirun -np "$np" --oversubscribe "$linnet" "$@" --backend cpu --tp "$tp" --threads 1 >ref.log 2>&1 || {
    cat ref.log
    fail "the reference mpirun run failed"
  }
}
same() { cmp -s "$1" "$2" || { diff <(head -c 2000 "$1") <(head -c 2000 "$2"); fail "$1 and $2 differ"; }; }
job_of() { squeue -h -o %i -n "$1" | head -1; }
wait_lines() {  # wait_lines FILE N SECONDS: FILE (or its parts) hold N finished lines
  local t
  for ((t = 0; t < $3 * 10; ++t)); do
    [[ $(cat "$1" "$1".part* 2>/dev/null | grep -c '}$') -ge $2 ]] && return 0
    sleep 0.1
  done
  return 1
}
gen=(generate --checkpoint "$ckpt" --prompts in.jsonl --max-new-tokens 8)

case $case_ in
node)  # one node, tensor parallel over its 2 tasks, generate
  prompts 24 >in.jsonl
  submit job.log -N1 --ntasks-per-node=2 --gpus-per-node=0 "$src/slurm/node.sbatch" "${gen[@]}" --output out.jsonl ||
    fail "the job failed"
  grep -q "LINNET_TP=2" job.log || fail "not tensor parallel over the node's tasks"
  reference 2 2 "${gen[@]}" --output ref.jsonl
  same out.jsonl ref.jsonl
  [[ $(wc -l <out.jsonl) -eq 24 ]] || fail "expected 24 lines"
  ;;
nodes)  # two nodes: one replica each (data parallel), eval; then 2 × 2 (DP × TP)
  docs 12 >in.jsonl
  ev=(eval --checkpoint "$ckpt" --data in.jsonl)
  submit job.log -N2 --ntasks-per-node=1 --gpus-per-node=0 "$src/slurm/nodes.sbatch" "${ev[@]}" --output out.jsonl ||
    fail "the job failed"
  reference 2 1 "${ev[@]}" --output ref.jsonl
  same out.jsonl ref.jsonl
  submit job4.log -N2 --ntasks-per-node=2 -O --gpus-per-node=0 "$src/slurm/nodes.sbatch" "${ev[@]}" --output out4.jsonl ||
    fail "the 2 × 2 job failed"
  grep -q "4 tasks, LINNET_TP=2" job4.log || fail "not two replicas of two shards"
  reference 4 2 "${ev[@]}" --output ref4.jsonl
  same out4.jsonl ref4.jsonl
  ;;
pipeline)  # two nodes as two pipeline stages × tensor parallel over each node's 2 tasks (PP 2 × TP 2)
  prompts 12 >in.jsonl
  submit job.log -N2 --ntasks-per-node=2 --gpus-per-node=0 "$src/slurm/pipeline.sbatch" "${gen[@]}" --output out.jsonl ||
    fail "the job failed"
  grep -q "4 tasks, LINNET_TP=2, LINNET_PP=2" job.log || fail "not two stages of two shards"
  grep -q "1 replica × 2 stages × 2 shards" job.log || fail "the layout was not printed"
  reference 2 2 "${gen[@]}" --output ref.jsonl  # one stage: the same tokens
  same out.jsonl ref.jsonl
  [[ $(wc -l <out.jsonl) -eq 12 ]] || fail "expected 12 lines"
  ;;
mpirun)  # mpirun inside the allocation instead of srun
  prompts 12 >in.jsonl
  LINNET_LAUNCHER=mpirun submit job.log -N2 --ntasks-per-node=1 --gpus-per-node=0 "$src/slurm/nodes.sbatch" \
    "${gen[@]}" --output out.jsonl || fail "the job failed"
  reference 2 1 "${gen[@]}" --output ref.jsonl
  same out.jsonl ref.jsonl
  ;;
sweep)  # a job array: one JSON per (Shards, Batch)
  LINNET_SWEEP_SHARDS="1 2" LINNET_SWEEP_BATCHES="1 2" LINNET_OUT_DIR="$d" \
    LINNET_BENCH_ARGS="--config tiny --random-weights --prompt 8 --gen 4 --warmup 0 --repeats 1" \
    submit "job-%a.log" --array=0-3 -N1 --ntasks-per-node=2 --gpus-per-node=0 "$src/slurm/sweep.sbatch" || fail "the sweep failed"
  for s in 1 2; do
    for b in 1 2; do
      f=$(find . -name "bench-*-shards$s-batch$b.json" | head -1)
      [[ -n $f ]] || fail "no JSON for Shards $s, Batch $b"
      if ! grep -q "\"shards\": $s" "$f" || ! grep -q "\"batch\": $b" "$f"; then fail "$f does not say Shards $s, Batch $b"; fi
    done
  done
  ;;
mismatch)  # an allocation that does not fit --tp fails at once, with the reason
  prompts 2 >in.jsonl
  LINNET_TP=3 submit job.log -N1 --ntasks-per-node=2 --gpus-per-node=0 "$src/slurm/node.sbatch" "${gen[@]}" \
    --output out.jsonl && fail "a job with 2 tasks and LINNET_TP=3 succeeded"
  grep -q "does not divide by LINNET_TP=3" job.log || fail "no reason given"
  LINNET_BACKEND=cuda submit job2.log -N1 --ntasks-per-node=2 --gpus-per-node=0 "$src/slurm/node.sbatch" "${gen[@]}" \
    --output out.jsonl && fail "a cuda job without GPUs succeeded"
  grep -q "GPU(s) on the node" job2.log || fail "no reason given for the missing GPUs"
  ;;
kill-srun | kill-mpirun | scancel-step)  # a rank killed mid-job ends the job, non-zero, soon
  prompts 4000 >in.jsonl
  launcher=srun
  [[ $case_ == kill-mpirun ]] && launcher=mpirun
  LINNET_LAUNCHER=$launcher sbatch --quiet -J "k$$" -o job.log -N2 --ntasks-per-node=1 --gpus-per-node=0 \
    "$src/slurm/nodes.sbatch" generate --checkpoint "$ckpt" --prompts in.jsonl --max-new-tokens 32 --ignore-eos \
    --output out.jsonl
  wait_lines out.jsonl 1 60 || { cat job.log; fail "the job wrote nothing in 60 s"; }
  job=$(job_of "k$$")
  t0=$(date +%s)
  if [[ $case_ == scancel-step ]]; then
    scancel "$job.0" || fail "scancel of the step"
  else
    pid=$(pgrep -f "$linnet generate .*--output out.jsonl" | tail -1)
    [[ -n $pid ]] || fail "no rank to kill"
    kill -9 "$pid"
  fi
  for ((t = 0; t < 60; ++t)); do
    [[ -z $(squeue -h -j "$job" 2>/dev/null) ]] && break
    sleep 1
  done
  elapsed=$(($(date +%s) - t0))
  [[ -z $(squeue -h -j "$job" 2>/dev/null) ]] || { scancel "$job"; fail "the job still ran 60 s after the kill"; }
  state=$(sacct -n -j "$job" -o State 2>/dev/null | head -1)
  code=$(scontrol show job "$job" -o 2>/dev/null | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p')
  echo "ended ${elapsed}s after the kill; ExitCode=${code:-gone} ${state}"
  [[ -z $code || $code != 0:0 ]] || fail "the job exited 0 after a rank was killed"
  grep -qiE "killed|exited on signal|error|terminated|CANCELLED" job.log || { cat job.log; fail "the log does not say what happened"; }
  ;;
resume | requeue)  # preempted mid-run, then resumed (or requeued): the same file as a run left alone
  prompts 600 >in.jsonl
  reference 2 1 "${gen[@]}" --output ref.jsonl
  extra=()
  [[ $case_ == requeue ]] && extra=(--requeue)
  sbatch --quiet -J "r$$" -o job.log -N2 --ntasks-per-node=1 --gpus-per-node=0 "${extra[@]}" \
    "$src/slurm/nodes.sbatch" "${gen[@]}" --output out.jsonl
  wait_lines out.jsonl 20 60 || { cat job.log; fail "the job wrote nothing in 60 s"; }
  job=$(job_of "r$$")
  if [[ $case_ == resume ]]; then
    scancel "$job"
    for ((t = 0; t < 30; ++t)); do [[ -z $(squeue -h -j "$job") ]] && break; sleep 1; done
    before=$(cat out.jsonl out.jsonl.part* 2>/dev/null | grep -c '}$')
    echo "cancelled with $before finished lines"
    submit job2.log -N2 --ntasks-per-node=1 --gpus-per-node=0 "$src/slurm/nodes.sbatch" "${gen[@]}" \
      --output out.jsonl --resume || fail "the resumed job failed"
    grep -q "already done" job2.log || fail "the resumed job did not resume"
  else
    scontrol requeue "$job" || fail "scontrol requeue"
    # Follow the job through scontrol, whose record says Restarts= and outlives the run by
    # MinJobAge; a query that fails on a loaded machine is asked again, never read as "gone".
    # A requeued job waits out a begin-time delay (about 2 min): start it soon after it is
    # pending for that reason — but not in the same second its nodes revoked the first run's
    # credential (whole seconds), or slurmd kills it: "Job credential revoked", FAILED.
    seen="" hurried=""
    for ((t = 0; t < 1500; ++t)); do
      if ! rec=$(scontrol show job -o "$job" 2>&1); then
        grep -q "Invalid job id" <<<"$rec" && { seen+=" gone"; break; }
        sleep 0.2
        continue
      fi
      state=$(sed -n 's/.* JobState=\([A-Z_]*\).*/\1/p' <<<"$rec")
      reason=$(sed -n 's/.* Reason=\([^ ]*\).*/\1/p' <<<"$rec")
      restarts=$(sed -n 's/.* Restarts=\([0-9]*\).*/\1/p' <<<"$rec")
      [[ $seen == *" $state/${restarts:-?}" ]] || seen+=" $state/${restarts:-?}"
      if [[ ${restarts:-0} -ge 1 ]]; then
        if [[ $state == PENDING && $reason == BeginTime && -z $hurried ]]; then
          scontrol update JobId="$job" StartTime=now+3 2>/dev/null && hurried=1
        fi
        [[ $state =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE)$ ]] && break
      fi
      sleep 0.2
    done
    echo "states after the requeue (JobState/Restarts):$seen"
    [[ $seen == *" gone" || $state == COMPLETED ]] || { cat job.log; fail "the requeued job did not complete in 300 s"; }
    grep -q "already done" job.log || { cat job.log; fail "the requeued job did not resume"; }
  fi
  [[ ! -e out.jsonl.part0 ]] || fail "parts left behind"
  same out.jsonl ref.jsonl
  ;;
serve)  # linnet serve as a job (Shards 2 over the node's tasks): answers as generate does; scancel -s TERM drains it
  printf '{"id": "s", "text": "Once upon a time", "max_new_tokens": 12}\n' >in.jsonl
  reference 2 2 generate --checkpoint "$ckpt" --prompts in.jsonl --output ref.jsonl
  sbatch --quiet -J "s$$" -o job.log -N1 --ntasks-per-node=2 --gpus-per-node=0 "$src/slurm/node.sbatch" \
    serve --checkpoint "$ckpt" --port 0
  for ((t = 0; t < 600; ++t)); do grep -q "listening on http://" job.log 2>/dev/null && break; sleep 0.1; done
  url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' job.log | head -1)
  job=$(job_of "s$$")
  [[ -n $url ]] || { scancel "$job"; cat job.log; fail "the server did not say where it listens in 60 s"; }
  curl -sf --max-time 60 "$url/v1/completions" -d '{"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0}' \
    >answer.json || { scancel "$job"; cat job.log; fail "no answer from $url"; }
  python3 - answer.json ref.jsonl <<'PY' || { scancel "$job"; fail "the server's answer differs from linnet generate's"; }
import json, sys
got = json.load(open(sys.argv[1]))["choices"][0]
want = json.loads(open(sys.argv[2]).readline())
assert got["text"] == want["text"], (got["text"], want["text"])
print("served:", repr(got["text"]))
PY
  scancel -s TERM "$job" || fail "scancel -s TERM"
  for ((t = 0; t < 60; ++t)); do [[ -z $(squeue -h -j "$job" 2>/dev/null) ]] && break; sleep 1; done
  [[ -z $(squeue -h -j "$job" 2>/dev/null) ]] || { scancel "$job"; fail "the server still ran 60 s after SIGTERM"; }
  grep -q "drained, exiting" job.log || { cat job.log; fail "the server did not drain"; }
  state=$(sacct -n -j "$job" -X -o State 2>/dev/null | head -1 | tr -d ' ')
  code=$(scontrol show job "$job" -o 2>/dev/null | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p')
  echo "after SIGTERM: ${state:-?} ExitCode=${code:-gone}"
  [[ -z $code || $code == 0:0 ]] || { cat job.log; fail "the drained server's job exited $code"; }
  ;;
batch)  # an OpenAI batch file as a job (slurm/batch.sbatch, Shards 2 over the node's tasks): the answers plain mpirun gives
  printf '%s\n' '{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}' \
    '{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}' >chat.jinja
  python3 - >in.jsonl <<'PY'
import json
for i in range(16):
    if i % 3 == 0:
        body = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0.8, "seed": i}
        print(json.dumps({"custom_id": f"t{i}", "method": "POST", "url": "/v1/completions", "body": body}))
    else:
        body = {"messages": [{"role": "user", "content": f"Tell me story number {i}."}], "max_tokens": 8, "seed": i}
        print(json.dumps({"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}))
PY
  args=(--checkpoint "$ckpt" -i in.jsonl --chat-template chat.jinja)
  submit job.log -N1 --ntasks-per-node=2 --gpus-per-node=0 "$src/slurm/batch.sbatch" "${args[@]}" -o out.jsonl ||
    fail "the job failed"
  grep -q "LINNET_TP=2" job.log || fail "not tensor parallel over the node's tasks"
  reference 2 2 run-batch "${args[@]}" -o ref.jsonl
  python3 - out.jsonl ref.jsonl <<'PY' || fail "the job's answers differ from plain mpirun's"
import json, sys
def lines(p):
    out = []
    for line in open(p):
        j = json.loads(line)
        j["response"]["body"].pop("created")  # the time of the answer
        out.append(j)
    return out
a, b = lines(sys.argv[1]), lines(sys.argv[2])
assert len(a) == 16 and a == b, "differ"
assert all(x["error"] is None and x["response"]["status_code"] == 200 for x in a)
print("answered:", sum(1 for x in a if x["response"]["body"]["object"] == "chat.completion"), "chat,",
      sum(1 for x in a if x["response"]["body"]["object"] == "text_completion"), "completions")
PY
  ;;
*)
  fail "unknown case $case_"
  ;;
esac
echo "ok: $case_"
