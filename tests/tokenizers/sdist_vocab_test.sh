#!/usr/bin/env bash
# ctest's Tokenizers.sdist_vocabularies (sdist_vocab_test.py) in the venv of tests/serve
# (transformers 5.24), made once per build folder. Exits 77 (skipped, with the reason) when
# PyPI cannot be reached.   sdist_vocab_test.sh LINNET SOURCE WORK
set -euo pipefail
linnet=$1 source=$2 work=$3
if ! venv=$(bash "$source/tests/serve/venv.sh" "$(dirname "$work")/serve-work"); then
  echo "sdist_vocab_test: skipped, the venv cannot be made (PyPI unreachable?)" >&2
  exit 77
fi
mkdir -p "$work"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME=$work/hf-home
exec "$venv/bin/python" "$source/tests/tokenizers/sdist_vocab_test.py" "$linnet" "$source" "$work"
