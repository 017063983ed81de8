#!/usr/bin/env bash
# emulate.sh KILN GPU_COMPARE FAKEDIR ROOT [CXX [CXXFLAGS]] — every model's CUDA .so run on the host and
# compared with its CPU .so (tests/gpu/gpu_compare, the gpu label's comparison), no GPU
# needed: FAKEDIR holds the host stand-ins for libcuda.so.1, libcublas.so.13 and
# libcudnn.so.9 (tests/cuda/fake), each model's CUDA C (kiln compile --emit cu) is built for
# the host as the fake driver's model module (fake/emul.h before it), and the GPU op library's
# kernels (kernels/cuda/*.cu, with fake/emul_tail.h after) once, as its library module.
# What this checks: the generated kernels' and the library kernels' arithmetic and indexing,
# the CUDA runtime's binding, arena, copies, steps and updates, against the CPU; what it
# cannot: anything of the real GPU (races between threads, the real cuBLAS and cuDNN, the
# PTX itself: tests/cuda/cli.sh assembles that). Env: EMULATE_MODELS, a regex of the model names
# to run, EMULATE_SKIP one of those to leave out; EMULATE_SET=asan runs the models below, which
# cover every kind of step (dense, depthwise and grouped convolutions, SE, pooling, norms,
# dropout, reductions, padding, attention, epilogues, activations), and EMULATE_SET=rest the
# others: the sanitizer build runs the first, scripts/test.sh's normal build the second.
set -u
kiln=$1 compare=$2 fake=$3 root=$4 cxx=${5:-c++} cxxflags=${6:-}   # the sanitizer build's flags, so kernels are checked too
asan_set='^(mlp|lenet|transformer|layout_dw|layout_se|normdrop|reduce|pads|heads|epilogue|act)$'
case ${EMULATE_SET:-} in
  asan) EMULATE_MODELS=$asan_set ;;
  rest) EMULATE_SKIP=$asan_set ;;
  '') ;;
  *) echo "emulate.sh: EMULATE_SET is asan or rest, not '$EMULATE_SET'"; exit 2 ;;
esac
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
pass=0 failed=0 left=()
host_cpp() { printf '#include "emul.h"\n#include "%s"\n' "$1"; }   # host_cpp MODEL.cu: a model module's host source
# The GPU op library's module, the same for every model (codegen/cuda/cg_cuda_lib.c): built for
# the host once, for every run below.
printf '#include "emul.h"\n#include "kc_blas.cu"\n#include "kc_ops.cu"\n#include "emul_tail.h"\n' >"$tmp/kc_lib.cpp"
# shellcheck disable=SC2086
"$cxx" -std=c++17 -O1 -shared -fPIC -ffp-contract=off -w $cxxflags -I"$root/tests/cuda/fake" -I"$root/kernels" -I"$root/kernels/cuda" \
  "$tmp/kc_lib.cpp" -o "$tmp/kc_lib.so" 2>"$tmp/kc_lib.log" || { echo "FAIL the GPU library does not build for the host: $(head -20 "$tmp/kc_lib.log")"; exit 1; }
