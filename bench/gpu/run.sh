#!/usr/bin/env bash
# run.sh — the GPU benchmark: every example compiled with kiln compile --target cuda and timed by
# bench/models/bench_models.c (train_step and predict at the .kiln's own batch, through the host-buffer ABI), next
# to its PyTorch twin on the same GPU (torch_gpu.py), with the ratios kiln ÷ torch; Kiln runs
# twice, replaying CUDA graphs (the default) and step by step (KILN_CUDA_GRAPH=0).
# usage: bench/gpu/run.sh [BUILD_DIR]   (a Kiln build with the CUDA target; default build-bench)
# Environment: MODELS (default "mlp lenet resnet transformer"), SECS (per timed run, default 0.5),
#   PYTHON (default python3), OUT (a folder to keep kiln.tsv, torch.jsonl and table.md in),
#   LIBDIR and BENCH_BIN (prebuilt NAME.cuda.so files and kiln_bench_models binary, as
#   scripts/gpu_check.sh prepares them: nothing is compiled then, and BUILD_DIR is not needed),
#   KILN_TARGET (default cuda; "cpu" tries the script on a machine without a GPU).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
MODELS=${MODELS:-mlp lenet resnet transformer}
SECS=${SECS:-0.5}
PY=${PYTHON:-python3}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/kiln-benchgpu-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
OUT=${OUT:-$TMP}
mkdir -p "$OUT"
: > "$OUT/kiln.tsv"; : > "$OUT/kiln_steps.tsv"; : > "$OUT/torch.jsonl"

if [ -z "${LIBDIR:-}" ]; then   # compile here: the source tree's examples, a build's kiln
  ROOT=$(cd "$HERE/../.." && pwd)
  BUILD=${1:-$ROOT/build-bench}
  cmake --build "$BUILD" --target kiln kiln_bench_models -j 2 >/dev/null || exit 1
  LIBDIR=$TMP
  for m in $MODELS; do
    "$BUILD/tools/kiln" compile "$ROOT/examples/$m.kiln" --target "${KILN_TARGET:-cuda}" -o "$LIBDIR/$m.cuda.so" \
      >"$TMP/log" 2>&1 || { echo "# $m: kiln compile failed: $(tr '\n' ' ' < "$TMP/log")"; rm -f "$LIBDIR/$m.cuda.so"; }
  done
  BENCH_BIN=$BUILD/bench/kiln_bench_models
fi

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "# $(date -u '+%Y-%m-%d %H:%M UTC')  GPU: ${gpu:-none found by nvidia-smi}  secs/run $SECS"
for m in $MODELS; do
  [ -f "$LIBDIR/$m.cuda.so" ] || { echo "# $m: no $m.cuda.so"; continue; }
  "$BENCH_BIN" "$LIBDIR/$m.cuda.so" "$SECS" >>"$OUT/kiln.tsv" 2>"$TMP/err"
  rc=$?
  [ $rc -eq 77 ] && { echo "# kiln: $(grep -h SKIP "$OUT/kiln.tsv")"; sed -i '/^SKIP/d' "$OUT/kiln.tsv"; break; }
  [ $rc -eq 0 ] || echo "# $m: kiln_bench_models exited $rc: $(tr '\n' ' ' < "$TMP/err")"
  KILN_CUDA_GRAPH=0 "$BENCH_BIN" "$LIBDIR/$m.cuda.so" "$SECS" >>"$OUT/kiln_steps.tsv" 2>"$TMP/err" ||
    echo "# $m: kiln_bench_models (KILN_CUDA_GRAPH=0) exited $?: $(tr '\n' ' ' < "$TMP/err")"
done
"$PY" "$HERE/torch_gpu.py" "$SECS" $MODELS >"$OUT/torch.jsonl" 2>"$TMP/err"
rc=$?
grep -h '^#' "$TMP/err"
[ $rc -eq 0 ] || { echo "# torch: exited $rc: $(grep -hv '^#' "$TMP/err" | tail -3 | tr '\n' ' ') $(grep -h SKIP "$OUT/torch.jsonl")"; sed -i '/^SKIP/d' "$OUT/torch.jsonl"; }

"$PY" - "$OUT/kiln.tsv" "$OUT/torch.jsonl" "$OUT/kiln_steps.tsv" <<'PYEOF' | tee "$OUT/table.md"
import json, sys
rows = {}
for side, path in (("kiln", sys.argv[1]), ("steps", sys.argv[3])):
    for line in open(path):   # kiln_bench_models: model, mode, batch, samples/s, iterations, ...
        f = line.rstrip("\n").split("\t")
        if len(f) >= 5 and not line.startswith("#"):
            rows[(side, f[0], f[1])] = {"batch": int(f[2]), "samples_per_s": float(f[3])}
for line in open(sys.argv[2]):
    if line.startswith("{"):
        r = json.loads(line)
        rows[(r["side"], r["model"], r["mode"])] = r
models = list(dict.fromkeys(k[1] for k in rows))
print()
print("| model | mode | batch | kiln samples/s | torch samples/s (host in/out) | kiln/torch | torch samples/s (on device) | kiln/torch on device | kiln step by step | graphs / step by step |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for m in models:
    for mode in ("train", "predict"):
        k, t, d = rows.get(("kiln", m, mode)), rows.get(("torch", m, mode)), rows.get(("torch", m, mode + "_dev"))
        st = rows.get(("steps", m, mode))
        if not (k or t):
            continue
        b = (k or t)["batch"]
        cell = lambda r: f"{r['samples_per_s']:,.0f}" if r else "-"
        ratio = lambda r: f"{k['samples_per_s'] / r['samples_per_s']:.2f}" if k and r else "-"
        print(f"| {m} | {mode} | {b} | {cell(k)} | {cell(t)} | {ratio(t)} | {cell(d)} | {ratio(d)} | {cell(st)} | {ratio(st)} |")
PYEOF
