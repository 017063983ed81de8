/* cg_common.c — what every part of code generation shares: the symbol names of fused
 * loops (the descriptor builder, the AOT emitter and the JIT must agree). Errors are written
 * with the runtime's rt_errf. */
#include "cg.h"

void cg_fused_name(char *buf, size_t n, bool train, int step) {
  snprintf(buf, n, "kiln_fused_%c%d", train ? 't' : 'p', step);
}
