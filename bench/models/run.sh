#!/bin/sh
# run.sh — whole-model throughput: every example compiled by kiln into a .so and timed by
# kiln_bench_models, next to its PyTorch twin (torch_models.py), same batch, same thread count.
# Usage: bench/models/run.sh [build-dir]
#   build-dir  a Kiln build tree (default: build-bench at the repo root; configure one with
#              scripts/build.sh build-bench -DCMAKE_BUILD_TYPE=Release); its kiln target is
#              (re)built first.
# Environment: THREADS (default "1 2"), MODELS (default "mlp lenet resnet transformer"),
#   BATCH (default "native 1": each model at its .kiln file's own batch, then at batch 1; a
#   number N recompiles the kiln side with -D batch=N and builds torch's inputs at N),
#   SECS (minimum seconds per timed run, default 0.5), ROUNDS (default 2: the kiln/torch pair is
#   run ROUNDS times alternately and each side keeps its best), PYTHON (default /usr/bin/python3).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build-bench}
PY=${PYTHON:-/usr/bin/python3}
THREADS=${THREADS:-1 2}
MODELS=${MODELS:-mlp lenet resnet transformer}
SECS=${SECS:-0.5}
ROUNDS=${ROUNDS:-2}
BATCH=${BATCH:-native 1}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

cmake --build "$BUILD" --target kiln kiln_bench_models -j 2 >/dev/null
BM=$BUILD/bench/kiln_bench_models
for b in $BATCH; do
  def=""; [ "$b" = native ] || def="-D batch=$b"
  for m in $MODELS; do
    "$BUILD/tools/kiln" compile "$ROOT/examples/$m.kiln" $def -o "$TMP/lib$m-$b.so" >"$TMP/log" 2>&1 || { cat "$TMP/log" >&2; exit 1; }
  done
done

echo "# $("$ROOT/bench/machine.sh")"
echo "# torch $("$PY" -c 'import torch; print(torch.__version__)')  secs/run $SECS  rounds $ROUNDS"
for b in $BATCH; do
  tb=""; [ "$b" = native ] || tb=$b
  for t in $THREADS; do
    for r in $(seq "$ROUNDS"); do
      for m in $MODELS; do
        KILN_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t \
          "$BM" "$TMP/lib$m-$b.so" "$SECS" 2>/dev/null | sed "s/^/kiln\t$t\t/" >> "$TMP/all.tsv"
        BATCH=$tb OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t \
          "$PY" "$ROOT/bench/models/torch_models.py" "$t" "$SECS" "$m" | sed "s/^/torch\t$t\t/" >> "$TMP/all.tsv"
      done
    done
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PY" - "$TMP/all.tsv" <<'PYEOF'
import sys
best, rss = {}, {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    side, t = f[0], f[1]
    if f[2] == "# rss_kib":   # model, RSS before creating the model, peak RSS (KiB)
        m, base, peak = f[3], int(f[4]), int(f[5])
        rss[(m, side)] = max(rss.get((m, side), (0, 0)), (peak - base, peak))
        continue
    if f[2] == "# create_ms":  # bench/onnx reads it; the model tables do not
        continue
    if f[2].startswith("#"):  # another comment (a model TorchScript could not compile)
        print(" ".join(f[2:]))
        continue
    m, mode, batch, sps = f[2], f[3], f[4], float(f[5])
    if mode == "predict_ts":  # torch's compiled predict: a third column of the predict row
        mode, side = "predict", "ts"
    key = (m, mode, t, batch)
    best.setdefault(key, {})
    best[key][side] = max(best[key].get(side, 0.0), sps)
# One table per batch size; predict rows carry torch's TorchScript-frozen,
# optimized-for-inference twin as a third column.
for b in dict.fromkeys(k[3] for k in best):
    print(f"\nbatch {b}\n")
    print("| model | mode | threads | kiln samples/s | torch samples/s | kiln/torch | torchscript samples/s | kiln/torchscript |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (m, mode, t, batch), v in best.items():
        if batch != b:
            continue
        k, p, ts = v.get("kiln", float("nan")), v.get("torch", float("nan")), v.get("ts")
        tcols = f"{ts:,.0f} | {k / ts:.2f}" if ts else "- | -"
        print(f"| {m} | {mode} | {t} | {k:,.0f} | {p:,.0f} | {k / p:.2f} | {tcols} |")
print()
print("Peak RSS of the process (MiB), and in parentheses its growth from just before the model was")
print("created (torch: after `import torch`); the most over thread counts and rounds.")
print()
print("| model | kiln | torch |")
print("|---|---:|---:|")
for m in dict.fromkeys(k[0] for k in rss):
    cell = lambda s: "%.0f (+%.0f)" % (rss[(m, s)][1] / 1024, rss[(m, s)][0] / 1024) if (m, s) in rss else "-"
    print(f"| {m} | {cell('kiln')} | {cell('torch')} |")
PYEOF
