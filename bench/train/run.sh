#!/usr/bin/env bash
# run.sh — `kiln train` on .npy arrays (Fashion-MNIST): what feeding the data costs, and a
# 5-epoch LeNet run to a test accuracy.
#
# Usage: bench/train/run.sh [speed|long|all] (default all)
#   speed  for each model (lenet, mlp) and thread count: `kiln train --data NAME=X.npy,...`
#          images/s, read from its --log, against the same model's train_step alone in a
#          loop (bench/train/step_loop.c on the `kiln compile`d .so: one fixed batch, the
#          first rows of the same .npy files, no loader). The step side keeps its best timed
#          run of at least SECS seconds; the kiln train side, from the log, its best stretch
#          of at least SECS seconds after the first SKIP steps of an epoch. The two sides
#          alternate, ROUNDS times, and each keeps its best. The loading cost is (step-alone
#          images/s) / (kiln train images/s) - 1: what kiln train adds to a batch (gathering
#          it from the memory-mapped .npy in its loader thread, handing it over, the log and
#          the progress bar), as a fraction of the step. Epoch 1 and the later epochs are
#          given apart: in epoch 1 the .npy file's pages are mapped in as they are first read.
#   long   LeNet (bench/train/lenet_cosine.kiln: SGD, Nesterov momentum, a cosine schedule over
#          the 5 epochs) trained for LONG_EPOCHS on the 60,000 training images, evaluated on
#          the 10,000 test images after each epoch; the accuracy per epoch and the time. Exits
#          1 when the last epoch's accuracy is below TARGET (%).
#
# The data: Fashion-MNIST's IDX files (Debian's dataset-fashion-mnist: apt-get install -y
# dataset-fashion-mnist) written as .npy by bench/train/fashion_npy.py, normalised as
# `kiln train --data DIR` normalises IDX files (so both train on the same values).
#
# Environment:
#   BUILD     the build tree whose tools/kiln runs (default build/); its kiln target is built
#             first unless NO_BUILD=1
#   THREADS   KILN_NUM_THREADS (and OPENBLAS_NUM_THREADS) of both sides (default "1 2"); kiln
#             train's loader thread comes on top of them
#   MODELS    default "lenet mlp";  ROUNDS (default 3)
#   SECS      the least seconds of a timed run of the step alone (5 of them a round) and of a
#             stretch of kiln train (default 0.5)
#   EPOCHS    epochs of each timed kiln train run (default 2: epoch 1, then a warm one)
#   SKIP      steps left out at the start of each epoch (default 50 of its 937)
#   LONG_EPOCHS (5; the model's cosine schedule spans 5 epochs whatever it is),
#   LONG_THREADS (default: kiln's own, every core), SEED (0), TARGET (90)
#   IDX       the IDX directory (default /usr/share/datasets/fashion-mnist)
#   NPY       a directory for the .npy files (kept, and reused when they are there; default:
#             written to a temporary directory and removed)
#   KEEP      a directory to copy the kiln train logs (.jsonl) and the raw timings into
#   PYTHON    a Python 3 with numpy (default /usr/bin/python3)
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
MODE=${1:-all}
case "$MODE" in
  -h|--help) usage; exit 0 ;;
  speed|long|all) ;;
  *) echo "run.sh: unknown mode '$MODE' (speed, long or all; --help)" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "run.sh: one argument at most (--help)" >&2; exit 2; }

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
KILN=$BUILD/tools/kiln
PY=${PYTHON:-/usr/bin/python3}
THREADS=${THREADS:-1 2}
MODELS=${MODELS:-lenet mlp}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-0.5}
EPOCHS=${EPOCHS:-2}
SKIP=${SKIP:-50}
LONG_EPOCHS=${LONG_EPOCHS:-5}
SEED=${SEED:-0}
TARGET=${TARGET:-90}
IDX=${IDX:-/usr/share/datasets/fashion-mnist}

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
NPY=${NPY:-$TMP/npy}

if [ "${NO_BUILD:-0}" != 1 ]; then
  cmake --build "$BUILD" --target kiln -j "$(nproc)" >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log" >&2; exit 1; }
fi
[ -x "$KILN" ] || { echo "run.sh: no $KILN (build it: scripts/build.sh build, or set BUILD)" >&2; exit 1; }
"$PY" -c 'import numpy' 2>/dev/null || { echo "run.sh: $PY has no numpy (apt-get install -y python3-numpy, or set PYTHON)" >&2; exit 1; }

