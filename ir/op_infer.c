/* op_infer.c — InferShape/InferType for every op, MXNet-style: output shapes from input
 * shapes, parameter shapes from data shapes, and each node's param struct normalised so
 * kernels see canonical values (negative axes resolved, defaults expanded). A failure
 * returns nonzero with x->msg saying what is wrong in the user's terms; the driver
 * (ir_infer.c) adds the op, its line and the input shapes. */
#include "ops.h"
#include "k_mm_geom.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ir_infer_fail(ir_infer *x, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(x->msg, sizeof x->msg, fmt, ap);
  va_end(ap);
  return 1;
}

int ir_infer_param(ir_infer *x, int i, k_shape want) {
  if (!x->in_known[i]) {
    x->in[i] = want;
    x->in_known[i] = true;
    return 0;
  }
  if (ir_shape_eq(&x->in[i], &want)) return 0;
  char have[96], need[96];
  ir_shape_str(&x->in[i], have, sizeof have);
  ir_shape_str(&want, need, sizeof need);
  return ir_infer_fail(x, "'%s' has shape %s but must be %s", x->in_name[i], have, need);
}

static k_shape ir_shape_of(int rank, const int64_t *d) {
  k_shape s = {0};
  s.rank = rank;
  for (int i = 0; i < rank; i++) s.d[i] = d[i];
  return s;
}

static k_shape ir_shape1(int64_t a) { return ir_shape_of(1, &a); }

/* Resolves a possibly negative axis against rank; 0 <= axis < rank afterwards. */
static int ir_norm_axis(ir_infer *x, int64_t *axis, int rank, const char *what) {
  int64_t a = *axis < 0 ? *axis + rank : *axis;
  if (a < 0 || a >= rank)
    return ir_infer_fail(x, "%s %lld is out of range for a tensor of rank %d", what, (long long)*axis, rank);
  *axis = a;
  return 0;
}

static int ir_norm_axis32(ir_infer *x, int32_t *axis, int rank, const char *what) {
  int64_t a = *axis;
  if (ir_norm_axis(x, &a, rank, what)) return 1;
  *axis = (int32_t)a;
  return 0;
}

static void ir_set_out(ir_infer *x, int i, k_shape s) {
  x->out[i] = s;
  x->out_dt[i] = K_F32;
}

/* An attribute that becomes a dimension or a window (num_hidden, a kernel size, a reshape
 * entry) is at most IR_MAX_DIM, as a declared dimension is: the sizes computed from it then
 * stay far from overflow, and the driver (ir_infer.c) checks the shapes that result. */
static int ir_dim_attr(ir_infer *x, const char *what, int64_t v) {
  if (v <= IR_MAX_DIM) return 0;
  return ir_infer_fail(x, "%s %lld is larger than a dimension can be (2^40)", what, (long long)v);
}

static const char *ir_ints_text(const k_ints *t, char *buf, size_t len);
static int ir_dim_attrs(ir_infer *x, const char *what, const k_ints *t) {
  char buf[160];
  for (int i = 0; i < t->n; i++)
    if (t->v[i] > IR_MAX_DIM)
      return ir_infer_fail(x, "%s %s: %lld is larger than a dimension can be (2^40)", what, ir_ints_text(t, buf, sizeof buf),
                           (long long)t->v[i]);
  return 0;
}

/* ---- elementwise ---- */
int ir_infer_unary(ir_infer *x) {
  ir_set_out(x, 0, x->in[0]);
  x->flops = k_shape_numel(&x->in[0]);
  return 0;
}

int ir_infer_binary(ir_infer *x) {
  k_shape out;
  char a[96], b[96];
  if (!ir_shape_broadcast(&x->in[0], &x->in[1], &out)) {
    ir_shape_str(&x->in[0], a, sizeof a);
    ir_shape_str(&x->in[1], b, sizeof b);
    return ir_infer_fail(x, "cannot broadcast %s with %s", a, b);
  }
  ir_set_out(x, 0, out);
  x->flops = ir_shape_numel_sat(&out);    /* broadcasting may exceed the limits: the driver says so */
  return 0;
}

