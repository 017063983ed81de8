/* cg_common.c — what every part of code generation shares: the symbol names of fused
 * loops (the descriptor builder, the AOT emitter and the JIT must agree) and error text. */
#include "cg.h"

#include <stdarg.h>

int cg_fail(char *err, size_t n, const char *fmt, ...) {
  if (err && n) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
  }
  return 1;
}

void cg_fused_name(char *buf, size_t n, bool train, int step) {
  snprintf(buf, n, "kiln_fused_%c%d", train ? 't' : 'p', step);
}
