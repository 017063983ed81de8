#!/bin/sh
# run.sh — ONNX models end to end: torchvision classifiers exported by torch (opset 13, eval,
# seed 0), `kiln compile MODEL.onnx` timed (the wall time of the command, best of ROUNDS), and
# predict of the resulting .so timed by kiln_bench_models next to PyTorch eager on the same
# weights (torch_onnx.py), at each batch and thread count.
# Usage: bench/onnx/run.sh [build-dir]
#   build-dir  a Kiln build tree (default: build-bench at the repo root, as bench/models/run.sh)
# Environment: MODELS (default "resnet18 mobilenet_v2 squeezenet1_1 vgg11_bn resnet50"),
#   BATCH (default "1 8"), THREADS (default "1 2"), SECS (minimum seconds per timed run,
#   default 0.5), ROUNDS (default 2: kiln and torch alternate, each keeps its best),
#   PYTHON (default /usr/bin/python3).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build-bench}
PY=${PYTHON:-/usr/bin/python3}
MODELS=${MODELS:-resnet18 mobilenet_v2 squeezenet1_1 vgg11_bn resnet50}
BATCH=${BATCH:-1 8}
THREADS=${THREADS:-1 2}
SECS=${SECS:-0.5}
ROUNDS=${ROUNDS:-2}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

cmake --build "$BUILD" --target kiln -j 2 >/dev/null
${CC:-cc} -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -I"$ROOT/runtime" -I"$ROOT/kernels" \
  "$ROOT/bench/models/bench_models.c" -o "$TMP/kiln_bench_models" -ldl -lm
now() { date +%s.%N; }

echo "# $(date -u '+%Y-%m-%d %H:%M UTC')  $(uname -m)  $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')  nproc $(nproc)"
echo "# torch $("$PY" -c 'import torch; print(torch.__version__)')  secs/run $SECS  rounds $ROUNDS  load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for b in $BATCH; do
  mkdir -p "$TMP/b$b"      # the model's name (and so its rows) comes from the file's name
  for m in $MODELS; do
    "$PY" "$ROOT/bench/onnx/torch_onnx.py" export "$m" "$b" "$TMP/b$b/$m.onnx"
    for r in $(seq "$ROUNDS"); do
      t0=$(now)
      "$BUILD/tools/kiln" compile "$TMP/b$b/$m.onnx" -o "$TMP/b$b/lib$m.so" >"$TMP/log" 2>&1 || { cat "$TMP/log" >&2; exit 1; }
      printf 'compile\t%s\t%s\t%s\n' "$m" "$b" "$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }')" >> "$TMP/all.tsv"
    done
    for t in $THREADS; do
      for r in $(seq "$ROUNDS"); do
        KILN_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t \
          "$TMP/kiln_bench_models" "$TMP/b$b/lib$m.so" "$SECS" 2>/dev/null | grep -v '^#' | sed "s/^/kiln\t$t\t/" >> "$TMP/all.tsv"
        OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t \
          "$PY" "$ROOT/bench/onnx/torch_onnx.py" time "$t" "$SECS" "$m" "$b" | sed "s/^/torch\t$t\t/" >> "$TMP/all.tsv"
      done
    done
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PY" - "$TMP/all.tsv" <<'PYEOF'
import sys
best, comp = {}, {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if f[0] == "compile":
        key = (f[1], f[2])
        comp[key] = min(comp.get(key, float("inf")), float(f[3]))
        continue
    side, t, m, batch, sps = f[0], f[1], f[2], f[4], float(f[5])
    best.setdefault((m, batch, t), {})
    best[(m, batch, t)][side] = max(best[(m, batch, t)].get(side, 0.0), sps)
print("\n| model | batch | kiln compile s | threads | kiln predict samples/s | torch eager samples/s | kiln/torch |")
print("|---|---:|---:|---:|---:|---:|---:|")
for (m, b, t), v in best.items():
    k, p = v.get("kiln", float("nan")), v.get("torch", float("nan"))
    print(f"| {m} | {b} | {comp.get((m, b), float('nan')):.2f} | {t} | {k:,.1f} | {p:,.1f} | {k / p:.2f} |")
PYEOF
