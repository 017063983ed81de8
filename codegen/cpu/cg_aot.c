/* cg_aot.c — the AOT half of the CPU back end: the model descriptor as LLVM constants (kernels
 * referenced by symbol, so the linker pulls exactly those from the archive; initial weights
 * by the weights object's symbol, cg_weights.c), the NAME_* wrappers of SPEC section 3 and
 * the exported name-free `kiln_model` (rt_model_api).
 *
 * Every struct the runtime reads is built field by field from a table that records the C
 * offset of each field; the LLVM layout under the target's data layout is checked against
 * those offsets and sizes before anything is emitted, so a drift between rt_model.h and this
 * file is an internal error at compile time, not a corrupt descriptor at run time. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cg_cpu.h"
#include "k_epilogue.h"

_Static_assert(sizeof(k_req) == 4, "k_req is emitted as i32");

typedef enum { CG_F_I32, CG_F_I64, CG_F_F32, CG_F_PTR, CG_F_DIMS, CG_F_SHAPE, CG_F_PROGRAM, CG_F_SGD, CG_F_ADAM, CG_F_DIMVAL,
               CG_F_SCHED } cg_fkind;
typedef struct {
  cg_fkind kind;
  size_t offset;
  const char *name;
} cg_field;

#define CG_FIELD(k, T, f) {k, offsetof(T, f), #f}
static const cg_field cg_shape_fields[] = {CG_FIELD(CG_F_I32, k_shape, rank), CG_FIELD(CG_F_DIMS, k_shape, d)};
static const cg_field cg_tensor_fields[] = {
  CG_FIELD(CG_F_PTR, rt_tensor_info, name), CG_FIELD(CG_F_I32, rt_tensor_info, role),
  CG_FIELD(CG_F_I32, rt_tensor_info, dtype), CG_FIELD(CG_F_SHAPE, rt_tensor_info, shape),
  CG_FIELD(CG_F_I32, rt_tensor_info, init), CG_FIELD(CG_F_F32, rt_tensor_info, init_a),
  CG_FIELD(CG_F_F32, rt_tensor_info, init_b), CG_FIELD(CG_F_PTR, rt_tensor_info, data),
  CG_FIELD(CG_F_I32, rt_tensor_info, ctr)};
static const cg_field cg_step_fields[] = {
  CG_FIELD(CG_F_I32, rt_step, kind), CG_FIELD(CG_F_I32, rt_step, op), CG_FIELD(CG_F_PTR, rt_step, kernel),
  CG_FIELD(CG_F_PTR, rt_step, fused), CG_FIELD(CG_F_PTR, rt_step, param), CG_FIELD(CG_F_I32, rt_step, param_bytes),
  CG_FIELD(CG_F_I32, rt_step, nin),
  CG_FIELD(CG_F_I32, rt_step, nout), CG_FIELD(CG_F_PTR, rt_step, in), CG_FIELD(CG_F_PTR, rt_step, out),
  CG_FIELD(CG_F_PTR, rt_step, in_shape), CG_FIELD(CG_F_PTR, rt_step, out_shape), CG_FIELD(CG_F_PTR, rt_step, req),
  CG_FIELD(CG_F_I64, rt_step, temp_offset), CG_FIELD(CG_F_I64, rt_step, temp_bytes),
  CG_FIELD(CG_F_I32, rt_step, random), CG_FIELD(CG_F_I32, rt_step, name_hash),
  CG_FIELD(CG_F_PTR, rt_step, name), CG_FIELD(CG_F_I32, rt_step, ndeps), CG_FIELD(CG_F_PTR, rt_step, deps),
  CG_FIELD(CG_F_PTR, rt_step, epi), CG_FIELD(CG_F_I32, rt_step, samples), CG_FIELD(CG_F_PTR, rt_step, sample_stride)};
static const cg_field cg_program_fields[] = {
  CG_FIELD(CG_F_I32, rt_program, nsteps), CG_FIELD(CG_F_PTR, rt_program, steps),
  CG_FIELD(CG_F_I64, rt_program, arena_bytes), CG_FIELD(CG_F_PTR, rt_program, offset),
  CG_FIELD(CG_F_I32, rt_program, ninputs), CG_FIELD(CG_F_PTR, rt_program, inputs),
  CG_FIELD(CG_F_I32, rt_program, noutputs), CG_FIELD(CG_F_PTR, rt_program, outputs),
  CG_FIELD(CG_F_I32, rt_program, is_train), CG_FIELD(CG_F_I32, rt_program, npatches),
  CG_FIELD(CG_F_PTR, rt_program, patches), CG_FIELD(CG_F_I32, rt_program, dims_used)};
static const cg_field cg_dim_fields[] = {CG_FIELD(CG_F_PTR, rt_dim, name), CG_FIELD(CG_F_I64, rt_dim, lo), CG_FIELD(CG_F_I64, rt_dim, hi)};
static const cg_field cg_dimval_fields[] = {CG_FIELD(CG_F_I32, k_dimval, mask), CG_FIELD(CG_F_I64, k_dimval, a), CG_FIELD(CG_F_I64, k_dimval, b)};
static const cg_field cg_patch_fields[] = {
  CG_FIELD(CG_F_I32, rt_dimpatch, kind), CG_FIELD(CG_F_I32, rt_dimpatch, index), CG_FIELD(CG_F_I32, rt_dimpatch, slot),
  CG_FIELD(CG_F_I32, rt_dimpatch, axis), CG_FIELD(CG_F_DIMVAL, rt_dimpatch, v)};
static const cg_field cg_sgd_fields[] = {CG_FIELD(CG_F_F32, k_sgd_param, momentum), CG_FIELD(CG_F_F32, k_sgd_param, wd),
                                         CG_FIELD(CG_F_I32, k_sgd_param, nesterov)};
_Static_assert(sizeof(k_ints) == sizeof(k_shape) && offsetof(k_ints, v) == offsetof(k_shape, d), "k_ints is emitted as k_shape");
static const cg_field cg_sched_fields[] = {
  CG_FIELD(CG_F_I32, k_schedule, kind), CG_FIELD(CG_F_I64, k_schedule, step_size),
  CG_FIELD(CG_F_SHAPE, k_schedule, milestones), CG_FIELD(CG_F_I64, k_schedule, total),
  CG_FIELD(CG_F_I64, k_schedule, warmup), CG_FIELD(CG_F_F32, k_schedule, gamma), CG_FIELD(CG_F_F32, k_schedule, min_lr),
  CG_FIELD(CG_F_F32, k_schedule, pct_start), CG_FIELD(CG_F_F32, k_schedule, div_factor),
  CG_FIELD(CG_F_F32, k_schedule, final_div_factor)};
static const cg_field cg_adam_fields[] = {
  CG_FIELD(CG_F_F32, k_adam_param, beta1), CG_FIELD(CG_F_F32, k_adam_param, beta2),
  CG_FIELD(CG_F_F32, k_adam_param, eps), CG_FIELD(CG_F_F32, k_adam_param, wd)};
static const cg_field cg_desc_fields[] = {
  CG_FIELD(CG_F_PTR, rt_model_desc, abi), CG_FIELD(CG_F_PTR, rt_model_desc, name),
  CG_FIELD(CG_F_I32, rt_model_desc, ntensors), CG_FIELD(CG_F_PTR, rt_model_desc, tensors),
  CG_FIELD(CG_F_PROGRAM, rt_model_desc, predict), CG_FIELD(CG_F_I32, rt_model_desc, has_train),
  CG_FIELD(CG_F_PROGRAM, rt_model_desc, train), CG_FIELD(CG_F_I32, rt_model_desc, optim),
  CG_FIELD(CG_F_F32, rt_model_desc, lr), CG_FIELD(CG_F_SGD, rt_model_desc, sgd),
  CG_FIELD(CG_F_ADAM, rt_model_desc, adam), CG_FIELD(CG_F_SCHED, rt_model_desc, sched),
  CG_FIELD(CG_F_F32, rt_model_desc, clip_norm),
  CG_FIELD(CG_F_I32, rt_model_desc, target),
  CG_FIELD(CG_F_PTR, rt_model_desc, gpu_module), CG_FIELD(CG_F_PTR, rt_model_desc, gpu_lib_module), CG_FIELD(CG_F_I32, rt_model_desc, ndims),
  CG_FIELD(CG_F_PTR, rt_model_desc, dims), CG_FIELD(CG_F_I32, rt_model_desc, ntensor_patches),
  CG_FIELD(CG_F_PTR, rt_model_desc, tensor_patches)};
static const cg_field cg_api_fields[] = {
  CG_FIELD(CG_F_PTR, rt_model_api, abi), CG_FIELD(CG_F_PTR, rt_model_api, desc),
  CG_FIELD(CG_F_PTR, rt_model_api, create), CG_FIELD(CG_F_PTR, rt_model_api, destroy),
  CG_FIELD(CG_F_PTR, rt_model_api, load), CG_FIELD(CG_F_PTR, rt_model_api, save),
  CG_FIELD(CG_F_PTR, rt_model_api, predict), CG_FIELD(CG_F_PTR, rt_model_api, train_step),
  CG_FIELD(CG_F_PTR, rt_model_api, set_lr), CG_FIELD(CG_F_PTR, rt_model_api, error),
  CG_FIELD(CG_F_PTR, rt_model_api, predict_device), CG_FIELD(CG_F_PTR, rt_model_api, train_step_device),
  CG_FIELD(CG_F_PTR, rt_model_api, predict_at), CG_FIELD(CG_F_PTR, rt_model_api, train_step_at),
  CG_FIELD(CG_F_PTR, rt_model_api, lr), CG_FIELD(CG_F_PTR, rt_model_api, save_state),
  CG_FIELD(CG_F_PTR, rt_model_api, load_state), CG_FIELD(CG_F_PTR, rt_model_api, set_comm)};
#define CG_N(a) (int)(sizeof a / sizeof *a)

/* The emitter's state: m's handles, the types, the descriptor global. */
typedef struct {
  cg_llvm *m;
  const rt_model_desc *d;
  LLVMTypeRef i8, i32, i64, f32, ptr, vd;
  LLVMTypeRef shape, tensor, step, program, sgd, adam, sched, desc, api, dim, dimval, patch;
  LLVMValueRef desc_ptr;        /* the descriptor global as i8* */
  LLVMValueRef weights;         /* CG_WEIGHTS_SYMBOL, declared when a tensor has data */
  int64_t *woff;                /* cg_weights_layout's offsets, one per tensor */
  int nglobals;
  char *err;
  size_t n;
} cg_aot;

