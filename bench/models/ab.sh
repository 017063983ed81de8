#!/bin/sh
# ab.sh — two generated .so files of one model, before and after a change, timed alternately:
# ROUNDS rounds, each running kiln_bench_models on A then on B, each run the best of RUNS
# single calls (KILN_BENCH_RUNS with 0 seconds: one call a run), so a slow spell of the shared
# host costs both sides alike and the per-call best filters the rest. Prints each side's best
# and median samples/s over the rounds, every round's figure, and B over A.
# Each .so carries the kernels of the kiln that compiled it: to compare kernel changes, compile
# A with a build tree of the old code (a git worktree) and B with the new one.
# Usage: bench/models/ab.sh A.so B.so [build-dir]   (build-dir: where kiln_bench_models is,
#   default build/; it is built first)
# Environment: ROUNDS (default 6), RUNS (calls a run, default 10), THREADS (default 1),
#   ENTRY (predict or train, default predict), PYTHON (default /usr/bin/python3).
set -eu
[ $# -ge 2 ] || { echo "usage: $0 A.so B.so [build-dir]" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${3:-$ROOT/build}" && pwd)
ROUNDS=${ROUNDS:-6}
RUNS=${RUNS:-10}
THREADS=${THREADS:-1}
ENTRY=${ENTRY:-predict}
PY=${PYTHON:-/usr/bin/python3}
for f in "$1" "$2"; do [ -f "$f" ] || { echo "ab.sh: no such file: $f" >&2; exit 1; }; done
cmake --build "$BUILD" --target kiln_bench_models -j 2 >/dev/null
BM=$BUILD/bench/kiln_bench_models
TMP=$(mktemp)
trap 'rm -f "$TMP"' EXIT
echo "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), cpu family $(grep -m1 'cpu family' /proc/cpuinfo | sed 's/.*: //')," \
  "model $(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | sed 's/.*: //'); load $(cut -d' ' -f1-3 /proc/loadavg)"
r=0
while [ $r -lt "$ROUNDS" ]; do
  for side in A B; do
    if [ $side = A ]; then so=$1; else so=$2; fi
    case $so in */*) ;; *) so=./$so ;; esac
    v=$(KILN_BENCH_RUNS=$RUNS KILN_NUM_THREADS=$THREADS "$BM" "$so" 0 "$ENTRY" | awk -v e="$ENTRY" '$2 == e {print $4}')
    [ -n "$v" ] || { echo "ab.sh: $so gave no $ENTRY figure" >&2; exit 1; }
    echo "$side $v" >>"$TMP"
  done
  r=$((r + 1))
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" - "$TMP" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    side, v = line.split()
    runs.setdefault(side, []).append(float(v))
for side in ("A", "B"):
    v = runs[side]
    print(f"{side}: best {max(v):.1f}, median {statistics.median(v):.1f} samples/s; rounds: {', '.join(f'{x:.1f}' for x in v)}")
a, b = runs["A"], runs["B"]
print(f"B / A: best {max(b) / max(a):.3f}, median {statistics.median(b) / statistics.median(a):.3f}")
EOF
