#!/usr/bin/env bash
# cli.sh KILN ROOT PTXAS — kiln compile's CUDA target without a GPU: every example and test
# model compiles to a GPU module that ptxas accepts (for sm_80, and for sm_90 with --gpu-arch),
# --emit cu writes the CUDA C, a full --target cuda build gives a .so whose only dependencies
# are libc and libm (the CUDA libraries are opened at create) and whose header has the device
# entry points; the errors: --emit ptx with --target cpu and --gpu-arch without cuda exit 2, a
# bad arch exits 1 and writes nothing.
set -u
kiln=$1 root=$2 ptxas=${3:-}
. "$(dirname "$0")/../support/tally.sh"   # $tmp, ok, bad
# A sanitizer build checks the PTX of the examples only: NVRTC, uninstrumented, runs ~5x
# slower under ASan's allocator, and cuda.emulate compiles every model for the GPU there.
san=$(readelf -d "$kiln" 2>/dev/null | grep -oE 'lib(asan|tsan|ubsan)' | head -1)
gpu_models() {   # every model file (test_cg_cuda.c checks the refusal of what the GPU cannot run)
  ls "$root"/examples/*.kiln
  [ -n "$san" ] || ls "$root"/tests/passes/models/*.kiln
}
[ -n "$san" ] && echo "note: kiln is built with $san: the PTX of examples/ only (the normal build checks every model's)"
for f in $(gpu_models); do
  name=$(basename "$f" .kiln)
  models=$(sed -n 's/^model \([A-Za-z_0-9]*\).*/\1/p' "$f")
  for m in $models; do
    out=$tmp/$name-$m.ptx
    if "$kiln" compile "$f" --model "$m" --emit ptx -o "$out" 2>"$tmp/err"; then ok; else bad "$name/$m: --emit ptx: $(cat "$tmp/err")"; continue; fi
    grep -q '^\.target sm_80' "$out" && grep -q '\.entry kiln_fused_p' "$out" && ok || bad "$name/$m: the PTX is not for sm_80 or has no generated kernel"
    if [ -n "$ptxas" ]; then
      "$ptxas" -arch=sm_80 "$out" -o "$tmp/x.cubin" 2>"$tmp/err" && ok || bad "$name/$m: ptxas: $(head -5 "$tmp/err")"
    fi
  done
done
[ -z "$ptxas" ] && echo "note: no ptxas (KILN_PTXAS): the PTX was written but not assembled"
# --gpu-arch: PTX for Hopper, which ptxas takes for sm_90.
"$kiln" compile "$root/examples/lenet.kiln" --emit ptx --gpu-arch sm_90 -o "$tmp/l90.ptx" 2>/dev/null && grep -q '^\.target sm_90' "$tmp/l90.ptx" && ok || bad "--gpu-arch sm_90"
[ -z "$ptxas" ] || { "$ptxas" -arch=sm_90 "$tmp/l90.ptx" -o "$tmp/x.cubin" && ok || bad "ptxas sm_90"; }
# The .so embeds two modules, the model's and the op library's, both for the arch asked: the
# library's PTX is built into kiln for sm_80 and compiled by the compile for any other.
for arch in sm_80 sm_90; do
  "$kiln" compile "$root/examples/mlp.kiln" --target cuda --gpu-arch $arch -o "$tmp/a.so" 2>"$tmp/err" &&
    [ "$(strings -n 6 "$tmp/a.so" | grep -c "^\.target $arch\$")" = 2 ] && ok || bad "--gpu-arch $arch: the .so has not two $arch modules $(cat "$tmp/err")"
done
# --emit cu: the program NVRTC compiles (not run for --emit cu), the k_scalar.h functions called
# from it; the op library is a module of its own (tests/cuda/test_kc_nvrtc.c checks it).
"$kiln" compile "$root/examples/transformer.kiln" --emit cu -o "$tmp/t.cu" 2>/dev/null && grep -q 'k_sf_gelu' "$tmp/t.cu" &&
  grep -q '#include "k_scalar.h"' "$tmp/t.cu" && ! grep -q '#include "kc_ops.cu"' "$tmp/t.cu" && ok || bad "--emit cu"
# The .so: libc, libm (and the loader, for thread-local storage) only; the header declares the device entry points.
"$kiln" compile "$root/examples/mlp.kiln" --target cuda -o "$tmp/libmlp.so" 2>"$tmp/err" && ok || bad "--target cuda .so: $(cat "$tmp/err")"
deps=$(readelf -d "$tmp/libmlp.so" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
# (the sanitizer build's .so also needs its runtimes and the BLAS its instrumented archives keep)
cudalibs=$(echo "$deps" | tr ' ' '\n' | grep -i -e cuda -e cublas -e cudnn -e nvrtc || true)
extra=$(echo "$deps" | tr ' ' '\n' | grep -v -e '^$' -e '^libc\.so\.6$' -e '^libm\.so\.6$' -e '^ld-linux' || true)
if echo "$deps" | grep -q libasan; then [ -z "$cudalibs" ] && ok || bad "the CUDA .so links CUDA libraries: $cudalibs"
else [ -z "$extra" ] && ok || bad "the CUDA .so needs: $deps (want libc, libm and the loader only)"; fi
grep -q 'int mlp_predict_device(mlp \*m, const float \*image, float \*prob, struct CUstream_st \*stream);' "$tmp/mlp.h" &&
  grep -q 'mlp_train_step_device' "$tmp/mlp.h" && ok || bad "the header lacks the device entry points"
# Errors.
"$kiln" compile "$root/examples/mlp.kiln" --target cpu --emit ptx -o "$tmp/x.ptx" 2>/dev/null; [ $? -eq 2 ] && ok || bad "--target cpu --emit ptx should exit 2"
"$kiln" compile "$root/examples/mlp.kiln" --gpu-arch sm_80 -o "$tmp/x.so" 2>/dev/null; [ $? -eq 2 ] && ok || bad "--gpu-arch without --target cuda should exit 2"
"$kiln" compile "$root/examples/mlp.kiln" --emit ptx --gpu-arch volta -o "$tmp/x.ptx" 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q "not a GPU architecture" "$tmp/err" && [ ! -e "$tmp/x.ptx" ] && ok || bad "--gpu-arch volta: exit $rc"
echo "cuda cli: $pass passed, $failed failed"
[ "$failed" -eq 0 ]