export KILN_FAKE_CUDA_LIB=$tmp/kc_lib.so
# kiln compile --target cuda runs NVRTC, uninstrumented, whose many allocations and frees go
# through the sanitizer's allocator: with ASan's default 256 MB quarantine of freed blocks
# such a compile took 5.4 s, with 4 MB 2.9 s (unloaded; half of this test's time under ASan
# was these compiles). So these compiles get a 4 MB quarantine: Kiln's own code in them is
# still checked, a use after free within a shorter window; the runs under test (gpu_compare)
# keep the defaults, and cuda.cli compiles the examples with them. No effect without ASan.
kiln_cuda() { ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4" "$kiln" "$@"; }
for f in "$root"/examples/*.kiln "$root"/tests/passes/models/*.kiln; do
  base=$(basename "$f" .kiln)
  for m in $(sed -n 's/^model \([A-Za-z_0-9]*\).*/\1/p' "$f"); do
    [[ "$m" =~ ${EMULATE_MODELS:-.} ]] || { left+=("$m"); continue; }
    [[ -n "${EMULATE_SKIP:-}" && "$m" =~ $EMULATE_SKIP ]] && { left+=("$m"); continue; }
    d=$tmp/$m && mkdir -p "$d"
    # The examples at batch 4: the emulation checks semantics, which the batch does not change,
    # and runs every GPU thread's work on one host thread.
    small=(); grep -q '^dim batch' "$f" && small=(-D batch=4)
    if ! kiln_cuda compile "$f" --model "$m" "${small[@]}" --target cuda -o "$d/lib$m.cuda.so" >"$d/log" 2>&1; then
      if grep -q 'no GPU kernel yet' "$d/log"; then echo "note: $base/$m is not on the GPU yet: $(grep -o 'no GPU kernel yet.*' "$d/log")"; continue; fi
      echo "FAIL $base/$m: kiln compile --target cuda: $(cat "$d/log")"; failed=$((failed + 1)); continue
    fi
    "$kiln" compile "$f" --model "$m" "${small[@]}" -o "$d/lib$m.cpu.so" >"$d/log" 2>&1 &&
      "$kiln" compile "$f" --model "$m" "${small[@]}" --emit cu -o "$d/$m.cu" >>"$d/log" 2>&1 || { echo "FAIL $base/$m: $(cat "$d/log")"; failed=$((failed + 1)); continue; }
    host_cpp "$m.cu" >"$d/host.cpp"
    # The kernels' floating-point model: no contraction, as NVRTC is run (--fmad=false).
    # shellcheck disable=SC2086
    if ! "$cxx" -std=c++17 -O1 -shared -fPIC -ffp-contract=off -w $cxxflags -I"$root/tests/cuda/fake" -I"$root/kernels" \
         -I"$root/kernels/cuda" -I"$d" "$d/host.cpp" -o "$d/host.so" 2>"$d/log"; then
      echo "FAIL $base/$m: the CUDA C does not build for the host: $(head -20 "$d/log")"; failed=$((failed + 1)); continue
    fi
    KILN_FAKE_CUDA_MODULE=$d/host.so LD_LIBRARY_PATH=$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
      "$compare" "$d/lib$m.cpu.so" "$d/lib$m.cuda.so" --bad-inputs >"$d/out" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then pass=$((pass + 1)); echo "ok   $base/$m: $(tail -n1 "$d/out")"
    else failed=$((failed + 1)); echo "FAIL $base/$m (exit $rc):"; grep -v '^ok' "$d/out" | head -20 | sed 's/^/    /'; fi
  done
done
# Bounded dims: the cases of bounded_cases.txt (which says what each checks), each under the
# fake driver with two host modules (the bounded one loaded first, as gpu_compare creates its
# second .so first). The sanitizer build runs lenet's (convolutions: cuDNN's state re-made per
# extent), the normal build the others.
mapfile -t bounded_cases < <(grep -v '^\s*\(#\|$\)' "$root/tests/cuda/bounded_cases.txt")
[ ${#bounded_cases[@]} -gt 0 ] || { failed=$((failed + 1)); echo "FAIL bounded dims: no cases read from tests/cuda/bounded_cases.txt"; }
emu_build() {  # emu_build DIR TAG FILE MODEL DEFS...: DIR/libMODEL.TAG.so and its host module DIR/host.TAG.so
  local d=$1 tag=$2 f=$3 m=$4; shift 4
  # shellcheck disable=SC2086
  kiln_cuda compile "$f" --model "$m" "$@" --target cuda -o "$d/lib$m.$tag.so" >>"$d/log" 2>&1 &&
    "$kiln" compile "$f" --model "$m" "$@" --emit cu -o "$d/$m.$tag.cu" >>"$d/log" 2>&1 &&
    host_cpp "$m.$tag.cu" >"$d/host.$tag.cpp" &&
    "$cxx" -std=c++17 -O1 -shared -fPIC -ffp-contract=off -w $cxxflags -I"$root/tests/cuda/fake" -I"$root/kernels" \
      -I"$root/kernels/cuda" -I"$d" "$d/host.$tag.cpp" -o "$d/host.$tag.so" >>"$d/log" 2>&1
}
emu_reuse() {  # emu_reuse MODEL TAG DIR: the first loop's build of MODEL, when it ran, as DIR/libMODEL.TAG.so, DIR/host.TAG.so and DIR/libMODEL.cpu.so
  local src=$tmp/$1   # (a host module built under the sanitizer is the costliest part of a case)
  [ -f "$src/host.so" ] && [ -f "$src/lib$1.cuda.so" ] && [ -f "$src/lib$1.cpu.so" ] || return 1
  ln -sf "$src/host.so" "$3/host.$2.so" && ln -sf "$src/lib$1.cuda.so" "$3/lib$1.$2.so" && ln -sf "$src/lib$1.cpu.so" "$3/lib$1.cpu.so"
}
emu_compare() {  # emu_compare NAME MODULES A.so B.so ARGS...: one gpu_compare run, counted
  local name=$1 modules=$2 out rc; shift 2
  out=$(KILN_FAKE_CUDA_MODULE=$modules LD_LIBRARY_PATH=$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$compare" "$@" --quiet 2>&1)
  rc=$?
  if [ $rc -eq 0 ]; then pass=$((pass + 1)); echo "ok   $name: $(tail -n1 <<<"$out")"
  else failed=$((failed + 1)); echo "FAIL $name (exit $rc):"; head -20 <<<"$out" | sed 's/^/    /'; fi
}
want_bounded() {  # want_bounded MODEL: this run takes MODEL's bounded case
  case ${EMULATE_SET:-} in
    asan) [ "$1" = lenet ] ;;
    rest) [ "$1" != lenet ] ;;
    *) [[ "$1" =~ ${EMULATE_MODELS:-.} ]] && ! [[ -n "${EMULATE_SKIP:-}" && "$1" =~ $EMULATE_SKIP ]] ;;
  esac
}
for c in "${bounded_cases[@]}"; do
  read -r f m bdefs exts fdefs fext <<<"$c"
  want_bounded "$m" || { left+=("$m(bounded)"); continue; }
  d=$tmp/bounded-$m && mkdir -p "$d"
  read -ra bd <<<"${bdefs//_/ }"; read -ra fd <<<"${fdefs//_/ }"
  if ! emu_build "$d" bounded "$root/$f" "$m" "${bd[@]}" || ! emu_build "$d" fixed "$root/$f" "$m" "${fd[@]}" ||
     ! "$kiln" compile "$root/$f" --model "$m" "${bd[@]}" -o "$d/lib$m.cpu.so" >>"$d/log" 2>&1; then
    failed=$((failed + 1)); echo "FAIL $m (bounded): $(tail -5 "$d/log")"; continue
  fi
  for e in ${exts//:/ }; do
    emu_compare "$m ${bd[*]} at $e: CUDA against the CPU" "$d/host.bounded.so" "$d/lib$m.cpu.so" "$d/lib$m.bounded.so" --extents "$e"
  done
  emu_compare "$m ${bd[*]} at $fext: CUDA against CUDA compiled with ${fd[*]}, bit for bit" "$d/host.bounded.so:$d/host.fixed.so" \
    "$d/lib$m.fixed.so" "$d/lib$m.bounded.so" --extents "$fext" --tol-predict 0 --tol-train 0 --atol 0 --tol-step 0 --tol-motion 0
done
# Data-parallel training through host buffers: normdrop (batch_norm with per-rank statistics,
# dropout) and the MLP as rank 0 of two whose twin holds the same rows (gpu_compare --comm:
# every sum doubles, so the step's result is as without the hook), CUDA against the CPU, each
# through its own hook. The sanitizer build runs normdrop's, the normal build the MLP's.
for m in normdrop mlp; do
  case ${EMULATE_SET:-} in asan) [ "$m" = normdrop ] || continue ;; rest) [ "$m" = mlp ] || continue ;; esac
  [[ "$m" =~ ${EMULATE_MODELS:-.} ]] || { left+=("$m(comm)"); continue; }
  f=$root/examples/$m.kiln; [ -f "$f" ] || f=$root/tests/passes/models/$m.kiln
  d=$tmp/comm-$m && mkdir -p "$d"
  small=(); grep -q '^dim batch' "$f" && small=(-D batch=4)
  if ! emu_reuse "$m" comm "$d" &&
     { ! emu_build "$d" comm "$f" "$m" "${small[@]}" || ! "$kiln" compile "$f" --model "$m" "${small[@]}" -o "$d/lib$m.cpu.so" >>"$d/log" 2>&1; }; then
    failed=$((failed + 1)); echo "FAIL $m (comm): $(tail -5 "$d/log")"; continue
  fi
  emu_compare "$m: data-parallel through host buffers, CUDA against the CPU" "$d/host.comm.so" "$d/lib$m.cpu.so" "$d/lib$m.comm.so" --comm
