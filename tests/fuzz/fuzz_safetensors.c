/* fuzz_safetensors.c — libFuzzer harness for the safetensors reader (its JSON header parser
 * included). An accepted file must keep every promise rt_st_parse makes: entries in order,
 * back to back, each exactly the size of its dtype and shape, all inside the image. */
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  unsigned char *img = malloc(size ? size : 1);       /* exact size: ASan sees any overread */
  if (!img) return 0;
  memcpy(img, data, size);
  char err[RT_ERR_LEN];
  rt_st_file f;
  if (rt_st_parse(img, size, "fuzz", &f, err, sizeof err) != 0) return 0;   /* img is f's or freed */
  uint64_t at = 0;
  for (int i = 0; i < f.n; i++) {
    const rt_st_entry *e = &f.entries[i];
    size_t bytes;
    if (e->begin != at || nd_shape_bytes(&e->shape, e->dtype, &bytes) || e->end - e->begin != bytes) abort();
    unsigned char sum = 0;             /* every byte read: ASan checks each one */
    for (size_t k = 0; k < bytes; k++) sum ^= ((const unsigned char *)e->data)[k];
    if (sum == 0 && bytes == 1 && f.n < 0) abort();   /* never: keeps the reads */
    at = e->end;
  }
  rt_st_close(&f);
  return 0;
}