/* ---- types ---- */

static LLVMTypeRef cg_field_type(cg_aot *a, cg_fkind k) {
  switch (k) {
  case CG_F_I32: return a->i32;
  case CG_F_I64: return a->i64;
  case CG_F_F32: return a->f32;
  case CG_F_PTR: return a->ptr;
  case CG_F_DIMS: return LLVMArrayType(a->i64, K_MAX_RANK);
  case CG_F_SHAPE: return a->shape;
  case CG_F_PROGRAM: return a->program;
  case CG_F_SGD: return a->sgd;
  case CG_F_ADAM: return a->adam;
  case CG_F_SCHED: return a->sched;
  case CG_F_DIMVAL: return a->dimval;
  }
  return NULL;
}

/* A literal struct of the fields, checked against the C layout. */
static int cg_struct(cg_aot *a, const char *cname, const cg_field *f, int nf, size_t csize, LLVMTypeRef *out) {
  LLVMTypeRef el[32];
  for (int i = 0; i < nf; i++) el[i] = cg_field_type(a, f[i].kind);
  LLVMTypeRef t = LLVMStructTypeInContext(a->m->ctx, el, (unsigned)nf, 0);
  for (int i = 0; i < nf; i++) {
    unsigned long long off = LLVMOffsetOfElement(a->m->td, t, (unsigned)i);
    if (off != f[i].offset)
      return rt_errf(a->err, a->n, "internal error: %s.%s at LLVM offset %llu, C offset %zu (please report)",
                     cname, f[i].name, off, f[i].offset);
  }
  if (LLVMABISizeOfType(a->m->td, t) != csize)
    return rt_errf(a->err, a->n, "internal error: sizeof %s is %llu in LLVM, %zu in C (please report)", cname,
                   LLVMABISizeOfType(a->m->td, t), csize);
  *out = t;
  return 0;
}

