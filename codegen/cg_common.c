/* cg_common.c — what every part of code generation shares: the symbol names of fused
 * loops (the descriptor builder, the AOT emitter and the JIT must agree). Errors are written
 * with the runtime's rt_errf. */
#include "cg.h"

/* The GPU's GEMMs and convolutions are library calls, so the epilogues and the blocked layout
 * are for the CPU kernels only. simplify's head-split matmuls read and write with two batch
 * strides, which cuBLAS's strided-batched call cannot take in one: the transformer's attention
 * products became one call per sequence, 115 us each on the H200 where the transposes and one
 * call cost a fraction of that (bench/README.md, 22:12); its pooling rewrite saves too little
 * on the GPU to keep the pass for it. The GPU's steps run as one call each: no per-sample
 * concat placement (PASS_NO_SPLIT). */
uint32_t cg_target_disabled(int target) {
  return target == RT_TARGET_CUDA ? (1u << PASS_simplify) | (1u << PASS_epilogue) | (1u << PASS_layout) | PASS_NO_SPLIT : 0;
}

void cg_fused_name(char *buf, size_t n, bool train, int step) {
  rt_fused_name(buf, n, train, step);
}
