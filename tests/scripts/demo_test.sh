#!/usr/bin/env bash
# ctest Scripts.demo_builds_only_linnet: scripts/demo builds the one target it runs, `linnet`
# (a full build, the tests included, took 14 minutes on a fresh machine). The demo runs from a
# copy of scripts/ with stand-ins: scripts/deps (nothing to install), scripts/fetch-stories15M
# (no model: the demo's random-model path) and a cmake on PATH that records its arguments and
# leaves a linnet that records its own.
#   demo_test.sh SOURCE_DIR WORK_DIR
set -uo pipefail
src=$1 work=$2
fail() {
  echo "FAILED: $*"
  exit 1
}
rm -rf "$work"
mkdir -p "$work/tree/scripts" "$work/bin"
cp "$src/scripts/demo" "$src/scripts/build" "$work/tree/scripts/"
printf '#!/bin/sh\nexit 0\n' >"$work/tree/scripts/deps"
printf '#!/bin/sh\necho "no stories15M here (the test stand-in)" >&2\nexit 1\n' >"$work/tree/scripts/fetch-stories15M"
cat >"$work/bin/cmake" <<SH
#!/bin/sh
echo "\$*" >>"$work/cmake.log"
if [ "\$1" = --build ]; then
  mkdir -p build
  printf '#!/bin/sh\necho "\$*" >>"$work/linnet.log"\n' >build/linnet
  chmod +x build/linnet
fi
SH
chmod +x "$work"/bin/* "$work"/tree/scripts/*
PATH="$work/bin:$PATH" bash "$work/tree/scripts/demo" >"$work/demo.log" 2>&1 || { cat "$work/demo.log"; fail "the demo failed"; }
builds=$(grep -c '^--build ' "$work/cmake.log")
[[ $builds == 1 ]] || fail "the demo built $builds times: $(cat "$work/cmake.log")"
line=$(grep '^--build ' "$work/cmake.log")
[[ $line =~ ^--build\ build\ -j[0-9]+\ --target\ linnet$ ]] || fail "the demo's build is not of linnet alone: cmake $line"
grep -q '^init ' "$work/linnet.log" || fail "the demo did not go on to run linnet: $(cat "$work/demo.log")"
echo "ok: the demo builds linnet alone (cmake $line), then runs it"
