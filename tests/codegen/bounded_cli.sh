#!/usr/bin/env bash
# bounded_cli.sh KILN SRC_ROOT — bounded dims through the command line and a generated .so:
# kiln compile -D batch=1..8 writes a header whose entry points take the batch after the
# model; a program built against it runs predict and train_step at batch 3 and is refused at
# 0, -1 and 9 with a message and its weights unchanged; kiln run reads the batch from the
# .npy inputs and gives the bits of a .so compiled for batch 3; kiln train runs the last
# short batch; and the CUDA target refuses bounded dims with a message.
set -u
kiln=$1 root=$2
. "$(dirname "$0")/../support/tally.sh"   # $tmp, ok, bad

mkdir -p "$tmp/b" "$tmp/f"
"$kiln" compile "$root/examples/mlp.kiln" -D batch=1..8 -o "$tmp/b/libmlp.so" >/dev/null 2>"$tmp/err" && ok || bad "compile -D batch=1..8: $(cat "$tmp/err")"
"$kiln" compile "$root/examples/mlp.kiln" -D batch=3 -o "$tmp/f/libmlp.so" >/dev/null 2>"$tmp/err" && ok || bad "compile -D batch=3: $(cat "$tmp/err")"
grep -q 'int mlp_predict(mlp \*m, int64_t batch, const float \*image, float \*prob);' "$tmp/b/mlp.h" && ok ||
  bad "the header's predict does not take the batch: $(grep _predict "$tmp/b/mlp.h")"
grep -q 'int mlp_train_step(mlp \*m, int64_t batch, ' "$tmp/b/mlp.h" && ok || bad "the header's train_step does not take the batch"
grep -q 'mlp_IMAGE_SIZE = 6272' "$tmp/b/mlp.h" && ok || bad "the SIZE constants are not the bound's (8 x 784)"

# A program against the header; it also writes the .npy input kiln run reads below.
san=""
readelf -d "$tmp/b/libmlp.so" | grep -q 'libasan' && san="-fsanitize=address,undefined"
cat >"$tmp/drive.c" <<'C'
#include <stdio.h>
#include <string.h>
#include "mlp.h"
static float x[8 * 784], prob[8 * 10];
static int32_t y[8];
int main(int argc, char **argv) {
  if (argc != 4) return 2;
  for (int i = 0; i < 8 * 784; i++) x[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
  for (int i = 0; i < 8; i++) y[i] = i % 10;
  FILE *f = fopen(argv[1], "wb");   /* x's first 3 rows as a .npy for kiln run */
  char h[118];
  int n = snprintf(h, sizeof h, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 784), }");
  memset(h + n, ' ', sizeof h - n - 1), h[sizeof h - 1] = '\n';
  fwrite("\x93NUMPY\x01\x00\x76\x00", 1, 10, f), fwrite(h, 1, sizeof h, f), fwrite(x, 4, 3 * 784, f), fclose(f);
  mlp *m = mlp_create(1);
  float loss = 0;
  if (!m || mlp_predict(m, 3, x, prob) || mlp_train_step(m, 3, x, y, &loss)) return printf("FAIL: batch 3: %s\n", mlp_error(m)), 1;
  if (mlp_save(m, argv[2])) return printf("FAIL: save: %s\n", mlp_error(m)), 1;
  const long bad[] = {0, -1, 9};
  for (int i = 0; i < 3; i++) {
    if (!mlp_predict(m, bad[i], x, prob) || !strstr(mlp_error(m), "outside its bounds"))
      return printf("FAIL: predict at batch %ld: %s\n", bad[i], mlp_error(m)), 1;
    if (!mlp_train_step(m, bad[i], x, y, &loss)) return printf("FAIL: train_step at batch %ld ran\n", bad[i]), 1;
  }
  if (mlp_save(m, argv[3])) return printf("FAIL: save: %s\n", mlp_error(m)), 1;
  mlp_destroy(m);
  return 0;
}
C
if cc $san -std=c99 -O2 -Wall -Wextra -Werror -I"$tmp/b" "$tmp/drive.c" -o "$tmp/drive" -L"$tmp/b" -lmlp -Wl,-rpath,"$tmp/b" 2>"$tmp/err"; then
  ok
  if "$tmp/drive" "$tmp/x.npy" "$tmp/w1.safetensors" "$tmp/w2.safetensors" >"$tmp/out" 2>&1; then ok; else bad "$(cat "$tmp/out")"; fi
  cmp -s "$tmp/w1.safetensors" "$tmp/w2.safetensors" && ok || bad "a refused extent changed the weights"
else
  bad "the driver does not build against the header: $(cat "$tmp/err")"
fi

# kiln run: the batch from the input's shape, the fixed .so's bits.
if [ -f "$tmp/x.npy" ]; then
  "$kiln" run "$tmp/b/libmlp.so" --input image="$tmp/x.npy" --output prob="$tmp/pb.npy" 2>"$tmp/err" >/dev/null && ok || bad "kiln run bounded: $(cat "$tmp/err")"
  "$kiln" run "$tmp/f/libmlp.so" --input image="$tmp/x.npy" --output prob="$tmp/pf.npy" 2>"$tmp/err" >/dev/null && ok || bad "kiln run fixed: $(cat "$tmp/err")"
  cmp -s "$tmp/pb.npy" "$tmp/pf.npy" && ok || bad "kiln run: the bounded .so at batch 3 differs from the batch-3 .so"
fi
"$kiln" run "$root/examples/mlp.kiln" -D batch=4..8 --input image="$tmp/x.npy" 2>"$tmp/err" >/dev/null && bad "kiln run took 3 rows below the bound 4..8" ||
  { grep -q "with batch = 4..8" "$tmp/err" && ok || bad "kiln run's message for a batch below the bound: $(cat "$tmp/err")"; }

# kiln train: 1000 images in batches of 64 leave 40, which a bounded batch trains too.
data=/usr/share/datasets/fashion-mnist
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
  "$kiln" train "$root/examples/mlp.kiln" -D batch=1..64 --data "$data" --limit 1000 >"$tmp/out" 2>&1 && ok || bad "kiln train: $(tail -3 "$tmp/out")"
  grep -q '1000/1000' "$tmp/out" && ok || bad "kiln train did not train the last short batch: $(tail -2 "$tmp/out")"
else
  echo "note: $data is not installed: the kiln train part is skipped"
fi

# The CUDA target's kernels read the run's extents (the CUDA C alone, so no NVRTC or GPU is
# needed; tests/cuda/emulate.sh runs bounded CUDA models against the CPU and fixed sizes).
if "$kiln" compile "$root/examples/mlp.kiln" -D batch=1..8 --target cuda --emit cu -o "$tmp/m.cu" 2>"$tmp/err"; then
  grep -q 'const long long \*kx' "$tmp/m.cu" && grep -q 'kx\[0\]' "$tmp/m.cu" && ok || bad "the CUDA C of a bounded model does not read the extents"
elif grep -q "without the CUDA target" "$tmp/err"; then
  echo "note: this kiln was built without the CUDA target: its part is skipped"
else
  bad "the CUDA target refused bounded dims: $(cat "$tmp/err")"
fi
echo "bounded_cli: $pass passed, $failed failed"
[ "$failed" -eq 0 ]
