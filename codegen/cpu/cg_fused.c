/* cg_fused.c — lowers each fused group's expression (cg_fexpr.h) to an LLVM function
 * `void kiln_fused_<p|t><i>(void *const *ptrs)`: a loop nest of constant trip counts over the
 * collapsed index space, loads placed at the loop level where they vary, the k_scalar.h
 * calls in member order with every value in SSA registers, stores at the end of the body.
 *
 * A group of more than one chunk (K_GRAIN elements, K_GRAIN_LIGHT when all its scalar
 * functions are light: k_vec.h) is split over the kernels' thread pool: the nest
 * becomes `kiln_fused_<p|t><i>_range(ptrs, lo, hi)` (a k_range_fn whose outermost loop runs
 * over [lo, hi)) and kiln_fused_<p|t><i> calls k_parallel_for over the outermost dimension,
 * which the .so resolves from the kernel archive it links and the JIT from this process.
 * Chunks depend only on the group, and on a rank-1 group they are multiples of K_GRAIN
 * elements, so every element is computed by the same code with any thread count. */
#include "cg_cpu.h"

#include <stdlib.h>
#include <string.h>

#include "cg_fexpr.h"
#include "k_parallel.h"
#include "k_vec.h"

typedef struct {
  cg_llvm *m;
  const cg_fexpr *fx;
  LLVMValueRef fn;
  LLVMValueRef *in, *out;       /* float* per slot */
  LLVMValueRef *off;            /* per input then output: element offset at the current level */
  LLVMValueRef *val;            /* per expression node */
  char *err;
  size_t n;
  LLVMValueRef lo, hi;          /* a _range function: the outermost loop's bounds, else NULL */
  bool parallel;                /* the nest's accesses join the module's access group */
  /* The loops' trip counts and strides (i64): constants, or for a dynamic group (bounded
   * dims) those that follow the dims computed at entry from the run's extents. */
  LLVMValueRef dim[K_MAX_RANK], ost[K_MAX_RANK];
  LLVMValueRef (*ist)[K_MAX_RANK];
} cg_lower;

static LLVMValueRef cg_i64c(cg_llvm *m, int64_t v) { return LLVMConstInt(cg_i64(m), (unsigned long long)v, 1); }

static LLVMValueRef cg_elem(cg_lower *l, LLVMValueRef base, LLVMValueRef off) {
  LLVMValueRef p = LLVMBuildGEP2(l->m->b, cg_f32(l->m), base, &off, 1, "");
  LLVMSetIsInBounds(p, 1);
  return p;
}

/* A load or store of a parallel group joins its access group. */
static void cg_access(cg_lower *l, LLVMValueRef mem) {
  LLVMSetAlignment(mem, 4);
  if (l->parallel) cg_access_join(l->m, mem);
}

static LLVMValueRef cg_load(cg_lower *l, LLVMValueRef base, LLVMValueRef off) {
  LLVMValueRef v = LLVMBuildLoad2(l->m->b, cg_f32(l->m), cg_elem(l, base, off), "");
  cg_access(l, v);
  return v;
}

/* A CALL node: the scalar function, checked against the arguments the expression gives. */
static int cg_lower_call(cg_lower *l, const cg_fx *x, LLVMValueRef *out) {
  LLVMValueRef f = LLVMGetNamedFunction(l->m->mod, x->fn), args[CG_FX_MAXARG];
  if (!f) return rt_errf(l->err, l->n, "%s is not in kernels/k_scalar.h", x->fn);
  LLVMTypeRef ft = LLVMGlobalGetValueType(f);
  if ((int)LLVMCountParamTypes(ft) != x->narg) return rt_errf(l->err, l->n, "%s takes %u arguments, the op gives %d", x->fn, LLVMCountParamTypes(ft), x->narg);
  LLVMTypeRef pt[CG_FX_MAXARG];
  LLVMGetParamTypes(ft, pt);
  for (int k = 0; k < x->narg; k++) {
    args[k] = l->val[x->arg[k]];
    if (LLVMTypeOf(args[k]) != pt[k]) return rt_errf(l->err, l->n, "%s: argument %d has the wrong type", x->fn, k);
  }
  if (l->m->large && cg_outline_heavy(x->fn)) {
    *out = cg_outline_call(l->m, f, args, (unsigned)x->narg, l->err, l->n);
    return *out ? 0 : 1;
  }
  *out = LLVMBuildCall2(l->m->b, ft, f, args, (unsigned)x->narg, "");
  return 0;
}

