/* k_elemwise.c — unary ops over any shape and binary ops with NumPy broadcasting.
 * All scalar math comes from k_scalar.h so that these reference kernels and the generated
 * fused loops compute the same thing; this file only supplies the loops and OpReqType. */
#include "kernels.h"
#include "k_scalar.h"
#include "k_bview.h"
#include "k_vm512.h"

#include <string.h>

#define K_PARAM(T) ((const T *)c->param)


/* The unary loops, where the k_vm_* math is, carry K_VEC_TARGETS (k_vec.h): AVX2 and
 * AVX-512 clones picked at load time, computing the same bits (-ffp-contract=off: no FMA,
 * only wider). */

/* ---- unary: forward in=[x] out=[y]; backward in=[og, x, y] out=[gx] ----
 * Element i is read before it is written, so out may alias an input, but only as the same
 * buffer (kWriteInplace): no iteration reads what another wrote, which `ivdep` tells gcc,
 * whose runtime overlap check would otherwise send every in-place call to the scalar loop.
 * The loop is written twice, for kAddTo and for the writes, so that no branch stays inside
 * it: gcc unswitches only small loops, and one with k_vm_* math inlined is not small. */
#define K_UNARY_LOOP(n, out, LOAD, EXPR, req)                           \
  do {                                                                  \
    if ((req) == kAddTo) {                                              \
      _Pragma("GCC ivdep")                                              \
      for (int64_t i = 0; i < (n); i++) { LOAD; (out)[i] += (EXPR); }   \
    } else {                                                            \
      _Pragma("GCC ivdep")                                              \
      for (int64_t i = 0; i < (n); i++) { LOAD; (out)[i] = (EXPR); }    \
    }                                                                   \
  } while (0)

/* Each unary op is a range function split by k_parallel_for in chunks of K_GRAIN or, for a
 * light op, K_GRAIN_LIGHT elements (k_vec.h): a multiple of every vector width, fixed by the
 * op and the size alone, so each element goes through the same code with any thread count.
 * ctx is the call (const, passed as k_range_fn's void *). */
static int64_t k_elem_grain(const char *op) { return k_vec_light_stem(op) ? K_GRAIN_LIGHT : K_GRAIN; }

#define K_UNARY_FWD(op, EXPR) K_UNARY_FWD_FIRST(op, EXPR, )

/* The same, trying FIRST (a statement that returns when it has done the range) before the
 * loop. */
