#!/usr/bin/env bash
# gpu_check.sh — the GPU check in two halves, for a lent GPU machine that can run .so files but
# cannot build Kiln (no LLVM, flex, bison there; CUDA libraries, python3 with torch, 16 cores).
#   scripts/gpu_check.sh prepare DIR   here: builds kiln, compiles every example and test model
#       for the CPU (the reference, --cpu x86-64-v3 so it runs on the other host) and for CUDA
#       into DIR/models, builds gpu_compare and kiln_bench_models into DIR/bin, copies the scripts, and
#       with the bench/onnx models at batch 1 and 64 for CUDA (ONNX_MODELS; compile_onnx below),
#       checks that everything in DIR needs only libc, libm, libdl, pthreads and
#       libopenblas.so.0 and that DIR stays under 40 MB (the models are packed otherwise).
#   bash DIR/run.sh OUTDIR             there: every CPU/CUDA pair through gpu_compare
#       (tests/gpu/run.sh --prebuilt) and the benchmark (bench/gpu/run.sh against PyTorch);
#       logs in OUTDIR, a summary on stdout; exits 0, 1 (a comparison failed) or 77 (no GPU).
# Environment for prepare: BUILD (the build folder; default build-gpu at the repo root, configured
#   Release when new), JOBS (default 2), GPU_CUDA_FLAGS (extra kiln compile options for the CUDA
#   side, e.g. "--gpu-arch sm_90"), CPU_FLAGS (default "--cpu x86-64-v3"), GPU_SECOND (the
#   options that make the second .so, default "--target cuda"; "-O0 --disable fusion" makes a
#   CPU pair, to try the whole flow on a machine without a GPU).
# Environment for DIR/run.sh: BENCH=0 skips the benchmark, SECS (per timed run, default 0.5),
#   GPU_MODELS and GPU_COMPARE_FLAGS as for tests/gpu/run.sh, PYTHON (default python3).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MAX_MB=40