/* Nodes other than loads, in order (loads were placed on the way into the nest). */
static int cg_lower_node(cg_lower *l, int i) {
  const cg_fx *x = &l->fx->x[i];
  cg_llvm *m = l->m;
  switch (x->kind) {
  case CG_FX_LOAD: return 0;
  case CG_FX_LOAD_OUT: l->val[i] = cg_load(l, l->out[x->slot], l->off[l->fx->nin + x->slot]); return 0;
  case CG_FX_FCONST: l->val[i] = LLVMConstReal(cg_f32(m), x->f); return 0;
  case CG_FX_ICONST: l->val[i] = LLVMConstInt(LLVMInt32TypeInContext(m->ctx), (unsigned long long)x->i, 1); return 0;
  case CG_FX_ADD: l->val[i] = LLVMBuildFAdd(m->b, l->val[x->arg[0]], l->val[x->arg[1]], ""); return 0;
  case CG_FX_CALL: return cg_lower_call(l, x, &l->val[i]);
  }
  return rt_errf(l->err, l->n, "unknown fused expression node %d", (int)x->kind);
}

static int cg_lower_body(cg_lower *l) {
  for (int i = 0; i < l->fx->nx; i++)
    if (cg_lower_node(l, i)) return 1;
  for (int j = 0; j < l->fx->nout; j++) {
    cg_access(l, LLVMBuildStore(l->m->b, l->val[l->fx->store[j]], cg_elem(l, l->out[j], l->off[l->fx->nin + j])));
  }
  return 0;
}

/* The loads of inputs that vary first at `level` (0: before any loop). */
static void cg_lower_loads(cg_lower *l, int level) {
  for (int i = 0; i < l->fx->nx; i++) {
    const cg_fx *x = &l->fx->x[i];
    if (x->kind == CG_FX_LOAD && cg_fexpr_load_level(l->fx, x->slot) == level)
      l->val[i] = cg_load(l, l->in[x->slot], l->off[x->slot]);
  }
}

/* Loop d: i from 0 to dim[d] (at least 1: a bottom-tested loop; the outermost from lo to hi
 * in a _range function, which k_parallel_for never calls empty), each operand's offset
 * advanced by i * its stride; the nest inside, then the body at the innermost level. */