done
# CUDA graphs (runtime/cuda/rtc_graph.c): every run above replays a captured graph from its
# second call at the same extents on; the fake driver records a capture and replays it with the
# arguments as they were at the capture, as a GPU does, so a value that changes per call but was
# passed by value would show up as a difference from the CPU. Here: that the runs did replay
# (the fake's trace counts the launches), and the same model step by step (KILN_CUDA_GRAPH=0)
# against the CPU. normdrop (dropout's counter, SGD) in the sanitizer build, adamw_cosine (the
# learning rate and Adam's step per call) in the normal one.
for m in normdrop adamw_cosine; do
  case ${EMULATE_SET:-} in asan) [ "$m" = normdrop ] || continue ;; rest) [ "$m" = adamw_cosine ] || continue ;; esac
  [[ "$m" =~ ${EMULATE_MODELS:-.} ]] || { left+=("$m(graphs)"); continue; }
  f=$root/tests/passes/models/$m.kiln
  d=$tmp/graph-$m && mkdir -p "$d"
  small=(); grep -q '^dim batch' "$f" && small=(-D batch=4)   # as the first loop compiled it
  if ! emu_reuse "$m" graph "$d" &&
     { ! emu_build "$d" graph "$f" "$m" "${small[@]}" || ! "$kiln" compile "$f" --model "$m" "${small[@]}" -o "$d/lib$m.cpu.so" >>"$d/log" 2>&1; }; then
    failed=$((failed + 1)); echo "FAIL $m (graphs): $(tail -5 "$d/log")"; continue
  fi
  KILN_CUDA_GRAPH=0 emu_compare "$m step by step (KILN_CUDA_GRAPH=0), CUDA against the CPU" "$d/host.graph.so" "$d/lib$m.cpu.so" "$d/lib$m.graph.so"
  n=$(KILN_FAKE_TRACE=1 KILN_FAKE_CUDA_MODULE=$d/host.graph.so LD_LIBRARY_PATH=$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
      "$compare" "$d/lib$m.cpu.so" "$d/lib$m.graph.so" --quiet 2>&1 | grep -c 'graph launch')
  if [ "$n" -ge 4 ]; then pass=$((pass + 1)); echo "ok   $m: gpu_compare's calls replayed $n CUDA graphs"
  else failed=$((failed + 1)); echo "FAIL $m: gpu_compare's calls replayed $n CUDA graphs, not at least 4"; fi
