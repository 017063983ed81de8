#!/usr/bin/env bash
# profile_train.sh GPU_COMPARE CUDA.so DIR CHECK.py — KILN_PROFILE on a CUDA .so's train_step:
# gpu_compare runs the .so against itself (every model it makes is profiled, the first into
# DIR/prof.json, whose table follows the line that says it wrote it), and CHECK.py
# (tests/tools/profile_check.py) checks that trace and table; the steps must be marked forward,
# backward and update, each saying what ran it. Prints one "ok" or "FAIL" line; exits 0 or 1.
# The caller's environment picks the driver: the fake one in tests/cuda/emulate.sh, a GPU's in
# tests/gpu/run.sh.
set -u
compare=$1 so=$2 d=$3 check=$4
mkdir -p "$d" || exit 1
KILN_PROFILE=$d/prof.json "$compare" "$so" "$so" --steps 2 --quiet >"$d/compare.log" 2>"$d/table"
rc=$?
sed -n "\|^kiln profile: wrote $d/prof.json\$|,\$p" "$d/table" >"$d/table1"
runs=$(sed -n 's/^kiln profile: train_step, \([0-9]*\) runs.*/\1/p' "$d/table1" | head -1)
if [ $rc -eq 0 ] && [ -n "$runs" ] && [ "$runs" -ge 2 ] && [ -f "$d/prof-2.json" ] &&
   /usr/bin/python3 "$check" "$d/prof.json" "$d/table1" train_step "$runs" >"$d/check.log" 2>&1 &&
   grep -q '"cat":"backward"' "$d/prof.json" && grep -q '"cat":"update".*"path":"library kernels"' "$d/prof.json"; then
  echo "ok   KILN_PROFILE on a CUDA .so's train_step: $runs runs, forward, backward and update steps"
  exit 0
fi
echo "FAIL KILN_PROFILE on a CUDA .so's train_step (gpu_compare exit $rc, ${runs:-no} runs): $(tail -3 "$d/check.log" 2>/dev/null) $(head -3 "$d/table")"
exit 1