static int cg_lower_level(cg_lower *l, int d) {
  cg_llvm *m = l->m;
  const cg_fexpr *fx = l->fx;
  if (d == fx->rank) return cg_lower_body(l);
  int nops = fx->nin + fx->nout;
  LLVMValueRef saved[nops];
  for (int k = 0; k < nops; k++) saved[k] = l->off[k];
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(m->b), head = LLVMAppendBasicBlockInContext(m->ctx, l->fn, "loop");
  LLVMBuildBr(m->b, head);
  LLVMPositionBuilderAtEnd(m->b, head);
  LLVMValueRef i = LLVMBuildPhi(m->b, cg_i64(m), "i");
  for (int k = 0; k < nops; k++) {
    int64_t st = k < fx->nin ? fx->ist[k][d] : fx->ost[d];
    LLVMValueRef stv = k < fx->nin ? l->ist[k][d] : l->ost[d];
    if (st) l->off[k] = LLVMBuildNSWAdd(m->b, saved[k], LLVMBuildNSWMul(m->b, i, stv, ""), "");
  }
  cg_lower_loads(l, d + 1);
  if (cg_lower_level(l, d + 1)) return 1;
  LLVMBasicBlockRef tail = LLVMGetInsertBlock(m->b), done = LLVMAppendBasicBlockInContext(m->ctx, l->fn, "done");
  LLVMValueRef next = LLVMBuildNUWAdd(m->b, i, cg_i64c(m, 1), "");
  LLVMValueRef end = d == 0 && l->hi ? l->hi : l->dim[d];
  LLVMValueRef br = LLVMBuildCondBr(m->b, LLVMBuildICmp(m->b, LLVMIntULT, next, end, ""), head, done);
  if (l->parallel && d == fx->rank - 1) {   /* independent iterations: no alias check, no scalar copy */
    LLVMMetadataRef pa = cg_loop_parallel(m);
    cg_loop_set(m, br, &pa, 1);
  }
  LLVMValueRef inc[2] = {d == 0 && l->lo ? l->lo : cg_i64c(m, 0), next};
  LLVMBasicBlockRef from[2] = {pre, tail};
  LLVMAddIncoming(i, inc, from, 2);
  LLVMPositionBuilderAtEnd(m->b, done);
  for (int k = 0; k < nops; k++) l->off[k] = saved[k];
  return 0;
}

static int cg_lower_nest(cg_lower *l) {
  for (int k = 0; k < l->fx->nin + l->fx->nout; k++) l->off[k] = cg_i64c(l->m, 0);
  cg_lower_loads(l, 0);
  return cg_lower_level(l, 0);
}

/* A parallel group (cg_fexpr.h) is one nest whose innermost loop is marked parallel: an
 * output and the input it shares are one array read and written at one index, and every
 * other pair is apart. Otherwise, with in-place outputs the nest is emitted twice: once where
 * each such output's pointer is its input's (then the loop reads and writes one array at one
 * index, which the vectorizer accepts), once for distinct buffers (its runtime alias checks
 * then pass). */
static int cg_lower_versions(cg_lower *l) {
  cg_llvm *m = l->m;
  if (l->fx->parallel) {
    l->parallel = true;
    return cg_access_group(m, l->err, l->n) ? cg_lower_nest(l) : 1;
  }
  LLVMValueRef same = NULL;
  for (int j = 0; j < l->fx->nout; j++) {
    if (l->fx->alias[j] < 0) continue;
    LLVMValueRef eq = LLVMBuildICmp(m->b, LLVMIntEQ, l->out[j], l->in[l->fx->alias[j]], "");
    same = same ? LLVMBuildAnd(m->b, same, eq, "") : eq;
  }
  if (!same) return cg_lower_nest(l);
  LLVMBasicBlockRef a = LLVMAppendBasicBlockInContext(m->ctx, l->fn, "inplace"),
                    b = LLVMAppendBasicBlockInContext(m->ctx, l->fn, "apart"),
                    end = LLVMAppendBasicBlockInContext(m->ctx, l->fn, "end");
  LLVMBuildCondBr(m->b, same, a, b);
  LLVMPositionBuilderAtEnd(m->b, b);
  if (cg_lower_nest(l)) return 1;
  LLVMBuildBr(m->b, end);
  LLVMPositionBuilderAtEnd(m->b, a);
  for (int j = 0; j < l->fx->nout; j++)
    if (l->fx->alias[j] >= 0) l->out[j] = l->in[l->fx->alias[j]];
  if (cg_lower_nest(l)) return 1;
  LLVMBuildBr(m->b, end);
  LLVMPositionBuilderAtEnd(m->b, end);
  return 0;
}

/* ---- the function ---- */

static LLVMTypeRef cg_i8p(cg_llvm *m) { return cg_ptr(m, LLVMInt8TypeInContext(m->ctx)); }

/* k_range_fn: void (void *ctx, int64_t lo, int64_t hi). */
static LLVMTypeRef cg_range_type(cg_llvm *m) {
  LLVMTypeRef p[3] = {cg_i8p(m), cg_i64(m), cg_i64(m)};
  return LLVMFunctionType(LLVMVoidTypeInContext(m->ctx), p, 3, 0);
}

