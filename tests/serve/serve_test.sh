#!/usr/bin/env bash
# ctest's Serve.* cases: the clients' venv (tests/serve/venv.sh, made once per build folder),
# then serve_test.py CASE. Exits 77 (skipped, with the reason) when PyPI cannot be reached.
set -euo pipefail
case=$1 linnet=$2 source=$3 work=$4
if ! venv=$(bash "$source/tests/serve/venv.sh" "$work"); then
  echo "serve_test: skipped, the clients cannot be installed" >&2
  exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME=$work/hf-home-$case
exec "$venv/bin/python" "$source/tests/serve/serve_test.py" "$case" "$linnet" "$source" "$work"
