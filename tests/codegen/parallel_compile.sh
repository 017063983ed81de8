#!/usr/bin/env bash
# parallel_compile.sh KILN SRC_ROOT — kiln compile --jobs N (codegen/cpu/cg_parts.c: the
# module's code written as several objects, one thread each) run many times:
#  - under Valgrind's memcheck (chains.kiln), which sees a write to freed memory inside LLVM's own
#    (uninstrumented) code: how the crash of issue 28 was found. Dropping a function's body
#    block by block left uses on freed values, and the heap corruption that followed crashed
#    about one compile in twenty. ASan cannot see it (LLVM is not instrumented), so the
#    normal build runs this part; a sanitizer build says it is skipped;
#  - in a loop (15 runs a model, 5 under TSan, 2 under ASan; KILN_PARALLEL_RUNS sets it), each
#    run's .so compared byte for byte with the first (the parts are deterministic), so a run
#    that crashes or writes other code fails. The TSan build runs
#    the loop too (label tsan): the part threads' own code is instrumented there.
set -u
kiln=$1 root=$2
runs=${KILN_PARALLEL_RUNS:-}
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
models=(tests/passes/models/chains.kiln tests/passes/models/repeat.kiln tests/passes/models/epilogue.kiln)

compile() {  # compile MODEL OUT_DIR [WRAPPER...]
  local model=$1 out=$2; shift 2
  mkdir -p "$out"
  "$@" "$kiln" compile "$root/$model" --jobs 3 -o "$out/lib.so" >"$out/log" 2>&1
}

san=$(readelf -d "$kiln" 2>/dev/null | grep -oE 'lib(asan|tsan|ubsan)' | head -1)
# The TSan build's archives are instrumented, and kiln links them with the sanitizer flags only
# for ASan (cg_link.c): the .so needs the TSan runtime to link.
[ "$san" = libtsan ] && export CC="${CC:-cc} -fsanitize=thread"
# 15 runs a model in the normal build, 5 under TSan, which instruments the part threads, 2
# under ASan, which sees only Kiln's own code around them (its compiles are 3x slower)
case $san in libtsan) dflt=5 ;; '') dflt=15 ;; *) dflt=2 ;; esac
runs=${runs:-$dflt}
if [ -n "$san" ]; then
  echo "SKIP memcheck: kiln is built with $san, which Valgrind cannot run"
elif ! command -v valgrind >/dev/null; then
  fail "valgrind is not installed (scripts/setup.sh installs it)"
else
  # chains.kiln alone, the model of issue 28's crash: memcheck takes ~14 s a compile, and each
  # model's parts go through the same code; the loop below runs all three.
  for m in "${models[@]:0:1}"; do
    compile "$m" "$tmp/vg" valgrind -q --error-exitcode=97 --num-callers=30 \
      || fail "$m under memcheck: $(cat "$tmp/vg/log")"
    echo "ok memcheck --jobs 3 $m"
  done
fi

for m in "${models[@]}"; do
  compile "$m" "$tmp/ref" || fail "$m: $(cat "$tmp/ref/log")"
  for i in $(seq 1 "$runs"); do
    compile "$m" "$tmp/run" || fail "$m, run $i of $runs: $(cat "$tmp/run/log")"
    cmp -s "$tmp/ref/lib.so" "$tmp/run/lib.so" || fail "$m, run $i: the .so differs from the first run's"
  done
  echo "ok $runs compiles --jobs 3 $m, identical"
done
echo "parallel compile: all passed"
