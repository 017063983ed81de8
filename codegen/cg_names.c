/* cg_names.c — symbol names shared by the descriptor builder, the AOT emitter and the JIT. */
#include "cg.h"

void cg_fused_name(char *buf, size_t n, bool train, int step) {
  snprintf(buf, n, "kiln_fused_%c%d", train ? 't' : 'p', step);
}