/* ---- reductions ---- */
static int ir_norm_axes(ir_infer *x, k_ints *ax, int rank, bool *reduced) {
  memset(reduced, 0, sizeof(bool) * K_MAX_RANK);
  if (ax->n == 0)
    for (int i = 0; i < rank; i++) reduced[i] = true;
  for (int i = 0; i < ax->n; i++) {
    if (ir_norm_axis(x, &ax->v[i], rank, "axis")) return 1;
    if (reduced[ax->v[i]]) return ir_infer_fail(x, "axis %lld is listed twice", (long long)ax->v[i]);
    reduced[ax->v[i]] = true;
  }
  ax->n = 0;
  for (int i = 0; i < rank; i++)
    if (reduced[i]) ax->v[ax->n++] = i;
  return 0;
}

int ir_infer_reduce(ir_infer *x) {
  k_reduce_param *p = x->param;
  bool reduced[K_MAX_RANK];
  if (ir_norm_axes(x, &p->axis, x->in[0].rank, reduced)) return 1;
  k_shape out = {0};
  for (int i = 0; i < x->in[0].rank; i++) {
    if (!reduced[i]) out.d[out.rank++] = x->in[0].d[i];
    else if (p->keepdims) out.d[out.rank++] = 1;
  }
  ir_set_out(x, 0, out);
  x->flops = k_shape_numel(&x->in[0]);
  return 0;
}

/* norm: a reduction with an order, 1 or 2 (the ones ONNX's ReduceL1 and ReduceL2 need). */
int ir_infer_norm(ir_infer *x) {
  const k_reduce_param *p = x->param;
  if (p->ord != 1 && p->ord != 2) return ir_infer_fail(x, "ord must be 1 or 2, not %d", (int)p->ord);
  return ir_infer_reduce(x);
}

/* ---- layout ---- */
int ir_infer_reshape(ir_infer *x) {
  k_reshape_param *p = x->param;
  int64_t known = 1, n = k_shape_numel(&x->in[0]);
  int infer_at = -1;
  for (int i = 0; i < p->shape.n; i++) {
    if (p->shape.v[i] == -1 && infer_at < 0) infer_at = i;
    else if (p->shape.v[i] == -1) return ir_infer_fail(x, "shape may contain -1 only once");
    else if (p->shape.v[i] < 0) return ir_infer_fail(x, "shape entry %lld is negative", (long long)p->shape.v[i]);
    else if (ir_dim_attr(x, "shape entry", p->shape.v[i])) return 1;
    else known = ir_sat_mul(known, p->shape.v[i]);
  }
  if (infer_at >= 0) {
    if (known == 0 || n % known) return ir_infer_fail(x, "cannot reshape %lld elements with -1 and the rest %lld", (long long)n, (long long)known);
    p->shape.v[infer_at] = n / known;
    known = n;
  }
  if (known != n) return ir_infer_fail(x, "cannot reshape %lld elements into %lld", (long long)n, (long long)known);
  ir_set_out(x, 0, ir_shape_of(p->shape.n, p->shape.v));
  return 0;
}

int ir_infer_flatten(ir_infer *x) {
  if (x->in[0].rank < 2) return ir_infer_fail(x, "needs a tensor of rank 2 or more");
  int64_t rest = 1;
  for (int i = 1; i < x->in[0].rank; i++) rest *= x->in[0].d[i];
  int64_t d[2] = {x->in[0].d[0], rest};
  ir_set_out(x, 0, ir_shape_of(2, d));
  return 0;
}

int ir_infer_transpose(ir_infer *x) {
  k_transpose_param *p = x->param;
  int r = x->in[0].rank;
  bool seen[K_MAX_RANK] = {0};
  if (p->axes.n == 0) {
    p->axes.n = r;
    for (int i = 0; i < r; i++) p->axes.v[i] = r - 1 - i;
  }
  if (p->axes.n != r) return ir_infer_fail(x, "axes has %d entries for a tensor of rank %d", p->axes.n, r);
  k_shape out = {.rank = r};
  for (int i = 0; i < r; i++) {
    if (ir_norm_axis(x, &p->axes.v[i], r, "axis")) return 1;
    if (seen[p->axes.v[i]]) return ir_infer_fail(x, "axes is not a permutation: %lld repeats", (long long)p->axes.v[i]);
    seen[p->axes.v[i]] = true;
    out.d[i] = x->in[0].d[p->axes.v[i]];
  }
  ir_set_out(x, 0, out);
  return 0;
}

