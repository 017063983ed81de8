#!/usr/bin/env bash
# f64_check.sh KILN GPU_COMPARE — gpu.f64_step: the reference side of the gpu label judged by a
# third opinion. examples/resnet.kiln is compiled twice for the CPU (as the gpu label's
# reference, and at -O0 without fusion), gpu_compare takes one train step on both and keeps the
# inputs and weights (--keep), and tests/gpu/f64_step.py checks both against PyTorch's step in
# float64: each tensor within f64_step.py's limit (0.2 of its update: a relu input within
# float32 rounding of 0 may flip, a wrong gradient is off by all of it). Skipped (77) without
# python3-torch.
set -u
KILN=$1 COMPARE=$2
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/kiln-f64-XXXXXX")
trap 'rm -rf "$T"' EXIT
/usr/bin/python3 -c 'import numpy, torch' 2>/dev/null || { echo "SKIP: no python3-torch (/usr/bin/python3 cannot import torch)"; exit 77; }
"$KILN" compile "$HERE/../../examples/resnet.kiln" -o "$T/a.so" >/dev/null || exit 1
"$KILN" compile "$HERE/../../examples/resnet.kiln" -O0 --disable fusion -o "$T/b.so" >/dev/null || exit 1
"$COMPARE" "$T/a.so" "$T/b.so" --steps 1 --quiet --keep "$T/keep" || exit 1
for f in data.npy label.npy init.safetensors a1.safetensors b1.safetensors; do
  [ -s "$T/keep/$f" ] || { echo "FAIL: gpu_compare --keep left no $f"; exit 1; }
done
/usr/bin/python3 "$HERE/f64_step.py" "$T/keep"
