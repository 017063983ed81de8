#!/bin/sh
# limits.sh — what limits each bench/onnx model against ONNX Runtime: both sides' own per-step
# profiles of the same .onnx (KILN_PROFILE around kiln_bench_models, ORT's enableProfiling
# through ort_profile.js), each step's fastest of RUNS calls, split by limits.py into the dense
# convolutions and matrix products (bounded by the core's FMA peak, measured here by peak.c)
# and the rest (bounded by memory), and the ratio Kiln would reach if its dense steps ran at the
# peak and nothing else changed. One Markdown table on stdout.
# Usage: bench/onnx/limits.sh [build-dir]   (default build/)
# Environment: MODELS (default torch_onnx.py's list), BATCH (default 1), THREADS (default 1),
#   RUNS (calls profiled on each side, default 30), PYTHON (default /usr/bin/python3), ORT_DIR
#   (as for run.sh: where onnxruntime-node is installed, default BUILD/ort), KEEP (a folder to
#   keep both sides' profiles in, as MODEL.kiln.json and MODEL.ort.json).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
PY=${PYTHON:-/usr/bin/python3}
MODELS=${MODELS:-$("$PY" "$ROOT/bench/onnx/torch_onnx.py" models)}
BATCH=${BATCH:-1}
THREADS=${THREADS:-1}
RUNS=${RUNS:-30}
ORT_DIR=${ORT_DIR:-$BUILD/ort}
[ -d "$ORT_DIR/node_modules/onnxruntime-node" ] ||
  { echo "limits.sh: no onnxruntime-node in $ORT_DIR (bench/onnx/run.sh installs it; or set ORT_DIR)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

cmake --build "$BUILD" --target kiln kiln_bench_models -j 2 >/dev/null
BM=$BUILD/bench/kiln_bench_models
${CC:-cc} -O2 -march=native -ffp-contract=fast -std=c11 -Wall -Wextra -Werror "$ROOT/bench/onnx/peak.c" -o "$TMP/peak"
peak1=$("$TMP/peak" 2 2>/dev/null)
peak=$(echo "$peak1 * $THREADS" | bc)
echo "# $("$ROOT/bench/machine.sh")"
echo "# batch $BATCH, $THREADS thread(s), $RUNS calls a side; FMA peak $peak1 GFLOP/s a core (peak.c), $peak in all"
"$PY" "$ROOT/bench/onnx/limits.py" --header
for m in $MODELS; do
  "$PY" "$ROOT/bench/onnx/torch_onnx.py" export "$m" "$BATCH" "$TMP/$m.onnx"
  "$BUILD/tools/kiln" compile "$TMP/$m.onnx" -o "$TMP/lib$m.so" >"$TMP/log" 2>&1 || { echo "# $m: kiln compile failed: $(head -3 "$TMP/log" | tr '\n' ' ')"; continue; }
  # KILN_PROFILE profiles any program that runs a model: kiln_bench_models fills the inputs
  # itself, and with SECS 0 makes one warm-up call and RUNS timed ones.
  KILN_PROFILE=$TMP/kiln.json KILN_NUM_THREADS=$THREADS KILN_BENCH_RUNS=$RUNS "$BM" "$TMP/lib$m.so" 0 predict \
    >/dev/null 2>"$TMP/log" || { echo "# $m: kiln_bench_models failed: $(tail -2 "$TMP/log" | tr '\n' ' ')"; continue; }
  ORT_NODE_MODULES=$ORT_DIR node "$ROOT/bench/onnx/ort_profile.js" "$THREADS" "$RUNS" "$TMP/$m.onnx" "$BATCH" "$TMP/ort.json" ||
    { echo "# $m: ONNX Runtime failed"; continue; }
  "$PY" "$ROOT/bench/onnx/limits.py" "$m" "$TMP/kiln.json" "$TMP/ort.json" "$peak"
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && mv "$TMP/kiln.json" "$KEEP/$m.kiln.json" && mv "$TMP/ort.json" "$KEEP/$m.ort.json"; fi
  rm -f "$TMP/$m.onnx" "$TMP/lib$m.so" "$TMP"/*.json
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
