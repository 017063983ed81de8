/* fuzz_onnx.c — libFuzzer harness for the ONNX front end: each input is written as a model
 * file in a private folder (the importer reads paths, and external data must stay beside the
 * model) and imported as `kiln import` does (names made valid for .kiln text); a model that
 * imports is printed and must read back. A crash, a sanitizer report, or printed text that
 * does not read back is a finding. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz_roundtrip.h"
#include "onnx.h"

/* The model's path in this process's own folder, made once. */
static const char *fuzz_model_path(void) {
  static char path[256];
  if (!path[0]) {
    char dir[] = "/tmp/kiln-fuzz-onnx-XXXXXX";
    if (!mkdtemp(dir)) abort();
    snprintf(path, sizeof path, "%s/model.onnx", dir);
  }
  return path;
}

static int fuzz_write(const char *path, const unsigned char *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) return 1;
  size_t put = size ? fwrite(data, 1, size, f) : 0;
  return (fclose(f) != 0) | (put != size);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  const char *path = fuzz_model_path();
  if (fuzz_write(path, data, size)) abort();   /* the harness's own failure, not the reader's */
  ir_diag d;
  ir_diag_init(&d, fuzz_sink());
  onnx_options o = {0};
  ir_graph *g = onnx_import(path, &o, &d, NULL);
  if (g) fuzz_roundtrip(g);
  ir_graph_free(g);
  ir_diag_free(&d);
  return 0;
}