done
# kiln run takes a CUDA .so as it takes a CPU one (the descriptor says which runtime it uses):
# the MLP on zeros gives a uniform softmax, the same bits on both targets.
d=$tmp/run && mkdir -p "$d"
{ printf '\x93NUMPY\x01\x00\x76\x00'; printf "%-117s\n" "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 784), }"
  head -c 3136 /dev/zero; } >"$d/x.npy"
mlp=$root/examples/mlp.kiln
if kiln_cuda compile "$mlp" -D batch=1 --target cuda -o "$d/libmlp.cuda.so" >"$d/log" 2>&1 &&
   "$kiln" compile "$mlp" -D batch=1 -o "$d/libmlp.cpu.so" >>"$d/log" 2>&1 &&
   "$kiln" compile "$mlp" -D batch=1 --emit cu -o "$d/mlp.cu" >>"$d/log" 2>&1 &&
   host_cpp mlp.cu >"$d/host.cpp" &&
   "$cxx" -std=c++17 -O1 -shared -fPIC -w -I"$root/tests/cuda/fake" -I"$root/kernels" -I"$root/kernels/cuda" -I"$d" \
     "$d/host.cpp" -o "$d/host.so" >>"$d/log" 2>&1 &&
   "$kiln" run "$d/libmlp.cpu.so" --input image="$d/x.npy" --output prob="$d/cpu.npy" >>"$d/log" 2>&1 &&
   KILN_FAKE_CUDA_MODULE=$d/host.so LD_LIBRARY_PATH=$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
     "$kiln" run "$d/libmlp.cuda.so" --input image="$d/x.npy" --output prob="$d/cuda.npy" >>"$d/log" 2>&1 &&
   cmp -s "$d/cpu.npy" "$d/cuda.npy"; then
  pass=$((pass + 1)); echo "ok   kiln run on a CUDA .so: the same output as on the CPU .so"