int ir_infer_expand_dims(ir_infer *x) {
  k_expand_dims_param *p = x->param;
  int r = x->in[0].rank;
  if (r >= K_MAX_RANK) return ir_infer_fail(x, "the result would exceed rank %d", K_MAX_RANK);
  if (ir_norm_axis32(x, &p->axis, r + 1, "axis")) return 1;
  k_shape out = {.rank = r + 1};
  for (int i = 0, j = 0; i <= r; i++) out.d[i] = i == p->axis ? 1 : x->in[0].d[j++];
  ir_set_out(x, 0, out);
  return 0;
}

/* torch.squeeze: without axis, every size-1 axis goes; a listed axis whose size is not 1
 * stays, as torch.squeeze(x, dim) leaves it. Normalised to the axes removed; when listed
 * axes remove none, they stay listed, since an empty list would read back as "all". */
int ir_infer_squeeze(ir_infer *x) {
  k_squeeze_param *p = x->param;
  bool drop[K_MAX_RANK] = {0};
  int r = x->in[0].rank;
  k_ints given = p->axis;
  bool seen[K_MAX_RANK] = {0};
  for (int i = 0; i < p->axis.n; i++) {
    if (ir_norm_axis(x, &p->axis.v[i], r, "axis")) return 1;
    if (seen[p->axis.v[i]]) return ir_infer_fail(x, "axis %lld is listed twice", (long long)given.v[i]);
    seen[p->axis.v[i]] = true;
    drop[p->axis.v[i]] = x->in[0].d[p->axis.v[i]] == 1;
  }
  for (int i = 0; i < r && p->axis.n == 0; i++) drop[i] = x->in[0].d[i] == 1;
  k_shape out = {0};
  p->axis.n = 0;
  for (int i = 0; i < r; i++) {
    if (drop[i]) p->axis.v[p->axis.n++] = i;
    else out.d[out.rank++] = x->in[0].d[i];
  }
  if (p->axis.n == 0 && given.n > 0) {
    p->axis = given;
    for (int i = 0; i < given.n; i++) p->axis.v[i] = given.v[i] < 0 ? given.v[i] + r : given.v[i];
  }
  ir_set_out(x, 0, out);
  return 0;
}

int ir_infer_broadcast_to(ir_infer *x) {
  k_broadcast_to_param *p = x->param;
  const k_shape *in = &x->in[0];
  if (p->shape.n < in->rank) return ir_infer_fail(x, "shape has fewer axes (%d) than the input (%d)", p->shape.n, in->rank);
  for (int i = 0; i < p->shape.n; i++) {
    int j = i - (p->shape.n - in->rank);
    int64_t have = j >= 0 ? in->d[j] : 1;
    if (p->shape.v[i] == -1 && j >= 0) p->shape.v[i] = have;
    if (p->shape.v[i] <= 0) return ir_infer_fail(x, "shape entry %d must be positive (tensors are never empty)", i);
    if (ir_dim_attr(x, "shape entry", p->shape.v[i])) return 1;
    if (have != 1 && have != p->shape.v[i])
      return ir_infer_fail(x, "axis %d of size %lld cannot broadcast to %lld", j, (long long)have, (long long)p->shape.v[i]);
  }
  ir_set_out(x, 0, ir_shape_of(p->shape.n, p->shape.v));
  return 0;
}