static int cg_types(cg_aot *a) {
  LLVMContextRef c = a->m->ctx;
  a->i8 = LLVMInt8TypeInContext(c), a->i32 = LLVMInt32TypeInContext(c), a->i64 = LLVMInt64TypeInContext(c);
  a->f32 = LLVMFloatTypeInContext(c), a->ptr = LLVMPointerType(a->i8, 0), a->vd = LLVMVoidTypeInContext(c);
  return cg_struct(a, "k_shape", cg_shape_fields, CG_N(cg_shape_fields), sizeof(k_shape), &a->shape) ||
         cg_struct(a, "rt_dim", cg_dim_fields, CG_N(cg_dim_fields), sizeof(rt_dim), &a->dim) ||
         cg_struct(a, "k_dimval", cg_dimval_fields, CG_N(cg_dimval_fields), sizeof(k_dimval), &a->dimval) ||
         cg_struct(a, "rt_dimpatch", cg_patch_fields, CG_N(cg_patch_fields), sizeof(rt_dimpatch), &a->patch) ||
         cg_struct(a, "rt_tensor_info", cg_tensor_fields, CG_N(cg_tensor_fields), sizeof(rt_tensor_info), &a->tensor) ||
         cg_struct(a, "rt_step", cg_step_fields, CG_N(cg_step_fields), sizeof(rt_step), &a->step) ||
         cg_struct(a, "rt_program", cg_program_fields, CG_N(cg_program_fields), sizeof(rt_program), &a->program) ||
         cg_struct(a, "k_sgd_param", cg_sgd_fields, CG_N(cg_sgd_fields), sizeof(k_sgd_param), &a->sgd) ||
         cg_struct(a, "k_adam_param", cg_adam_fields, CG_N(cg_adam_fields), sizeof(k_adam_param), &a->adam) ||
         cg_struct(a, "k_schedule", cg_sched_fields, CG_N(cg_sched_fields), sizeof(k_schedule), &a->sched) ||
         cg_struct(a, "rt_model_desc", cg_desc_fields, CG_N(cg_desc_fields), sizeof(rt_model_desc), &a->desc) ||
         cg_struct(a, "rt_model_api", cg_api_fields, CG_N(cg_api_fields), sizeof(rt_model_api), &a->api);
}

/* ---- constants ---- */

static LLVMValueRef cg_i32c(cg_aot *a, int64_t v) { return LLVMConstInt(a->i32, (unsigned long long)v, 1); }
static LLVMValueRef cg_i64c(cg_aot *a, int64_t v) { return LLVMConstInt(a->i64, (unsigned long long)v, 1); }
static LLVMValueRef cg_f32c(cg_aot *a, float v) { return LLVMConstReal(a->f32, v); }
static LLVMValueRef cg_null(cg_aot *a) { return LLVMConstNull(a->ptr); }

static LLVMValueRef cg_struct_val(cg_aot *a, LLVMValueRef *v, int n) {
  return LLVMConstStructInContext(a->m->ctx, v, (unsigned)n, 0);
}

/* A private constant global holding init, as i8*. */
static LLVMValueRef cg_global(cg_aot *a, LLVMValueRef init, const char *tag, unsigned align) {
  char name[64];
  snprintf(name, sizeof name, "kiln.%s.%d", tag, a->nglobals++);
  LLVMValueRef g = LLVMAddGlobal(a->m->mod, LLVMTypeOf(init), name);
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
  if (align) LLVMSetAlignment(g, align);
  return LLVMConstBitCast(g, a->ptr);
}

static LLVMValueRef cg_str(cg_aot *a, const char *s) {
  if (!s) return cg_null(a);
  LLVMValueRef v = LLVMConstStringInContext(a->m->ctx, s, (unsigned)strlen(s), 0);
  return cg_global(a, v, "str", 1);
}

static LLVMValueRef cg_array(cg_aot *a, LLVMTypeRef el, LLVMValueRef *v, int n, const char *tag) {
  return cg_global(a, LLVMConstArray(el, v, (unsigned)n), tag, 0);
}

