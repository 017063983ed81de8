#!/bin/sh
# run.sh — Kiln's GEMM/convolution kernels next to bare OpenBLAS sgemm and PyTorch, same shapes,
# same thread count (for grouped layers such as mobilenet_v2's depthwise ones the "cblas" column
# is Kiln's own im2col path, KILN_CONV=grouped-im2col: see bench_kernels.c).
# Usage: bench/kernels/run.sh [threads] [build-dir]
#   threads    Kiln's pool (KILN_NUM_THREADS), OpenBLAS and torch threads (default 1)
#   build-dir  a Release build tree with bench/ hooked in (default: build-rel at the repo root);
#              the kiln_bench_kernels target is (re)built there first.
# BENCH_CLOCK=cpu times both sides by process CPU time instead of the wall clock: at 1 thread
# on a shared, loaded machine that leaves out the time other processes held the core (it
# still counts their effect on the caches). Meaningless with more than one thread.
set -eu
THREADS=${1:-1}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${2:-$ROOT/build-rel}
PY=${PYTHON:-/usr/bin/python3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

cmake --build "$BUILD" --target kiln_bench_kernels -j 2 >/dev/null
BIN=$(find "$BUILD" -name kiln_bench_kernels -type f -perm -u+x | head -n 1)

echo "# $("$ROOT/bench/machine.sh")"
echo "# clock: ${BENCH_CLOCK:-wall}"
echo "# threads: $THREADS (OPENBLAS_NUM_THREADS, torch.set_num_threads)  torch $("$PY" -c 'import torch; print(torch.__version__)')"
# The peak: one core's measured FMA throughput (bench_kernels.c, b_peak) times the threads.
PEAK=$("$BIN" --peak)
echo "# peak: $(echo "$PEAK" | cut -f2) GFLOP/s per core ($(echo "$PEAK" | cut -f3) loop, measured) x $THREADS"
KILN_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS "$BIN" > "$TMP/kiln.tsv"
OMP_NUM_THREADS=$THREADS "$PY" "$ROOT/bench/kernels/torch_kernels.py" "$THREADS" > "$TMP/torch.tsv"

# Join on (model, layer, pass) and print GFLOP/s and the two ratios.
"$PY" - "$TMP/kiln.tsv" "$TMP/torch.tsv" "$(echo "$PEAK" | cut -f2)" "$THREADS" <<'PYEOF'
import sys
def rows(path):
    lines = [l.rstrip("\n").split("\t") for l in open(path)][1:]
    return {tuple(l[:3]): [float(v) for v in l[3:]] for l in lines}
kiln, torch = rows(sys.argv[1]), rows(sys.argv[2])
peak = float(sys.argv[3]) * int(sys.argv[4])
print("| model | layer | pass | kiln GFLOP/s | cblas GFLOP/s | torch GFLOP/s | kiln/cblas | kiln/torch | kiln % of peak | torch % of peak |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
for key, (k, b) in kiln.items():
    t = torch[key][0] if key in torch else float("nan")
    print(f"| {key[0]} | {key[1]} | {key[2]} | {k:.1f} | {b:.1f} | {t:.1f} | {k / b:.2f} | {k / t:.2f}"
          f" | {100 * k / peak:.0f}% | {100 * t / peak:.0f}% |")
PYEOF