else
  failed=$((failed + 1)); echo "FAIL kiln run on a CUDA .so: $(tail -5 "$d/log")"
fi
# KILN_PROFILE on a CUDA .so: each step timed between two CUDA events (the fake's host clock),
# the CPU's trace and table (tests/tools/profile_check.py), outputs unchanged; predict through
# kiln run --profile, train_step through gpu_compare (profile_train.sh).
check=$root/tests/tools/profile_check.py
fake_env=(KILN_FAKE_CUDA_MODULE="$d/host.so" LD_LIBRARY_PATH="$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
if [ -f "$d/cpu.npy" ] &&
   env "${fake_env[@]}" "$kiln" run "$d/libmlp.cuda.so" --input image="$d/x.npy" --output prob="$d/prof.npy" --repeat 3 \
     --profile "$d/run.json" 2>"$d/table" && cmp -s "$d/cpu.npy" "$d/prof.npy" &&
   /usr/bin/python3 "$check" "$d/run.json" "$d/table" predict 3 >>"$d/log" 2>&1 && grep -q '"path":"cuBLAS"' "$d/run.json"; then
  pass=$((pass + 1)); echo "ok   kiln run --profile on a CUDA .so: a step event per step of each of 3 calls, the table, the same output"
else
  failed=$((failed + 1)); echo "FAIL kiln run --profile on a CUDA .so: $(tail -5 "$d/log") $(head -5 "$d/table" 2>/dev/null)"
fi
if env "${fake_env[@]}" bash "$root/tests/cuda/profile_train.sh" "$compare" "$d/libmlp.cuda.so" "$d/ptrain" "$check"; then
  pass=$((pass + 1))
else failed=$((failed + 1)); fi
case ${EMULATE_SET:-} in
  asan) why="EMULATE_SET=asan: scripts/test.sh's normal build runs the others" ;;
  rest) why="EMULATE_SET=rest: the sanitizer build runs them" ;;
  *) why="EMULATE_MODELS/EMULATE_SKIP" ;;
esac
[ ${#left[@]} -gt 0 ] && echo "note: left out ${#left[@]} models ($why): ${left[*]}"
echo "cuda emulation: $pass passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$pass" -gt 0 ]
