#!/usr/bin/env bash
# The llama-cpp-python 0.3.36 sdist (pinned by sha256 in tests/chat_templates/sdist.txt) that
# the chat-template, tokenizer and chat-serving tests read their templates and vocab files
# from: downloaded once into WORK, one fetcher at a time (a lock), and its path printed.
# pip ≥ 23.2 downloads it in seconds; older pips (Debian's 23.0) build the sdist's build
# requirements from source first to read its metadata (minutes), so the fetch uses a small
# venv of its own with a recent pip. Exits 77 (skipped, with the reason) when PyPI cannot be
# reached.
#   fetch_sdist.sh SOURCE_DIR WORK
set -euo pipefail
source_dir=$1 work=$2
req=$source_dir/tests/chat_templates/sdist.txt
name=llama_cpp_python-0.3.36.tar.gz
pinned=$(sed -n 's/.*sha256:\([0-9a-f]*\).*/\1/p' "$req")
mkdir -p "$work"
exec 9>"$work/lock"
flock 9
if [[ -f $work/$name && $(sha256sum "$work/$name" | cut -d' ' -f1) == "$pinned" ]]; then
  echo "$work/$name"
  exit 0
fi
venv=$work/pip-venv
rm -rf "$venv" "$work/download"
if ! python3 -m venv "$venv" >"$work/fetch.log" 2>&1 ||
   ! "$venv/bin/pip" install -q --disable-pip-version-check 'pip==24.3.1' >>"$work/fetch.log" 2>&1 ||
   ! "$venv/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary :all: --require-hashes \
       -r "$req" -d "$work/download" >>"$work/fetch.log" 2>&1; then
  echo "skipped: cannot download llama-cpp-python 0.3.36 from PyPI:" >&2
  tail -3 "$work/fetch.log" >&2
  exit 77
fi
mv "$work/download/$name" "$work/$name"
rm -rf "$venv" "$work/download"
echo "$work/$name"