/* The step's own type, void (void *const *ptrs). */
static LLVMTypeRef cg_step_type(cg_llvm *m) {
  LLVMTypeRef pp = cg_ptr(m, cg_i8p(m));
  return LLVMFunctionType(LLVMVoidTypeInContext(m->ctx), &pp, 1, 0);
}

static LLVMValueRef cg_fused_decl(cg_llvm *m, const char *name, LLVMTypeRef type) {
  LLVMValueRef f = LLVMAddFunction(m->mod, name, type);
  cg_fn_attr(m, f, "nounwind");
  cg_fn_target(m, f);
  return f;
}

/* A size the loops use: the bound's constant, or a * prod(extent[d]) + b from the run's
 * extents `ext` (an i64 array; NULL for a static group). */
static LLVMValueRef cg_fused_size(cg_llvm *m, LLVMValueRef ext, int64_t c, k_dimval v) {
  if (!ext || !v.mask) return cg_i64c(m, c);
  LLVMValueRef p = cg_i64c(m, v.a);
  for (int d = 0; d < K_MAX_BDIMS; d++) {
    if (!(v.mask >> d & 1)) continue;
    LLVMValueRef idx = cg_i64c(m, d), at = LLVMBuildInBoundsGEP2(m->b, cg_i64(m), ext, &idx, 1, "");
    p = LLVMBuildNSWMul(m->b, p, LLVMBuildLoad2(m->b, cg_i64(m), at, ""), "");
  }
  return LLVMBuildNSWAdd(m->b, p, cg_i64c(m, v.b), "");
}

/* The run's extents: the pointer after the tensors' in ptrs (an i8** value). */
static LLVMValueRef cg_fused_extents(cg_llvm *m, const cg_fexpr *fx, LLVMValueRef pp) {
  if (!fx->dynamic) return NULL;
  LLVMValueRef idx = cg_i64c(m, fx->nin + fx->nout), slot = LLVMBuildInBoundsGEP2(m->b, cg_i8p(m), pp, &idx, 1, "");
  return LLVMBuildBitCast(m->b, LLVMBuildLoad2(m->b, cg_i8p(m), slot, ""), cg_ptr(m, cg_i64(m)), "");
}

static void cg_fused_sizes(cg_lower *l, LLVMValueRef ext) {
  const cg_fexpr *fx = l->fx;
  k_dimval none = {0, 0, 0};
  for (int d = 0; d < fx->rank; d++) {
    l->dim[d] = cg_fused_size(l->m, ext, fx->dim[d], fx->dynamic ? fx->vdim[d] : none);
    l->ost[d] = cg_fused_size(l->m, ext, fx->ost[d], fx->dynamic ? fx->vost[d] : none);
    for (int s = 0; s < fx->nin; s++) l->ist[s][d] = cg_fused_size(l->m, ext, fx->ist[s][d], fx->dynamic ? fx->vist[s][d] : none);
  }
}

/* ptrs[k] as float*: inputs first, then outputs; then the sizes. */
static void cg_fused_ptrs(cg_lower *l) {
  cg_llvm *m = l->m;
  LLVMTypeRef i8p = cg_i8p(m), fp = cg_ptr(m, cg_f32(m));
  LLVMValueRef pp = LLVMBuildBitCast(m->b, LLVMGetParam(l->fn, 0), cg_ptr(m, i8p), "");
  cg_fused_sizes(l, cg_fused_extents(m, l->fx, pp));
  for (int k = 0; k < l->fx->nin + l->fx->nout; k++) {
    LLVMValueRef idx = cg_i64c(m, k), slot = LLVMBuildInBoundsGEP2(m->b, i8p, pp, &idx, 1, "");
    LLVMValueRef p = LLVMBuildLoad2(m->b, i8p, slot, "");
    p = LLVMBuildBitCast(m->b, p, fp, "");
    if (k < l->fx->nin) l->in[k] = p;
    else l->out[k - l->fx->nin] = p;
  }
}

