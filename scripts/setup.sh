#!/usr/bin/env bash
# setup.sh — installs what building and testing Kiln needs on Debian 12, and nothing when
# it is all there already. Runs apt as root, or through sudo.
set -euo pipefail
# llvm-dev: the CPU code generator (LLVM C API); clang: compiles kernels/k_scalar.h to bitcode;
# graphviz: the tests render `kiln passes --dot` output.
# python3-torch and python3-numpy serve the tests against PyTorch (tests/conformance, tests/onnx);
# python3-numpy is also what the Python package needs, and python3-pytest runs its tests.
# Extra packages may be named as arguments (demo.sh adds the Fashion-MNIST data set).
# ninja-build: scripts/configure.sh's generator (faster than Make; Make stays the fallback).
# libclang-rt-14-dev: libFuzzer and the sanitizer runtimes for clang (tests/fuzz).
pkgs=(cmake make ninja-build gcc g++ flex bison libopenblas-dev llvm-dev clang libclang-rt-14-dev graphviz python3-torch python3-numpy python3-pytest "$@")
# libedit-dev: kiln repl's line editing and history; pkg-config: tests/api/install.sh builds
# the C API's example with `pkg-config --cflags --libs kiln`.
pkgs+=(libedit-dev pkg-config)
# zlib1g-dev: kiln train inflates the arrays of compressed .npz archives (numpy.savez_compressed).
pkgs+=(zlib1g-dev)
# valgrind: tests/codegen/parallel_compile.sh runs the parallel compile under memcheck.
pkgs+=(valgrind)
# libprotobuf-c-dev, protobuf-c-compiler, libonnx-dev: the ONNX reader (frontend/onnx: protoc-c
# generates its decoder from the onnx.proto libonnx-dev installs); python3-onnx and
# python3-torchvision: the ONNX tests export torchvision models (tests/onnx).
pkgs+=(libprotobuf-c-dev protobuf-c-compiler libonnx-dev python3-onnx python3-torchvision)
# chromium: tests/tools/report.sh loads `kiln passes --html` reports in a real browser (headless).
pkgs+=(chromium)
# libopenmpi-dev, openmpi-bin: libkiln_mpi (mpi/) and the data-parallel tests under mpirun
# (tests/mpi); python3-mpi4py: Model.set_comm from Python.
pkgs+=(libopenmpi-dev openmpi-bin python3-mpi4py)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
