#!/bin/sh
# run.sh — ONNX models end to end, Kiln against ONNX Runtime and eager PyTorch on the same file:
# the bench models exported by torch (opset 13, eval, seed 0, batch_norm statistics calibrated),
# `kiln compile MODEL.onnx` timed (the wall time of the command, best of ROUNDS), then predict
# of the resulting .so timed by kiln_bench_models, the same .onnx timed by ONNX Runtime 1.30's
# CPU build (ort_time.js through node) and the torch module eager (torch_onnx.py), at each batch
# and thread count, the three alternating, each side keeping its best. Also the time to the
# first result: dlopen + create + first predict for Kiln, session creation + first run for ORT.
# Usage: bench/onnx/run.sh [build-dir]
#   build-dir  a Kiln build tree (default: build-bench at the repo root, as bench/models/run.sh)
# Environment: MODELS (default: torch_onnx.py's list), BATCH (default "1 8"), THREADS (default
#   "1 2"), SECS (minimum seconds per timed run, default 0.5), ROUNDS (default 2), PYTHON
#   (default /usr/bin/python3), ORT_DIR (where onnxruntime-node is installed, default
#   BUILD/ort: installed there with npm on first use; without npm or the registry the ORT
#   column says n/a).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build-bench}" && pwd)   # absolute: node resolves ORT_DIR from elsewhere
PY=${PYTHON:-/usr/bin/python3}
MODELS=${MODELS:-$("$PY" "$ROOT/bench/onnx/torch_onnx.py" models)}
BATCH=${BATCH:-1 8}
THREADS=${THREADS:-1 2}
SECS=${SECS:-0.5}
ROUNDS=${ROUNDS:-2}
ORT_DIR=${ORT_DIR:-$BUILD/ort}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

cmake --build "$BUILD" --target kiln kiln_bench_models -j 2 >/dev/null
BM=$BUILD/bench/kiln_bench_models
now() { date +%s.%N; }

# ONNX Runtime: a benchmark peer, never a dependency. Its package's install script only
# fetches GPU extras, which this machine cannot reach, so it is skipped.
ort=1
if [ ! -d "$ORT_DIR/node_modules/onnxruntime-node" ]; then
  mkdir -p "$ORT_DIR"
  (cd "$ORT_DIR" && npm install --silent --ignore-scripts onnxruntime-node@1.30.0 >"$TMP/npm.log" 2>&1) \
    || { echo "# ONNX Runtime: npm install failed, its column is n/a: $(tail -1 "$TMP/npm.log")"; ort=0; }
fi
command -v node >/dev/null || { echo "# ONNX Runtime: no node, its column is n/a"; ort=0; }

echo "# $("$ROOT/bench/machine.sh")"
echo "# torch $("$PY" -c 'import torch; print(torch.__version__)')  onnxruntime-node $([ $ort = 1 ] && node -e "console.log(require(process.argv[1]).version)" "$ORT_DIR/node_modules/onnxruntime-node/package.json" || echo n/a)  secs/run $SECS  rounds $ROUNDS"
for b in $BATCH; do
  mkdir -p "$TMP/b$b"      # the model's name (and so its rows) comes from the file's name
  for m in $MODELS; do
    "$PY" "$ROOT/bench/onnx/torch_onnx.py" export "$m" "$b" "$TMP/b$b/$m.onnx"
    for r in $(seq "$ROUNDS"); do
      t0=$(now)
      "$BUILD/tools/kiln" compile "$TMP/b$b/$m.onnx" -o "$TMP/b$b/lib$m.so" >"$TMP/log" 2>&1 || { echo "# $m: kiln compile failed: $(head -3 "$TMP/log" | tr '\n' ' ')"; break; }
      printf 'compile\t%s\t%s\t%s\n' "$m" "$b" "$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }')" >> "$TMP/all.tsv"
    done
    for t in $THREADS; do
      for r in $(seq "$ROUNDS"); do
        [ -f "$TMP/b$b/lib$m.so" ] && KILN_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t \
          "$BM" "$TMP/b$b/lib$m.so" "$SECS" 2>/dev/null | grep -v '^# rss' | sed "s/^# create_ms/create/; s/^/kiln\t$t\t/" >> "$TMP/all.tsv"
        if [ $ort = 1 ]; then
          if ORT_NODE_MODULES=$ORT_DIR node "$ROOT/bench/onnx/ort_time.js" "$t" "$SECS" "$TMP/b$b/$m.onnx" "$b" >"$TMP/ort.out" 2>"$TMP/ort.err"; then
            sed "s/^/ort\t$t\t/" "$TMP/ort.out" >> "$TMP/all.tsv"
          else
            echo "# $m: ONNX Runtime failed: $(tail -1 "$TMP/ort.err")"
          fi
        fi
        OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t \
          "$PY" "$ROOT/bench/onnx/torch_onnx.py" time "$t" "$SECS" "$m" "$b" | sed "s/^/torch\t$t\t/" >> "$TMP/all.tsv"
      done
    done
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PY" - "$TMP/all.tsv" <<'PYEOF'
import sys
best, comp, first = {}, {}, {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if f[0] == "compile":
        key = (f[1], f[2])
        comp[key] = min(comp.get(key, float("inf")), float(f[3]))
        continue
    side, t = f[0], f[1]
    if f[2] == "create":                       # kiln: create, model, batch, ms
        key = (f[3], f[4], t, side)
        first[key] = min(first.get(key, float("inf")), float(f[5]))
        continue
    if f[3] == "create":                       # ort: model, create, batch, ms
        key = (f[2], f[4], t, side)
        first[key] = min(first.get(key, float("inf")), float(f[5]))
        continue
    m, batch, sps = f[2], f[4], float(f[5])
    best.setdefault((m, batch, t), {})
    best[(m, batch, t)][side] = max(best[(m, batch, t)].get(side, 0.0), sps)
nan = float("nan")
print("\nSamples per second, predict (higher is better); the ratios are Kiln's speed over the peer's.\n")
print("| model | batch | threads | kiln | ONNX Runtime | kiln/ORT | torch eager | kiln/torch |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for (m, b, t), v in best.items():
    k, o, p = v.get("kiln", nan), v.get("ort", nan), v.get("torch", nan)
    print(f"| {m} | {b} | {t} | {k:,.1f} | {o:,.1f} | {k / o:.2f} | {p:,.1f} | {k / p:.2f} |")
print("\nTime to the first result, milliseconds: kiln compile (once, ahead of time); then dlopen + create +"
      " first predict of the .so against ORT's session creation + first run, at 1 thread.\n")
print("| model | batch | kiln compile s | kiln create + first ms | ORT create + first ms |")
print("|---|---:|---:|---:|---:|")
for (m, b) in comp:
    t = min((k[2] for k in first if k[0] == m and k[1] == b), default="1")
    print(f"| {m} | {b} | {comp[(m, b)]:.2f} | {first.get((m, b, t, 'kiln'), nan):.1f} | {first.get((m, b, t, 'ort'), nan):.1f} |")
PYEOF
