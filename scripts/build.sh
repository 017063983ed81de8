#!/usr/bin/env bash
# build.sh [DIR] [cmake options...] — configures (scripts/configure.sh) and builds Kiln into
# DIR (default build/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/build}
shift || true
"$root/scripts/configure.sh" "$dir" "$@"
cmake --build "$dir" -j "$(nproc)"
