#!/usr/bin/env bash
# ctest Install.find_package: `cmake --install` of this build into a fresh prefix, then the
# installed command runs and a project outside the tree (tests/install/consumer) finds the
# package with find_package(linnet), links linnet::chat and renders a chat template.
#   install_test.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -uo pipefail
build=$1 src=$2 work=$3
fail() {
  echo "FAILED: $*"
  exit 1
}
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || { cat "$work/install.log"; fail "cmake --install"; }
"$prefix/bin/linnet" --help >/dev/null || fail "the installed linnet does not run"
for h in chat/chat_template.h chat/jinja/jinja.h core/error.h; do
  [[ -f $prefix/include/linnet/$h ]] || fail "include/linnet/$h is not installed"
done
find "$prefix/lib" -name linnetConfig.cmake | grep -q . || fail "no linnetConfig.cmake under $prefix/lib"
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src/tests/install/consumer" -B "$work/consumer" "${gen[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "find_package(linnet)"; }
cmake --build "$work/consumer" >"$work/build.log" 2>&1 || { tail -40 "$work/build.log"; fail "the consumer does not build"; }
printf '%s' '{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}{% if not enable_thinking %}(no thinking){% endif %}' \
  >"$work/chat.jinja"
got=$("$work/consumer/render_chat" "$src/tests/fixtures/lm_eval/model" "$work/chat.jinja") || fail "render_chat failed"
want='<|begin_of_text|><system>Be brief.<user>Hi<assistant>(no thinking)'
[[ $got == "$want" ]] || fail "render_chat printed '$got', want '$want'"
echo "ok: installed into $prefix; find_package(linnet) and linnet::chat render: $got"
