#!/usr/bin/env bash
# run.sh — bounded dims against fixed sizes (issue: one .so for every batch up to a bound, at
# fixed-size speed). Each example is compiled once with its batch bounded (-D batch=1..64) and
# once per fixed batch; the transformer also with seq=1..256 against fixed seq. predict and
# train_step samples/s of both .so files at each size, alternated, best of ROUNDS, and the
# ratio bounded/fixed (the target is >= 0.9). The compile times of both are printed too.
#   bench/bounded/run.sh                      # all examples, batch 1 8 64, 1 thread
#   MODELS=mlp ROUNDS=5 bench/bounded/run.sh
# Environment: BUILD (default build/), MODELS, BATCH, SEQ, ROUNDS (3), SECS (0.3), THREADS (1).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
MODELS=${MODELS:-mlp lenet resnet transformer}
BATCH=${BATCH:-1 8 64}
SEQ=${SEQ:-16 64 256}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-0.3}
export KILN_NUM_THREADS=${THREADS:-1} OPENBLAS_NUM_THREADS=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cmake --build "$BUILD" --target kiln -j 2 >/dev/null
${CC:-cc} -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -I"$ROOT/runtime" -I"$ROOT/kernels" \
  "$ROOT/bench/models/bench_models.c" -o "$TMP/bm" -ldl -lm
KILN=$BUILD/tools/kiln

compile() {  # compile NAME.so MODEL FLAGS...: prints the seconds it took
  local so=$1 m=$2; shift 2
  local t0 t1
  t0=$(date +%s.%N)
  "$KILN" compile "$ROOT/examples/$m.kiln" "$@" -o "$TMP/$so" >"$TMP/log" 2>&1 || { cat "$TMP/log" >&2; exit 1; }
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}

best() {  # best MODE LIB EXTENT: the best samples/s of ROUNDS runs (the bounded .so at EXTENT)
  local mode=$1 lib=$2 ext=${3:-}
  "$TMP/bm" "$TMP/$lib" "$SECS" "$mode" $ext 2>/dev/null | awk -F'\t' '!/^#/ {print $4}'
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC')  $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')  cpu family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') model $(grep -m1 '^model' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')  threads ${KILN_NUM_THREADS}  rounds $ROUNDS  load before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf 'model\tdim\textent\tmode\tbounded/s\tfixed/s\tratio\n'
run_dim() {  # run_dim MODEL DIM BOUND EXTENTS...
  local m=$1 dim=$2 bound=$3; shift 3
  local cb cf
  cb=$(compile "b-$m-$dim.so" "$m" -D "$dim=1..$bound")
  echo "# compile $m $dim=1..$bound: ${cb}s"
  for e in "$@"; do
    cf=$(compile "f-$m-$dim-$e.so" "$m" -D "$dim=$e")
    echo "# compile $m $dim=$e: ${cf}s"
    for mode in predict train; do
      local bb=0 bf=0 v
      for r in $(seq "$ROUNDS"); do
        v=$(best "$mode" "b-$m-$dim.so" "$e"); [ -n "$v" ] && bb=$(echo "if ($v > $bb) $v else $bb" | bc -l)
        v=$(best "$mode" "f-$m-$dim-$e.so"); [ -n "$v" ] && bf=$(echo "if ($v > $bf) $v else $bf" | bc -l)
      done
      printf '%s\t%s\t%s\t%s\t%.1f\t%.1f\t%.2f\n' "$m" "$dim" "$e" "$mode" "$bb" "$bf" "$(echo "$bb / $bf" | bc -l)"
    done
  done
}
for m in $MODELS; do
  # shellcheck disable=SC2086
  run_dim "$m" batch 64 $BATCH
  # shellcheck disable=SC2086
  [ "$m" = transformer ] && run_dim "$m" seq 256 $SEQ
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
