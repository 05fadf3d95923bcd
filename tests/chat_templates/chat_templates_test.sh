#!/usr/bin/env bash
# ctest's ChatTemplates.conformance: renders the ~70 real chat templates that PyPI's
# llama-cpp-python 0.3.36 sdist carries (vendor/llama.cpp/models/templates/) with Python's
# jinja2 as transformers does (render_reference.py), then with linnet (chat_template_check),
# and compares byte for byte. Also re-checks tests/jinja/cases.json (jinja_tests' expected
# outputs) against jinja2. The venv and the sdist are kept in WORK; nothing is committed.
# Exits 77 (skipped, with the reason) when PyPI cannot be reached.
#   chat_templates_test.sh CHAT_TEMPLATE_CHECK SOURCE_DIR WORK
#   chat_templates_test.sh CHAT_TEMPLATE_CHECK SOURCE_DIR WORK content_format LINNET
# The second (ctest ChatTemplates.content_format): each template's content format as vLLM
# detects it (content_format.py) against linnet's, then a conversation of content parts through
# `linnet apply-chat-template` with openbmb-MiniCPM5-1B's template (a "string" template that
# once got the parts as a list: `can only concatenate str (not "list")`) against jinja2's
# rendering of the same conversation with the parts joined, as vLLM hands it over.
set -euo pipefail
check=$1 source=$2 work=$3 mode=${4:-conformance} linnet=${5:-}
here=$source/tests/chat_templates
req=$here/requirements.txt
mkdir -p "$work"
exec 9>"$work/lock"
flock 9

venv=$work/venv
want=$(sha256sum "$req" | cut -d' ' -f1)
if [[ ! -f $venv/.requirements.sha256 || $(cat "$venv/.requirements.sha256") != "$want" ]]; then
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >"$work/venv.log" 2>&1 ||
     ! "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >>"$work/venv.log" 2>&1; then
    echo "chat_templates_test: skipped, cannot make the jinja2 venv (PyPI unreachable?):" >&2
    tail -3 "$work/venv.log" >&2
    rm -rf "$venv"
    exit 77
  fi
  echo "$want" >"$venv/.requirements.sha256"
fi

# The sdist, pinned by its sha256 (sdist.txt), fetched once per build folder (shared with
# the tokenizer and chat-serving tests).
sdist=$(bash "$source/tests/sdist/fetch_sdist.sh" "$source" "$(dirname "$work")/sdist-work") || exit $?
templates=$work/templates
if [[ ! -d $templates ]]; then
  rm -rf "$work/extract" && mkdir -p "$work/extract"
  tar -xzf "$sdist" -C "$work/extract" --wildcards '*/vendor/llama.cpp/models/templates/*.jinja'
  mv "$work/extract"/*/vendor/llama.cpp/models/templates "$templates"
  rm -rf "$work/extract"
fi

if [[ $mode == content_format ]]; then
  "$venv/bin/python" "$here/content_format.py" "$templates" "$work/formats.json"
  "$check" --content-formats "$work/formats.json" "$templates"
  model=$source/tests/fixtures/lm_eval/model
  cat >"$work/parts.json" <<'JSON'
[{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
 {"role": "user", "content": [{"type": "text", "text": "Name a colour."}, {"type": "text", "text": "Just one."}]}]
JSON
  "$linnet" apply-chat-template --checkpoint "$model" --template "$templates/openbmb-MiniCPM5-1B.jinja" \
    --messages "$work/parts.json" >"$work/minicpm5.linnet.txt"
  PYTHONPATH=$here "$venv/bin/python" - "$templates/openbmb-MiniCPM5-1B.jinja" "$work/parts.json" "$model" \
    >"$work/minicpm5.jinja2.txt" <<'PY'
import json, sys
from render_reference import apply_chat_template
source = open(sys.argv[1], encoding="utf-8").read()
messages = json.load(open(sys.argv[2]))
for m in messages:  # vLLM's "string" format: the text parts joined by newlines
    m["content"] = "\n".join(p["text"] for p in m["content"])
config = json.load(open(sys.argv[3] + "/tokenizer_config.json"))
sys.stdout.write(apply_chat_template(source, messages, add_generation_prompt=True,
                                     bos_token=config["bos_token"], eos_token=config["eos_token"]))
PY
  cmp "$work/minicpm5.jinja2.txt" "$work/minicpm5.linnet.txt" ||
    { echo "MiniCPM5 with content parts: linnet's prompt differs from jinja2's"; exit 1; }
  echo "MiniCPM5 with content parts: the prompt jinja2 renders from the joined text"
  exit 0
fi
"$venv/bin/python" "$here/render_reference.py" "$templates" "$work/cases.json"
"$venv/bin/python" "$source/tests/jinja/make_cases.py" --check "$source/tests/jinja/cases.json"
"$check" "$work/cases.json" "$templates"