#define K_UNARY_FWD_FIRST(op, EXPR, FIRST)                              \
  K_VEC_TARGETS static void k_##op##_forward_range(void *ctx, int64_t lo, int64_t hi) { \
    const k_call *c = ctx;                                              \
    const float *xs = (const float *)c->in[0].data + lo;                \
    float *ys = (float *)c->out[0].data + lo;                           \
    FIRST                                                               \
    K_UNARY_LOOP(hi - lo, ys, float x = xs[i], EXPR, c->req[0]);        \
  }                                                                     \
  int k_##op##_forward(const k_call *c) {                               \
    if (c->req[0] == kNullOp) return 0;                                 \
    k_parallel_for(k_shape_numel(&c->out[0].shape), k_elem_grain(#op), \
                   k_##op##_forward_range, (void *)c);                  \
    return 0;                                                           \
  }

/* The same for a K_UNARY_WIDE op: its AVX-512 loop (k_vm512.h, the same bits) where the CPU
 * has it. */
#if K_VM512
#define K_UNARY_FWD_WIDE(op, EXPR)                                      \
  K_VM512_ROWS(k_##op##_forward_512, k_vm512_##op)                      \
  K_UNARY_FWD_FIRST(op, EXPR, if (k_vm512_have()) {                     \
    k_##op##_forward_512(xs, ys, hi - lo, c->req[0] == kAddTo);         \
    return;                                                             \
  })
#else
#define K_UNARY_FWD_WIDE K_UNARY_FWD
#endif

/* An undeclared x or y (NULL) reads og's element instead, masked to +0 by its bits: a load
 * that always happens and an AND let gcc vectorise the loop, which `p ? p[i] : 0` (a
 * conditional load) and even `has ? v : 0` (with a large body) do not. */
#define K_UNARY_BWD(op, EXPR)                                           \
  K_VEC_TARGETS static void k_##op##_backward_range(void *ctx, int64_t lo, int64_t hi) { \
    const k_call *c = ctx;                                              \
    const float *ogs = c->in[0].data, *xs = c->in[1].data, *ys = c->in[2].data; \
    unsigned int mx = xs ? ~0u : 0u, my = ys ? ~0u : 0u;                \
    xs = (xs ? xs : ogs) + lo;                                          \
    ys = (ys ? ys : ogs) + lo;                                          \
    ogs += lo;                                                          \
    float *gx = (float *)c->out[0].data + lo;                           \
    K_UNARY_LOOP(hi - lo, gx,                                           \
                 float og = ogs[i];                                     \
                 float x = k_vm_asfloat(k_vm_asuint(xs[i]) & mx);       \
                 float y = k_vm_asfloat(k_vm_asuint(ys[i]) & my),       \
                 EXPR, c->req[0]);                                      \
  }                                                                     \
  int k_##op##_backward(const k_call *c) {                              \
    if (c->req[0] == kNullOp) return 0;                                 \
    k_parallel_for(k_shape_numel(&c->out[0].shape), k_elem_grain(#op), \
                   k_##op##_backward_range, (void *)c);                 \
    return 0;                                                           \
  }

/* The unary ops of the op list without parameters; those with follow, written out. */
#define K_DEFINE_PLAIN(op) \
  K_UNARY_FWD(op, k_sf_##op(x)) \
  K_UNARY_BWD(op, k_sf_##op##_grad(og, x, y))
#define K_DEFINE_WIDE(op) \
  K_UNARY_FWD_WIDE(op, k_sf_##op(x)) \
  K_UNARY_BWD(op, k_sf_##op##_grad(og, x, y))
#define K_OP(op)
#define K_BINARY(op)
#define K_UNARY K_DEFINE_PLAIN
#define K_UNARY_WIDE K_DEFINE_WIDE
#define K_UNARY_PARAM(op)
#include "k_ops.def"
#undef K_OP
#undef K_BINARY
#undef K_UNARY
#undef K_UNARY_WIDE
#undef K_UNARY_PARAM

K_UNARY_FWD(leaky_relu, k_sf_leaky_relu(x, K_PARAM(k_leaky_relu_param)->slope))
K_UNARY_BWD(leaky_relu, k_sf_leaky_relu_grad(og, x, y, K_PARAM(k_leaky_relu_param)->slope))
K_UNARY_FWD(clip, k_sf_clip(x, K_PARAM(k_clip_param)->a_min, K_PARAM(k_clip_param)->a_max))
K_UNARY_BWD(clip, k_sf_clip_grad(og, x, y, K_PARAM(k_clip_param)->a_min,
                                 K_PARAM(k_clip_param)->a_max))
K_UNARY_FWD(smooth_l1, k_sf_smooth_l1(x, K_PARAM(k_smooth_l1_param)->sigma))
K_UNARY_BWD(smooth_l1, k_sf_smooth_l1_grad(og, x, y, K_PARAM(k_smooth_l1_param)->sigma))
K_UNARY_FWD(hard_sigmoid, k_sf_hard_sigmoid(x, K_PARAM(k_hard_sigmoid_param)->alpha,
                                            K_PARAM(k_hard_sigmoid_param)->beta))
K_UNARY_BWD(hard_sigmoid, k_sf_hard_sigmoid_grad(og, x, y, K_PARAM(k_hard_sigmoid_param)->alpha,
                                                 K_PARAM(k_hard_sigmoid_param)->beta))
K_UNARY_FWD(activation, k_sf_activation(x, K_PARAM(k_activation_param)->act_type))
K_UNARY_BWD(activation, k_sf_activation_grad(og, x, y, K_PARAM(k_activation_param)->act_type))

/* ---- binary: forward in=[a, b] out=[y]; backward in=[og, a, b, y] out=[ga, gb] ----
 * Both directions run on a collapsed broadcast view (k_bview.h): the innermost run reads each
 * operand at stride 1 or 0, and each op gets its own loops per stride case with its scalar
 * function inlined, so they vectorise. The generic per-element iterator these replaced lives
 * on only as the reference in tests/kernels/test_elemwise.c. */
typedef struct {
  const k_bview *v;
  const float *a, *b;
  float *y;
  k_req req;
  k_fwd_block_fn blk;
  int64_t nb;                 /* blocks per run */
} k_fwd_job;

/* tile[0 .. K_BLOCK) = the run r[0 .. n) repeated, n dividing K_BLOCK (so a power of 2): by
 * doubling copies. A `k % n` per element (n not a constant, so a division each) took 0.6 us a
 * run: EfficientNet-B1's channel scales on 7x7 planes cost more than the products. */
static void k_tile_run(float *tile, const float *r, int64_t n) {
  memcpy(tile, r, (size_t)n * sizeof(float));
  for (int64_t have = n; have < K_BLOCK; have *= 2) memcpy(tile + have, tile, (size_t)have * sizeof(float));
}

/* Units are blocks of runs; y over a same-shaped input (kWriteInplace) is safe because each
 * block is read before it is stored. */
static void k_binary_forward_range(void *ctx, int64_t lo, int64_t hi) {
  const k_fwd_job *j = ctx;
  const k_bview *v = j->v;
  int in = v->rank - 1;
  int64_t n = v->d[in], sa = v->st[1][in], sb = v->st[2][in], off[3];
  float t[K_BLOCK];
  if (j->nb == 1 && in >= 1) {
    /* Runs of at most a block (a channel scale on blocked values: 16 floats), one operand
     * contiguous across the next axis out and the other repeating along it: the repeated run
     * is tiled into a block once, and the contiguous span goes through in whole blocks. Other
     * short runs step their offsets along that axis instead of rebuilding them for every run.
     * Each element gets the same operands and op either way, so the same bits. */
    int ax = in - 1;
    int rep = v->st[0][ax] == n && sa == 1 && sb == 1 && K_BLOCK % n == 0
                  ? (v->st[1][ax] == n && v->st[2][ax] == 0 ? 2 : v->st[2][ax] == n && v->st[1][ax] == 0 ? 1 : 0)
                  : 0;
    float tile[K_BLOCK];
    for (int64_t u = lo; u < hi;) {
      int64_t end = u + (v->d[ax] - u % v->d[ax]);
      end = end < hi ? end : hi;
      k_bview_at(v, (1u << in) - 1, u, off);
      if (rep) {   /* operand rep repeats: its run tiled, the other read straight through */
        const float *r = (rep == 1 ? j->a : j->b) + off[rep];
        k_tile_run(tile, r, n);
        int64_t span = (end - u) * n;
        for (int64_t e = 0; e < span; e += K_BLOCK) {
          int64_t len = span - e < K_BLOCK ? span - e : K_BLOCK;
          j->blk(t, rep == 1 ? tile : j->a + off[1] + e, rep == 2 ? tile : j->b + off[2] + e, len, 1, 1);
          k_store_block(j->y + off[0] + e, t, len, j->req);
        }
        u = end;
        continue;
      }
      for (; u < end; u++) {
        j->blk(t, j->a + off[1], j->b + off[2], n, sa, sb);
        k_store_block(j->y + off[0], t, n, j->req);
        off[0] += v->st[0][ax], off[1] += v->st[1][ax], off[2] += v->st[2][ax];
      }
    }
    return;
  }
  for (int64_t u = lo; u < hi; u++) {
    int64_t k0 = u % j->nb * K_BLOCK, len = n - k0 < K_BLOCK ? n - k0 : K_BLOCK;
    k_bview_at(v, (1u << in) - 1, u / j->nb, off);
    j->blk(t, j->a + off[1] + k0 * sa, j->b + off[2] + k0 * sb, len, sa, sb);
    k_store_block(j->y + off[0] + k0, t, len, j->req);
  }
}

static int k_binary_forward(const k_call *c, k_fwd_block_fn blk, const char *op) {
  if (c->req[0] == kNullOp) return 0;
  k_bview v = k_bview_make(&c->out[0].shape, &c->in[0].shape, &c->in[1].shape);
  int64_t n = v.d[v.rank - 1], nb = (n + K_BLOCK - 1) / K_BLOCK;
  int64_t units = n ? k_shape_numel(&c->out[0].shape) / n * nb : 0;
  k_fwd_job j = {&v, c->in[0].data, c->in[1].data, c->out[0].data, c->req[0], blk, nb};
  int64_t run = n < K_BLOCK ? n : K_BLOCK, grain = run ? k_elem_grain(op) / run : 1;
  k_parallel_for(units, grain > 0 ? grain : 1, k_binary_forward_range, &j);
  return 0;
}

/* An undeclared operand (NULL) reads og instead: the op's gradient does not use its value,
 * and every offset of an input is inside og, which has the output's (larger) size. */
static k_bsrc k_binary_sources(const k_call *c) {
  const float *og = c->in[0].data;
  k_bsrc s = {og, c->in[1].data, c->in[2].data, c->in[3].data};
  if (!s.x1) s.x1 = og;
  if (!s.x2) s.x2 = og;
  if (!s.y) s.y = og;
  return s;
}


/* Gradient of operand j (0 = a, 1 = b): the sum of its per-element term over the output
 * positions it was broadcast to. */
static void k_binary_grad(const k_call *c, int j, const k_reducer *g) {
  const k_shape *full = &c->in[0].shape;
  k_bview v = k_bview_make(full, &c->in[1].shape, &c->in[2].shape);
  k_breduce(&v, 1 + j, k_binary_sources(c), c->out[j].data, k_shape_numel(&c->in[1 + j].shape),
            c->req[j], 1.0f, g);
}

/* A gradient written in place over og must be computed last, after the other read og. */
static int k_binary_backward(const k_call *c, const k_reducer *ga, const k_reducer *gb) {
  int a_over_og = c->req[0] != kNullOp && c->out[0].data == c->in[0].data;
  if (a_over_og) {
    k_binary_grad(c, 1, gb);
    k_binary_grad(c, 0, ga);
  } else {
    k_binary_grad(c, 0, ga);
    k_binary_grad(c, 1, gb);
  }
  return 0;
}

/* The block functions of one op. Each *_at body is written once with strides as arguments and
 * called with constant strides per case, so every case compiles to its own vector loop. */
#define K_FWD_BLOCKS(op)                                                                   \
  static inline void k_##op##_fwd_at(float *restrict t, const float *a, const float *b,    \
                                     int64_t n, int64_t sa, int64_t sb) {                  \
    for (int64_t k = 0; k < n; k++) t[k] = k_sf_##op(a[k * sa], b[k * sb]);                \
  }                                                                                        \
  K_VEC_TARGETS void k_##op##_fwd_block(float *restrict t, const float *a, const float *b,               \
                                 int64_t n, int64_t sa, int64_t sb) {                      \
    if (sa && sb) k_##op##_fwd_at(t, a, b, n, 1, 1);                                       \
    else if (sa) k_##op##_fwd_at(t, a, b, n, 1, 0);                                        \
    else if (sb) k_##op##_fwd_at(t, a, b, n, 0, 1);                                        \
    else k_##op##_fwd_at(t, a, b, n, 0, 0);                                                \
  }

#define K_GRAD_TERM(G, s, k, s1, s2) G(s.og[k], s.x1[(k) * (s1)], s.x2[(k) * (s2)], s.y[k])

#define K_GRAD_BLOCKS(name, G)                                                             \
  static inline void name##_cols_at(float *restrict t, int first, k_bsrc s, int64_t n,     \
                                    int64_t s1, int64_t s2) {                              \
    if (first) for (int64_t k = 0; k < n; k++) t[k] = K_GRAD_TERM(G, s, k, s1, s2);        \
    else for (int64_t k = 0; k < n; k++) t[k] += K_GRAD_TERM(G, s, k, s1, s2);            \
  }                                                                                        \
  K_VEC_TARGETS static void name##_cols(float *restrict t, int first, k_bsrc s, int64_t n, int64_t s1,   \
                          int64_t s2) {                                                    \
    if (s1 && s2) name##_cols_at(t, first, s, n, 1, 1);                                    \
    else if (s1) name##_cols_at(t, first, s, n, 1, 0);                                     \
    else if (s2) name##_cols_at(t, first, s, n, 0, 1);                                     \
    else name##_cols_at(t, first, s, n, 0, 0);                                             \
  }                                                                                        \
  static inline void name##_rows_at(float *restrict l, k_bsrc s, int64_t n, int64_t s1,    \
                                    int64_t s2) {                                          \
    int64_t k = 0;                                                                         \
    for (; k + K_LANES <= n; k += K_LANES)                                                 \
      for (int i = 0; i < K_LANES; i++) l[i] += K_GRAD_TERM(G, s, k + i, s1, s2);          \
    for (int i = 0; k + i < n; i++) l[i] += K_GRAD_TERM(G, s, k + i, s1, s2);              \
  }                                                                                        \
  K_VEC_TARGETS static void name##_rows(float *restrict l, k_bsrc s, int64_t n, int64_t s1, int64_t s2) { \
    if (s1 && !s2) name##_rows_at(l, s, n, 1, 0);                                          \
    else if (s2 && !s1) name##_rows_at(l, s, n, 0, 1);                                     \
    else name##_rows_at(l, s, n, s1, s2);                                                  \
  }

#define K_DEFINE_BINARY(op)                                                               \
  K_FWD_BLOCKS(op)                                                                        \
  K_GRAD_BLOCKS(k_##op##_ga, k_sf_##op##_grad_a)                                          \
  K_GRAD_BLOCKS(k_##op##_gb, k_sf_##op##_grad_b)                                          \
  int k_##op##_forward(const k_call *c) { return k_binary_forward(c, k_##op##_fwd_block, #op); } \
  int k_##op##_backward(const k_call *c) {                                                \
    static const k_reducer ga = {k_##op##_ga_cols, k_##op##_ga_rows, 0.0f, k_lanes_sum, NULL}; \
    static const k_reducer gb = {k_##op##_gb_cols, k_##op##_gb_rows, 0.0f, k_lanes_sum, NULL}; \
    return k_binary_backward(c, &ga, &gb);                                                \
  }
#define K_OP(op)
#define K_UNARY(op)
#define K_BINARY K_DEFINE_BINARY
#include "k_ops.def"
#undef K_OP
#undef K_UNARY
#undef K_BINARY
