/* fuzz_roundtrip.h — what the front-end harnesses share: a diagnostics sink and the
 * printer's contract (a lowered graph printed as .kiln text reads back without an error).
 * Static functions: each harness is its own program. */
#ifndef KILN_FUZZ_ROUNDTRIP_H
#define KILN_FUZZ_ROUNDTRIP_H

#include <stdio.h>
#include <stdlib.h>

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

#endif
