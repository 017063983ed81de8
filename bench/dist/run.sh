#!/usr/bin/env bash
# run.sh — data-parallel scaling on this machine (issue 33): each example's train_step as one
# process with one thread against 2 ranks (mpirun) with one thread each, every rank at the
# example's own batch, so 2 ranks train twice the rows a step. Scaling efficiency = the job's
# samples/s on 2 ranks / (2 x one process's). Rounds alternate the two; each keeps its best.
# Then the cost model for 8, 64 and 512 ranks from a profiled step of each (cost_model.py).
# Usage: bench/dist/run.sh [build-dir]   (default build-bench; its kiln_shared and kiln_mpi are built)
# Environment: MODELS (default "resnet transformer"), SECS (default 3), ROUNDS (default 3).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build-bench}
MODELS=${MODELS:-resnet transformer}
SECS=${SECS:-3}
ROUNDS=${ROUNDS:-3}
case ${1:-} in -h|--help) sed -n "2,8p" "$0"; exit 0 ;; esac
command -v mpicc >/dev/null || { echo "run.sh: needs Open MPI (apt-get install libopenmpi-dev openmpi-bin)"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cmake --build "$BUILD" --target kiln_shared kiln_mpi -j 2 >/dev/null
mpicc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -I"$ROOT/include" -I"$ROOT/mpi" "$ROOT/bench/dist/dist_bench.c" -o "$TMP/dist_bench" \
  -L"$BUILD/api" -L"$BUILD/mpi" -lkiln -lkiln_mpi -Wl,-rpath,"$BUILD/api" -Wl,-rpath,"$BUILD/mpi"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 KILN_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
echo "# $("$ROOT/bench/machine.sh")"
echo "| model | batch per rank | 1 process samples/s | 2 ranks samples/s (job) | efficiency | 2 ranks: waiting |"
echo "|---|---:|---:|---:|---:|---:|"
for m in $MODELS; do
  b=$(sed -n 's/^dim batch = \([0-9]*\).*/\1/p' "$ROOT/examples/$m.kiln")
  best1=0 best2=0 wait2=""
  for r in $(seq "$ROUNDS"); do
    o1=$(mpirun -np 1 "$TMP/dist_bench" "$ROOT/examples/$m.kiln" "$b" "$SECS")
    o2=$(mpirun -np 2 --oversubscribe --bind-to core "$TMP/dist_bench" "$ROOT/examples/$m.kiln" "$b" "$SECS")
    s1=$(sed -n 's/.*, \([0-9.]*\) samples.*/\1/p' <<<"$o1"); s2=$(sed -n 's/.*, \([0-9.]*\) samples.*/\1/p' <<<"$o2")
    awk -v a="$s1" -v b="$best1" 'BEGIN{exit !(a>b)}' && best1=$s1
    awk -v a="$s2" -v b="$best2" 'BEGIN{exit !(a>b)}' && { best2=$s2; wait2=$(sed -n 's/.*waiting \([0-9.]*%\).*/\1/p' <<<"$o2"); }
  done
  eff=$(awk -v a="$best1" -v b="$best2" 'BEGIN{printf "%.2f", b / (2 * a)}')
  echo "| $m | $b | $best1 | $best2 | $eff | $wait2 |"
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
# The cost model for larger clusters (cost_model.py): one process, every gradient its own
# bucket on a hook that moves nothing, profiled, so the trace says when each is ready.
for m in $MODELS; do
  b=$(sed -n 's/^dim batch = \([0-9]*\).*/\1/p' "$ROOT/examples/$m.kiln")
  DIST_BUCKET_BYTES=4 KILN_PROFILE="$TMP/$m.json" "$TMP/dist_bench" "$ROOT/examples/$m.kiln" "$b" "$SECS" >/dev/null 2>&1
  (cd "$TMP" && /usr/bin/python3 "$ROOT/bench/dist/cost_model.py" "$m.json")
done