int ir_infer_slice(ir_infer *x) {
  k_slice_param *p = x->param;
  if (ir_norm_axis32(x, &p->axis, x->in[0].rank, "axis")) return 1;
  int64_t d = x->in[0].d[p->axis];
  if (p->begin < 0) p->begin += d;
  if (p->end == K_SLICE_END) p->end = d;
  if (p->end < 0) p->end += d;
  if (p->begin < 0 || p->end > d || p->begin > p->end)
    return ir_infer_fail(x, "begin..end [%lld, %lld) is not within axis %d of size %lld",
                         (long long)p->begin, (long long)p->end, p->axis, (long long)d);
  if (p->begin == p->end)
    return ir_infer_fail(x, "begin..end [%lld, %lld) is empty; tensors are never empty", (long long)p->begin, (long long)p->end);
  if (p->step == 0) return ir_infer_fail(x, "step must not be 0");
  /* A step longer than the axis takes one element, as a step of d does; clamping keeps the
   * arithmetic here and in the kernels far from overflow. */
  if (p->step > d) p->step = d;
  if (p->step < -d) p->step = -d;
  int64_t mag = p->step > 0 ? p->step : -p->step;
  k_shape out = x->in[0];
  out.d[p->axis] = (p->end - p->begin + mag - 1) / mag;
  ir_set_out(x, 0, out);
  return 0;
}

int ir_infer_concat(ir_infer *x) {
  k_concat_param *p = x->param;
  k_shape out = x->in[0];
  if (ir_norm_axis32(x, &p->dim, out.rank, "dim")) return 1;
  for (int i = 1; i < x->nargs; i++) {
    const k_shape *s = &x->in[i];
    bool ok = s->rank == out.rank;
    for (int j = 0; ok && j < out.rank; j++) ok = j == p->dim || s->d[j] == out.d[j];
    if (!ok) return ir_infer_fail(x, "input %d does not match input 1 outside dim %d", i + 1, p->dim);
    out.d[p->dim] += s->d[p->dim];
  }
  ir_set_out(x, 0, out);
  return 0;
}

/* pad: F.pad's pairs, last axis first; normalised to a pair for every axis. A constant pad
 * may be negative (it crops, as in torch); reflect needs each pad below the axis's size
 * (one reflection), replicate and reflect need them non-negative. */
int ir_infer_pad(ir_infer *x) {
  k_pad_param *p = x->param;
  k_shape out = x->in[0];
  int rank = out.rank;
  if (p->pad.n % 2 || p->pad.n > 2 * rank)
    return ir_infer_fail(x, "pad has %d values; it takes (before, after) pairs for at most the %d axes, last axis first",
                         p->pad.n, rank);
  for (int i = p->pad.n; i < 2 * rank; i++) p->pad.v[i] = 0;
  p->pad.n = 2 * rank;
  static const char *const modes[] = {"constant", "reflect", "replicate"};
  for (int a = 0; a < rank; a++) {
    int64_t b = p->pad.v[2 * (rank - 1 - a)], e = p->pad.v[2 * (rank - 1 - a) + 1], d = out.d[a];
    if (b < -d || e < -d || b > (INT64_C(1) << 32) || e > (INT64_C(1) << 32))
      return ir_infer_fail(x, "pad (%lld, %lld) of axis %d (size %lld) is out of range", (long long)b, (long long)e, a,
                           (long long)d);
    if (p->mode != K_PAD_CONSTANT && (b < 0 || e < 0))
      return ir_infer_fail(x, "%s padding cannot be negative: (%lld, %lld) on axis %d", modes[p->mode], (long long)b,
                           (long long)e, a);
    if (p->mode == K_PAD_REFLECT && (b >= d || e >= d))
      return ir_infer_fail(x, "reflect padding must be smaller than the axis: (%lld, %lld) on axis %d of size %lld",
                           (long long)b, (long long)e, a, (long long)d);
    out.d[a] = d + b + e;
    if (out.d[a] < 1)
      return ir_infer_fail(x, "pad (%lld, %lld) leaves axis %d of size %lld empty; tensors are never empty", (long long)b,
                           (long long)e, a, (long long)d);
  }
  ir_set_out(x, 0, out);
  return 0;
}

/* ---- GEMM family ---- */
/* An operand or output stored swapped (k_matmul_param.swap_*, set by passes/pass_simplify.c)
 * is inferred by its logical shape; the output's shape is the stored one. */
