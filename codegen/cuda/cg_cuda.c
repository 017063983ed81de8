/* cg_cuda.c — the CUDA back end's code: one CUDA C kernel per generated step, as one NVRTC
 * program (the GPU op library is a module of its own, cg_cuda_lib.c).
 *
 * Generated steps (the runtime launches them by rt_fused_name):
 *   - fused groups, and unfused elementwise ops as groups of one member: the same fused
 *     expression as the CPU loops (cg_fexpr.h), one thread per element of the group's space
 *     (grid-stride; four, through float4, where the group's inputs allow), each node a
 *     `float vN = ...;` line calling kernels/k_scalar.h, which NVRTC compiles as device code:
 *     one definition of every function for both targets;
 *   - the backward of a binary op whose operand was broadcast: per element of the operand,
 *     the sum over the broadcast positions of the op's gradient, in a fixed order.
 * Every distinct expression becomes one __device__ body (deep models repeat their blocks,
 * cg_fexpr_key tells them apart), called by each step's thin __global__ entry.
 * The sources of kernels/cuda and the k_ headers are embedded in kiln at build time
 * (cg_cuda_sources.c, made by CMake) and handed to NVRTC as headers; the program includes the
 * headers the generated code calls (k_scalar.h's functions, k_philox.h's counters). */
#include "cg_cuda.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cg_fexpr.h"
#include "ops.h"

/* ---- which ops the GPU runs: generated elementwise ones, and the op table's ---- */

static const bool cg_cuda_unary[IR_OP_COUNT] = {
#define K_OP(id)
#define K_BINARY(id)
#define K_UNARY(id) [IR_OP_##id] = true,
#include "k_ops.def"
#undef K_OP
#undef K_BINARY
#undef K_UNARY
};
static const bool cg_cuda_binary[IR_OP_COUNT] = {
#define K_OP(id)
#define K_UNARY(id)
#define K_BINARY(id) [IR_OP_##id] = true,
#include "k_ops.def"
#undef K_OP
#undef K_BINARY
#undef K_UNARY
};
static const bool cg_cuda_library[IR_OP_COUNT] = {
#define RTC_OP(id, lib, data) [IR_OP_##id] = true,
#include "rtc_ops.def"
#undef RTC_OP
};

static bool cg_cuda_elementwise(int op) { return op >= 0 && op < IR_OP_COUNT && (cg_cuda_unary[op] || cg_cuda_binary[op]); }

bool cg_cuda_generated(const ir_node *nd) {
  if (nd->kind == IR_N_FUSED) return !nd->epi;
  return (nd->kind == IR_N_OP || nd->kind == IR_N_BACKWARD) && cg_cuda_elementwise(nd->op);
}

/* Every op of g that the GPU cannot run, listed once each in err. */
int cg_cuda_check(const ir_graph *g, char *err, size_t n) {
  bool seen[IR_OP_COUNT] = {false};
  size_t len = 0;
  int bad = 0;
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *nd = ir_node_at(g, i);
    if (nd->kind == IR_N_UPDATE || cg_cuda_generated(nd)) continue;
    int op = nd->op;
    bool ok = nd->kind != IR_N_FUSED && op >= 0 && op < IR_OP_COUNT && cg_cuda_library[op];
    if (ok || (op >= 0 && op < IR_OP_COUNT && seen[op])) continue;
    if (op >= 0 && op < IR_OP_COUNT) seen[op] = true;
    const char *name = nd->kind == IR_N_FUSED ? "a fused epilogue" : ir_ops[op].name;
    if (!bad) len = (size_t)snprintf(err, n, "the CUDA target has no GPU kernel yet for:");
    if (len < n) len += (size_t)snprintf(err + len, n - len, " %s", name);
    bad = 1;
  }
  return bad;
}

/* ---- text ---- */

typedef struct {
  char *p;
  size_t len, cap;
  bool oom;
} cg_text;