static LLVMValueRef cg_i32_array(cg_aot *a, const int32_t *v, int n, const char *tag) {
  if (!v || n <= 0) return cg_null(a);
  LLVMValueRef tmp[n];
  for (int i = 0; i < n; i++) tmp[i] = cg_i32c(a, v[i]);
  return cg_array(a, a->i32, tmp, n, tag);
}

static LLVMValueRef cg_i64_array(cg_aot *a, const int64_t *v, int n, const char *tag) {
  if (!v || n <= 0) return cg_null(a);
  LLVMValueRef tmp[n];
  for (int i = 0; i < n; i++) tmp[i] = cg_i64c(a, v[i]);
  return cg_array(a, a->i64, tmp, n, tag);
}

static LLVMValueRef cg_shape_val(cg_aot *a, const k_shape *s) {
  LLVMValueRef d[K_MAX_RANK];
  for (int i = 0; i < K_MAX_RANK; i++) d[i] = cg_i64c(a, s->d[i]);
  LLVMValueRef f[2] = {cg_i32c(a, s->rank), LLVMConstArray(a->i64, d, K_MAX_RANK)};
  return cg_struct_val(a, f, 2);
}

static LLVMValueRef cg_shape_array(cg_aot *a, const k_shape *s, int n) {
  if (!s || n <= 0) return cg_null(a);
  LLVMValueRef tmp[n];
  for (int i = 0; i < n; i++) tmp[i] = cg_shape_val(a, &s[i]);
  return cg_array(a, a->shape, tmp, n, "shape");
}

/* A param struct as bytes, aligned for any field it holds. */
static LLVMValueRef cg_bytes(cg_aot *a, const void *p, size_t n) {
  LLVMValueRef v = LLVMConstStringInContext(a->m->ctx, (const char *)p, (unsigned)n, 1);
  return cg_global(a, v, "param", 16);
}

/* ---- the tensor table ---- */

/* Initial weight values (a model compiled from ONNX): a pointer into the weights object
 * (cg_weights.c), never constants of the module, which cost LLVM a copy and a hash of every
 * byte. The symbol is hidden: the link resolves it inside the .so. */
static LLVMValueRef cg_weights(cg_aot *a, int i) {
  if (!a->d->tensors[i].data) return cg_null(a);
  if (!a->weights) {
    a->weights = LLVMAddGlobal(a->m->mod, LLVMArrayType(a->i8, 0), CG_WEIGHTS_SYMBOL);
    LLVMSetGlobalConstant(a->weights, 1);
    LLVMSetVisibility(a->weights, LLVMHiddenVisibility);
  }
  LLVMValueRef off = cg_i64c(a, a->woff[i]);
  return LLVMConstGEP2(a->i8, LLVMConstBitCast(a->weights, a->ptr), &off, 1);   /* not inbounds: LLVM sees [0 x i8] */
}

static LLVMValueRef cg_tensor_val(cg_aot *a, int i) {
  const rt_tensor_info *t = &a->d->tensors[i];
  LLVMValueRef f[] = {cg_str(a, t->name), cg_i32c(a, t->role), cg_i32c(a, t->dtype), cg_shape_val(a, &t->shape),
                      cg_i32c(a, t->init), cg_f32c(a, t->init_a), cg_f32c(a, t->init_b), cg_weights(a, i), cg_i32c(a, t->ctr)};
  return cg_struct_val(a, f, CG_N(f));
}

static LLVMValueRef cg_tensors(cg_aot *a) {
  int n = a->d->ntensors;
  if (n <= 0) return cg_null(a);
  LLVMValueRef *tmp = malloc(sizeof *tmp * (size_t)n);
  a->woff = malloc(sizeof *a->woff * (size_t)n);
  LLVMValueRef g = NULL;
  if (tmp && a->woff) {
    cg_weights_layout(a->d, a->woff);
    for (int i = 0; i < n; i++) tmp[i] = cg_tensor_val(a, i);
    g = cg_array(a, a->tensor, tmp, n, "tensors");
  }
  free(tmp), free(a->woff);
  a->woff = NULL;
  return g;
}

/* ---- steps ---- */

/* k_<op>_forward / k_<op>_backward, declared for the linker; checked against the pointer
 * the in-memory descriptor holds, so the symbol is the kernel cg_desc_build chose. */
static int cg_step_kernel(cg_aot *a, const rt_step *s, LLVMValueRef *out) {
  *out = cg_null(a);
  if (!s->kernel) return 0;
  bool fwd = s->kind == RT_STEP_FORWARD;
  if ((!fwd && s->kind != RT_STEP_BACKWARD) || s->op < 0 || s->op >= IR_OP_COUNT ||
      s->kernel != (fwd ? ir_ops[s->op].forward : ir_ops[s->op].backward))
    return rt_errf(a->err, a->n, "internal error: step '%s' names a kernel that is not its op's (please report)", s->name);
  char name[128];
  snprintf(name, sizeof name, "k_%s_%s", ir_ops[s->op].name, fwd ? "forward" : "backward");
  LLVMValueRef fn = LLVMGetNamedFunction(a->m->mod, name);
  if (!fn) fn = LLVMAddFunction(a->m->mod, name, LLVMFunctionType(a->i32, &a->ptr, 1, 0));
  *out = LLVMConstBitCast(fn, a->ptr);
  return 0;
}