/* A dynamic group returns at once when a trip count is below 1 at the run's extents: the
 * loops are bottom-tested (they run once before their first test). */
static void cg_fused_skip_empty(cg_lower *l) {
  cg_llvm *m = l->m;
  LLVMValueRef empty = NULL;
  for (int d = 0; d < l->fx->rank; d++) {
    if (!l->fx->vdim[d].mask) continue;
    LLVMValueRef lt = LLVMBuildICmp(m->b, LLVMIntSLT, l->dim[d], cg_i64c(m, 1), "");
    empty = empty ? LLVMBuildOr(m->b, empty, lt, "") : lt;
  }
  if (!empty) return;
  LLVMBasicBlockRef ret = LLVMAppendBasicBlockInContext(m->ctx, l->fn, "empty"), go = LLVMAppendBasicBlockInContext(m->ctx, l->fn, "run");
  LLVMBuildCondBr(m->b, empty, ret, go);
  LLVMPositionBuilderAtEnd(m->b, ret);
  LLVMBuildRetVoid(m->b);
  LLVMPositionBuilderAtEnd(m->b, go);
}

/* The group's loop nest as function `name` of `type`: the step's own type, or with `range`
 * a k_range_fn over the outermost dimension. */
static int cg_fused_emit_nest(cg_llvm *m, const cg_fexpr *fx, const char *name, bool range, char *err, size_t n) {
  int nops = fx->nin + fx->nout;
  LLVMValueRef in[fx->nin + 1], out[fx->nout + 1], off[nops + 1];
  LLVMValueRef *val = calloc((size_t)fx->nx + 1, sizeof *val);
  LLVMValueRef (*ist)[K_MAX_RANK] = calloc((size_t)fx->nin + 1, sizeof *ist);
  if (!val || !ist) return free(val), free(ist), rt_errf(err, n, "out of memory");
  cg_lower l = {m, fx, cg_fused_decl(m, name, range ? cg_range_type(m) : cg_step_type(m)), in, out, off, val, err, n, NULL, NULL, false,
                {0}, {0}, ist};
  if (range) l.lo = LLVMGetParam(l.fn, 1), l.hi = LLVMGetParam(l.fn, 2);
  LLVMPositionBuilderAtEnd(m->b, LLVMAppendBasicBlockInContext(m->ctx, l.fn, "entry"));
  int bad = 0;
  if (fx->numel > 0) {
    cg_fused_ptrs(&l);
    if (fx->dynamic) cg_fused_skip_empty(&l);
    bad = cg_lower_versions(&l);
  }
  if (!bad) LLVMBuildRetVoid(m->b);
  free(val), free(ist);
  if (bad) LLVMDeleteFunction(l.fn);
  return bad;
}

/* Whether every scalar function of the group is light (k_vec.h: a few instructions). */
static bool cg_fused_light(const cg_fexpr *fx) {
  for (int i = 0; i < fx->nx; i++)
    if (fx->x[i].kind == CG_FX_CALL && cg_outline_heavy(fx->x[i].fn)) return false;
  return true;
}

/* Outermost indices per k_parallel_for chunk: K_GRAIN elements' worth, K_GRAIN_LIGHT for a
 * light group (k_vec.h), at least one index. */
static int64_t cg_fused_grain(const cg_fexpr *fx) {
  int64_t elems = cg_fused_light(fx) ? K_GRAIN_LIGHT : K_GRAIN, inner = fx->numel / fx->dim[0];
  return inner < elems ? elems / inner : 1;
}

/* Whether the group is split over the pool: more than one chunk. Below a chunk, waking a
 * worker (~5-10 us) costs more than the loop. */
