/* cg_build.c — the one pipeline from a lowered graph to code: the passes for predict (and
 * for train when the model trains), the descriptor, the LLVM module with the fused loops,
 * then the JIT. The C API (api/) and kiln compile / run / train (tools/kiln.c) build through
 * it. */
#include "cg_cpu.h"

void cg_build_free(cg_build *b) {
  cg_llvm_free(b->llvm);
  cg_desc_free(b->desc);
  ir_graph_free(b->predict);
  ir_graph_free(b->train);
  *b = (cg_build){0};
}

static ir_graph *cg_build_pass(const ir_graph *lowered, ir_mode mode, uint32_t disabled, ir_diag *d) {
  pass_ctx cx;
  pass_ctx_init(&cx, mode, d);
  cx.disabled = disabled;
  ir_graph *g = pass_compile(lowered, &cx);
  pass_ctx_free(&cx);
  return g;
}

int cg_build_graphs(const ir_graph *lowered, uint32_t disabled, ir_diag *d, cg_build *b) {
  *b = (cg_build){0};
  if (!(b->predict = cg_build_pass(lowered, IR_MODE_PREDICT, disabled, d))) return 1;
  if (lowered->has_train && !(b->train = cg_build_pass(lowered, IR_MODE_TRAIN, disabled, d))) return 1;
  return 0;
}

int cg_build_module(cg_build *b, const cg_options *o, char *err, size_t n) {
  if (!(b->desc = cg_desc_build(b->predict, b->train, err, n))) return 1;
  if (!o) return 0;
  if (!(b->llvm = cg_llvm_new(b->predict->name, o, err, n))) return 1;
  return cg_emit_fused_all(b->llvm, b->predict, b->train, err, n);
}

int cg_build_jit(cg_build *b, char *err, size_t n) {
  return cg_optimize(b->llvm, err, n) || cg_jit(b->llvm, b->desc, err, n);
}
