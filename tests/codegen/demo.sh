#!/usr/bin/env bash
# demo.sh KILN SRC_ROOT — keeps the README's first command true: compiles examples/lenet.kiln
# with `kiln compile`, builds examples/demo/train_fashion_mnist.c against the generated
# header, and loads/unloads a generated .so with dlopen/dlclose while the runtime's engine is
# running (its workers must stop before the code is unmapped). With the Fashion-MNIST data
# installed it also runs the demo for zero epochs (evaluate, then save); without it, it says
# that part is skipped.
set -u
kiln=$1 root=$2
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$kiln" compile "$root/examples/lenet.kiln" -o "$tmp/liblenet.so" 2>"$tmp/err" || fail "kiln compile: $(cat "$tmp/err")"
# A sanitizer build of kiln links generated objects with the sanitizers: so must their callers.
san=""
readelf -d "$tmp/liblenet.so" | grep -q 'libasan' && san="-fsanitize=address,undefined"
cc $san -std=c99 -O2 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L -I"$tmp" "$root/examples/demo/train_fashion_mnist.c" \
  -o "$tmp/demo" -L"$tmp" -llenet -Wl,-rpath,"$tmp" 2>"$tmp/err" || fail "the demo does not build: $(cat "$tmp/err")"
cat >"$tmp/unload.c" <<'C'
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include "rt_model.h"
/* Threads of this process: after dlclose no engine worker may be left running the
 * unloaded code. */
static int threads(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/task");
  for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}
int main(int argc, char **argv) {
  for (int round = 0; round < 3; round++) {
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) return fprintf(stderr, "%s\n", dlerror()), 1;
    const rt_model_api *api = dlsym(h, "kiln_model");
    if (!api) return fprintf(stderr, "no kiln_model\n"), 1;
    rt_model *m = api->create(api->desc, 1);
    static float x[64 * 784], prob[64 * 10];
    if (!m || api->predict(m, (const void *const[]){x}, (void *const[]){prob})) return fprintf(stderr, "predict failed\n"), 1;
    api->destroy(m);
    if (dlclose(h)) return fprintf(stderr, "dlclose: %s\n", dlerror()), 1;
    if (dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD)) return fprintf(stderr, "the .so stayed loaded\n"), 1;
    if (threads() != 1) return fprintf(stderr, "%d threads left after dlclose\n", threads()), 1;
  }
  (void)argc;
  return 0;
}
C
cc $san -std=c11 -I"$root/runtime" -I"$root/kernels" "$tmp/unload.c" -o "$tmp/unload" -ldl || fail "unload test does not build"
KILN_ENGINE=threaded "$tmp/unload" "$tmp/liblenet.so" || fail "dlopen/predict/dlclose of a generated .so"
if [ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  "$tmp/demo" --epochs 0 --save "$tmp/w.safetensors" >"$tmp/out" 2>&1 || fail "demo --epochs 0: $(cat "$tmp/out")"
  grep -q "test accuracy" "$tmp/out" || fail "the demo printed no accuracy"
  [ -s "$tmp/w.safetensors" ] || fail "the demo saved no weights"
else
  echo "note: dataset-fashion-mnist is not installed; the demo was built but not run"
fi
echo "demo: 1 passed, 0 failed"