static bool cg_fused_split(const cg_fexpr *fx) {
  return fx->rank > 0 && fx->numel > 0 && k_parallel_chunks(fx->dim[0], cg_fused_grain(fx)) > 1;
}

/* k_parallel_for as the module sees it, declared once. */
static LLVMValueRef cg_parallel_for(cg_llvm *m) {
  LLVMValueRef f = LLVMGetNamedFunction(m->mod, "k_parallel_for");
  if (f) return f;
  LLVMTypeRef p[4] = {cg_i64(m), cg_i64(m), cg_ptr(m, cg_range_type(m)), cg_i8p(m)};
  f = LLVMAddFunction(m->mod, "k_parallel_for", LLVMFunctionType(LLVMVoidTypeInContext(m->ctx), p, 4, 0));
  cg_fn_attr(m, f, "nounwind");
  return f;
}

/* `name` as k_parallel_for over `name`_range. */
static int cg_fused_emit_split(cg_llvm *m, const cg_fexpr *fx, const char *name, char *err, size_t n) {
  char rname[80];
  snprintf(rname, sizeof rname, "%s_range", name);
  if (cg_fused_emit_nest(m, fx, rname, true, err, n)) return 1;
  LLVMValueRef body = LLVMGetNamedFunction(m->mod, rname), pf = cg_parallel_for(m);
  LLVMValueRef f = cg_fused_decl(m, name, cg_step_type(m));
  LLVMPositionBuilderAtEnd(m->b, LLVMAppendBasicBlockInContext(m->ctx, f, "entry"));
  /* a dynamic outer trip count from the run's extents (the grain stays the bound's: chunks
   * hold no reduction, so any cut gives the same bits) */
  LLVMValueRef pp = LLVMBuildBitCast(m->b, LLVMGetParam(f, 0), cg_ptr(m, cg_i8p(m)), "");
  LLVMValueRef n0 = cg_fused_size(m, cg_fused_extents(m, fx, pp), fx->dim[0], fx->dynamic ? fx->vdim[0] : (k_dimval){0, 0, 0});
  LLVMValueRef args[4] = {n0, cg_i64c(m, cg_fused_grain(fx)), body,
                          LLVMBuildBitCast(m->b, LLVMGetParam(f, 0), cg_i8p(m), "")};
  LLVMBuildCall2(m->b, LLVMGlobalGetValueType(pf), pf, args, 4, "");
  LLVMBuildRetVoid(m->b);
  return 0;
}

static int cg_fused_emit(cg_llvm *m, const cg_fexpr *fx, const char *name, char *err, size_t n) {
  return cg_fused_split(fx) ? cg_fused_emit_split(m, fx, name, err, n) : cg_fused_emit_nest(m, fx, name, false, err, n);
}

/* ---- one function per distinct expression ---- */

/* The functions emitted so far, by cg_fexpr_key (open addressing on an FNV-1a hash). A group
 * whose key is already here gets an alias of that function under its own name, so the
 * descriptor, the JIT and the .so find every step's loop by name as before. */
typedef struct { uint64_t h; unsigned char *key; size_t len; LLVMValueRef fn; } cg_seen_slot;
typedef struct { cg_seen_slot *s; size_t cap, n; } cg_seen;

static uint64_t cg_seen_hash(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static cg_seen_slot *cg_seen_find(cg_seen_slot *s, size_t cap, const unsigned char *key, size_t len, uint64_t h) {
  for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1))
    if (!s[i].key || (s[i].h == h && s[i].len == len && memcmp(s[i].key, key, len) == 0)) return &s[i];
}

/* Keeps the table at most half full. 0, or 1 when out of memory. */
static int cg_seen_reserve(cg_seen *t) {
  if (2 * (t->n + 1) <= t->cap) return 0;
  size_t cap = t->cap ? 2 * t->cap : 64;
  cg_seen_slot *s = calloc(cap, sizeof *s);
  if (!s) return 1;
  for (size_t i = 0; i < t->cap; i++)
    if (t->s[i].key) *cg_seen_find(s, cap, t->s[i].key, t->s[i].len, t->s[i].h) = t->s[i];
  free(t->s);
  t->s = s, t->cap = cap;
  return 0;
}

