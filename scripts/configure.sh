#!/usr/bin/env bash
# configure.sh DIR [cmake options...] — configures a build folder of Kiln (CMAKE_BUILD_TYPE
# Release unless the options say otherwise). A new folder gets Ninja when it is installed
# (scripts/setup.sh installs it): Make's per-target dependency scans cost ~10 CPU seconds on
# every build, even one with nothing to do, and Ninja compiles a target's sources while the
# targets it links against are still linking, which keeps both of CI's cores busy. A folder
# already configured keeps its generator (CMake refuses to change it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:?usage: scripts/configure.sh DIR [cmake options...]}
shift
gen=()
[ ! -f "$dir/CMakeCache.txt" ] && command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$root" -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
