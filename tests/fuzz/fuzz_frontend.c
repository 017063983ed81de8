/* fuzz_frontend.c — libFuzzer harness for the .kiln front end: parse, check, lower (shapes
 * inferred), print each model that lowers and read the printed text back. A crash, a
 * sanitizer report, or printed text that does not read back is a finding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"

/* Diagnostics go nowhere: the harness looks only for crashes and broken contracts. */
static FILE *fuzz_sink(void) {
  static FILE *null;
  if (!null) null = fopen("/dev/null", "w");
  return null;
}

/* Printed text must lower again without an error (the printer's round-trip contract). */
static void fuzz_roundtrip(const ir_graph *g) {
  char *text = NULL;
  size_t len = 0;
  FILE *o = open_memstream(&text, &len);
  if (!o) return;
  ir_print(g, o);
  fclose(o);
  ir_diag d;
  ir_diag_init(&d, fuzz_sink());
  fe_file *f = fe_parse_text("printed.kiln", text, len, &d);
  int bad = !f || d.errors || fe_check_file(f, NULL, 0, &d);
  for (fe_model *m = f && !bad ? f->models : NULL; m; m = m->next) {
    ir_graph *h = fe_lower_model(f, m, NULL, 0, &d);
    bad |= h == NULL;
    ir_graph_free(h);
  }
  if (bad) {
    fprintf(stderr, "printed graph does not read back:\n%s\n", text);
    abort();
  }
  fe_file_free(f);
  ir_diag_free(&d);
  free(text);
}

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