static int cg_step_fused(cg_aot *a, const rt_step *s, bool train, int i, LLVMValueRef *out) {
  *out = cg_null(a);
  if (s->kind != RT_STEP_FUSED || a->d->target != RT_TARGET_CPU) return 0;   /* CUDA: a kernel of gpu_module */
  char name[64];
  cg_fused_name(name, sizeof name, train, i);
  LLVMValueRef fn = cg_fused_fn(a->m, name);
  if (!fn || (LLVMIsAFunction(fn) && LLVMIsDeclaration(fn)))
    return rt_errf(a->err, a->n, "internal error: fused step %d has no function %s (please report)", i, name);
  *out = LLVMConstBitCast(fn, a->ptr);
  return 0;
}

/* A FUSED step with an op is the CUDA target's kernel generated for one elementwise op
 * (cg_cuda.c: a clip after a convolution), which keeps that op's param. */
static size_t cg_param_size(const rt_step *s) {
  if (s->kind == RT_STEP_UPDATE) return k_optim_param_size(s->op);
  if ((s->kind == RT_STEP_FORWARD || s->kind == RT_STEP_BACKWARD || s->kind == RT_STEP_FUSED) && s->op >= 0 &&
      s->op < IR_OP_COUNT)
    return ir_ops[s->op].param_size;
  return 0;
}

static int cg_step_param(cg_aot *a, const rt_step *s, LLVMValueRef *out) {
  *out = cg_null(a);
  if (!s->param) return 0;
  size_t n = cg_param_size(s);
  if (n == 0) return rt_errf(a->err, a->n, "internal error: step '%s' has a param of unknown size (please report)", s->name);
  *out = cg_bytes(a, s->param, n);
  return 0;
}

static int cg_step_val(cg_aot *a, const rt_step *s, bool train, int i, LLVMValueRef *out) {
  LLVMValueRef kernel, fused, param;
  if (cg_step_kernel(a, s, &kernel) || cg_step_fused(a, s, train, i, &fused) || cg_step_param(a, s, &param)) return 1;
  LLVMValueRef epi = s->epi ? cg_bytes(a, s->epi, sizeof *s->epi) : cg_null(a);
  LLVMValueRef f[] = {cg_i32c(a, s->kind), cg_i32c(a, s->op), kernel, fused, param, cg_i32c(a, s->param_bytes), cg_i32c(a, s->nin),
                      cg_i32c(a, s->nout), cg_i32_array(a, s->in, s->nin, "in"), cg_i32_array(a, s->out, s->nout, "out"),
                      cg_shape_array(a, s->in_shape, s->nin), cg_shape_array(a, s->out_shape, s->nout),
                      cg_i32_array(a, (const int32_t *)s->req, s->nout, "req"),
                      cg_i64c(a, s->temp_offset), cg_i64c(a, s->temp_bytes), cg_i32c(a, s->random),
                      cg_i32c(a, (int32_t)s->name_hash), cg_str(a, s->name), cg_i32c(a, s->ndeps),
                      cg_i32_array(a, s->deps, s->ndeps, "deps"), epi, cg_i32c(a, s->samples),
                      cg_i64_array(a, s->sample_stride, s->sample_stride ? s->nin + s->nout : 0, "sample_stride")};
  *out = cg_struct_val(a, f, CG_N(f));
  return 0;
}

/* ---- bounded dims ---- */

static LLVMValueRef cg_patches(cg_aot *a, const rt_dimpatch *x, int n) {
  if (!x || n <= 0) return cg_null(a);
  LLVMValueRef *tmp = malloc(sizeof *tmp * (size_t)n);
  if (!tmp) return NULL;
  for (int i = 0; i < n; i++) {
    LLVMValueRef v[] = {cg_i32c(a, x[i].v.mask), cg_i64c(a, x[i].v.a), cg_i64c(a, x[i].v.b)};
    LLVMValueRef f[] = {cg_i32c(a, x[i].kind), cg_i32c(a, x[i].index), cg_i32c(a, x[i].slot), cg_i32c(a, x[i].axis),
                        cg_struct_val(a, v, 3)};
    tmp[i] = cg_struct_val(a, f, CG_N(f));
  }
  LLVMValueRef g = cg_array(a, a->patch, tmp, n, "patches");
  free(tmp);
  return g;
}

static LLVMValueRef cg_dims(cg_aot *a) {
  const rt_model_desc *d = a->d;
  if (d->ndims <= 0) return cg_null(a);
  LLVMValueRef tmp[K_MAX_BDIMS];
  for (int k = 0; k < d->ndims && k < K_MAX_BDIMS; k++) {
    LLVMValueRef f[] = {cg_str(a, d->dims[k].name), cg_i64c(a, d->dims[k].lo), cg_i64c(a, d->dims[k].hi)};
    tmp[k] = cg_struct_val(a, f, 3);
  }
  return cg_array(a, a->dim, tmp, d->ndims, "dims");
}

static int cg_program_val(cg_aot *a, const rt_program *p, bool train, LLVMValueRef *out) {
  LLVMValueRef steps = cg_null(a);
  if (p->nsteps > 0) {
    LLVMValueRef *tmp = malloc(sizeof *tmp * (size_t)p->nsteps);
    if (!tmp) return rt_errf(a->err, a->n, "out of memory");
    for (int i = 0; i < p->nsteps; i++)
      if (cg_step_val(a, &p->steps[i], train, i, &tmp[i])) return free(tmp), 1;
    steps = cg_array(a, a->step, tmp, p->nsteps, train ? "tsteps" : "psteps");
    free(tmp);
  }
  int nt = p->offset ? a->d->ntensors : 0;
  LLVMValueRef f[] = {cg_i32c(a, p->nsteps), steps, cg_i64c(a, p->arena_bytes), cg_i64_array(a, p->offset, nt, "offset"),
                      cg_i32c(a, p->ninputs), cg_i32_array(a, p->inputs, p->ninputs, "inputs"),
                      cg_i32c(a, p->noutputs), cg_i32_array(a, p->outputs, p->noutputs, "outputs"),
                      cg_i32c(a, p->is_train), cg_i32c(a, p->npatches), cg_patches(a, p->patches, p->npatches),
                      cg_i32c(a, (int32_t)p->dims_used)};
  if (!f[10]) return rt_errf(a->err, a->n, "out of memory");
  *out = cg_struct_val(a, f, CG_N(f));
  return 0;
}

