/* fuzz_npy.c — libFuzzer harness for the .npy reader. An accepted array must hold exactly
 * shape-product × itemsize bytes, all readable, and serialise back to a file that reads as
 * the same array. */
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

static void fuzz_npy_same(const rt_npy *a) {
  void *buf = NULL;
  size_t len = 0;
  char err[RT_ERR_LEN];
  rt_npy b;
  if (rt_npy_serialize(a->dtype, &a->shape, a->data, &buf, &len, err, sizeof err)) abort();
  if (rt_npy_parse(buf, len, "again", &b, err, sizeof err)) abort();
  if (b.dtype != a->dtype || b.nbytes != a->nbytes || b.shape.rank != a->shape.rank ||
      memcmp(b.shape.d, a->shape.d, sizeof(int64_t) * (size_t)a->shape.rank) || memcmp(b.data, a->data, a->nbytes))
    abort();
  rt_npy_free(&b);
  free(buf);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  unsigned char *img = malloc(size ? size : 1);
  if (!img) return 0;
  memcpy(img, data, size);
  char err[RT_ERR_LEN];
  rt_npy a;
  if (rt_npy_parse(img, size, "fuzz", &a, err, sizeof err) == 0) {
    size_t bytes;
    if (nd_shape_bytes(&a.shape, a.dtype, &bytes) || bytes != a.nbytes) abort();
    fuzz_npy_same(&a);
    rt_npy_free(&a);
  }
  free(img);
  return 0;
}
