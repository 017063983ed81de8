/* fuzz_frontend.c — libFuzzer harness for the .kiln front end: parse, check, lower (shapes
 * inferred), print each model that lowers and read the printed text back. A crash, a
 * sanitizer report, or printed text that does not read back is a finding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_roundtrip.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  ir_diag d;
  ir_diag_init(&d, fuzz_sink());
  fe_file *f = fe_parse_text("fuzz.kiln", (const char *)data, size, &d);
  if (f && !d.errors && !fe_check_file(f, NULL, 0, &d))
    for (fe_model *m = f->models; m; m = m->next) {
      ir_graph *g = fe_lower_model(f, m, NULL, 0, &d);
      if (g) fuzz_roundtrip(g);
      ir_graph_free(g);
    }
  fe_file_free(f);
  ir_diag_free(&d);
  return 0;
}
