/* fuzz_onnx.c — libFuzzer harness for the ONNX front end: each input is written as a model
 * file in a private folder (the importer reads paths, and external data must stay beside the
 * model) and imported as `kiln import` does (names made valid for .kiln text); a model that
 * imports is printed and must read back. A crash, a sanitizer report, or printed text that
 * does not read back is a finding. */
#include <stdlib.h>

#include "fuzz_file.h"
#include "fuzz_roundtrip.h"
#include "onnx.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  const char *path = fuzz_file_path("kiln-fuzz-onnx", "model.onnx");
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
