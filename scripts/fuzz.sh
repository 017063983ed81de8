#!/usr/bin/env bash
# fuzz.sh TARGET [SECONDS] — builds the libFuzzer harness tests/fuzz/TARGET.c (clang,
# ASan+UBSan, in build-fuzz/) and runs it for SECONDS (default 30) from its seed corpus
# tests/fuzz/corpus/NAME (NAME = TARGET without "fuzz_"), with tests/fuzz/NAME.dict when there
# is one. New inputs go to build-fuzz/corpus/NAME, not into the source tree. Exits 0 when
# nothing was found; on a finding prints the reproducer's path and exits 1.
#   scripts/fuzz.sh fuzz_frontend 600      # ten minutes on the front end
#   build-fuzz/tests/fuzz/fuzz_frontend build-fuzz/findings/frontend/crash-...   # replay one
#   scripts/fuzz.sh --build                # builds every harness (then KILN_FUZZ_NO_BUILD=1
#                                          # runs several at once without racing their builds)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${1:-}
secs=${2:-30}
build=$root/build-fuzz
configure() { CC=clang CXX=clang++ "$root/scripts/configure.sh" "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_FUZZ=ON; }
if [ "$target" = --build ]; then
  configure
  # shellcheck disable=SC2046
  cmake --build "$build" -j "$(nproc)" --target $(cd "$root/tests/fuzz" && ls fuzz_*.c | sed 's/\.c$//') >/dev/null
  exit 0
fi
if [ -z "$target" ] || [ ! -f "$root/tests/fuzz/$target.c" ]; then
  echo "usage: scripts/fuzz.sh TARGET [SECONDS]; TARGET is one of:" $(cd "$root/tests/fuzz" && ls fuzz_*.c | sed 's/\.c$//') >&2
  exit 2
fi
case $secs in ''|*[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number" >&2; exit 2 ;; esac
name=${target#fuzz_}
if [ -z "${KILN_FUZZ_NO_BUILD:-}" ]; then
  configure
  cmake --build "$build" --target "$target" -j "$(nproc)" >/dev/null
fi
work=$build/corpus/$name findings=$build/findings/$name
mkdir -p "$work" "$findings"
args=(-max_total_time="$secs" -artifact_prefix="$findings/" -print_final_stats=1 -rss_limit_mb=4096)
[ -f "$root/tests/fuzz/$name.dict" ] && args+=(-dict="$root/tests/fuzz/$name.dict")
seeds=()
[ -d "$root/tests/fuzz/corpus/$name" ] && seeds+=("$root/tests/fuzz/corpus/$name")
echo "fuzz.sh: $target for ${secs} s"
set +e
"$build/tests/fuzz/$target" "${args[@]}" "$work" "${seeds[@]}" 2>"$build/$name.log"
rc=$?
set -e
grep -E '^stat::number_of_executed_units|^#[0-9]+.*DONE' "$build/$name.log" | tail -2 || true
if [ $rc -ne 0 ]; then
  tail -40 "$build/$name.log"
  echo "fuzz.sh: $target found a problem (exit $rc); reproducer:" $(ls -t "$findings" | head -1 | sed "s|^|$findings/|")
  exit 1
fi
echo "fuzz $target: 1 passed, 0 failed"