static int cg_descriptor(cg_aot *a) {
  const rt_model_desc *d = a->d;
  LLVMValueRef predict, train, tensors = cg_tensors(a);
  if (!tensors) return rt_errf(a->err, a->n, "out of memory");
  if (cg_program_val(a, &d->predict, false, &predict) || cg_program_val(a, &d->train, true, &train)) return 1;
  LLVMValueRef sgd[] = {cg_f32c(a, d->sgd.momentum), cg_f32c(a, d->sgd.wd), cg_i32c(a, d->sgd.nesterov)};
  LLVMValueRef adam[] = {cg_f32c(a, d->adam.beta1), cg_f32c(a, d->adam.beta2), cg_f32c(a, d->adam.eps), cg_f32c(a, d->adam.wd)};
  const k_schedule *s = &d->sched;
  k_shape milestones = {.rank = s->milestones.n};
  memcpy(milestones.d, s->milestones.v, sizeof milestones.d);
  LLVMValueRef sched[] = {cg_i32c(a, s->kind), cg_i64c(a, s->step_size), cg_shape_val(a, &milestones), cg_i64c(a, s->total),
                          cg_i64c(a, s->warmup), cg_f32c(a, s->gamma), cg_f32c(a, s->min_lr), cg_f32c(a, s->pct_start),
                          cg_f32c(a, s->div_factor), cg_f32c(a, s->final_div_factor)};
  LLVMValueRef f[] = {cg_str(a, RT_MODEL_ABI), cg_str(a, d->name), cg_i32c(a, d->ntensors), tensors, predict,
                      cg_i32c(a, d->has_train), train, cg_i32c(a, d->optim), cg_f32c(a, d->lr),
                      cg_struct_val(a, sgd, 3), cg_struct_val(a, adam, 4), cg_struct_val(a, sched, CG_N(sched)),
                      cg_f32c(a, d->clip_norm), cg_i32c(a, d->target), cg_str(a, d->gpu_module), cg_str(a, d->gpu_lib_module),
                      cg_i32c(a, d->ndims), cg_dims(a), cg_i32c(a, d->ntensor_patches),
                      cg_patches(a, d->tensor_patches, d->ntensor_patches)};
  if (!f[CG_N(f) - 1]) return rt_errf(a->err, a->n, "out of memory");
  a->desc_ptr = cg_global(a, cg_struct_val(a, f, CG_N(f)), "desc", 16);
  return 0;
}

/* ---- the NAME_* wrappers ---- */

static LLVMValueRef cg_declare(cg_aot *a, const char *name, LLVMTypeRef ret, LLVMTypeRef *params, int n) {
  LLVMValueRef fn = LLVMGetNamedFunction(a->m->mod, name);
  return fn ? fn : LLVMAddFunction(a->m->mod, name, LLVMFunctionType(ret, params, (unsigned)n, 0));
}

/* NAME_<suffix> with its entry block under the builder; NULL when the name is taken. */
static LLVMValueRef cg_define(cg_aot *a, const char *suffix, LLVMTypeRef ret, LLVMTypeRef *params, int n) {
  char name[512];
  snprintf(name, sizeof name, "%s_%s", a->d->name, suffix);
  if (LLVMGetNamedFunction(a->m->mod, name) || LLVMGetNamedGlobal(a->m->mod, name)) {
    rt_errf(a->err, a->n, "model name '%s' clashes with the symbol %s of the runtime or the generated code; rename the model",
            a->d->name, name);
    return NULL;
  }
  LLVMValueRef fn = LLVMAddFunction(a->m->mod, name, LLVMFunctionType(ret, params, (unsigned)n, 0));
  LLVMPositionBuilderAtEnd(a->m->b, LLVMAppendBasicBlockInContext(a->m->ctx, fn, "entry"));
  return fn;
}

static void cg_return(cg_aot *a, LLVMValueRef v) {
  if (LLVMGetTypeKind(LLVMTypeOf(v)) == LLVMVoidTypeKind) LLVMBuildRetVoid(a->m->b);
  else LLVMBuildRet(a->m->b, v);
}

/* The runtime whose functions the wrappers and kiln_model name: the CPU's (runtime/rt_model.h)
 * or the CUDA runtime's (runtime/cuda/rtc_model.h), which has the same signatures. */
static const char *cg_rt_prefix(const cg_aot *a) { return a->d->target == RT_TARGET_CUDA ? "rtc_model" : "rt_model"; }

/* NAME_<suffix>(params) { return rt_model_<suffix>([&desc,] params); } */
static int cg_forwarder(cg_aot *a, const char *suffix, LLVMTypeRef ret, LLVMTypeRef *params, int n, bool with_desc) {
  char target[64];
  snprintf(target, sizeof target, "%s_%s", cg_rt_prefix(a), suffix);
  LLVMTypeRef tp[4] = {a->ptr};
  LLVMValueRef args[4] = {a->desc_ptr};
  for (int i = 0; i < n; i++) tp[i + with_desc] = params[i];
  LLVMValueRef callee = cg_declare(a, target, ret, tp, n + with_desc);
  LLVMValueRef fn = cg_define(a, suffix, ret, params, n);
  if (!fn) return 1;
  for (int i = 0; i < n; i++) args[i + with_desc] = LLVMGetParam(fn, (unsigned)i);
  LLVMTypeRef fty = LLVMFunctionType(ret, tp, (unsigned)(n + with_desc), 0);
  cg_return(a, LLVMBuildCall2(a->m->b, fty, callee, args, (unsigned)(n + with_desc), ""));
  return 0;
}