static void cg_tx(cg_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cg_tx(cg_text *t, const char *fmt, ...) {
  if (t->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    if (k < 0) { t->oom = true; return; }
    if (t->p && t->len + (size_t)k < t->cap) { t->len += (size_t)k; return; }
    size_t cap = t->cap ? 2 * t->cap : 1 << 16;
    while (cap <= t->len + (size_t)k) cap *= 2;
    char *np = realloc(t->p, cap);
    if (!np) { t->oom = true; return; }
    t->p = np, t->cap = cap;
  }
}

/* ---- bodies: one per distinct expression ---- */

/* The fused expression's key with the constants folded into the body appended: two groups
 * share a body only when they also fold the same values (the CPU's loops load them, so its key
 * need not say). */
static unsigned char *cg_fexpr_key_consts(const cg_fexpr *fx, const bool *is_const, const float *value, size_t *len) {
  size_t n;
  unsigned char *k = cg_fexpr_key(fx, &n);
  if (!k) return NULL;
  unsigned char *p = realloc(k, n + (size_t)fx->nin * 5);
  if (!p) return free(k), NULL;
  for (int s = 0; s < fx->nin; s++) {
    p[n++] = is_const[s];
    memcpy(p + n, is_const[s] ? &value[s] : &(float){0}, 4), n += 4;
  }
  *len = n;
  return p;
}

typedef struct {
  unsigned char *key;
  size_t len;
  int id;
} cg_body;

typedef struct {
  cg_text src;
  cg_body *bodies;
  int nbodies, capbodies;
  const cg_probes *pr;         /* bounded dims: the probe graphs (every entry then takes kx) */
  char *err;
  size_t n;
} cg_gen;

/* An existing body with this key, or -1 (the key is then kept as the new body's). */
static int cg_body_find(cg_gen *g, unsigned char *key, size_t len, int *id) {
  for (int i = 0; i < g->nbodies; i++)
    if (g->bodies[i].len == len && memcmp(g->bodies[i].key, key, len) == 0) return free(key), *id = g->bodies[i].id, 1;
  if (g->nbodies == g->capbodies) {
    int cap = g->capbodies ? 2 * g->capbodies : 64;
    cg_body *p = realloc(g->bodies, sizeof *p * (size_t)cap);
    if (!p) return free(key), -1;
    g->bodies = p, g->capbodies = cap;
  }
  *id = g->nbodies;
  g->bodies[g->nbodies++] = (cg_body){key, len, *id};
  return 0;
}

/* A float constant by its bits, so -0, NaNs and every last bit survive the text. */
static void cg_tx_float(cg_text *t, float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  cg_tx(t, "__int_as_float(0x%08x)", u);
}

/* Index arithmetic in 32 bits where every index and the grid-stride step stay far below 2^31
 * (64-bit division by a constant costs the GPU several times the 32-bit one). */
static bool cg_small(int64_t n) { return n < ((int64_t)1 << 30); }
static const char *cg_ix(int64_t n) { return cg_small(n) ? "int" : "long long"; }
static const char *cg_sfx(int64_t n) { return cg_small(n) ? "" : "LL"; }

/* ---- sizes: constants, or for a dynamic group (bounded dims) locals of its body ----
 * A dynamic group's body starts by evaluating each trip count and stride that follows the
 * dims from the run's extents (`kx`, the pointer after the step's tensors: the CUDA runtime
 * keeps them in device memory) into locals D<d> (extents), O<d> (the space's strides),
 * S<s>_<d> (input s's strides) and n (the element count); the loops read those. */

static bool cg_dv_eq(k_dimval a, k_dimval b) { return a.mask == b.mask && a.a == b.a && a.b == b.b; }

/* Size v, following the dims as dv: "(a * kx[d]... + b)" in long long, else the constant. */
static void cg_tx_dimval(cg_text *t, int64_t v, k_dimval dv) {
  if (!dv.mask) { cg_tx(t, "%lldLL", (long long)v); return; }
  cg_tx(t, "(%lldLL", (long long)dv.a);
  for (int d = 0; d < K_MAX_BDIMS; d++)
    if (dv.mask >> d & 1) cg_tx(t, " * kx[%d]", d);
  cg_tx(t, " + %lldLL)", (long long)dv.b);
}

static bool cg_zero_stride(const cg_fexpr *fx, int s, int d);

/* A flat group's sizes (cg_fexpr.flat): the extents fitted, the strides their products. */
static void cg_tx_flat_sizes(cg_text *t, const cg_fexpr *fx) {
  const char *ix = cg_ix(fx->numel);
  for (int d = 0; d < fx->rank; d++) cg_tx(t, "  const %s D%d = (%s)", ix, d, ix), cg_tx_dimval(t, fx->dim[d], fx->vdim[d]), cg_tx(t, ";\n");
  for (int d = fx->rank - 1; d >= 0; d--) {
    cg_tx(t, "  const %s O%d = 1", ix, d);
    for (int e = d + 1; e < fx->rank; e++) cg_tx(t, " * D%d", e);
    cg_tx(t, ";\n");
    for (int s = 0; s < fx->nin; s++) {
      if (cg_zero_stride(fx, s, d)) continue;
      cg_tx(t, "  const %s S%d_%d = 1", ix, s, d);
      for (int e = d + 1; e < fx->rank; e++)
        if (!cg_zero_stride(fx, s, e)) cg_tx(t, " * D%d", e);
      cg_tx(t, ";\n");
    }
  }
}

static void cg_tx_dynamic_sizes(cg_text *t, const cg_fexpr *fx) {
  const char *ix = cg_ix(fx->numel);
  if (fx->flat) cg_tx_flat_sizes(t, fx);
  for (int d = 0; !fx->flat && d < fx->rank; d++) {
    cg_tx(t, "  const %s D%d = (%s)", ix, d, ix), cg_tx_dimval(t, fx->dim[d], fx->vdim[d]);
    cg_tx(t, ", O%d = (%s)", d, ix), cg_tx_dimval(t, fx->ost[d], fx->vost[d]), cg_tx(t, ";\n");
    for (int s = 0; s < fx->nin; s++)
      if (fx->ist[s][d] || fx->vist[s][d].mask)
        cg_tx(t, "  const %s S%d_%d = (%s)", ix, s, d, ix), cg_tx_dimval(t, fx->ist[s][d], fx->vist[s][d]), cg_tx(t, ";\n");
  }
  cg_tx(t, "  const %s n = 1", ix);
  for (int d = 0; d < fx->rank; d++) cg_tx(t, " * D%d", d);
  cg_tx(t, ";\n");
}

/* Input s's stride on axis d equals the space's, at every extent (flat: on an axis of extent 1
 * any stride will do; elsewhere equal at the bound is equal at every extent, as no axis it
 * broadcasts along moves). */
static bool cg_same_stride(const cg_fexpr *fx, int s, int d) {
  if (fx->flat) return fx->ist[s][d] == fx->ost[d] || fx->dim[d] == 1;
  return fx->ist[s][d] == fx->ost[d] && (!fx->dynamic || cg_dv_eq(fx->vist[s][d], fx->vost[d]));
}
static bool cg_zero_stride(const cg_fexpr *fx, int s, int d) {
  return !fx->ist[s][d] && (fx->flat || !fx->dynamic || !fx->vist[s][d].mask);
}

/* The element offset of input s at the multi-index of linear element i of the space. */
static void cg_tx_offset(cg_text *t, const cg_fexpr *fx, int s) {
  bool same = true;
  for (int d = 0; d < fx->rank; d++) same = same && cg_same_stride(fx, s, d);
  if (same) { cg_tx(t, "i"); return; }
  bool any = false;
  const char *k = cg_sfx(fx->numel);
  for (int d = 0; d < fx->rank; d++) {
    if (cg_zero_stride(fx, s, d)) continue;
    if (fx->dynamic) cg_tx(t, "%s(i / O%d %% D%d) * S%d_%d", any ? " + " : "", d, d, s, d);
    else
      cg_tx(t, "%s(i / %lld%s %% %lld%s) * %lld%s", any ? " + " : "", (long long)fx->ost[d], k, (long long)fx->dim[d], k,
            (long long)fx->ist[s][d], k);
    any = true;
  }
  if (!any) cg_tx(t, "0");
}

/* Input s read at every element (its strides the space's) or as one value (all strides 0). */
static bool cg_contiguous(const cg_fexpr *fx, int s) {
  for (int d = 0; d < fx->rank; d++)
    if (!cg_same_stride(fx, s, d)) return false;
  return true;
}
static bool cg_scalar_input(const cg_fexpr *fx, int s) {
  for (int d = 0; d < fx->rank; d++)
    if (!cg_zero_stride(fx, s, d)) return false;
  return true;
}

/* Four elements a thread through float4 loads and stores: a group whose inputs are each read
 * whole or as one value, over a multiple of four elements (for a dynamic group, checked at
 * the run's extents too). One float a thread left the H200 at 0.69-0.73 of a device copy's
 * bandwidth; four keep more bytes in flight. */
static bool cg_vectorizable(const cg_fexpr *fx, const bool *is_const) {
  if (fx->numel < 4 || (!fx->dynamic && fx->numel % 4)) return false;
  for (int s = 0; s < fx->nin; s++)
    if (!is_const[s] && !cg_contiguous(fx, s) && !cg_scalar_input(fx, s)) return false;
  return true;
}

/* Node k as a line of the loop: lane < 0 the scalar loop (element i), lane 0..3 one of the four
 * elements of the float4 loop (element 4q + lane: a contiguous input's lane of its float4 a<s>,
 * the old output's of o<j>). A load of a constant tensor (a literal in the model: `x * 2.0`) is
 * its value, known here. */
static void cg_tx_node(cg_text *t, const cg_fexpr *fx, const bool *is_const, const float *value, int k, int lane) {
  const cg_fx *x = &fx->x[k];
  char v[16], sfx[4] = "";
  if (lane >= 0) snprintf(sfx, sizeof sfx, "_%c", "xyzw"[lane]);
  snprintf(v, sizeof v, "v%d%s", k, sfx);
  switch (x->kind) {
  case CG_FX_LOAD:
    if (is_const[x->slot]) cg_tx(t, "    float %s = ", v), cg_tx_float(t, value[x->slot]), cg_tx(t, ";\n");
    else if (lane >= 0 && cg_scalar_input(fx, x->slot)) cg_tx(t, "    float %s = in%d[0];\n", v, x->slot);
    else if (lane >= 0) cg_tx(t, "    float %s = a%d.%c;\n", v, x->slot, "xyzw"[lane]);
    else cg_tx(t, "    float %s = in%d[", v, x->slot), cg_tx_offset(t, fx, x->slot), cg_tx(t, "];\n");
    break;
  case CG_FX_LOAD_OUT:
    if (lane >= 0) cg_tx(t, "    float %s = o%d.%c;\n", v, x->slot, "xyzw"[lane]);
    else cg_tx(t, "    float %s = out%d[i];\n", v, x->slot);
    break;
  case CG_FX_FCONST: cg_tx(t, "    float %s = ", v), cg_tx_float(t, x->f), cg_tx(t, ";\n"); break;
  case CG_FX_ICONST: cg_tx(t, "    int %s = %d;\n", v, x->i); break;
  case CG_FX_ADD: cg_tx(t, "    float %s = v%d%s + v%d%s;\n", v, x->arg[0], sfx, x->arg[1], sfx); break;
  case CG_FX_CALL:
    cg_tx(t, "    float %s = %s(", v, x->fn);
    for (int a = 0; a < x->narg; a++) cg_tx(t, "%sv%d%s", a ? ", " : "", x->arg[a], sfx);
    cg_tx(t, ");\n");
    break;
  }
}

/* The float4 loop, taken when every pointer it reads or writes whole is 16-byte aligned (the
 * arena's and the store's are; a caller's device pointer may not be), else the scalar loop
 * below it runs. Each output is written after all four lanes are computed, so an output that
 * shares an input's buffer is read before it is overwritten, as in the scalar loop. */
static void cg_tx_vector_loop(cg_text *t, const cg_fexpr *fx, const bool *is_const, const float *value) {
  bool old_out[fx->nout + 1];
  memset(old_out, 0, sizeof old_out);
  for (int k = 0; k < fx->nx; k++)
    if (fx->x[k].kind == CG_FX_LOAD_OUT) old_out[fx->x[k].slot] = true;
  cg_tx(t, "  if (%s!((0", fx->dynamic ? "n % 4 == 0 && " : "");
  for (int s = 0; s < fx->nin; s++)
    if (!is_const[s] && cg_contiguous(fx, s)) cg_tx(t, " | (unsigned long long)in%d", s);
  for (int j = 0; j < fx->nout; j++) cg_tx(t, " | (unsigned long long)out%d", j);
  int64_t nq = fx->numel / 4;
  const char *ix = cg_ix(nq);
  char count[48];
  if (fx->dynamic) snprintf(count, sizeof count, "n / 4");
  else snprintf(count, sizeof count, "%lld%s", (long long)nq, cg_sfx(nq));
  cg_tx(t, ") & 15)) {\n  for (%s q = blockIdx.x * (%s)blockDim.x + threadIdx.x; q < %s; q += (%s)blockDim.x * gridDim.x) {\n", ix, ix,
        count, ix);
  for (int s = 0; s < fx->nin; s++)
    if (!is_const[s] && cg_contiguous(fx, s) && !cg_scalar_input(fx, s)) cg_tx(t, "    float4 a%d = ((const float4 *)in%d)[q];\n", s, s);
  for (int j = 0; j < fx->nout; j++)
    if (old_out[j]) cg_tx(t, "    float4 o%d = ((const float4 *)out%d)[q];\n", j, j);
  for (int lane = 0; lane < 4; lane++)
    for (int k = 0; k < fx->nx; k++) cg_tx_node(t, fx, is_const, value, k, lane);
  for (int j = 0; j < fx->nout; j++)
    cg_tx(t, "    ((float4 *)out%d)[q] = make_float4(v%d_x, v%d_y, v%d_z, v%d_w);\n", j, fx->store[j], fx->store[j], fx->store[j],
          fx->store[j]);
  cg_tx(t, "  }\n  return;\n  }\n");
}

/* __device__ void kiln_body<id>(in0.., out0..): the group's loop, one element a thread. The
 * outputs are contiguous in the space; an output may be its aliased input's buffer (each
 * thread reads and writes only its own element there). */
static void cg_tx_fexpr_body(cg_text *t, const cg_fexpr *fx, const bool *is_const, const float *value, int id) {
  cg_tx(t, "static __device__ void kiln_body%d(", id);
  for (int s = 0; s < fx->nin; s++) cg_tx(t, "%sconst float *in%d", s ? ", " : "", s);
  for (int j = 0; j < fx->nout; j++) cg_tx(t, "%sfloat *out%d", fx->nin + j ? ", " : "", j);
  if (fx->dynamic) cg_tx(t, ", const long long *kx");
  cg_tx(t, ") {\n");
  if (fx->dynamic) cg_tx_dynamic_sizes(t, fx);
  if (cg_vectorizable(fx, is_const)) cg_tx_vector_loop(t, fx, is_const, value);
  const char *ix = cg_ix(fx->numel);
  char count[48];
  if (fx->dynamic) snprintf(count, sizeof count, "n");
  else snprintf(count, sizeof count, "%lld%s", (long long)fx->numel, cg_sfx(fx->numel));
  cg_tx(t, "  for (%s i = blockIdx.x * (%s)blockDim.x + threadIdx.x; i < %s; i += (%s)blockDim.x * gridDim.x) {\n", ix, ix,
        count, ix);
  for (int k = 0; k < fx->nx; k++) cg_tx_node(t, fx, is_const, value, k, -1);
  for (int j = 0; j < fx->nout; j++) cg_tx(t, "    out%d[i] = v%d;\n", j, fx->store[j]);
  cg_tx(t, "  }\n}\n\n");
}

/* ---- groups of one: an unfused elementwise node as a fused node over its present slots ---- */

typedef struct {
  ir_node fn;                  /* the wrapping IR_N_FUSED node */
  int in[8], out[4];           /* its slots: the member's present tensors, each once */
  int in_map[8], out_map[4];   /* the step slot each compact slot comes from */
} cg_single;

static int cg_single_make(const ir_node *nd, cg_single *s) {
  memset(s, 0, sizeof *s);
  int ni = 0, no = 0;
  for (int j = 0; j < nd->nin; j++) {
    if (nd->in[j] < 0) continue;
    bool dup = false;
    for (int k = 0; k < ni; k++) dup = dup || s->in[k] == nd->in[j];
    if (dup) continue;
    if (ni == 8) return 1;
    s->in_map[ni] = j, s->in[ni++] = nd->in[j];
  }
  for (int j = 0; j < nd->nout; j++) {
    if (nd->out[j] < 0 || ir_node_req(nd, j) == kNullOp) continue;
    if (no == 4) return 1;
    s->out_map[no] = j, s->out[no++] = nd->out[j];
  }
  s->fn = (ir_node){.kind = IR_N_FUSED, .op = -1, .name = nd->name, .nin = ni, .nout = no, .in = s->in, .out = s->out,
                    .sub = (ir_node *)nd, .nsub = 1};
  return no == 0;   /* nothing to write: the pass would have dropped it */
}

/* Bounded dims: node i of a probe graph as the generator sees it (cg_fexpr_probe's builder). */
static int cg_probe_build(const ir_graph *q, int i, bool flat, cg_fexpr *fx, char *err, size_t n) {
  const ir_node *nd = ir_node_at(q, i);
  if (nd->kind == IR_N_FUSED) return cg_fexpr_build_as(q, nd, flat, fx, err, n);
  cg_single s;
  if (!cg_cuda_generated(nd) || cg_single_make(nd, &s))
    return rt_errf(err, n, "bounded dims: the step differs at other extents; compile with fixed dims");
  return cg_fexpr_build_as(q, &s.fn, flat, fx, err, n);
}

/* Group fn's expression with its sizes fitted over the bounded dims' ranges: over the merged
 * space when its trip counts and strides follow the dims there, else over the output's own
 * axes (cg_fexpr.flat), whose extents do where a merged run of them would not. */
static int cg_gen_fexpr_build(cg_gen *gen, const ir_graph *g, const ir_node *fn, bool train, int step, cg_fexpr *fx) {
  if (cg_fexpr_build(g, fn, fx, gen->err, gen->n)) return 1;
  if (!gen->pr || !cg_fexpr_probe(gen->pr, train, step, fx, cg_probe_build, gen->err, gen->n)) return 0;
  cg_fexpr_free(fx);
  if (cg_fexpr_build_as(g, fn, true, fx, gen->err, gen->n)) return 1;
  if (!cg_fexpr_probe(gen->pr, train, step, fx, cg_probe_build, gen->err, gen->n)) return 0;
  cg_fexpr_free(fx);
  return 1;
}

/* ---- the broadcast gradient of a binary op ---- */

/* A binary backward whose gradient operand is not the output's shape. */
static bool cg_is_bcast_backward(const ir_graph *g, const ir_node *nd) {
  if (nd->kind != IR_N_BACKWARD || !cg_cuda_binary[nd->op] || !nd->slot_shape) return false;
  const k_shape *og = &nd->slot_shape[0];
  for (int j = 0; j < nd->nout; j++)
    if (nd->out[j] >= 0 && !ir_shape_eq(&ir_tensor_at(g, nd->out[j])->shape, og)) return true;
  return false;
}

/* Body for gradient j (0: a, 1: b) of `op`: for each element of the operand, the sum over
 * the output positions that read it, in increasing order of those positions. */
static void cg_tx_bcast_grad(cg_text *t, const ir_node *nd, int j) {
  const k_shape *s = &nd->slot_shape[0];          /* og, y: the output's shape */
  const k_shape *pa = &nd->slot_shape[1], *pb = &nd->slot_shape[2];
  const k_shape *pj = j ? pb : pa;
  int64_t sa[K_MAX_RANK], sb[K_MAX_RANK], sj[K_MAX_RANK], so[K_MAX_RANK];
  /* the operands broadcast to the output's shape, or the binary op would not have checked */
  cg_fexpr_bcast_strides(pa, s, sa), cg_fexpr_bcast_strides(pb, s, sb), cg_fexpr_bcast_strides(pj, s, sj);
  int64_t m = 1, nj = k_shape_numel(pj), red = 1;
  for (int d = s->rank - 1; d >= 0; d--) so[d] = m, m *= s->d[d];
  for (int d = 0; d < s->rank; d++)
    if (!sj[d]) red *= s->d[d];
  k_req req = ir_node_req(nd, j);
  cg_tx(t, "  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < %lldLL;"
        " e += (long long)blockDim.x * gridDim.x) {\n    float acc = 0.0f;\n", (long long)nj);
  cg_tx(t, "    for (long long q = 0; q < %lldLL; q++) {\n      long long o = 0, oa = 0, ob = 0;\n", (long long)red);
  /* the position: kept axes from e (the operand's own index), reduced ones from q */
  int64_t em = 1, qm = 1;
  for (int d = s->rank - 1; d >= 0; d--) {
    if (s->d[d] == 1) continue;
    const char *v = sj[d] ? "e" : "q";
    int64_t div = sj[d] ? em : qm;
    cg_tx(t, "      { long long c = %s / %lldLL %% %lldLL; o += c * %lldLL; oa += c * %lldLL; ob += c * %lldLL; }\n", v,
          (long long)div, (long long)s->d[d], (long long)so[d], (long long)sa[d], (long long)sb[d]);
    if (sj[d]) em *= s->d[d];
    else qm *= s->d[d];
  }
  const char *sfx = j ? "_grad_b" : "_grad_a";
  cg_tx(t, "      acc += k_sf_%s%s(og[o], a ? a[oa] : 0.0f, b ? b[ob] : 0.0f, y ? y[o] : 0.0f);\n    }\n",
        cg_fexpr_stem(nd), sfx);
  cg_tx(t, "    %s[e] %s acc;\n  }\n", j ? "gb" : "ga", req == kAddTo ? "+=" : "=");
}

/* The same sum for a model with bounded dims: the output's and operands' extents (aligned to
 * the output's rank, 1 where an operand has no axis), each a size that may follow the dims,
 * fitted from the probe graphs; which axes an operand broadcasts along is the bound's (an axis
 * of extent 1 there that does not move). The kernel takes the output's extents (sd) from the
 * run's and derives every stride from them; its loop is the static one's with the positions
 * decomposed at run time, so the order of the sum, and its bits, are the same. */
typedef struct { int64_t v[3][K_MAX_RANK]; k_dimval dv[3][K_MAX_RANK]; int rank; } cg_bshape;

static int cg_bshape_fit(const cg_probes *pr, bool train, int step, const ir_node *nd, cg_bshape *b) {
  int r = nd->slot_shape[0].rank;
  b->rank = r;
  for (int k = 0; k < 3; k++)
    for (int d = 0; d < r; d++) {
      const k_shape *sh = &nd->slot_shape[k];
      int od = d - (r - sh->rank);   /* the operand's own axis, or < 0: none (extent 1) */
      b->v[k][d] = od >= 0 ? sh->d[od] : 1;
      int64_t vp[K_MAX_BDIMS + 1];
      for (int p = 0; p < pr->n; p++) {
        const ir_graph *q = train ? pr->train[p] : pr->predict[p];
        const ir_node *m = q && step < ir_nnodes(q) ? ir_node_at(q, step) : NULL;
        if (!m || m->kind != nd->kind || m->op != nd->op || !m->slot_shape || m->slot_shape[k].rank != sh->rank) return 1;
        vp[p] = od >= 0 ? m->slot_shape[k].d[od] : 1;
      }
      if (ir_dims_fit(pr->lowered, b->v[k][d], vp, &b->dv[k][d])) return 1;
    }
  return 0;
}

static bool cg_bshape_dynamic(const cg_bshape *b) {
  for (int k = 0; k < 3; k++)
    for (int d = 0; d < b->rank; d++)
      if (b->dv[k][d].mask) return true;
  return false;
}

static void cg_tx_bcast_grad_dynamic(cg_text *t, const ir_node *nd, const cg_bshape *b, int j) {
  int r = b->rank;
  bool bc[3][K_MAX_RANK];   /* operand k broadcasts along axis d */
  for (int k = 1; k < 3; k++)
    for (int d = 0; d < r; d++) bc[k][d] = b->v[k][d] == 1 && !b->dv[k][d].mask && (b->v[0][d] != 1 || b->dv[0][d].mask);
  cg_tx(t, "  {\n    long long sd[%d], so[%d], sa[%d], sb[%d], nj = 1, red = 1;\n", r, r, r, r);
  for (int d = 0; d < r; d++) cg_tx(t, "    sd[%d] = ", d), cg_tx_dimval(t, b->v[0][d], b->dv[0][d]), cg_tx(t, ";\n");
  cg_tx(t, "    long long m = 1, ma = 1, mb = 1;\n");
  for (int d = r - 1; d >= 0; d--) {
    cg_tx(t, "    so[%d] = m; m *= sd[%d];", d, d);
    cg_tx(t, bc[1][d] ? " sa[%d] = 0;" : " sa[%d] = ma; ma *= sd[%d];", d, d);
    cg_tx(t, bc[2][d] ? " sb[%d] = 0;" : " sb[%d] = mb; mb *= sd[%d];", d, d);
    cg_tx(t, bc[1 + j][d] ? " red *= sd[%d];\n" : " nj *= sd[%d];\n", d);
  }
  k_req req = ir_node_req(nd, j);
  cg_tx(t, "    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < nj; e += (long long)blockDim.x * gridDim.x) {\n"
           "      float acc = 0.0f;\n      for (long long q = 0; q < red; q++) {\n"
           "        long long o = 0, oa = 0, ob = 0, em = 1, qm = 1;\n");
  for (int d = r - 1; d >= 0; d--) {
    const char *v = bc[1 + j][d] ? "q" : "e", *mm = bc[1 + j][d] ? "qm" : "em";
    cg_tx(t, "        { long long c = %s / %s %% sd[%d]; o += c * so[%d]; oa += c * sa[%d]; ob += c * sb[%d]; %s *= sd[%d]; }\n", v, mm,
          d, d, d, d, mm, d);
  }
  const char *sfx = j ? "_grad_b" : "_grad_a";
  cg_tx(t, "        acc += k_sf_%s%s(og[o], a ? a[oa] : 0.0f, b ? b[ob] : 0.0f, y ? y[o] : 0.0f);\n      }\n", cg_fexpr_stem(nd), sfx);
  cg_tx(t, "      %s[e] %s acc;\n    }\n  }\n", j ? "gb" : "ga", req == kAddTo ? "+=" : "=");
}

/* ---- entries ---- */

/* A step's kernel: its tensors' pointers, then in a model with bounded dims the run's extents
 * (device memory, K_MAX_BDIMS of them), as the runtime launches every generated step. */
static void cg_tx_entry_head(cg_gen *gen, bool train, int step, int nin, int nout) {
  cg_text *t = &gen->src;
  char name[64];
  rt_fused_name(name, sizeof name, train, step);
  cg_tx(t, "extern \"C\" __global__ void %s(", name);
  for (int s = 0; s < nin; s++) cg_tx(t, "%sfloat *p%d", s ? ", " : "", s);
  for (int j = 0; j < nout; j++) cg_tx(t, "%sfloat *p%d", nin + j ? ", " : "", nin + j);
  if (gen->pr) cg_tx(t, "%sconst long long *kx", nin + nout ? ", " : "");
  cg_tx(t, ")");
}

static int cg_gen_bcast(cg_gen *gen, const ir_node *nd, bool train, int step) {
  if (nd->nin != 4 || nd->nout != 2) return rt_errf(gen->err, gen->n, "a binary backward without 4 inputs and 2 outputs");
  cg_bshape b;
  if (gen->pr && cg_bshape_fit(gen->pr, train, step, nd, &b))
    return rt_errf(gen->err, gen->n, "bounded dims: its broadcast shapes follow no form a * dim + b; compile with fixed dims");
  bool dynamic = gen->pr && cg_bshape_dynamic(&b);
  cg_text *t = &gen->src;
  cg_tx_entry_head(gen, train, step, 4, 2);
  cg_tx(t, " {\n  const float *og = p0, *a = p1, *b = p2, *y = p3;\n  float *ga = p4, *gb = p5;\n  (void)a, (void)b, (void)y;\n");
  for (int j = 0; j < 2; j++) {
    if (nd->out[j] < 0 || ir_node_req(nd, j) == kNullOp) continue;
    if (dynamic) cg_tx_bcast_grad_dynamic(t, nd, &b, j);
    else cg_tx_bcast_grad(t, nd, j);
  }
  cg_tx(t, "}\n\n");
  return 0;
}

/* A fused group (or a group of one): its body (new or shared) and the step's entry, which
 * passes the body its slots in the compact order. */
static int cg_gen_fexpr(cg_gen *gen, const ir_graph *g, const ir_node *fn, const int *in_map, const int *out_map,
                        int step_nin, int step_nout, bool train, int step) {
  cg_fexpr fx;
  if (cg_gen_fexpr_build(gen, g, fn, train, step, &fx)) return 1;
  bool is_const[fn->nin + 1];
  float value[fn->nin + 1];
  for (int s = 0; s < fn->nin; s++) {
    const ir_tensor *x = ir_tensor_at(g, fn->in[s]);
    is_const[s] = x->kind == IR_T_CONST, value[s] = x->value;
  }
  size_t len;
  unsigned char *key = cg_fexpr_key_consts(&fx, is_const, value, &len);
  int id, found = key ? cg_body_find(gen, key, len, &id) : -1;
  if (found < 0) return cg_fexpr_free(&fx), rt_errf(gen->err, gen->n, "out of memory");
  if (!found) cg_tx_fexpr_body(&gen->src, &fx, is_const, value, id);
  cg_text *t = &gen->src;
  cg_tx_entry_head(gen, train, step, step_nin, step_nout);
  cg_tx(t, " {\n  kiln_body%d(", id);
  for (int s = 0; s < fx.nin; s++) cg_tx(t, "%sp%d", s ? ", " : "", in_map ? in_map[s] : s);
  for (int j = 0; j < fx.nout; j++) cg_tx(t, "%sp%d", fx.nin + j ? ", " : "", step_nin + (out_map ? out_map[j] : j));
  cg_tx(t, "%s);\n}\n\n", fx.dynamic ? ", kx" : "");
  cg_fexpr_free(&fx);
  return 0;
}

static int cg_gen_node_text(cg_gen *gen, const ir_graph *g, int i, bool train) {
  const ir_node *nd = ir_node_at(g, i);
  if (nd->kind == IR_N_FUSED) return cg_gen_fexpr(gen, g, nd, NULL, NULL, nd->nin, nd->nout, train, i);
  if (cg_is_bcast_backward(g, nd)) return cg_gen_bcast(gen, nd, train, i);
  cg_single s;
  if (cg_single_make(nd, &s)) return rt_errf(gen->err, gen->n, "an elementwise node the GPU generator cannot take");
  return cg_gen_fexpr(gen, g, &s.fn, s.in_map, s.out_map, nd->nin, nd->nout, train, i);
}

/* Node i's kernel; a failure names the step. */
static int cg_gen_node(cg_gen *gen, const ir_graph *g, int i, bool train) {
  const ir_node *nd = ir_node_at(g, i);
  if (!cg_cuda_generated(nd) || !cg_gen_node_text(gen, g, i, train)) return 0;
  char msg[512];
  snprintf(msg, sizeof msg, "%s", gen->err);
  return rt_errf(gen->err, gen->n, "%s graph, step %d (%s): %s", train ? "train" : "predict", i, nd->name, msg);
}

/* The whole program's text: the shared headers first, then every generated step of both graphs. */
int cg_cuda_source(const ir_graph *predict, const ir_graph *train, const cg_probes *pr, char **src, char *err, size_t n) {
  cg_gen gen = {.err = err, .n = n, .pr = pr && pr->n ? pr : NULL};
  cg_tx(&gen.src, "/* generated by kiln: %s */\n", predict->name);
  for (int k = 0; k < cg_cuda_nsources; k++)
    if (cg_cuda_sources[k].role == CG_CUDA_SRC_MAIN) cg_tx(&gen.src, "#include \"%s\"\n", cg_cuda_sources[k].name);
  cg_tx(&gen.src, "\n");
  int bad = 0;
  const ir_graph *gs[2] = {predict, train};
  for (int k = 0; k < 2 && !bad; k++)
    for (int i = 0; gs[k] && i < ir_nnodes(gs[k]) && !bad; i++) bad = cg_gen_node(&gen, gs[k], i, k == 1);
  for (int i = 0; i < gen.nbodies; i++) free(gen.bodies[i].key);
  free(gen.bodies);
  if (!bad && gen.src.oom) bad = rt_errf(err, n, "out of memory");
  if (bad) return free(gen.src.p), 1;
  *src = gen.src.p;
  return 0;
}

/* ---- the descriptor, made a CUDA model's ---- */

static void cg_cuda_steps(rt_program *p, const ir_graph *g) {
  for (int i = 0; g && i < p->nsteps; i++) {
    rt_step *s = (rt_step *)&p->steps[i];
    const ir_node *nd = ir_node_at(g, i);
    if (cg_cuda_generated(nd)) s->kind = RT_STEP_FUSED;
    s->kernel = NULL, s->fused = NULL;   /* the GPU runs its own: generated, or the op table's */
  }
}

void cg_cuda_retarget(rt_model_desc *d, const ir_graph *predict, const ir_graph *train, const char *ptx, const char *lib_ptx) {
  cg_cuda_steps(&d->predict, predict);
  if (d->has_train) cg_cuda_steps(&d->train, train);
  d->target = RT_TARGET_CUDA;
  d->gpu_module = ptx;
  d->gpu_lib_module = lib_ptx;
}
