#!/usr/bin/env bash
# ctest's Serve.* cases: a venv with the real clients (tests/serve/requirements.txt, from
# PyPI, made once per build folder and reused while the file is unchanged), then
# serve_test.py CASE. Exits 77 (skipped, with the reason) when PyPI cannot be reached.
set -euo pipefail
case=$1 linnet=$2 source=$3 work=$4
req=$source/tests/serve/requirements.txt
venv=$work/venv
stamp=$venv/.requirements.sha256
want=$(sha256sum "$req" | cut -d' ' -f1)
mkdir -p "$work"
# One venv for every case (ctest may run them at once): made under a lock.
exec 9>"$work/venv.lock"
flock 9
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  rm -rf "$venv"
  py=python3
  [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null && py=/usr/bin/python3
  if ! "$py" -m venv "$venv" >"$work/venv.log" 2>&1 ||
     ! "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >>"$work/venv.log" 2>&1; then
    echo "serve_test: cannot make the clients' venv (PyPI unreachable?):" >&2
    tail -5 "$work/venv.log" >&2
    rm -rf "$venv"
    exit 77
  fi
  echo "$want" >"$stamp"
fi
flock -u 9
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME=$work/hf-home-$case
exec "$venv/bin/python" "$source/tests/serve/serve_test.py" "$case" "$linnet" "$source" "$work"