int ir_infer_matmul(ir_infer *x) {
  const k_matmul_param *p = x->param;
  if (x->in[0].rank < 2 || x->in[1].rank < 2) return ir_infer_fail(x, "both inputs need rank 2 or more");
  k_shape la = k_mm_logical(&x->in[0], p->swap_a), lb = k_mm_logical(&x->in[1], p->swap_b);
  const k_shape *a = &la, *b = &lb;
  int64_t m = a->d[a->rank - 2], ka = a->d[a->rank - 1], kb = b->d[b->rank - 2], n = b->d[b->rank - 1];
  if (p->transpose_a) { int64_t t = m; m = ka; ka = t; }
  if (p->transpose_b) { int64_t t = n; n = kb; kb = t; }
  if (ka != kb) return ir_infer_fail(x, "inner dimensions differ: %lld and %lld", (long long)ka, (long long)kb);
  k_shape ba = *a, bb = *b, out;
  ba.rank -= 2;
  bb.rank -= 2;
  if (!ir_shape_broadcast(&ba, &bb, &out)) return ir_infer_fail(x, "batch dimensions do not broadcast");
  out.d[out.rank++] = m;
  out.d[out.rank++] = n;
  if (p->swap_c && out.rank < 3) return ir_infer_fail(x, "an output stored swapped needs a batch axis");
  out = k_mm_logical(&out, p->swap_c);
  ir_set_out(x, 0, out);
  x->flops = ir_sat_mul(2 * ka, ir_shape_numel_sat(&out));
  return 0;
}

int ir_infer_fully_connected(ir_infer *x) {
  const k_fc_param *p = x->param;
  const k_shape *d = &x->in[0];
  if (p->num_hidden <= 0) return ir_infer_fail(x, "num_hidden must be positive, not %lld", (long long)p->num_hidden);
  if (ir_dim_attr(x, "num_hidden", p->num_hidden)) return 1;
  if (d->rank < (p->flatten ? 2 : 1)) return ir_infer_fail(x, "data needs rank %d or more", p->flatten ? 2 : 1);
  if (p->no_bias && x->nargs > 2) return ir_infer_fail(x, "a bias is given but no_bias is true");
  if (!p->no_bias && x->nargs < 3) return ir_infer_fail(x, "no bias is given; pass one or set no_bias=true");
  k_shape out = *d;
  int64_t in = d->d[d->rank - 1];
  if (p->flatten) {
    in = k_shape_numel(d) / (d->d[0] ? d->d[0] : 1);
    out.rank = 2;
  }
  out.d[out.rank - 1] = p->num_hidden;
  int64_t w[2] = {p->num_hidden, in};
  if (ir_infer_param(x, 1, ir_shape_of(2, w))) return 1;
  if (!p->no_bias && ir_infer_param(x, 2, ir_shape1(p->num_hidden))) return 1;
  ir_set_out(x, 0, out);
  x->flops = ir_sat_mul(2 * in, ir_shape_numel_sat(&out));
  return 0;
}

/* Expands a tuple attribute to `rank` entries: absent -> dflt, one entry -> repeated. */
static int ir_expand_ints(ir_infer *x, k_ints *t, int rank, int64_t dflt, const char *name) {
  if (t->n == 0) t->v[0] = dflt;
  if (t->n <= 1) {
    for (int i = 1; i < rank; i++) t->v[i] = t->v[0];
    t->n = rank;
  }
  if (t->n != rank) return ir_infer_fail(x, "%s has %d entries but the kernel has %d", name, t->n, rank);
  return 0;
}

/* A tuple as the language writes it, "(1, -1)", into buf. */
static const char *ir_ints_text(const k_ints *t, char *buf, size_t len) {
  size_t at = (size_t)snprintf(buf, len, "(");
  for (int i = 0; i < t->n && at < len; i++) at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? ", " : "", (long long)t->v[i]);
  if (at < len) snprintf(buf + at, len - at, ")");
  return buf;
}

/* pad of a convolution or pooling over sp spatial axes: absent (0), one value for every axis,
 * one per axis, or, beyond SPEC section 2, every axis's start then every axis's end
 * (k_params.h), that form kept only where a start and its end differ, so that a printed graph
 * shows one value per axis wherever it can and reads back the same. Every value >= 0 (zeros
 * added, never a crop) and at most 2^32 (so sizes cannot overflow). */
