#!/usr/bin/env bash
# onnx.sh LIBDIR BENCH_BIN OUT — on the GPU machine: the bench/onnx models' CUDA .so files that
# scripts/gpu_check.sh prepared (LIBDIR/MODEL.bBATCH.cuda.so, each an ONNX export imported to
# .kiln text and compiled without its weights: the same graph and speed, a .so small enough to
# travel) timed by kiln_bench_models, replaying CUDA graphs and step by step (KILN_CUDA_GRAPH=0),
# beside the torch module eager on the same GPU (torch_onnx.py time ... cuda: the input in from
# pinned host memory and the output out each call). Writes OUT/onnx.tsv and OUT/table.md.
# Environment: SECS (per timed run, default 0.5), PYTHON (default python3).
set -u
LIBDIR=$1 BENCH_BIN=$2 OUT=$3
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
SECS=${SECS:-0.5}
mkdir -p "$OUT"
: > "$OUT/onnx.tsv"
for so in "$LIBDIR"/*.cuda.so; do
  [ -f "$so" ] || { echo "# no models in $LIBDIR"; exit 0; }
  f=$(basename "$so" .cuda.so) m=${f%.b*} b=${f##*.b}
  k=$("$BENCH_BIN" "$so" "$SECS" predict 2>/dev/null | awk -F'\t' '$2 == "predict" {print $4}')
  s=$(KILN_CUDA_GRAPH=0 "$BENCH_BIN" "$so" "$SECS" predict 2>/dev/null | awk -F'\t' '$2 == "predict" {print $4}')
  t=$("$PY" "$HERE/torch_onnx.py" time 1 "$SECS" "$m" "$b" cuda 2>/dev/null | awk -F'\t' '$2 == "predict" {print $4}')
  printf '%s\t%s\t%s\t%s\t%s\n' "$m" "$b" "${k:--}" "${s:--}" "${t:--}" | tee -a "$OUT/onnx.tsv"
done
"$PY" - "$OUT/onnx.tsv" <<'PYEOF' | tee "$OUT/table.md"
import sys
print("| model | batch | kiln samples/s | kiln step by step | torch eager samples/s | kiln/torch | graphs / step by step |")
print("|---|---:|---:|---:|---:|---:|---:|")
num = lambda v: float(v) if v not in ("", "-") else None
for line in open(sys.argv[1]):
    m, b, k, s, t = line.rstrip("\n").split("\t")
    k, s, t = num(k), num(s), num(t)
    cell = lambda v: f"{v:,.0f}" if v else "-"
    ratio = lambda a, c: f"{a / c:.2f}" if a and c else "-"
    print(f"| {m} | {b} | {cell(k)} | {cell(s)} | {cell(t)} | {ratio(k, t)} | {ratio(k, s)} |")
PYEOF
