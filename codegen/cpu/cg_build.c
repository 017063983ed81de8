/* cg_build.c — the one pipeline from a lowered graph to code: the passes for predict (and
 * for train when the model trains), the descriptor, the LLVM module with the fused loops,
 * then the JIT, or the objects (the module's, the weights') and the link of a .so. The C API
 * (api/) and kiln compile / run / train (tools/kiln.c) build through it. */
#include "cg_cpu.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef KILN_HAVE_CUDA
#include "cg_cuda.h"
#endif

void cg_build_free(cg_build *b) {
  cg_llvm_free(b->llvm);
  free(b->gpu_src), free(b->gpu_ptx);
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

/* The GPU program: every op checked, the CUDA C written and compiled by NVRTC, the
 * descriptor made a CUDA model's; the LLVM module then holds only the descriptor and the
 * wrappers (cg_emit_aot). */
static int cg_build_cuda(cg_build *b, const cg_options *o, char *err, size_t n) {
#ifdef KILN_HAVE_CUDA
  if (cg_cuda_check(b->predict, err, n) || (b->train && cg_cuda_check(b->train, err, n)) ||
      cg_cuda_source(b->predict, b->train, &b->gpu_src, err, n) || cg_cuda_ptx(b->gpu_src, o->gpu_arch, &b->gpu_ptx, err, n))
    return 1;
  cg_cuda_retarget(b->desc, b->predict, b->train, b->gpu_ptx);
  return !(b->llvm = cg_llvm_new(b->predict->name, o, err, n));
#else
  (void)b, (void)o;
  return rt_errf(err, n, "this kiln was built without the CUDA target (no CUDA toolkit headers at build time, or KILN_WITH_CUDA=OFF)");
#endif
}

int cg_build_module(cg_build *b, const cg_options *o, char *err, size_t n) {
  if (!(b->desc = cg_desc_build(b->predict, b->train, err, n))) return 1;
  if (!o) return 0;
  if (o->target == RT_TARGET_CUDA) return cg_build_cuda(b, o, err, n);
  if (!(b->llvm = cg_llvm_new(b->predict->name, o, err, n))) return 1;
  return cg_emit_fused_all(b->llvm, b->predict, b->train, err, n);
}

int cg_build_jit(cg_build *b, char *err, size_t n) {
  if (b->desc->target != RT_TARGET_CPU) return rt_errf(err, n, "a CUDA model is not JIT-compiled: compile it with kiln compile --target cuda");
  return cg_optimize(b->llvm, err, n) || cg_jit(b->llvm, b->desc, err, n);
}

/* ---- objects and the link ---- */

/* An empty temporary file $TMPDIR/kiln-XXXXXX.o (or in /tmp). */
static int cg_build_temp(char *path, size_t size, char *err, size_t n) {
  const char *dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  snprintf(path, size, "%s/kiln-XXXXXX.o", dir);
  int fd = mkstemps(path, 2);
  if (fd < 0) return *path = 0, rt_errf(err, n, "cannot create a temporary object file in %s: %s", dir, strerror(errno));
  close(fd);
  return 0;
}

/* The module's object, and the weights object when the model has initial weights (weights
 * is then "" otherwise), both as temporary files. */
static int cg_build_objects(cg_build *b, char *obj, char *weights, size_t size, char *err, size_t n) {
  *obj = *weights = 0;
  if (cg_build_temp(obj, size, err, n) || cg_write_object(b->llvm, obj, err, n)) return 1;
  if (cg_weights_layout(b->desc, NULL) == 0) return 0;
  return cg_build_temp(weights, size, err, n) || cg_write_weights(b->desc, obj, weights, err, n);
}

static void cg_build_unlink(const char *obj, const char *weights) {
  if (*obj) unlink(obj);
  if (*weights) unlink(weights);
}

int cg_build_link(cg_build *b, const char *so_path, const char *lib_dir, char *err, size_t n) {
  char obj[4096], weights[4096];
  int rc = cg_build_objects(b, obj, weights, sizeof obj, err, n) ||
           cg_link_shared_target(obj, *weights ? weights : NULL, so_path, lib_dir, b->desc->target, err, n);
  cg_build_unlink(obj, weights);
  return rc;
}

int cg_build_object(cg_build *b, const char *path, char *err, size_t n) {
  if (cg_weights_layout(b->desc, NULL) == 0) return cg_write_object(b->llvm, path, err, n);
  char obj[4096], weights[4096];
  int rc = cg_build_objects(b, obj, weights, sizeof obj, err, n) || cg_link_relocatable(obj, weights, path, err, n);
  cg_build_unlink(obj, weights);
  return rc;
}