# The .npy files, from the IDX files unless NPY already holds them.
if [ ! -f "$NPY/test_y.npy" ]; then
  [ -f "$IDX/train-images-idx3-ubyte.gz" ] || [ -f "$IDX/train-images-idx3-ubyte" ] ||
    { echo "run.sh: no Fashion-MNIST in $IDX (apt-get install -y dataset-fashion-mnist, or set IDX)" >&2; exit 1; }
  "$PY" "$ROOT/bench/train/fashion_npy.py" "$IDX" "$NPY" >&2
fi

load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "# $("$ROOT/bench/machine.sh")"

# data MODEL [SPLIT]: the --data / --val spec of MODEL (its input names) for SPLIT (train, test).
data() {
  local split=${2:-train}
  case "$1" in
    lenet) echo "data=$NPY/${split}_x.npy,label=$NPY/${split}_y.npy" ;;
    mlp) echo "image=$NPY/${split}_f.npy,label=$NPY/${split}_y.npy" ;;
    *) echo "run.sh: no data for model '$1' (lenet, mlp)" >&2; exit 1 ;;
  esac
}

speed() {
  ${CC:-cc} -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -I"$ROOT/runtime" -I"$ROOT/kernels" \
    "$ROOT/bench/train/step_loop.c" -o "$TMP/step_loop" -ldl -lm
  for m in $MODELS; do
    data "$m" >/dev/null
    "$KILN" compile "$ROOT/examples/$m.kiln" -o "$TMP/lib$m.so" >"$TMP/log" 2>&1 || { cat "$TMP/log" >&2; exit 1; }
  done
  echo "# speed: threads $THREADS  rounds $ROUNDS  epochs $EPOCHS (skip $SKIP steps each)  secs/run $SECS  load before: $(load)"
  : >"$TMP/speed.tsv"
  for r in $(seq "$ROUNDS"); do
    for t in $THREADS; do
      for m in $MODELS; do
        # alternate which side goes first from one round to the next
        local sides="train step"
        [ $((r % 2)) = 1 ] || sides="step train"
        for side in $sides; do
          if [ "$side" = train ]; then
            KILN_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t \
              "$KILN" train "$ROOT/examples/$m.kiln" --data "$(data "$m")" --epochs "$EPOCHS" --seed "$SEED" \
              --log "$TMP/$m-$t-$r.jsonl" >"$TMP/log" 2>"$TMP/err" || { cat "$TMP/log" "$TMP/err" >&2; exit 1; }
            "$PY" - "$TMP/$m-$t-$r.jsonl" "$TMP/log" "$SKIP" "$SECS" "$m" "$t" >>"$TMP/speed.tsv" <<'PYEOF'
import json, re, sys
# Step k (1-based in its epoch) of a full batch ends t_k = k * batch / rate_k seconds into the
# epoch (rate_k: the log's images_per_s, images since the epoch began / seconds since). From
# step SKIP on, the epoch is cut into stretches of at least SECS seconds, as long as the step
# side's timed runs (the last, shorter one left out; a steady part shorter than SECS is one
# stretch), and each stretch gives a rate: the best of them is this run's, as the step side
# keeps its best run. Noise on this machine only slows a stretch down.
path, out, skip, secs, model, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]
batch = int(re.search(r"; batch (\d+)", open(out).read()).group(1))
rates = {}
for line in open(path):
    rec = json.loads(line)
    if "step" in rec:
        rates.setdefault(rec["epoch"], []).append(rec["images_per_s"])
for epoch, r in sorted(rates.items()):
    n = len(r)
    if n <= skip:
        sys.exit(f"run.sh: {path}: epoch {epoch} has {n} steps, SKIP is {skip}")
    t = lambda k: k * batch / r[k - 1] if k else 0.0
    best, a = 0.0, skip
    for b in range(skip + 1, n + 1):
        if t(b) - t(a) >= secs:
            best, a = max(best, (b - a) * batch / (t(b) - t(a))), b
    if best == 0.0:
        best = (n - skip) * batch / (t(n) - t(skip))
    print(f"train\t{model}\t{threads}\t{'1' if epoch == 1 else '2+'}\t{best:.1f}")
