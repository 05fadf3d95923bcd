# Sourced by the slurm/*.sbatch scripts: where linnet is, how it is launched, and the checks
# that make a wrong allocation fail at once with a clear message. Variables (all optional):
#   LINNET_BIN       the linnet binary (default: linnet on PATH, else build/linnet of this repo)
#   LINNET_BACKEND   cuda (default) or cpu
#   LINNET_TP        ranks per model replica's stage (default: tasks per node: one replica per node)
#   LINNET_PP        pipeline stages per replica (default 1; slurm/pipeline.sbatch: the nodes)
#   LINNET_LAUNCHER  srun (default; --mpi=$LINNET_MPI, default pmix) or mpirun (inside the allocation)
#   LINNET_THREADS   CPU threads per rank (default: SLURM_CPUS_PER_TASK, else linnet's own share)
#   LINNET_STAGE_DIR copy the checkpoint there once per node first (node-local disk)
#   LINNET_ARGS      more options for the linnet command
# shellcheck shell=bash

linnet_fail() {
  echo "linnet job: $*" >&2
  exit 1
}

# Tasks per node of this allocation: SLURM_NTASKS_PER_NODE, else the first of
# SLURM_TASKS_PER_NODE ("2(x3),1" → 2).
linnet_tasks_per_node() {
  if [[ -n ${SLURM_NTASKS_PER_NODE:-} ]]; then
    echo "$SLURM_NTASKS_PER_NODE"
  else
    local t=${SLURM_TASKS_PER_NODE:-1}
    t=${t%%,*}
    echo "${t%%(*}"
  fi
}

# First thing each script does: `bash slurm/node.sbatch …` outside an allocation has no
# SLURM_* variables to run with.
linnet_require_allocation() {
  [[ -n ${SLURM_JOB_ID:-} ]] || linnet_fail "not inside a SLURM allocation (submit with sbatch)"
}

linnet_setup() {
  linnet_require_allocation
  local here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  LINNET_BIN=${LINNET_BIN:-$(command -v linnet || echo "$here/build/linnet")}
  [[ -x $LINNET_BIN ]] || linnet_fail "LINNET_BIN=$LINNET_BIN is not an executable (build linnet, or set LINNET_BIN)"
  LINNET_BACKEND=${LINNET_BACKEND:-cuda}
  LINNET_LAUNCHER=${LINNET_LAUNCHER:-srun}
  local ntasks=${SLURM_NTASKS:-1} per_node
  per_node=$(linnet_tasks_per_node)
  LINNET_TP=${LINNET_TP:-$per_node}
  LINNET_PP=${LINNET_PP:-1}
  [[ $LINNET_TP =~ ^[1-9][0-9]*$ ]] || linnet_fail "LINNET_TP=$LINNET_TP is not a positive number"
  [[ $LINNET_PP =~ ^[1-9][0-9]*$ ]] || linnet_fail "LINNET_PP=$LINNET_PP is not a positive number"
  ((ntasks % LINNET_TP == 0)) ||
    linnet_fail "the allocation has $ntasks tasks, which does not divide by LINNET_TP=$LINNET_TP (ranks per replica)"
  ((ntasks % (LINNET_TP * LINNET_PP) == 0)) ||
    linnet_fail "the allocation has $ntasks tasks, which does not divide by LINNET_PP=$LINNET_PP stages × LINNET_TP=$LINNET_TP shards (ranks per replica)"
  if [[ $LINNET_BACKEND == cuda ]]; then
    # Tensor parallel inside a node (NCCL over NVLink), one GPU per task.
    ((LINNET_TP <= per_node)) ||
      linnet_fail "LINNET_TP=$LINNET_TP spans nodes ($per_node tasks per node): keep a replica's shards on one node"
    local gpus=${SLURM_GPUS_ON_NODE:-}
    [[ -z $gpus ]] && gpus=$(echo "${CUDA_VISIBLE_DEVICES:-}" | tr ',' '\n' | grep -c . || true)
    ((gpus >= per_node)) ||
      linnet_fail "$per_node tasks per node but $gpus GPU(s) on the node: ask for --gpus-per-node=$per_node (or LINNET_BACKEND=cpu)"
  fi
  [[ $LINNET_LAUNCHER == srun || $LINNET_LAUNCHER == mpirun ]] ||
    linnet_fail "LINNET_LAUNCHER=$LINNET_LAUNCHER: expected srun or mpirun"
  export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
  if [[ -n ${LINNET_THREADS:-${SLURM_CPUS_PER_TASK:-}} ]]; then
    LINNET_ARGS="${LINNET_ARGS:-} --threads ${LINNET_THREADS:-$SLURM_CPUS_PER_TASK}"
  fi
}

