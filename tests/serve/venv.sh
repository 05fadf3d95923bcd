#!/usr/bin/env bash
# Prints the path of a venv holding the real clients of tests/serve/requirements.txt, made in
# DIR (default build/tests/serve-work) on first use and remade when the file changes; one
# maker at a time (a lock). Exits 1 with the reason on stderr when PyPI cannot be reached.
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-$source_dir/build/tests/serve-work}
req=$source_dir/tests/serve/requirements.txt
venv=$work/venv
stamp=$venv/.requirements.sha256
want=$(sha256sum "$req" | cut -d' ' -f1)
mkdir -p "$work"
exec 9>"$work/venv.lock"
flock 9
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  rm -rf "$venv"
  py=python3
  [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null && py=/usr/bin/python3
  if ! "$py" -m venv "$venv" >"$work/venv.log" 2>&1 ||
     ! "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >>"$work/venv.log" 2>&1; then
    echo "cannot make the clients' venv (PyPI unreachable?):" >&2
    tail -5 "$work/venv.log" >&2
    rm -rf "$venv"
    exit 1
  fi
  echo "$want" >"$stamp"
fi
echo "$venv"
