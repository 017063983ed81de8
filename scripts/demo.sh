#!/usr/bin/env bash
# demo.sh — the main job from a fresh clone: installs dependencies, builds Kiln, and runs
# `kiln check` on every example model, printing each model's node table. (Once code
# generation lands, this compiles LeNet and trains it on Fashion-MNIST.)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh" "$root/build"
for model in "$root"/examples/*.kiln; do
  echo "== kiln check examples/$(basename "$model")"
  "$root/build/tools/kiln" check "$model"
  echo
done