# The checkpoint, copied once per node to LINNET_STAGE_DIR when asked (a slow shared file
# system); prints the path to use. Without staging every rank maps its own slices of the
# files and the ranks of a node share the page cache: the files are read about once per node.
linnet_checkpoint() {
  local ckpt=$1
  [[ -d $ckpt ]] || linnet_fail "checkpoint $ckpt is not a directory"
  if [[ -z ${LINNET_STAGE_DIR:-} ]]; then
    echo "$ckpt"
    return
  fi
  local dest
  dest="$LINNET_STAGE_DIR/$(basename "$ckpt")"
  srun --ntasks-per-node=1 --nodes="${SLURM_NNODES:-1}" --ntasks="${SLURM_NNODES:-1}" \
    bash -c "mkdir -p '$dest' && cp -rL '$ckpt'/. '$dest'/" >&2 || linnet_fail "staging $ckpt to $dest failed"
  echo "$dest"
}

# Runs linnet on every task of the allocation: a failing rank ends the whole step.
linnet_launch() {
  local -a extra=()
  read -r -a extra <<<"${LINNET_ARGS:-}"
  if ((${LINNET_PP:-1} > 1)); then extra+=(--pp "$LINNET_PP"); fi
  if [[ $LINNET_LAUNCHER == srun ]]; then
    srun --mpi="${LINNET_MPI:-pmix}" --kill-on-bad-exit=1 "$LINNET_BIN" "$@" --backend "$LINNET_BACKEND" \
      --tp "$LINNET_TP" "${extra[@]}"
  else
    mpirun -np "${SLURM_NTASKS:-1}" --bind-to none "$LINNET_BIN" "$@" --backend "$LINNET_BACKEND" \
      --tp "$LINNET_TP" "${extra[@]}"
  fi
}

# A whole job: `linnet <command> <options…>` on every task. --checkpoint is staged when asked;
# after a requeue (SLURM_RESTART_COUNT > 0) generate, eval and run-batch get --resume, so the
# work done before the preemption is kept and not done twice.
linnet_job() {
  linnet_setup
  local -a args=("$@")
  local i
  for ((i = 0; i < ${#args[@]}; ++i)); do
    if [[ ${args[i]} == --checkpoint && $((i + 1)) -lt ${#args[@]} ]]; then
      args[i + 1]=$(linnet_checkpoint "${args[i + 1]}")
    fi
  done
  if [[ ${SLURM_RESTART_COUNT:-0} -gt 0 && ( ${args[0]:-} == generate || ${args[0]:-} == eval || ${args[0]:-} == run-batch ) ]]; then
    # The first run replaced OUT if --overwrite said so; the requeued one continues it.
    local -a kept=()
    for i in "${!args[@]}"; do [[ ${args[i]} == --overwrite ]] || kept+=("${args[i]}"); done
    args=("${kept[@]}")
    [[ " ${args[*]} " == *" --resume "* ]] || args+=(--resume)
  fi
  echo "linnet job $SLURM_JOB_ID: ${SLURM_NNODES:-1} node(s), ${SLURM_NTASKS:-1} tasks, LINNET_TP=$LINNET_TP, LINNET_PP=$LINNET_PP, backend $LINNET_BACKEND, launcher $LINNET_LAUNCHER" >&2
  linnet_launch "${args[@]}"
}