PYEOF
          else
            local spec
            IFS=, read -r -a spec <<<"$(data "$m")"   # NAME=X.npy,NAME=Y.npy: one argument each
            KILN_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t \
              "$TMP/step_loop" "$TMP/lib$m.so" "$SECS" "${spec[@]}" >"$TMP/step.tsv"
            awk -F'\t' -v m="$m" -v t="$t" '$2 == "train" {printf "step\t%s\t%s\t-\t%s\n", m, t, $4}' "$TMP/step.tsv" >>"$TMP/speed.tsv"
          fi
        done
      done
    done
  done
  echo "# load after: $(load)"
  "$PY" - "$TMP/speed.tsv" "$EPOCHS" <<'PYEOF'
import sys
best = {}
for line in open(sys.argv[1]):
    side, model, threads, epoch, ips = line.rstrip("\n").split("\t")
    key = (side, model, threads, epoch)
    best[key] = max(best.get(key, 0.0), float(ips))
later = int(sys.argv[2]) > 1
head = "| model | threads | train_step alone, images/s | kiln train epoch 1, images/s | loading cost |"
rule = "|---|---:|---:|---:|---:|"
if later:
    head += " kiln train epochs 2+, images/s | loading cost |"
    rule += "---:|---:|"
print("\n" + head + "\n" + rule)
for (side, model, threads, _), step in best.items():
    if side != "step":
        continue
    row = f"| {model} | {threads} | {step:,.0f} |"
    for epoch in ("1", "2+") if later else ("1",):
        train = best.get(("train", model, threads, epoch))
        row += f" {train:,.0f} | {100 * (step / train - 1):+.1f}% |" if train else " - | - |"
    print(row)
print("\nloading cost = (train_step alone images/s) / (kiln train images/s) - 1: the time kiln train adds"
      " to each batch, as a fraction of the step (target: at most 5%)")
PYEOF
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$TMP"/*.jsonl "$TMP/speed.tsv" "$KEEP/"; fi
}

long() {
  local model=$ROOT/bench/train/lenet_cosine.kiln
  local threads=()
  [ -z "${LONG_THREADS:-}" ] || threads=(env "KILN_NUM_THREADS=$LONG_THREADS" "OPENBLAS_NUM_THREADS=$LONG_THREADS")
  echo "# long: bench/train/lenet_cosine.kiln ($(grep -m1 '^ *train ' "$model" | sed 's/^ *//'))"
  echo "# $LONG_EPOCHS epochs, seed $SEED, threads ${LONG_THREADS:-kiln default ($(nproc) cores)}  load before: $(load)"
  local t0 t1
  t0=$(date +%s.%N)
  "${threads[@]}" "$KILN" train "$model" --data "$(data lenet)" --val "$(data lenet test)" --epochs "$LONG_EPOCHS" \
    --seed "$SEED" --log "$TMP/long.jsonl" 2>"$TMP/long.err" || { cat "$TMP/long.err" >&2; exit 1; }
  t1=$(date +%s.%N)
  echo "# load after: $(load)"
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$TMP/long.jsonl" "$KEEP/"; fi
  "$PY" - "$TMP/long.jsonl" "$t0" "$t1" "$TARGET" <<'PYEOF'
import json, sys
epochs = [r for r in map(json.loads, open(sys.argv[1])) if "step" not in r]
wall, target = float(sys.argv[3]) - float(sys.argv[2]), float(sys.argv[4])
print("\n| epoch | lr at its end | train loss | test loss | test accuracy | seconds | images/s |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for r in epochs:
    print(f"| {r['epoch']} | {r['lr']:.3g} | {r['train_loss']:.4f} | {r['val_loss']:.4f} | "
          f"{100 * r['val_accuracy']:.2f}% | {r['seconds']:.1f} | {r['images_per_s']:,.0f} |")
train = sum(r["seconds"] for r in epochs)
acc = 100 * epochs[-1]["val_accuracy"]
print(f"\n{train:.1f} s of training ({wall:.1f} s for the whole command: loading, JIT compile, test passes);"
      f" final test accuracy {acc:.2f}%: {'reached' if acc >= target else 'BELOW'} the {target:g}% target")
sys.exit(0 if acc >= target else 1)
PYEOF
}

case "$MODE" in
  speed) speed ;;
  long) long ;;
  all) speed; echo; long ;;
esac
