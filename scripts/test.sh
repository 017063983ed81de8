#!/usr/bin/env bash
# test.sh — the whole test suite from a fresh clone: installs dependencies, builds Kiln three
# ways and runs each test once, where it checks the most:
#  - an AddressSanitizer+UBSan build runs every test that can run instrumented but those
#    labelled "noasan": the same assertions as a normal build, and every memory access
#    checked besides;
#  - the normal build (-O2, what users build) runs the tests labelled "release"
#    (tests/CMakeLists.txt, KILN_RELEASE_TESTS: those that cannot run instrumented, those the
#    ASan build runs only in part, a few broad ones over the optimised code), "kernels", and
#    "noasan" (KILN_NOASAN_TESTS: the costly ones the ASan build leaves out);
#  - a ThreadSanitizer build, of only what its tests need, for the concurrent runtime and the
#    threads tests (labels "runtime" and "tsan");
# then a short run of each fuzzer (tests/fuzz, scripts/fuzz.sh). Each stage prints the second
# it started at. CI's budget is 20 minutes on 2 cores: a stage added here costs from it.
# `ctest` in a build folder of your own still runs every test of that build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
start=$SECONDS
stage() { echo "== $1 (at $((SECONDS - start)) s)"; }   # each stage's start time, for CI's budget
"$root/scripts/setup.sh"
jobs=$(nproc)
# Every process that loads OpenBLAS (kiln, the test programs, the .so files they build) starts
# its worker threads, which spin in sched_yield for tens of milliseconds on the other core
# although Kiln never gives them work (k_blas.c keeps BLAS on the caller's thread): with two
# tests at a time and thousands of short processes, that was 15% of the suite's CPU.
export OPENBLAS_NUM_THREADS=1
# The build targets the selected tests run: each test's executable when it is one of the
# build's (CTest knows the commands of tests not built yet only from the CTestTestfiles),
# and the CLI, which the script tests drive.
test_targets() {  # test_targets BUILD_DIR CTEST_ARGS...
  local dir=$1; shift
  (cd "$dir" && ctest -N "$@") | sed -n 's/^ *Test *#[0-9]*: //p' |
    /usr/bin/python3 -c '
import glob, os, re, sys
root = sys.argv[1]
want = set(sys.stdin.read().split())
names = {"kiln"}
for f in glob.glob(root + "/**/CTestTestfile.cmake", recursive=True):
    for name, exe in re.findall(r"add_test\(\[=\[(.*?)\]=\] \"([^\"]*)\"", open(f).read()):
        if name in want and exe.startswith(root + "/"):
            names.add(os.path.basename(exe))
print(" ".join(sorted(names)))' "$dir"
}
run() {  # run NAME BUILD_DIR [--only] CTEST_ARGS... -- CMAKE_ARGS...   (--only: build just what the tests need)
  local name=$1 dir=$2 only=0; shift 2
  [ "${1:-}" = --only ] && { only=1; shift; }
  local ctest_args=() cmake_args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do ctest_args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  cmake_args=("$@")
  stage "$name build"
  if [ $only = 1 ]; then
    "$root/scripts/configure.sh" "$dir" "${cmake_args[@]}"
    # shellcheck disable=SC2046
    cmake --build "$dir" -j "$jobs" --target $(test_targets "$dir" "${ctest_args[@]}")
  else
    "$root/scripts/build.sh" "$dir" "${cmake_args[@]}"
  fi
  stage "$name tests"
  (cd "$dir" && ctest --output-on-failure -j "$jobs" "${ctest_args[@]}")
}
EMULATE_SET=rest run normal "$root/build" -L '^(release|kernels|noasan)$' --
run "asan+ubsan" "$root/build-asan" -E '^cuda[.]cli$' -LE '^(python|noasan)$' -- -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON
run tsan "$root/build-tsan" --only -L 'runtime|tsan' -- -DCMAKE_BUILD_TYPE=Debug -DKILN_TSAN=ON
# A short smoke run of every libFuzzer harness (KILN_FUZZ_SECS each, default 6): a finding
# fails the suite with the reproducer's path.
stage "fuzz smoke runs"
# Every harness built at once, then run $jobs at a time (each fuzzer is one process).
"$root/scripts/fuzz.sh" --build
(cd "$root/tests/fuzz" && ls fuzz_*.c) | sed 's/\.c$//' |
  KILN_FUZZ_NO_BUILD=1 xargs -P "$jobs" -I{} "$root/scripts/fuzz.sh" {} "${KILN_FUZZ_SECS:-6}"
stage "all test builds passed"