/* An alloca'd void *[n] holding fn's parameters first..first+n-1, as i8*. */
static LLVMValueRef cg_pack(cg_aot *a, LLVMValueRef fn, int first, int n) {
  LLVMBuilderRef b = a->m->b;
  LLVMTypeRef at = LLVMArrayType(a->ptr, (unsigned)(n ? n : 1));
  LLVMValueRef arr = LLVMBuildAlloca(b, at, "ptrs");
  for (int i = 0; i < (n ? n : 1); i++) {
    LLVMValueRef idx[2] = {cg_i32c(a, 0), cg_i32c(a, i)};
    LLVMValueRef slot = LLVMBuildInBoundsGEP2(b, at, arr, idx, 2, "");
    LLVMBuildStore(b, n ? LLVMGetParam(fn, (unsigned)(first + i)) : cg_null(a), slot);
  }
  return LLVMBuildBitCast(b, arr, a->ptr, "");
}

/* NAME_predict(m, in..., out...) and NAME_train_step(m, in..., loss): the pointers packed
 * into the arrays rt_model_predict / rt_model_train_step take. With `device` (a CUDA model's
 * NAME_predict_device / NAME_train_step_device) the stream follows, passed on as it is. */
/* Bounded dims: an alloca'd int64_t[ndims] of the extents, the entry point's own parameters
 * (fn's 1.. in declaration order) for the dims it takes, the bound for the others. */
static LLVMValueRef cg_pack_extents(cg_aot *a, LLVMValueRef fn, uint32_t used) {
  LLVMBuilderRef b = a->m->b;
  int nd = a->d->ndims, at = 1;
  LLVMTypeRef t = LLVMArrayType(a->i64, (unsigned)nd);
  LLVMValueRef arr = LLVMBuildAlloca(b, t, "extents");
  for (int k = 0; k < nd; k++) {
    LLVMValueRef idx[2] = {cg_i32c(a, 0), cg_i32c(a, k)};
    LLVMValueRef v = used >> k & 1 ? LLVMGetParam(fn, (unsigned)at++) : cg_i64c(a, a->d->dims[k].hi);
    LLVMBuildStore(b, v, LLVMBuildInBoundsGEP2(b, t, arr, idx, 2, ""));
  }
  return LLVMBuildBitCast(b, arr, a->ptr, "");
}

/* NAME_predict(m, [extents...,] in..., out...): with bounded dims, the extents the entry
 * point depends on (int64_t each) follow the model, and the call goes to _at (a CUDA model's
 * device entries to rtc_model_predict_device_at / _train_step_device_at alike). */
static int cg_entry(cg_aot *a, const rt_program *p, bool train, bool device) {
  bool at = a->d->ndims > 0;
  int ndim = at ? __builtin_popcount(p->dims_used) : 0;
  int nin = p->ninputs, nout = train ? 1 : p->noutputs, np = 1 + ndim + nin + nout + device;
  LLVMTypeRef params[np], tp[5] = {a->ptr, a->ptr, a->ptr, a->ptr, a->ptr};
  for (int i = 0; i < np; i++) params[i] = i >= 1 && i <= ndim ? a->i64 : a->ptr;
  char suffix[32], target[96];
  snprintf(suffix, sizeof suffix, "%s%s", train ? "train_step" : "predict", device ? "_device" : "");
  LLVMValueRef fn = cg_define(a, suffix, a->i32, params, np);
  if (!fn) return 1;
  int first = 1 + ndim;
  LLVMValueRef outs = train ? LLVMGetParam(fn, (unsigned)(first + nin)) : cg_pack(a, fn, first + nin, nout);
  LLVMValueRef args[5], ins = cg_pack(a, fn, first, nin);
  unsigned na = 0;
  args[na++] = LLVMGetParam(fn, 0);
  if (at) args[na++] = cg_pack_extents(a, fn, p->dims_used);
  args[na++] = ins, args[na++] = outs;
  if (device) args[na++] = LLVMGetParam(fn, (unsigned)(np - 1));
  snprintf(target, sizeof target, "%s_%s%s", cg_rt_prefix(a), suffix, at ? "_at" : "");
  LLVMValueRef callee = cg_declare(a, target, a->i32, tp, (int)na);
  LLVMBuildRet(a->m->b, LLVMBuildCall2(a->m->b, LLVMFunctionType(a->i32, tp, na, 0), callee, args, na, ""));
  return 0;
}

