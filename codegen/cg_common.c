/* cg_common.c — what every part of code generation shares: the symbol names of fused
 * loops (the descriptor builder, the AOT emitter and the JIT must agree). Errors are written
 * with the runtime's rt_errf. */
#include "cg.h"

uint32_t cg_target_disabled(int target) {
  return target == RT_TARGET_CUDA ? (1u << PASS_epilogue) | (1u << PASS_layout) : 0;
}

void cg_fused_name(char *buf, size_t n, bool train, int step) {
  rt_fused_name(buf, n, train, step);
}