static int ir_window_pads(ir_infer *x, k_ints *pad, int sp) {
  char buf[160];
  if (pad->n > 1 && pad->n != sp && pad->n != 2 * sp)
    return ir_infer_fail(x, "pad %s has %d values; give %s", ir_ints_text(pad, buf, sizeof buf), pad->n,
                         sp == 1 ? "1, or 2 (the start, then the end)"
                                 : "1, 2 (one per spatial axis) or 4 (every axis's start, then every axis's end)");
  for (int i = 0; i < pad->n; i++) {
    if (pad->v[i] < 0) return ir_infer_fail(x, "pad %s: pads cannot be negative", ir_ints_text(pad, buf, sizeof buf));
    if (pad->v[i] > (INT64_C(1) << 32))
      return ir_infer_fail(x, "pad %s: a pad above 2^32 is out of range", ir_ints_text(pad, buf, sizeof buf));
  }
  if (pad->n != 2 * sp) return ir_expand_ints(x, pad, sp, 0, "pad");
  bool same = true;
  for (int i = 0; i < sp; i++) same &= pad->v[i] == pad->v[sp + i];
  if (same) pad->n = sp;
  return 0;
}

static int ir_conv_check(ir_infer *x, k_conv_param *p) {
  int sp = p->kernel.n;
  if (sp != 1 && sp != 2) return ir_infer_fail(x, "kernel must have 1 or 2 entries (conv1d or conv2d), not %d", sp);
  if (x->in[0].rank != sp + 2)
    return ir_infer_fail(x, "a %dd convolution needs data of rank %d, got rank %d", sp, sp + 2, x->in[0].rank);
  if (ir_expand_ints(x, &p->stride, sp, 1, "stride") || ir_window_pads(x, &p->pad, sp) ||
      ir_expand_ints(x, &p->dilate, sp, 1, "dilate")) return 1;
  for (int i = 0; i < sp; i++)
    if (p->kernel.v[i] <= 0 || p->stride.v[i] <= 0 || p->dilate.v[i] <= 0)
      return ir_infer_fail(x, "kernel, stride and dilate must be positive");
  if (ir_dim_attrs(x, "kernel", &p->kernel) || ir_dim_attrs(x, "stride", &p->stride) || ir_dim_attrs(x, "dilate", &p->dilate))
    return 1;
  int64_t c = x->in[0].d[1];
  if (p->num_filter <= 0 || p->num_group <= 0) return ir_infer_fail(x, "num_filter and num_group must be positive");
  if (ir_dim_attr(x, "num_filter", p->num_filter) || ir_dim_attr(x, "num_group", p->num_group)) return 1;
  if (c % p->num_group || p->num_filter % p->num_group)
    return ir_infer_fail(x, "channels (%lld) and num_filter (%lld) must be divisible by num_group (%lld)",
                         (long long)c, (long long)p->num_filter, (long long)p->num_group);
  if (p->no_bias && x->nargs > 2) return ir_infer_fail(x, "a bias is given but no_bias is true");
  if (!p->no_bias && x->nargs < 3) return ir_infer_fail(x, "no bias is given; pass one or set no_bias=true");
  return 0;
}

int ir_infer_convolution(ir_infer *x) {
  k_conv_param *p = x->param;
  if (ir_conv_check(x, p)) return 1;
  int sp = p->kernel.n;
  const k_shape *d = &x->in[0];
  k_shape out = {.rank = sp + 2, .d = {d->d[0], p->num_filter}};
  int64_t w[K_MAX_RANK] = {p->num_filter, d->d[1] / p->num_group}, kprod = 1;
  for (int i = 0; i < sp; i++) {
    int64_t span = ir_sat_mul(p->dilate.v[i], p->kernel.v[i] - 1) + 1;   /* each at most 2^40 */
    int64_t in = d->d[2 + i] + k_conv_pad_begin(p, i) + k_conv_pad_end(p, i);
    if (in < span) return ir_infer_fail(x, "the kernel (extent %lld) is larger than the padded input (%lld) on spatial axis %d",
                                        (long long)span, (long long)in, i);
    out.d[2 + i] = (in - span) / p->stride.v[i] + 1;
    w[2 + i] = p->kernel.v[i];
    kprod = ir_sat_mul(kprod, p->kernel.v[i]);
  }
  if (ir_infer_param(x, 1, ir_shape_of(sp + 2, w))) return 1;
  if (!p->no_bias && ir_infer_param(x, 2, ir_shape1(p->num_filter))) return 1;
  ir_set_out(x, 0, out);
  x->flops = ir_sat_mul(ir_sat_mul(2 * w[1], kprod), ir_shape_numel_sat(&out));
  return 0;
}