static int cg_wrappers(cg_aot *a) {
  bool cuda = a->d->target == RT_TARGET_CUDA;
  LLVMTypeRef p1[] = {a->ptr}, p2[] = {a->ptr, a->ptr}, seed[] = {a->i64}, lr[] = {a->ptr, a->f32};
  return cg_forwarder(a, "create", a->ptr, seed, 1, true) || cg_forwarder(a, "destroy", a->vd, p1, 1, false) ||
         cg_forwarder(a, "load", a->i32, p2, 2, false) || cg_forwarder(a, "save", a->i32, p2, 2, false) ||
         cg_forwarder(a, "load_state", a->i32, p2, 2, false) || cg_forwarder(a, "save_state", a->i32, p2, 2, false) ||
         cg_entry(a, &a->d->predict, false, false) || (a->d->has_train && cg_entry(a, &a->d->train, true, false)) ||
         (cuda && (cg_entry(a, &a->d->predict, false, true) || (a->d->has_train && cg_entry(a, &a->d->train, true, true)))) ||
         cg_forwarder(a, "set_lr", a->i32, lr, 2, false) || cg_forwarder(a, "lr", a->f32, p1, 1, false) ||
         cg_forwarder(a, "error", a->ptr, p1, 1, false) || cg_forwarder(a, "set_comm", a->i32, p2, 2, false);
}

/* ---- kiln_model ---- */

static LLVMValueRef cg_rt_fn(cg_aot *a, const char *name) {
  LLVMValueRef fn = LLVMGetNamedFunction(a->m->mod, name);
  if (!fn) fn = LLVMAddFunction(a->m->mod, name, LLVMFunctionType(a->vd, NULL, 0, 0));
  return LLVMConstBitCast(fn, a->ptr);
}

static int cg_api(cg_aot *a) {
  if (LLVMGetNamedGlobal(a->m->mod, "kiln_model")) return rt_errf(a->err, a->n, "kiln_model is already defined");
  static const char *const fns[] = {"create", "destroy", "load", "save", "predict", "train_step", "set_lr", "error",
                                    "predict_device", "train_step_device", "predict_at", "train_step_at", "lr",
                                    "save_state", "load_state", "set_comm"};
  enum { NFN = sizeof fns / sizeof *fns };
  LLVMValueRef f[2 + NFN] = {cg_str(a, RT_MODEL_ABI), a->desc_ptr};
  bool cuda = a->d->target == RT_TARGET_CUDA;
  for (int i = 0; i < NFN; i++) {
    char name[64];
    snprintf(name, sizeof name, "%s_%s", cg_rt_prefix(a), fns[i]);
    bool has = i < 8 || i >= 10 || cuda;   /* device entries: CUDA's only */
    f[2 + i] = has ? cg_rt_fn(a, name) : cg_null(a);
  }
  LLVMValueRef g = LLVMAddGlobal(a->m->mod, a->api, "kiln_model");
  LLVMSetInitializer(g, LLVMConstNamedStruct(a->api, f, 2 + NFN));
  LLVMSetGlobalConstant(g, 1);
  LLVMSetAlignment(g, 16);
  return 0;
}

/* Only NAME_* and kiln_model leave the object: everything else defined here becomes local
 * (fused loops, scalar helpers), so two models' objects never clash and the .so exports
 * nothing else. */
static const char *const cg_wrapper_names[] = {"create", "destroy", "load", "save", "predict", "train_step",
                                               "set_lr", "lr", "error", "predict_device", "train_step_device",
                                               "save_state", "load_state", "set_comm", NULL};

static bool cg_is_export(cg_aot *a, const char *name) {
  size_t k = strlen(a->d->name);
  if (strcmp(name, "kiln_model") == 0) return true;
  if (strncmp(name, a->d->name, k) != 0 || name[k] != '_') return false;
  for (int i = 0; cg_wrapper_names[i]; i++)
    if (strcmp(name + k + 1, cg_wrapper_names[i]) == 0) return true;
  return false;
}

static void cg_localise(cg_aot *a, LLVMValueRef v) {
  if (LLVMIsDeclaration(v) || cg_is_export(a, LLVMGetValueName2(v, &(size_t){0}))) return;
  LLVMLinkage l = LLVMGetLinkage(v);
  if (l == LLVMExternalLinkage) LLVMSetLinkage(v, LLVMInternalLinkage);
  else if (l != LLVMInternalLinkage && l != LLVMPrivateLinkage) LLVMSetVisibility(v, LLVMHiddenVisibility);
}

static void cg_localise_all(cg_aot *a) {
  for (LLVMValueRef f = LLVMGetFirstFunction(a->m->mod); f; f = LLVMGetNextFunction(f)) cg_localise(a, f);
  for (LLVMValueRef g = LLVMGetFirstGlobal(a->m->mod); g; g = LLVMGetNextGlobal(g)) cg_localise(a, g);
  for (LLVMValueRef g = LLVMGetFirstGlobalAlias(a->m->mod); g; g = LLVMGetNextGlobalAlias(g)) cg_localise(a, g);   /* repeated fused groups */
}

/* Names whose NAME_create etc. would be the runtime's own functions. */
static int cg_check_name(cg_aot *a) {
  static const char *const taken[] = {"rt", "rt_model", "rtc", "rtc_model", "nd", "k", "kiln", "cg", "ex", "ir", "fe", "pass", NULL};
  for (int i = 0; taken[i]; i++)
    if (strcmp(a->d->name, taken[i]) == 0)
      return rt_errf(a->err, a->n, "model name '%s' is reserved (its NAME_* functions would clash with Kiln's own); rename the model",
                     a->d->name);
  return 0;
}

int cg_emit_aot(cg_llvm *m, const rt_model_desc *d, char *err, size_t n) {
  cg_aot a = {.m = m, .d = d, .err = err, .n = n};
  if (!m || !m->mod || !d || !d->name) return rt_errf(err, n, "internal error: cg_emit_aot without a module or descriptor");
  if (cg_check_name(&a) || cg_types(&a) || cg_descriptor(&a) || cg_wrappers(&a) || cg_api(&a)) return 1;
  cg_localise_all(&a);
  return 0;
}
