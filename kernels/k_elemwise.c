/* k_elemwise.c — unary ops over any shape and binary ops with NumPy broadcasting.
 * All scalar math comes from k_scalar.h so that these reference kernels and the generated
 * fused loops compute the same thing; this file only supplies the loops and OpReqType. */
#include "kernels.h"
#include "k_scalar.h"
#include "k_util.h"

#define K_PARAM(T) ((const T *)c->param)

/* An undeclared backward dependency arrives as NULL; its value is then unused. */
static inline float k_ld(const float *p, int64_t i) { return p ? p[i] : 0.0f; }

/* The library is built for baseline x86-64 (SSE2: 4 floats a vector); the unary loops,
 * where the k_vm_* math is, also get AVX2 and AVX-512 clones, picked at load time by the
 * CPU (gcc's target_clones). The clones compute the same bits: the same IEEE operations
 * with -ffp-contract=off, so no FMA, only wider. */
#if defined(__GNUC__) && __GNUC__ >= 12 && !defined(__clang__) && defined(__x86_64__) && !defined(KILN_SANITIZE)
#define K_VEC_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define K_VEC_CLONES
#endif

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

#define K_UNARY_FWD(op, EXPR)                                           \
  K_VEC_CLONES int k_##op##_forward(const k_call *c) {                  \
    k_req req = c->req[0];                                              \
    if (req == kNullOp) return 0;                                       \
    const float *xs = c->in[0].data;                                    \
    float *ys = c->out[0].data;                                         \
    int64_t n = k_shape_numel(&c->out[0].shape);                        \
    K_UNARY_LOOP(n, ys, float x = xs[i], EXPR, req);                    \
    return 0;                                                           \
  }

/* An undeclared x or y (NULL) reads og's element instead, masked to +0 by its bits: a load
 * that always happens and an AND let gcc vectorise the loop, which `p ? p[i] : 0` (a
 * conditional load) and even `has ? v : 0` (with a large body) do not. */
#define K_UNARY_BWD(op, EXPR)                                           \
  K_VEC_CLONES int k_##op##_backward(const k_call *c) {                 \
    k_req req = c->req[0];                                              \
    if (req == kNullOp) return 0;                                       \
    const float *ogs = c->in[0].data, *xs = c->in[1].data, *ys = c->in[2].data; \
    unsigned int mx = xs ? ~0u : 0u, my = ys ? ~0u : 0u;                \
    xs = xs ? xs : ogs;                                                 \
    ys = ys ? ys : ogs;                                                 \
    float *gx = c->out[0].data;                                         \
    int64_t n = k_shape_numel(&c->out[0].shape);                        \
    K_UNARY_LOOP(n, gx,                                                 \
                 float og = ogs[i];                                     \
                 float x = k_vm_asfloat(k_vm_asuint(xs[i]) & mx);       \
                 float y = k_vm_asfloat(k_vm_asuint(ys[i]) & my),       \
                 EXPR, req);                                            \
    return 0;                                                           \
  }

#define K_PLAIN_UNARY(X) X(neg) X(abs) X(exp) X(log) X(sqrt) X(rsqrt) X(square) X(sin) X(cos) \
  X(sign) X(reciprocal) X(relu) X(sigmoid) X(tanh) X(softplus) X(gelu)