static void cg_seen_free(cg_seen *t) {
  for (size_t i = 0; i < t->cap; i++) free(t->s[i].key);
  free(t->s);
}

/* Emits fx as `name`, or aliases `name` to an equal expression's function. */
static int cg_fused_emit_once(cg_llvm *m, cg_seen *t, const cg_fexpr *fx, const char *name, char *err, size_t n) {
  size_t len = 0;
  unsigned char *key = cg_fexpr_key(fx, &len);
  if (!key || cg_seen_reserve(t)) return free(key), rt_errf(err, n, "out of memory");
  uint64_t h = cg_seen_hash(key, len);
  cg_seen_slot *hit = cg_seen_find(t->s, t->cap, key, len, h);
  if (hit->key) {
    free(key);
    LLVMAddAlias2(m->mod, LLVMGlobalGetValueType(hit->fn), 0, hit->fn, name);
    return 0;
  }
  if (cg_fused_emit(m, fx, name, err, n)) return free(key), 1;
  *hit = (cg_seen_slot){h, key, len, LLVMGetNamedFunction(m->mod, name)};
  t->n++;
  return 0;
}

static int cg_emit_graph(cg_llvm *m, cg_seen *t, const ir_graph *g, bool train, char *err, size_t n) {
  for (int i = 0; g && i < ir_nnodes(g); i++) {
    const ir_node *fn = ir_node_at(g, i);
    if (fn->kind != IR_N_FUSED || fn->epi) continue;   /* an epilogue runs in its heavy op's kernel */
    char name[64], msg[512];
    cg_fused_name(name, sizeof name, train, i);
    if (cg_fused_fn(m, name)) return rt_errf(err, n, "%s is already in the module", name);
    cg_fexpr fx;
    if (cg_fexpr_build(g, fn, &fx, msg, sizeof msg)) return rt_errf(err, n, "%s graph: %s", train ? "train" : "predict", msg);
    int bad = m->probes ? cg_fexpr_probe(m->probes, train, i, &fx, NULL, msg, sizeof msg) : 0;
    if (!bad) bad = cg_fused_emit_once(m, t, &fx, name, msg, sizeof msg);
    cg_fexpr_free(&fx);
    if (bad) return rt_errf(err, n, "%s (%s): %s", name, fn->name, msg);
  }
  return 0;
}

LLVMValueRef cg_fused_fn(cg_llvm *m, const char *name) {
  LLVMValueRef f = LLVMGetNamedFunction(m->mod, name);
  return f ? f : LLVMGetNamedGlobalAlias(m->mod, name, strlen(name));
}

/* Members of g's fused groups (not epilogues: those run in their heavy op's kernel). */
static int64_t cg_fused_members(const ir_graph *g) {
  int64_t k = 0;
  for (int i = 0; g && i < ir_nnodes(g); i++) {
    const ir_node *fn = ir_node_at(g, i);
    if (fn->kind == IR_N_FUSED && !fn->epi) k += fn->nsub;
  }
  return k;
}

int cg_emit_fused_all(cg_llvm *m, const ir_graph *predict, const ir_graph *train, char *err, size_t n) {
  if (!m || !m->mod) return rt_errf(err, n, "no module to emit into (already handed to the JIT?)");
  if (cg_link_scalars(m, err, n)) return 1;
  m->large = m->opt.large > 0 || (m->opt.large == 0 && cg_fused_members(predict) + cg_fused_members(train) > CG_LARGE_MEMBERS);
  cg_seen seen = {0};   /* shared: a train group may equal a predict group */
  int bad = cg_emit_graph(m, &seen, predict, false, err, n) || cg_emit_graph(m, &seen, train, true, err, n);
  cg_seen_free(&seen);
  return bad;
}
