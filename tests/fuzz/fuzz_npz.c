/* fuzz_npz.c — libFuzzer harness for kiln train's .npz reader (tools/kiln_data.c: the zip and
 * zip64 directory, stored entries read in place, deflated ones inflated through zlib with
 * their CRC checked, each entry's .npy header, 8-byte values narrowed). The input is written
 * to a file and opened as a bare archive (every array) and as one named entry. An accepted
 * archive's columns must agree on their examples, and its first and last examples must
 * gather: AddressSanitizer checks that every byte read lies in the mapping or the inflated
 * copy. */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_file.h"
#include "kiln_data.h"

/* kiln train's message printer (kiln_train.c): the harness looks only for crashes. */
int kiln_train_error(const char *fmt, ...) {
  (void)fmt;
  return 1;
}

static void fuzz_npz_check(const kiln_data *d) {
  for (int k = 0; k < d->n; k++) {
    const kiln_column *c = &d->col[k];
    if (c->head.shape.rank < 1 || c->head.shape.d[0] != d->rows || c->row_elems < 0) abort();
    if (d->rows == 0 || c->row_elems == 0) continue;
    float *row = malloc((size_t)c->row_elems * 4);
    if (!row) abort();
    long ends[2] = {0, d->rows - 1};
    for (int i = 0; i < 2; i++) kiln_data_gather(c, &ends[i], 1, row);
    free(row);
  }
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  const char *path = fuzz_file_path("kiln-fuzz-npz", "a.npz");
  if (fuzz_write(path, data, size)) abort();   /* the harness's own failure, not the reader's */
  char spec[300];
  for (int named = 0; named < 2; named++) {
    snprintf(spec, sizeof spec, named ? "x=%s" : "%s", path);
    kiln_data d;
    if (kiln_data_open(spec, "--data", &d) == 0) fuzz_npz_check(&d);
    kiln_data_free(&d);
  }
  return 0;
}
