#!/usr/bin/env bash
# demo.sh — the main job from a fresh clone: installs what is missing (the Fashion-MNIST
# data set included), builds Kiln, compiles examples/lenet.kiln into a self-contained shared
# object with `kiln compile`, builds the C program examples/demo/train_fashion_mnist.c
# against its generated header, and trains LeNet for one epoch through that ABI: a progress
# bar, then the test-set accuracy, then the weights saved as safetensors.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" dataset-fashion-mnist
"$root/scripts/build.sh" "$root/build"
out="$root/build/demo"
mkdir -p "$out"
echo "== kiln compile examples/lenet.kiln -o build/demo/liblenet.so"
"$root/build/tools/kiln" compile "$root/examples/lenet.kiln" -o "$out/liblenet.so"
echo "== cc examples/demo/train_fashion_mnist.c (against build/demo/lenet.h)"
cc -std=c99 -O2 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L -I"$out" \
  "$root/examples/demo/train_fashion_mnist.c" -o "$out/train_fashion_mnist" \
  -L"$out" -llenet -Wl,-rpath,"$out"
echo "== ldd build/demo/liblenet.so"
ldd "$out/liblenet.so"
echo "== train"
"$out/train_fashion_mnist" --save "$out/lenet.safetensors" "$@"
