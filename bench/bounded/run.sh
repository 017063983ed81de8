#!/usr/bin/env bash
# run.sh — bounded dims against fixed sizes (issue: one .so for every batch up to a bound, at
# fixed-size speed). Each example is compiled once with its batch bounded (-D batch=1..64) and
# once per fixed batch; the transformer also with seq=1..256 against fixed seq. predict and
# train_step samples/s of both .so files at each size, alternated, best of ROUNDS, and the
# ratio bounded/fixed (the target is >= 0.9). The compile times of both are printed too.
# ONNX_MODELS names bench/onnx models (bench/onnx/torch_onnx.py's) to run the same way: each
# exported once with a dynamic batch axis and compiled with -D batch=1..64, and once per fixed
# batch; predict, and with ONNX_TRAIN set train_step too (each .so compiled with
# --train "$ONNX_TRAIN": a loss and an optimizer, e.g. "softmax_cross_entropy sgd(lr=0.01)",
# which adds the label input; the BERT-style encoder, whose output is a sequence, gets
# mse_loss and the same optimizer).
#   bench/bounded/run.sh                      # all examples, batch 1 8 64, 1 thread
#   MODELS=mlp ROUNDS=5 bench/bounded/run.sh
#   MODELS= ONNX_MODELS="resnet18 mobilenet_v2" BATCH="1 8" bench/bounded/run.sh
#   MODELS= ONNX_MODELS=mobilenet_v2 ONNX_TRAIN="softmax_cross_entropy sgd(lr=0.01)" bench/bounded/run.sh
# Environment: BUILD (default build/), MODELS, ONNX_MODELS (none), BATCH, SEQ, ROUNDS (3),
# SECS (0.3), THREADS (1).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
MODELS=${MODELS-mlp lenet resnet transformer}
ONNX_MODELS=${ONNX_MODELS:-}
ONNX_TRAIN=${ONNX_TRAIN:-}
PY=${PYTHON:-/usr/bin/python3}
BATCH=${BATCH:-1 8 64}
SEQ=${SEQ:-16 64 256}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-0.3}
export KILN_NUM_THREADS=${THREADS:-1} OPENBLAS_NUM_THREADS=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cmake --build "$BUILD" --target kiln kiln_bench_models -j 2 >/dev/null
BM=$BUILD/bench/kiln_bench_models
KILN=$BUILD/tools/kiln

compile() {  # compile NAME.so MODEL FLAGS...: prints the seconds it took (MODEL: an example, or a path)
  local so=$1 m=$2; shift 2
  local t0 t1 src=$ROOT/examples/$m.kiln
  [[ "$m" == */* ]] && src=$m
  t0=$(date +%s.%N)
  "$KILN" compile "$src" "$@" -o "$TMP/$so" >"$TMP/log" 2>&1 || { cat "$TMP/log" >&2; exit 1; }
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}

best() {  # best MODE LIB EXTENT: the best samples/s of ROUNDS runs (the bounded .so at EXTENT)
  local mode=$1 lib=$2 ext=${3:-}
  "$BM" "$TMP/$lib" "$SECS" "$mode" $ext 2>/dev/null | awk -F'\t' '!/^#/ {print $4}'
}

echo "# $("$ROOT/bench/machine.sh")  threads ${KILN_NUM_THREADS}  rounds $ROUNDS"
printf 'model\tdim\textent\tmode\tbounded/s\tfixed/s\tratio\n'
# the two .so files of MODEL at extent E, each mode alternated, best of ROUNDS
compare() {  # compare MODEL DIM E BOUNDED.so FIXED.so MODES...
  local m=$1 dim=$2 e=$3 lb=$4 lf=$5; shift 5
  for mode in "$@"; do
    local bb=0 bf=0 v
    for r in $(seq "$ROUNDS"); do
      v=$(best "$mode" "$lb" "$e"); [ -n "$v" ] && bb=$(echo "if ($v > $bb) $v else $bb" | bc -l)
      v=$(best "$mode" "$lf"); [ -n "$v" ] && bf=$(echo "if ($v > $bf) $v else $bf" | bc -l)
    done
    printf '%s\t%s\t%s\t%s\t%.1f\t%.1f\t%.2f\n' "$m" "$dim" "$e" "$mode" "$bb" "$bf" "$(echo "$bb / $bf" | bc -l)"
  done
}
run_dim() {  # run_dim MODEL DIM BOUND EXTENTS...
  local m=$1 dim=$2 bound=$3; shift 3
  local cb cf
  cb=$(compile "b-$m-$dim.so" "$m" -D "$dim=1..$bound")
  echo "# compile $m $dim=1..$bound: ${cb}s"
  for e in "$@"; do
    cf=$(compile "f-$m-$dim-$e.so" "$m" -D "$dim=$e")
    echo "# compile $m $dim=$e: ${cf}s"
    compare "$m" "$dim" "$e" "b-$m-$dim.so" "f-$m-$dim-$e.so" predict train
  done
}
run_onnx() {  # run_onnx MODEL EXTENTS...: a bench/onnx model, its batch dynamic against fixed
  local m=$1 cb cf; shift
  local train=() modes=predict spec=$ONNX_TRAIN
  # The encoder's output is a sequence, not scores over classes: its loss is mse_loss.
  [ "$m" = bert ] && spec="mse_loss ${ONNX_TRAIN#* }"
  [ -n "$ONNX_TRAIN" ] && train=(--train "$spec") && modes="predict train"
  mkdir -p "$TMP/dyn" && "$PY" "$ROOT/bench/onnx/torch_onnx.py" export "$m" 1 "$TMP/dyn/$m.onnx" dynamic
  cb=$(compile "b-$m.so" "$TMP/dyn/$m.onnx" -D batch=1..64 "${train[@]}")
  echo "# compile $m batch=1..64: ${cb}s"
  for e in "$@"; do
    mkdir -p "$TMP/b$e" && "$PY" "$ROOT/bench/onnx/torch_onnx.py" export "$m" "$e" "$TMP/b$e/$m.onnx"
    cf=$(compile "f-$m-$e.so" "$TMP/b$e/$m.onnx" "${train[@]}")
    echo "# compile $m batch $e: ${cf}s"
    # shellcheck disable=SC2086
    compare "$m" batch "$e" "b-$m.so" "f-$m-$e.so" $modes
  done
}
for m in $ONNX_MODELS; do
  # shellcheck disable=SC2086
  run_onnx "$m" $BATCH
done
for m in $MODELS; do
  # shellcheck disable=SC2086
  run_dim "$m" batch 64 $BATCH
  # shellcheck disable=SC2086
  [ "$m" = transformer ] && run_dim "$m" seq 256 $SEQ
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