#define K_DEFINE_PLAIN(op) \
  K_UNARY_FWD(op, k_sf_##op(x)) \
  K_UNARY_BWD(op, k_sf_##op##_grad(og, x, y))
K_PLAIN_UNARY(K_DEFINE_PLAIN)

K_UNARY_FWD(leaky_relu, k_sf_leaky_relu(x, K_PARAM(k_leaky_relu_param)->slope))
K_UNARY_BWD(leaky_relu, k_sf_leaky_relu_grad(og, x, y, K_PARAM(k_leaky_relu_param)->slope))
K_UNARY_FWD(clip, k_sf_clip(x, K_PARAM(k_clip_param)->a_min, K_PARAM(k_clip_param)->a_max))
K_UNARY_BWD(clip, k_sf_clip_grad(og, x, y, K_PARAM(k_clip_param)->a_min,
                                 K_PARAM(k_clip_param)->a_max))
K_UNARY_FWD(smooth_l1, k_sf_smooth_l1(x, K_PARAM(k_smooth_l1_param)->sigma))
K_UNARY_BWD(smooth_l1, k_sf_smooth_l1_grad(og, x, y, K_PARAM(k_smooth_l1_param)->sigma))
K_UNARY_FWD(activation, k_sf_activation(x, K_PARAM(k_activation_param)->act_type))
K_UNARY_BWD(activation, k_sf_activation_grad(og, x, y, K_PARAM(k_activation_param)->act_type))

/* ---- binary: forward in=[a, b] out=[y]; backward in=[og, a, b, y] out=[ga, gb] ---- */
typedef float (*k_fwd2_fn)(float a, float b);
typedef float (*k_grad2_fn)(float og, float a, float b, float y);

/* Walks the output with a and b at broadcast strides; y may alias a same-shaped input.
 * Same-shaped operands take a plain loop, the common case in fused-free execution. */
static int k_binary_forward(const k_call *c, k_fwd2_fn f) {
  k_req req = c->req[0];
  if (req == kNullOp) return 0;
  const k_shape *os = &c->out[0].shape;
  const float *a = c->in[0].data, *b = c->in[1].data;
  float *y = c->out[0].data;
  int64_t n = k_shape_numel(os), sa[K_MAX_RANK], sb[K_MAX_RANK];
  if (k_shape_numel(&c->in[0].shape) == n && k_shape_numel(&c->in[1].shape) == n) {
    for (int64_t i = 0; i < n; i++) k_put(y, i, f(a[i], b[i]), req);
    return 0;
  }
  k_iter it;
  k_iter_init(&it, os, 2);
  k_bcast_strides(&c->in[0].shape, os, sa);
  k_bcast_strides(&c->in[1].shape, os, sb);
  k_iter_set(&it, 0, sa);
  k_iter_set(&it, 1, sb);
  for (int64_t i = 0; i < n; i++, k_iter_next(&it))
    k_put(y, i, f(a[it.off[0]], b[it.off[1]]), req);
  return 0;
}

/* Operands of the backward walk: 0 og, 1 a, 2 b, 3 y; outer over operand j's elements,
 * inner over the output positions each was broadcast to. Returns the inner count. */
static int64_t k_binary_grad_iters(const k_call *c, int j, k_iter *o, k_iter *in) {
  const k_shape *full = &c->in[0].shape;
  k_shape keep = k_shape_align(&c->in[1 + j].shape, full->rank);
  int64_t st[K_MAX_RANK], n = k_shape_numel(&keep);
  k_iter_split(o, in, full, &keep, 4);
  k_contig_strides(full, st);
  k_iter_split_set(o, in, 0, st);
  k_iter_split_set(o, in, 3, st);
  for (int k = 1; k <= 2; k++) {
    k_bcast_strides(&c->in[k].shape, full, st);
    k_iter_split_set(o, in, k, st);
  }
  return n ? k_shape_numel(full) / n : 0;
}

/* Gradient of operand j: each element sums g over its output positions (one position when
 * it was not broadcast, so writing over og in place is safe). */
static void k_binary_grad(const k_call *c, int j, k_grad2_fn g) {
  k_req req = c->req[j];
  if (req == kNullOp) return;
  const float *og = c->in[0].data, *a = c->in[1].data, *b = c->in[2].data, *y = c->in[3].data;
  k_iter o, in;
  int64_t m = k_binary_grad_iters(c, j, &o, &in), n = k_shape_numel(&c->in[1 + j].shape);
  for (int64_t i = 0; i < n; i++, k_iter_next(&o)) {
    double s = 0;
    k_iter_rewind(&in);
    for (int64_t r = 0; r < m; r++, k_iter_next(&in)) {
      const int64_t *p = o.off, *q = in.off;
      s += g(og[p[0] + q[0]], k_ld(a, p[1] + q[1]), k_ld(b, p[2] + q[2]), k_ld(y, p[3] + q[3]));
    }
    k_put(c->out[j].data, i, (float)s, req);
  }
}

/* A gradient written in place over og must be computed last, after the other read og. */
static int k_binary_backward(const k_call *c, k_grad2_fn ga, k_grad2_fn gb) {
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

#define K_DEFINE_BINARY(op)                                                   \
  int k_##op##_forward(const k_call *c) { return k_binary_forward(c, k_sf_##op); } \
  int k_##op##_backward(const k_call *c) {                                    \
    return k_binary_backward(c, k_sf_##op##_grad_a, k_sf_##op##_grad_b);      \
  }
K_BINARY_OPS(K_DEFINE_BINARY)
