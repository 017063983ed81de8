#!/usr/bin/env bash
# test.sh — the whole test suite from a fresh clone: installs dependencies, then builds and
# runs every test three times over: a normal build, an AddressSanitizer+UBSan build (leaks
# included), and a ThreadSanitizer build for the concurrent runtime and the C API's threads
# test (labels "runtime" and "tsan"); then a
# short run of each fuzzer (tests/fuzz, scripts/fuzz.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
jobs=$(nproc)
run() {  # run NAME BUILD_DIR CTEST_ARGS... -- CMAKE_ARGS...
  local name=$1 dir=$2; shift 2
  local ctest_args=() cmake_args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do ctest_args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  cmake_args=("$@")
  echo "== $name build"
  "$root/scripts/build.sh" "$dir" "${cmake_args[@]}"
  echo "== $name tests"
  (cd "$dir" && ctest --output-on-failure -j "$jobs" "${ctest_args[@]}")
}
run normal "$root/build" --
run "asan+ubsan" "$root/build-asan" -- -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON
run tsan "$root/build-tsan" -L 'runtime|tsan' -- -DCMAKE_BUILD_TYPE=Debug -DKILN_TSAN=ON
# A short smoke run of every libFuzzer harness (KILN_FUZZ_SECS each, default 15): a finding
# fails the suite with the reproducer's path.
echo "== fuzz smoke runs"
for h in "$root"/tests/fuzz/fuzz_*.c; do
  "$root/scripts/fuzz.sh" "$(basename "$h" .c)" "${KILN_FUZZ_SECS:-15}"
done
echo "== all test builds passed"
