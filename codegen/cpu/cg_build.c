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
  cg_probes_free(&b->probes);
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
  return cg_probes_compile(&b->probes, lowered, disabled, d);
}

int cg_probes_compile(cg_probes *pr, const ir_graph *lowered, uint32_t disabled, ir_diag *d) {
  *pr = (cg_probes){0};
  if (!lowered->nbdims) return 0;
  if (!lowered->probes) {
    ir_error(d, (ir_loc){lowered->name, 0, 0}, "model '%s' has bounded dims but no probe graphs (a front end bug)", lowered->name);
    return 1;
  }
  pr->lowered = lowered, pr->n = ir_dims_nprobes(lowered->nbdims);
  for (int p = 0; p < pr->n; p++) {
    const ir_graph *g = lowered->probes[p];
    if (!(pr->predict[p] = cg_build_pass(g, IR_MODE_PREDICT, disabled, d))) return 1;
    if (g->has_train && !(pr->train[p] = cg_build_pass(g, IR_MODE_TRAIN, disabled, d))) return 1;
  }
  return 0;
}

void cg_probes_free(cg_probes *pr) {
  for (int p = 0; p < pr->n; p++) ir_graph_free(pr->predict[p]), ir_graph_free(pr->train[p]), cg_desc_free(pr->desc[p]);
  *pr = (cg_probes){0};
}

/* The GPU program: every op checked, the CUDA C written and compiled by NVRTC, the op
 * library's PTX found (cg_cuda_lib_ptx), the descriptor made a CUDA model's; the LLVM module
 * then holds only the descriptor and the wrappers (cg_emit_aot). With gpu_source_only the
 * CUDA C is the product: NVRTC, the slowest step, is not run. */
static int cg_build_cuda(cg_build *b, const cg_options *o, char *err, size_t n) {
#ifdef KILN_HAVE_CUDA
  if (cg_cuda_check(b->predict, err, n) || (b->train && cg_cuda_check(b->train, err, n)) ||
      cg_cuda_source(b->predict, b->train, &b->probes, &b->gpu_src, err, n))
    return 1;
  if (o->gpu_source_only) return 0;
  const char *lib_ptx;
  if (cg_cuda_ptx(b->gpu_src, o->gpu_arch, &b->gpu_ptx, err, n) || cg_cuda_lib_ptx(o->gpu_arch, &lib_ptx, err, n)) return 1;
  cg_cuda_retarget(b->desc, b->predict, b->train, b->gpu_ptx, lib_ptx);
  return !(b->llvm = cg_llvm_new(b->predict->name, o, err, n));
#else
  (void)b, (void)o;
  return rt_errf(err, n, "this kiln was built without the CUDA target (no CUDA toolkit headers at build time, or KILN_WITH_CUDA=OFF)");
#endif
}

int cg_build_module(cg_build *b, const cg_options *o, char *err, size_t n) {
  if (!(b->desc = cg_desc_build(b->predict, b->train, err, n))) return 1;
  if (b->probes.n && cg_desc_dims(b->desc, &b->probes, err, n)) return 1;
  if (!o) return 0;
  if (o->target == RT_TARGET_CUDA) return cg_build_cuda(b, o, err, n);
  if (!(b->llvm = cg_llvm_new(b->predict->name, o, err, n))) return 1;
  b->llvm->probes = b->probes.n ? &b->probes : NULL;
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

/* The module's objects (cg_parts_count of them: several threads write a large graph's
 * code) and the weights object when the model has initial weights (weights is then "",
 * otherwise), all as temporary files; objs[] ends with NULL. The weights object copies the
 * first object's ELF header. */
typedef struct { char path[CG_MAX_JOBS][4096]; const char *list[CG_MAX_JOBS + 1]; int n; } cg_objs;

static int cg_build_objects(cg_build *b, cg_objs *o, char *weights, size_t size, char *err, size_t n) {
  *weights = 0;
  o->n = 0;
  int parts = b->desc->target == RT_TARGET_CPU ? cg_parts_count(b->llvm) : 1;
  for (int k = 0; k < parts; k++, o->n++) {
    o->list[k] = o->path[k], o->list[k + 1] = NULL;
    if (cg_build_temp(o->path[k], sizeof o->path[k], err, n)) return 1;
  }
  if (cg_write_objects(b->llvm, o->list, parts, err, n)) return 1;
  if (cg_weights_layout(b->desc, NULL) == 0) return 0;
  return cg_build_temp(weights, size, err, n) || cg_write_weights(b->desc, o->path[0], weights, err, n);
}

static void cg_build_unlink(const cg_objs *o, const char *weights) {
  for (int k = 0; k < o->n; k++)
    if (*o->path[k]) unlink(o->path[k]);
  if (*weights) unlink(weights);
}

int cg_build_link(cg_build *b, const char *so_path, const char *lib_dir, char *err, size_t n) {
  cg_objs *o = calloc(1, sizeof *o);
  char weights[4096];
  if (!o) return rt_errf(err, n, "out of memory");
  int rc = cg_build_objects(b, o, weights, sizeof weights, err, n) ||
           cg_link_shared_parts(o->list, *weights ? weights : NULL, so_path, lib_dir, b->desc->target, err, n);
  cg_build_unlink(o, weights);
  free(o);
  return rc;
}

/* --emit obj: one object, by one thread (parts would leave their shared symbols global in
 * the merged object, where two models' objects could clash). */
int cg_build_object(cg_build *b, const char *path, char *err, size_t n) {
  if (cg_weights_layout(b->desc, NULL) == 0) return cg_write_object(b->llvm, path, err, n);
  char obj[4096], weights[4096] = "";
  int rc = cg_build_temp(obj, sizeof obj, err, n) || cg_write_object(b->llvm, obj, err, n) ||
           cg_build_temp(weights, sizeof weights, err, n) || cg_write_weights(b->desc, obj, weights, err, n) ||
           cg_link_relocatable(obj, weights, path, err, n);
  if (*obj) unlink(obj);
  if (*weights) unlink(weights);
  return rc;
}