usage() { echo "usage: scripts/gpu_check.sh prepare DIR   (then, on the GPU machine: bash DIR/run.sh OUTDIR)" >&2; exit 2; }
[ $# -eq 2 ] && [ "$1" = prepare ] || usage
DIR=$2
BUILD=${BUILD:-$ROOT/build-gpu}

build() {
  [ -f "$BUILD/CMakeCache.txt" ] || "$ROOT/scripts/configure.sh" "$BUILD"
  cmake --build "$BUILD" --target kiln kiln_runtime kiln_kernels kiln_bench_models -j "${JOBS:-2}" >/dev/null
  local cflags="-O2 -std=c11 -Wall -Wextra -Werror -I$ROOT/runtime -I$ROOT/kernels -I$ROOT/include"
  ${CC:-cc} $cflags "$ROOT/tests/gpu/gpu_compare.c" "$BUILD/runtime/libkiln_runtime.a" \
    "$BUILD/kernels/libkiln_kernels.a" -o "$DIR/bin/gpu_compare" -ldl -lm -lpthread
  cp "$BUILD/bench/kiln_bench_models" "$DIR/bin/"
}

# Every model of examples/ and tests/passes/models/, both targets; a CUDA compile that fails
# leaves NAME.cuda.err (kiln's message), which DIR/run.sh reports as "not on the GPU yet".
compile_models() {
  local kiln=$BUILD/tools/kiln f model n=0 ncuda=0
  for f in "$ROOT"/examples/*.kiln "$ROOT"/tests/passes/models/*.kiln; do
    for model in $(sed -n 's/^\s*model\s\+\([A-Za-z_][A-Za-z0-9_]*\).*/\1/p' "$f"); do
      "$kiln" compile "$f" --model "$model" ${CPU_FLAGS:---cpu x86-64-v3} -o "$DIR/models/$model.cpu.so" \
        >/dev/null 2>"$DIR/models/$model.cpu.err" || { cat "$DIR/models/$model.cpu.err" >&2; exit 1; }
      rm -f "$DIR/models/$model.cpu.err"
      rm -f "$DIR/models/$model.h"
      if "$kiln" compile "$f" --model "$model" ${GPU_SECOND:---target cuda} ${GPU_CUDA_FLAGS:-} -o "$DIR/models/$model.cuda.so" \
           >/dev/null 2>"$DIR/models/$model.cuda.err"; then
        rm -f "$DIR/models/$model.cuda.err"; ncuda=$((ncuda + 1))
      else
        echo "  $model: no CUDA .so: $(head -c 300 "$DIR/models/$model.cuda.err" | tr '\n' ' ')"
      fi
      rm -f "$DIR/models/$model.h"
      echo "${f#"$ROOT"/}:$model $model" >> "$DIR/models.txt"
      n=$((n + 1))
    done
  done
  "$kiln" compile "$ROOT/bench/gpu/stream.kiln" ${GPU_SECOND:---target cuda} ${GPU_CUDA_FLAGS:-} -o "$DIR/models/stream.cuda.so" >/dev/null
  rm -f "$DIR/models/stream.h"
  # The examples at batch 1 too, for the benchmark's batch-1 table (predict against torch eager).
  mkdir -p "$DIR/models/b1"
  for model in mlp lenet resnet transformer; do
    "$kiln" compile "$ROOT/examples/$model.kiln" -D batch=1 ${GPU_SECOND:---target cuda} ${GPU_CUDA_FLAGS:-} \
      -o "$DIR/models/b1/$model.cuda.so" >/dev/null
    rm -f "$DIR/models/b1/$model.h"
  done
  echo "compiled $n models for the CPU, $ncuda for CUDA"
}

# Bounded dims on the GPU: the cases of tests/cuda/bounded_cases.txt (the emulation's, which
# says what each checks) into DIR/models/bounded/: per case a CPU and a CUDA .so bounded alike
# and a CUDA .so at one fixed size, and a line per comparison in DIR/bounded.txt, "NAME FIRST.so
# SECOND.so GPU_COMPARE_OPTIONS...", which tests/run.sh --prebuilt runs after the models.
compile_bounded() {
  local kiln=$BUILD/tools/kiln f m bdefs exts fdefs fext bd fd e lab n=0 b=$DIR/models/bounded
  mkdir -p "$b" && : > "$DIR/bounded.txt"
  while read -r f m bdefs exts fdefs fext; do
    read -ra bd <<<"${bdefs//_/ }"; read -ra fd <<<"${fdefs//_/ }"
    "$kiln" compile "$ROOT/$f" --model "$m" "${bd[@]}" ${CPU_FLAGS:---cpu x86-64-v3} -o "$b/$m.cpu.so" >"$b/log" 2>&1 &&
      "$kiln" compile "$ROOT/$f" --model "$m" "${bd[@]}" ${GPU_SECOND:---target cuda} ${GPU_CUDA_FLAGS:-} -o "$b/$m.cuda.so" >>"$b/log" 2>&1 &&
      "$kiln" compile "$ROOT/$f" --model "$m" "${fd[@]}" ${GPU_SECOND:---target cuda} ${GPU_CUDA_FLAGS:-} -o "$b/$m.fixed.cuda.so" >>"$b/log" 2>&1 ||
      { echo "gpu_check: $f:$m with ${bd[*]}: kiln compile failed: $(tail -3 "$b/log")" >&2; exit 1; }
    rm -f "$b/$m.h" "$b/log"
    lab=${bdefs//-D_/} && lab="${m}[${lab//_/,}]"   # lenet[batch=1..4]
    for e in ${exts//:/ }; do
      echo "$lab@$e:against-CPU bounded/$m.cpu.so bounded/$m.cuda.so --extents $e" >> "$DIR/bounded.txt"
    done
    echo "$lab@$fext:against-fixed-bitwise bounded/$m.fixed.cuda.so bounded/$m.cuda.so --extents $fext --tol-predict 0 --tol-train 0 --atol 0 --tol-step 0 --tol-motion 0" >> "$DIR/bounded.txt"
    n=$((n + 1))
  done < <(grep -v '^\s*\(#\|$\)' "$ROOT/tests/cuda/bounded_cases.txt")
  echo "compiled $n bounded-dims cases"
}

# The bench/onnx models at batch 1 and 64 (ONNX_MODELS, default torch_onnx.py's list; "none"
# skips them) into DIR/models/onnx/MODEL.bBATCH.cuda.so: each exported here by torch
# (/usr/bin/python3), imported to .kiln text and compiled without its weights, which the .so
# initialises as the text declares: the graph and the speed are the same, and a .so stays a
# few MB where ResNet-50's weights alone are 100.
compile_onnx() {
  local kiln=$BUILD/tools/kiln py=/usr/bin/python3 m b tmp n=0
  [ "${ONNX_MODELS:-}" = none ] && return 0
  tmp=$(mktemp -d) && mkdir -p "$DIR/models/onnx"
  for m in ${ONNX_MODELS:-$("$py" "$ROOT/bench/onnx/torch_onnx.py" models)}; do
    for b in 1 64; do
      if "$py" "$ROOT/bench/onnx/torch_onnx.py" export "$m" "$b" "$tmp/$m.onnx" >"$tmp/log" 2>&1 &&
         "$kiln" import "$tmp/$m.onnx" -o "$tmp/$m.kiln" >>"$tmp/log" 2>&1 &&
         "$kiln" compile "$tmp/$m.kiln" ${GPU_SECOND:---target cuda} ${GPU_CUDA_FLAGS:-} -o "$DIR/models/onnx/$m.b$b.cuda.so" >>"$tmp/log" 2>&1; then
        n=$((n + 1))
      else
        echo "  $m at batch $b: no CUDA .so: $(tail -n 3 "$tmp/log" | tr '\n' ' ' | head -c 300)"
      fi
      rm -f "$tmp/$m.onnx" "$tmp/$m.safetensors" "$DIR/models/onnx/$m.h"
    done
  done
  rm -rf "$tmp"
  echo "compiled $n ONNX models for CUDA"
}

# Only these may be NEEDED by anything in DIR: the GPU machine has them (and the CUDA libraries,
# which the CUDA runtime dlopens rather than links).
check_deps() {
  local f bad=0 needed
  for f in "$DIR"/bin/* "$DIR"/models/*.so "$DIR"/models/b1/*.so "$DIR"/models/bounded/*.so "$DIR"/models/onnx/*.so; do
    [ -f "$f" ] || continue
    needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' |
             grep -vxE 'libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|libopenblas\.so\.0|ld-linux-x86-64\.so\.2' || true)
    [ -z "$needed" ] || { echo "gpu_check: $f needs $(echo $needed)" >&2; bad=1; }
  done
  return $bad
}

rm -rf "$DIR"
mkdir -p "$DIR/bin" "$DIR/models" "$DIR/tests" "$DIR/bench"
DIR=$(realpath "$DIR")
build
compile_models
compile_bounded
compile_onnx
strip --strip-unneeded "$DIR"/bin/* "$DIR"/models/*.so "$DIR"/models/b1/*.so "$DIR"/models/bounded/*.so "$DIR"/models/onnx/*.so 2>/dev/null || true
check_deps
cp "$ROOT/tests/gpu/run.sh" "$DIR/tests/run.sh"
cp "$ROOT/tests/gpu/f64_step.py" "$ROOT/tests/support/st_read.py" "$ROOT/tests/cuda/profile_train.sh" "$ROOT/tests/tools/profile_check.py" "$DIR/tests/"
cp "$ROOT/bench/gpu/run.sh" "$ROOT/bench/gpu/profile.sh" "$ROOT/bench/gpu/torch_gpu.py" "$ROOT/bench/models/torch_models.py" \
  "$ROOT/bench/gpu/onnx.sh" "$ROOT/bench/onnx/torch_onnx.py" "$ROOT/tests/support/onnx_models.py" "$DIR/bench/"
{ echo "prepared $(date -u '+%Y-%m-%d %H:%M UTC') from $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "CPU .so: ${CPU_FLAGS:---cpu x86-64-v3}; CUDA .so: ${GPU_SECOND:---target cuda} ${GPU_CUDA_FLAGS:-}"; } > "$DIR/info.txt"

cat > "$DIR/run.sh" <<'RUNEOF'
#!/usr/bin/env bash
# run.sh OUTDIR — made by scripts/gpu_check.sh prepare: compares every model's CPU and CUDA .so
# (tests/run.sh --prebuilt, gpu_compare) and benchmarks the examples against PyTorch on this GPU
# (bench/run.sh). Logs and results go to OUTDIR; exits as the comparisons did (0, 1, or 77 when
# there is no usable GPU). BENCH=0 skips the benchmark.
set -u
D=$(cd "$(dirname "$0")" && pwd)
[ $# -eq 1 ] || { echo "usage: bash run.sh OUTDIR" >&2; exit 2; }
mkdir -p "$1" && OUT=$(cd "$1" && pwd) || exit 1
if [ ! -d "$D/models" ]; then   # packed to keep the folder small (python's lzma: xz may be missing there)
  ${PYTHON:-python3} -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$D/models.tar.xz" "$D" || exit 1
fi
for f in "$D"/bin/* "$D"/models/*.so "$D"/models/bounded/*.so; do [ -f "$f" ] || continue; ldd "$f" 2>&1 | grep 'not found' | sed "s|^|$f: |"; done > "$OUT/missing.txt"
{ cat "$D/info.txt"; date -u; uname -a; nproc; nvidia-smi 2>&1; cat "$OUT/missing.txt"; } > "$OUT/env.txt"
echo "== $(grep -m1 prepared "$D/info.txt"); GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
[ -s "$OUT/missing.txt" ] && { cat "$OUT/missing.txt"; echo "== some libraries are missing here (above)"; }

echo "== gpu_compare: every model, CPU .so against CUDA .so (logs: $OUT/compare-*.log)"
bash "$D/tests/run.sh" --prebuilt "$D" "$OUT" | tee "$OUT/compare.txt"
rc=${PIPESTATUS[0]}

if [ $rc -ne 77 ] && grep -q ' resnet$' "$D/models.txt"; then
  echo "== the ResNet's first step against a float64 PyTorch step (kiln CPU, kiln CUDA, PyTorch float32 on this GPU)"
  KILN_CUDNN_LOG=1 "$D/bin/gpu_compare" "$D/models/resnet.cpu.so" "$D/models/resnet.cuda.so" --steps 1 --quiet \
    --tol-step 0.2 --keep "$OUT/keep-resnet" > "$OUT/keep-resnet.log" 2>&1
  ${PYTHON:-python3} "$D/tests/f64_step.py" --torch-device cuda "$OUT/keep-resnet" > "$OUT/f64-resnet.txt" 2>&1
  echo "(f64_step.py exit $?; the tensors furthest from float64 on the CUDA side, in $OUT/f64-resnet.txt:)"
  grep -E '^[a-z0-9_.]+ +[0-9]' "$OUT/f64-resnet.txt" | sort -k4 -g | tail -n 5
fi

if [ "${BENCH:-1}" != 0 ] && [ $rc -ne 77 ]; then
  echo "== benchmark: samples/s on this GPU, kiln against PyTorch (results: $OUT/bench)"
  LIBDIR=$D/models BENCH_BIN=$D/bin/kiln_bench_models OUT=$OUT/bench bash "$D/bench/run.sh" 2>&1 | tee "$OUT/bench.txt"
  echo "== benchmark at batch 1 (results: $OUT/bench-b1)"
  BATCH=1 LIBDIR=$D/models/b1 BENCH_BIN=$D/bin/kiln_bench_models OUT=$OUT/bench-b1 bash "$D/bench/run.sh" 2>&1 | tee "$OUT/bench-b1.txt"
  echo "== the bench/onnx models' predict, kiln against torch eager on this GPU (results: $OUT/onnx)"
  bash "$D/bench/onnx.sh" "$D/models/onnx" "$D/bin/kiln_bench_models" "$OUT/onnx" 2>&1 | tee "$OUT/onnx.txt"
  echo "== profile: each example's steps, and one fused group's bandwidth (results: $OUT/profile)"
  bash "$D/bench/profile.sh" "$D/models" "$D/bin/kiln_bench_models" "$OUT/profile" 2>&1
fi
echo "== CUDA graphs: programs that ran step by step because their capture failed (none is the goal):"
grep -rh "runs step by step, not as a CUDA graph" "$OUT" | sort | uniq -c | head -20
echo "== summary: $(tail -n1 "$OUT/compare.txt")$( [ $rc -eq 77 ] && echo ' (skipped: no usable GPU)')"
exit $rc
RUNEOF
chmod +x "$DIR/run.sh" "$DIR/tests/run.sh" "$DIR/bench/run.sh" "$DIR/bench/profile.sh" "$DIR/bench/onnx.sh"

mb=$(du -sm "$DIR" | cut -f1)
if [ "$mb" -ge $MAX_MB ]; then
  # xz's large window finds the runtime and kernels every CPU .so carries (4.5 MB each) again
  # in the next one: 165 MB of models pack into about 5 MB, where gzip leaves 60.
  tar -cf - -C "$DIR" models | xz -9 -T2 > "$DIR/models.tar.xz" && rm -rf "$DIR/models"
  echo "packed the models into models.tar.xz ($mb MB unpacked)"
  mb=$(du -sm "$DIR" | cut -f1)
  [ "$mb" -lt $MAX_MB ] || { echo "gpu_check: $DIR is $mb MB, over $MAX_MB MB" >&2; exit 1; }
fi
echo "prepared $DIR ($mb MB); on the GPU machine: bash $(basename "$DIR")/run.sh OUTDIR"