/* global_pool=true with a kernel, stride or pad other than what it implies (the whole input,
 * stride 1, pad 0): the SPEC refuses them. Values equal to the implied ones are what this
 * function itself writes, so inferring a graph twice (or printing and re-reading it) passes. */
static bool ir_pool_global_conflict(const k_pool_param *p, const k_shape *d, int sp) {
  if ((p->kernel.n && p->kernel.n != sp) || (p->stride.n && p->stride.n != sp) || (p->pad.n && p->pad.n != sp)) return true;
  for (int i = 0; i < sp; i++)
    if ((p->kernel.n && p->kernel.v[i] != d->d[2 + i]) || (p->stride.n && p->stride.v[i] != 1) || (p->pad.n && p->pad.v[i] != 0))
      return true;
  return false;
}

/* The output length along one axis: torch's, whose ceil_mode rounds up but drops a last
 * window that would start in the right padding (so every window holds an input element). */
static int64_t ir_pool_out_len(int64_t n, int64_t k, int64_t s, int64_t pd, int64_t pe, bool ceil_mode) {
  int64_t span = n + pd + pe - k, out = (ceil_mode ? span + s - 1 : span) / s + 1;
  if (ceil_mode && (out - 1) * s >= n + pd) out--;
  return out;
}

int ir_infer_pooling(ir_infer *x) {
  k_pool_param *p = x->param;
  const k_shape *d = &x->in[0];
  int sp = d->rank - 2;
  if (sp != 1 && sp != 2) return ir_infer_fail(x, "needs data of rank 3 or 4 (1-D or 2-D pooling), got rank %d", d->rank);
  if (p->global_pool && ir_pool_global_conflict(p, d, sp))
    return ir_infer_fail(x, "takes no kernel, stride or pad with global_pool=true (the kernel is the whole input)");
  if (p->global_pool) {
    p->kernel.n = sp;
    for (int i = 0; i < sp; i++) p->kernel.v[i] = d->d[2 + i], p->stride.v[i] = 1;
    p->stride.n = sp, p->pad.n = 0;             /* stride 1, pad 0, as k_params.h says */
  } else if (p->kernel.n == 0) {
    return ir_infer_fail(x, "needs a kernel unless global_pool=true");
  }
  if (ir_expand_ints(x, &p->kernel, sp, 1, "kernel") || ir_window_pads(x, &p->pad, sp)) return 1;
  if (p->stride.n == 0) p->stride = p->kernel;
  if (ir_expand_ints(x, &p->stride, sp, 1, "stride") || ir_dim_attrs(x, "kernel", &p->kernel) ||
      ir_dim_attrs(x, "stride", &p->stride))
    return 1;
  k_shape out = *d;
  for (int i = 0; i < sp; i++) {
    int64_t k = p->kernel.v[i], s = p->stride.v[i], pd = k_pool_pad_begin(p, i), pe = k_pool_pad_end(p, i);
    if (k <= 0 || s <= 0 || pd < 0 || pe < 0) return ir_infer_fail(x, "kernel and stride must be positive and pad not negative");
    if (2 * (pd > pe ? pd : pe) > k)
      return ir_infer_fail(x, "pad (%lld) must be at most half the kernel (%lld)", (long long)(pd > pe ? pd : pe), (long long)k);
    if (d->d[2 + i] + pd + pe < k) return ir_infer_fail(x, "the kernel (%lld) is larger than the padded input (%lld)",
                                                       (long long)k, (long long)(d->d[2 + i] + pd + pe));
    out.d[2 + i] = ir_pool_out_len(d->d[2 + i], k, s, pd, pe, p->ceil_mode);
  }
  ir_set_out(x, 0, out);
  x->flops = ir_sat_mul(ir_sat_mul(p->kernel.v[0], sp == 2 ? p->kernel.v[1] : 1), ir_shape_numel_sat(&out));
  return 0;
}

/* ---- normalisation ---- */
int ir_infer_batch_norm(ir_infer *x) {
  k_batch_norm_param *p = x->param;
  const k_shape *d = &x->in[0];
  if (d->rank < 2) return ir_infer_fail(x, "needs data of rank 2 or more");
  if (ir_norm_axis32(x, &p->axis, d->rank, "axis")) return 1;
  if (!(p->eps > 0)) return ir_infer_fail(x, "eps must be positive");
  if (!(p->momentum >= 0 && p->momentum <= 1)) return ir_infer_fail(x, "momentum must be within [0, 1]");
  k_shape c = ir_shape1(d->d[p->axis]);
  for (int i = 1; i < 5; i++)
    if (ir_infer_param(x, i, c)) return 1;
  ir_set_out(x, 0, *d);
  ir_set_out(x, 1, c);
  ir_set_out(x, 2, c);
  x->flops = 4 * k_shape_numel(d);
  return 0;
}

int ir_infer_layer_norm(ir_infer *x) {
  k_layer_norm_param *p = x->param;
  const k_shape *d = &x->in[0];
  if (d->rank < 1) return ir_infer_fail(x, "needs data of rank 1 or more");
  if (ir_norm_axis32(x, &p->axis, d->rank, "axis")) return 1;
  if (p->axis != d->rank - 1) return ir_infer_fail(x, "normalises over the last axis only; axis must be -1 or %d", d->rank - 1);
  if (!(p->eps > 0)) return ir_infer_fail(x, "eps must be positive");
  k_shape c = ir_shape1(d->d[p->axis]), lead = *d;
  lead.rank--;
  if (ir_infer_param(x, 1, c) || ir_infer_param(x, 2, c)) return 1;
  ir_set_out(x, 0, *d);
  ir_set_out(x, 1, lead);
  ir_set_out(x, 2, lead);
  x->flops = 5 * k_shape_numel(d);
  return 0;
}

int ir_infer_dropout(ir_infer *x) {
  const k_dropout_param *p = x->param;
  if (!(p->p >= 0 && p->p <= 1)) return ir_infer_fail(x, "p must be within [0, 1]");
  ir_set_out(x, 0, x->in[0]);
  ir_set_out(x, 1, x->in[0]);
  x->flops = k_shape_numel(&x->in[0]);
  return 0;
}

int ir_infer_softmax(ir_infer *x) {
  k_softmax_param *p = x->param;
  if (x->in[0].rank < 1) return ir_infer_fail(x, "needs a tensor of rank 1 or more");
  if (ir_norm_axis32(x, &p->axis, x->in[0].rank, "axis")) return 1;
  ir_set_out(x, 0, x->in[0]);
  x->flops = 3 * k_shape_numel(&x->in[0]);
  return 0;
}

int ir_infer_embedding(ir_infer *x) {
  const k_embedding_param *p = x->param;
  if (p->input_dim <= 0 || p->output_dim <= 0) return ir_infer_fail(x, "input_dim and output_dim must be positive");
  if (ir_dim_attr(x, "input_dim", p->input_dim) || ir_dim_attr(x, "output_dim", p->output_dim)) return 1;
  if (x->in[0].rank >= K_MAX_RANK) return ir_infer_fail(x, "indices of rank %d leave no room for the embedding axis", x->in[0].rank);
  int64_t w[2] = {p->input_dim, p->output_dim};
  if (ir_infer_param(x, 1, ir_shape_of(2, w))) return 1;
  k_shape out = x->in[0];
  out.d[out.rank++] = p->output_dim;
  ir_set_out(x, 0, out);
  return 0;
}

int ir_infer_softmax_cross_entropy(ir_infer *x) {
  const k_shape *l = &x->in[0], *y = &x->in[1];
  if (l->rank != 2) return ir_infer_fail(x, "logits must be [batch, classes], got rank %d", l->rank);
  if (y->rank != 1 || y->d[0] != l->d[0])
    return ir_infer_fail(x, "label must be [%lld] to match the logits' batch", (long long)l->d[0]);
  ir_set_out(x, 0, (k_shape){0});
  x->flops = 4 * k_shape_numel(l);
  return 0;
}
