/* onnx_ops.c — handlers of the ONNX ops that become Kiln nodes (onnx_ops.def names them).
 * Each reads the node's inputs and attributes, refuses by name any attribute value Kiln has
 * no row for, emits the node and fills the row's param struct; inference then runs on it.
 * Layout ops on constants fold to constants (onnx_fold.c holds the pure folds). */
#include "onnx_int.h"

#include <float.h>
#include <string.h>

/* Only output 0 is imported: another output that the graph reads is refused (a training-mode
 * BatchNormalization lists its running statistics as outputs nothing reads). */
static int onnx_one_output(onnx_ctx *c, const Onnx__NodeProto *n, const char *what) {
  for (size_t i = 1; i < n->n_output; i++)
    if (n->output[i] && *n->output[i] && fe_map_get(&c->file->read, n->output[i]))
      return onnx_fail(c, "reading output %zu (%s) is not supported; only the first output is", i + 1, what);
  return 0;
}

/* ---- elementwise ---- */

int onnx_unary(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  int x = onnx_in(c, n, 0, IR_T_PARAM);
  return onnx_emit(c, n, kop, &x, 1) < 0;
}

/* Max and Min take 1 to N inputs: one is the identity, more a chain of binary nodes. */
static int onnx_variadic(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  int cur = onnx_in(c, n, 0, IR_T_PARAM);
  if (n->n_input == 1) return cur < 0 ? 1 : (onnx_bind(c, n->output[0], cur, NULL), 0);
  for (size_t i = 1; i < n->n_input && cur >= 0; i++) {
    int in[2] = {cur, onnx_in(c, n, (int)i, IR_T_PARAM)};
    cur = onnx_step_done(c, onnx_step(c, n, i + 1 == n->n_input, kop, in, 2));
  }
  return cur < 0;
}

int onnx_binary(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  if (!n->n_output || n->n_input < 1) return onnx_fail(c, "the node needs inputs and an output");
  if (n->n_input != 2 && (kop == IR_OP_maximum || kop == IR_OP_minimum)) return onnx_variadic(c, n, kop);
  if (n->n_input != 2) return onnx_fail(c, "Kiln reads this op with exactly 2 inputs, not %zu", n->n_input);
  onnx_value *a = onnx_input(c, n, 0), *b = onnx_input(c, n, 1);
  if (a && b && a->k && b->k) return onnx_fold_binary(c, n, kop, a->k, b->k);
  int in[2] = {onnx_in(c, n, 0, IR_T_PARAM), onnx_in(c, n, 1, IR_T_PARAM)};
  return onnx_emit(c, n, kop, in, 2) < 0;
}

int onnx_leaky_relu(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  int x = onnx_in(c, n, 0, IR_T_PARAM), k = onnx_emit(c, n, kop, &x, 1);
  if (k < 0) return 1;
  ((k_leaky_relu_param *)onnx_param(c, k))->slope = onnx_attr_float(n, "alpha", 0.01f);
  return 0;
}

/* A one-element constant input (Clip's min/max since opset 11), or dflt when absent. */
static int onnx_scalar_input(onnx_ctx *c, const Onnx__NodeProto *n, int i, const char *what, float dflt, float *out) {
  if (!onnx_input(c, n, i)) return *out = dflt, 0;
  onnx_const *k = onnx_input_const(c, n, i, what);
  if (!k) return 1;
  if (k->n != 1) return onnx_fail(c, "'%s' must hold one value", k->onnx_name);
  *out = k->is_int ? (float)k->i[0] : k->f[0];
  return 0;
}

int onnx_clip(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  float lo = onnx_attr_float(n, "min", -FLT_MAX), hi = onnx_attr_float(n, "max", FLT_MAX);
  if (c->opset >= 11 && (onnx_scalar_input(c, n, 1, "min", -FLT_MAX, &lo) || onnx_scalar_input(c, n, 2, "max", FLT_MAX, &hi))) return 1;
  int x = onnx_in(c, n, 0, IR_T_PARAM), k = onnx_emit(c, n, kop, &x, 1);
  if (k < 0) return 1;
  k_clip_param *p = onnx_param(c, k);
  p->a_min = lo, p->a_max = hi;
  return 0;
}

/* HardSigmoid: ONNX's defaults (alpha 0.2, beta 0.5) differ from the row's (torch's 1/6, 1/2). */
int onnx_hard_sigmoid(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  int x = onnx_in(c, n, 0, IR_T_PARAM), k = onnx_emit(c, n, kop, &x, 1);
  if (k < 0) return 1;
  k_hard_sigmoid_param *p = onnx_param(c, k);
  p->alpha = onnx_attr_float(n, "alpha", 0.2f), p->beta = onnx_attr_float(n, "beta", 0.5f);
  return 0;
}

/* ---- Pad ---- */

typedef struct {
  int64_t pads[2 * K_MAX_RANK];  /* ONNX order: every axis's begin, then every axis's end */
  int np;
  int mode;                      /* K_PAD_* */
  float value;
} onnx_padspec;

/* pads and value: attributes before opset 11, constant inputs since; mode an attribute. */
static int onnx_pad_read(onnx_ctx *c, const Onnx__NodeProto *n, onnx_padspec *s) {
  s->np = onnx_attr_ints(n, "pads", s->pads, 2 * K_MAX_RANK);
  s->value = onnx_attr_float(n, "value", 0.0f);
  if (c->opset >= 11) {
    onnx_const *k = onnx_input_const(c, n, 1, "pads");
    if (!k) return 1;
    if (!k->is_int || k->n > 2 * K_MAX_RANK) return onnx_fail(c, "pads must be at most %d integers", 2 * K_MAX_RANK);
    s->np = (int)k->n;
    memcpy(s->pads, k->i, (size_t)s->np * sizeof *s->pads);
    if (onnx_scalar_input(c, n, 2, "constant_value", 0.0f, &s->value)) return 1;
  }
  if (s->np < 0) return onnx_fail(c, "pads must be at most %d integers", 2 * K_MAX_RANK);
  const Onnx__AttributeProto *a = onnx_attr(n, "mode");
  static const char *const modes[] = {"constant", "reflect", "edge"};
  s->mode = a ? -1 : K_PAD_CONSTANT;
  for (int m = 0; a && a->has_s && m < 3; m++)
    if (a->s.len == strlen(modes[m]) && memcmp(a->s.data, modes[m], a->s.len) == 0) s->mode = m;
  if (s->mode < 0) return onnx_unsupported_attr(c, "mode", "other than constant, reflect or edge");
  return 0;
}

/* A zero constant Pad of a computed tensor's spatial axes (torch's avg_pool2d with padding
 * exports one, TensorFlow's converters one before a strided Conv, uneven): left pending on the
 * value, to become the pads of the Conv (any) or AveragePool (count_include_pad, Kiln's
 * average; alike on both sides) that reads it. 1 if it is one. */
static bool onnx_pad_pending(onnx_ctx *c, const Onnx__NodeProto *n, onnx_value *x, const onnx_padspec *s) {
  int r = s->np / 2;
  if (x->tensor < 0 || x->npad || s->mode != K_PAD_CONSTANT || s->value != 0.0f || r < 3 || r - 2 > K_MAX_RANK)
    return false;
  for (int i = 0; i < 2 * r; i++)
    if ((i % r < 2 && s->pads[i] != 0) || s->pads[i] < 0 || s->pads[i] > ONNX_MAX_DIM) return false;
  onnx_value *v = ir_alloc(&c->g->arena, sizeof *v);
  *v = (onnx_value){.tensor = x->tensor, .npad = r - 2, .pad_name = n->output[0]};
  for (int i = 2; i < r; i++) v->pad_begin[i - 2] = s->pads[i], v->pad_end[i - 2] = s->pads[r + i];
  fe_map_set(&c->values, &c->g->arena, n->output[0], v);
  return true;
}

/* Pad: all-zero pads are the identity (torch exports one before some average pools), a zero
 * spatial Pad stays pending (above); any other is a pad node. */
int onnx_pad(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_padspec s;
  onnx_value *xv = onnx_input(c, n, 0);
  if (!xv) return onnx_fail(c, "input 1 is required");
  if (onnx_pad_read(c, n, &s)) return 1;
  bool zero = true;
  for (int i = 0; i < s.np; i++) zero &= s.pads[i] == 0;
  if (zero) return onnx_fold_identity(c, n, kop);
  if (onnx_pad_pending(c, n, xv, &s)) return 0;
  int x = onnx_tensor(c, xv, IR_T_PARAM);
  if (x < 0) return 1;
  int rank = ir_tensor_at(c->g, x)->shape.rank;
  if (s.np != 2 * rank) return onnx_fail(c, "pads has %d values; an input of rank %d needs %d", s.np, rank, 2 * rank);
  int k = onnx_emit(c, n, kop, &x, 1);
  if (k < 0) return 1;
  k_pad_param *p = onnx_param(c, k);
  onnx_pad_tuple(&p->pad, s.pads, rank);
  p->mode = s.mode, p->value = s.value;
  return 0;
}

/* ---- GEMM family ---- */

/* B' = alpha * B^T (when transposed) as a new constant of the same ONNX name: Kiln's
 * fully_connected weight is [N, K]. */
static onnx_const *onnx_gemm_weight(onnx_ctx *c, onnx_const *b, bool trans_b, float alpha) {
  if (b->shape.rank != 2 || b->is_int) return onnx_fail(c, "B must be a float matrix"), NULL;
  if (trans_b && alpha == 1.0f) return b;
  int64_t r = b->shape.d[0], q = b->shape.d[1];
  k_shape s = {2, {trans_b ? r : q, trans_b ? q : r}};
  onnx_const *w = onnx_const_new(c, false, &s);
  w->onnx_name = b->onnx_name, w->origin = b->origin;
  for (int64_t i = 0; i < r; i++)
    for (int64_t j = 0; j < q; j++) w->f[trans_b ? i * q + j : j * r + i] = alpha * b->f[i * q + j];
  return w;
}

/* C' = beta * C broadcast to [N]: fully_connected's bias. */
static onnx_const *onnx_gemm_bias(onnx_ctx *c, onnx_const *b, int64_t nh, float beta) {
  if (b->is_int || (b->n != nh && b->n != 1) || (b->shape.rank == 2 && b->shape.d[0] != 1))
    return onnx_fail(c, "C must broadcast as a row of %lld values to be a bias", (long long)nh), NULL;
  onnx_const *w = onnx_const_new(c, false, &(k_shape){1, {nh}});
  w->onnx_name = b->onnx_name, w->origin = b->origin;
  for (int64_t i = 0; i < nh; i++) w->f[i] = beta * b->f[b->n == 1 ? 0 : i];
  return w;
}

/* Input i scaled by s as a Kiln tensor: a float constant is scaled at import (a new constant:
 * the original may have other readers), so no mul node is left; -1 when not a float constant. */
static int onnx_scaled_const(onnx_ctx *c, const Onnx__NodeProto *n, int i, float s) {
  onnx_value *v = onnx_input(c, n, i);
  if (!v || !v->k || v->k->is_int) return -1;
  if (s == 1.0f) return onnx_tensor(c, v, IR_T_PARAM);
  onnx_const *w = onnx_const_new(c, false, &v->k->shape);
  if (!w) return onnx_fail(c, "input %d is too large to scale", i + 1), -1;
  w->onnx_name = v->k->onnx_name, w->origin = v->k->origin;
  for (int64_t j = 0; j < w->n; j++) w->f[j] = s * v->k->f[j];
  onnx_value sv = {.tensor = -1, .k = w};
  return onnx_tensor(c, &sv, IR_T_PARAM);
}

/* Gemm whose B is computed, or with transA = 1: matmul, then alpha *, then + beta * C, alpha and
 * beta folded into B and C where those are constants. With transA, a fully_connected would need
 * A transposed by a node first (it reads its data row by row), a copy that matmul's transpose_a
 * does not make; a constant B is packed once per weight change by matmul as by
 * fully_connected (k_gemm.c), so matmul is the faster of the two (docs/onnx.md). */
static int onnx_gemm_matmul(onnx_ctx *c, const Onnx__NodeProto *n) {
  float alpha = onnx_attr_float(n, "alpha", 1.0f), beta = onnx_attr_float(n, "beta", 1.0f);
  bool has_c = onnx_input(c, n, 2) != NULL;
  onnx_value *bv = onnx_input(c, n, 1), *cv = onnx_input(c, n, 2);
  bool fold_b = bv && bv->k && !bv->k->is_int, fold_c = cv && cv->k && !cv->k->is_int;
  int in[2] = {onnx_in(c, n, 0, IR_T_PARAM), fold_b ? onnx_scaled_const(c, n, 1, alpha) : onnx_in(c, n, 1, IR_T_PARAM)};
  if (fold_b) alpha = 1.0f;
  int k = onnx_step(c, n, !has_c && alpha == 1.0f, IR_OP_matmul, in, 2);
  if (k < 0) return 1;
  k_matmul_param *p = onnx_param(c, k);
  p->transpose_a = onnx_attr_int(n, "transA", 0) != 0, p->transpose_b = onnx_attr_int(n, "transB", 0) != 0;
  int cur = onnx_step_done(c, k);
  if (cur >= 0 && alpha != 1.0f) {
    int m[2] = {cur, onnx_scalar(c, alpha)};
    cur = onnx_step_done(c, onnx_step(c, n, !has_c, IR_OP_mul, m, 2));
  }
  int bias = !has_c || cur < 0 ? -1 : fold_c ? onnx_scaled_const(c, n, 2, beta) : onnx_in(c, n, 2, IR_T_PARAM);
  if (bias >= 0 && beta != 1.0f && !fold_c) {
    int m[2] = {bias, onnx_scalar(c, beta)};
    bias = onnx_step_done(c, onnx_step(c, n, false, IR_OP_mul, m, 2));
  }
  if (bias >= 0) {
    int a[2] = {cur, bias};
    cur = onnx_step_done(c, onnx_step(c, n, true, IR_OP_add, a, 2));
  }
  return cur < 0 || (has_c && bias < 0);
}

int onnx_gemm(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_value *bv = onnx_input(c, n, 1), *cv = onnx_input(c, n, 2);
  if (!bv || !n->n_output) return onnx_fail(c, "A, B and the output are required");
  if (onnx_attr_int(n, "transA", 0) || !bv->k || (cv && !cv->k) || bv->k->is_int) return onnx_gemm_matmul(c, n);
  onnx_const *b = bv->k;
  onnx_const *w = onnx_gemm_weight(c, b, onnx_attr_int(n, "transB", 0) != 0, onnx_attr_float(n, "alpha", 1.0f));
  onnx_const *bias = w && cv ? onnx_gemm_bias(c, cv->k, w->shape.d[0], onnx_attr_float(n, "beta", 1.0f)) : NULL;
  if (!w || (cv && !bias)) return 1;
  onnx_value wval = {.tensor = -1, .k = w}, bval = {.tensor = -1, .k = bias};
  int in[3] = {onnx_in(c, n, 0, IR_T_PARAM), onnx_tensor(c, &wval, IR_T_PARAM), bias ? onnx_tensor(c, &bval, IR_T_PARAM) : 0};
  int k = onnx_emit(c, n, kop, in, bias ? 3 : 2);
  if (k < 0) return 1;
  k_fc_param *p = onnx_param(c, k);
  p->num_hidden = w->shape.d[0], p->no_bias = !bias, p->flatten = 0;
  return 0;
}

int onnx_matmul(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  int in[2] = {onnx_in(c, n, 0, IR_T_PARAM), onnx_in(c, n, 1, IR_T_PARAM)};
  return onnx_emit(c, n, kop, in, 2) < 0;
}

/* ---- convolution and pooling: kernel, strides, dilations, pads ---- */

/* pad: what the pads of both sides share; before/after: the excess of asymmetric pads on one
 * side, which the op takes as its own start and end pads (convolution always, pooling within
 * half its kernel) or a pad node in front of it does (onnx_window_input, pooling). */
typedef struct {
  int nk;
  int64_t kernel[K_MAX_RANK], stride[K_MAX_RANK], dilate[K_MAX_RANK], pad[K_MAX_RANK];
  int64_t before[K_MAX_RANK], after[K_MAX_RANK];
  bool asym;
} onnx_window;

static int onnx_ints_or(const Onnx__NodeProto *n, const char *name, int64_t *v, int nk, int64_t dflt) {
  int got = onnx_attr_ints(n, name, v, nk);
  if (got == 0)
    for (int i = 0; i < nk; i++) v[i] = dflt;
  return got == 0 || got == nk ? 0 : 1;
}

/* The window's pads from each axis's start b[i] and end e[i]: alike on both sides up to the
 * smaller, the rest before or after. */
static void onnx_window_set(onnx_window *w, const int64_t *b, const int64_t *e) {
  w->asym = false;
  for (int i = 0; i < w->nk; i++) {
    w->pad[i] = b[i] < e[i] ? b[i] : e[i];
    w->before[i] = b[i] - w->pad[i], w->after[i] = e[i] - w->pad[i];
    w->asym |= b[i] != e[i];
  }
}

/* auto_pad SAME_*: the total padding that makes out = ceil(in / stride), an odd total's extra
 * one at the end (SAME_UPPER) or at the start (SAME_LOWER). */
static void onnx_same_pads(const onnx_window *w, const k_shape *x, bool lower, int64_t *pads) {
  for (int i = 0; i < w->nk; i++) {
    int64_t in = x->d[2 + i], out = (in + w->stride[i] - 1) / w->stride[i];
    int64_t total = (out - 1) * w->stride[i] + (w->kernel[i] - 1) * w->dilate[i] + 1 - in;
    if (total < 0) total = 0;
    pads[i] = lower ? total - total / 2 : total / 2, pads[w->nk + i] = total - pads[i];
  }
}

static int onnx_window_pads(onnx_ctx *c, const Onnx__NodeProto *n, const k_shape *x, onnx_window *w) {
  int64_t pads[2 * K_MAX_RANK] = {0};
  const Onnx__AttributeProto *ap = onnx_attr(n, "auto_pad");
  const char *mode = ap && ap->has_s ? (const char *)ap->s.data : NULL;
  size_t ml = ap && ap->has_s ? ap->s.len : 0;
  if (mode && ml >= 4 && strncmp(mode, "SAME", 4) == 0) onnx_same_pads(w, x, ml > 5 && mode[5] == 'L', pads);
  else if (mode && !(ml == 6 && strncmp(mode, "NOTSET", 6) == 0) && !(ml == 5 && strncmp(mode, "VALID", 5) == 0))
    return onnx_unsupported_attr(c, "auto_pad", "with this value");
  else if (!mode || ml == 6) {
    int got = onnx_attr_ints(n, "pads", pads, 2 * K_MAX_RANK);
    if (got != 0 && got != 2 * w->nk) return onnx_fail(c, "pads has %d values for a %d-d window", got, w->nk);
  }
  for (int i = 0; i < 2 * w->nk; i++)
    if (pads[i] < 0 || pads[i] > ONNX_MAX_DIM) return onnx_fail(c, "pads must be non-negative");
  onnx_window_set(w, pads, pads + w->nk);
  return 0;
}

static int onnx_window_read(onnx_ctx *c, const Onnx__NodeProto *n, const k_shape *x, onnx_window *w) {
  if (x->rank < 3 || x->rank - 2 > 2)
    return onnx_fail(c, "an input of rank %d is not supported: Kiln convolves and pools 1-d and 2-d inputs", x->rank);
  if (w->nk == 0 && onnx_attr_ints(n, "kernel_shape", w->kernel, K_MAX_RANK) != x->rank - 2)
    return onnx_fail(c, "kernel_shape must have %d values", x->rank - 2);
  w->nk = x->rank - 2;
  if (onnx_ints_or(n, "strides", w->stride, w->nk, 1) || onnx_ints_or(n, "dilations", w->dilate, w->nk, 1))
    return onnx_fail(c, "strides and dilations must have %d values", w->nk);
  for (int i = 0; i < w->nk; i++)
    if (w->stride[i] <= 0 || w->dilate[i] <= 0 || w->kernel[i] <= 0 || w->stride[i] > ONNX_MAX_DIM || w->dilate[i] > ONNX_MAX_DIM)
      return onnx_fail(c, "kernel_shape, strides and dilations must be positive");
  return onnx_window_pads(c, n, x, w);
}

/* A pending zero Pad (onnx_pad) on the input becomes the window's own padding, added to the
 * op's pads on each side: the op then reads the unpadded tensor, whose shape xs becomes. A
 * convolution takes any; a pool one alike on both sides, whose pads stay within half its
 * kernel (PyTorch's limit, which Kiln keeps): past that the Pad stays a pad node. */
static int onnx_take_pad(onnx_ctx *c, onnx_value **xv, onnx_window *w, k_shape *xs, bool pool) {
  const onnx_value *v = *xv;
  if (!v->npad || v->npad != w->nk) return 0;
  for (int i = 0; pool && i < w->nk; i++)
    if (v->pad_begin[i] != v->pad_end[i] || 2 * (w->pad[i] + v->pad_begin[i]) > w->kernel[i]) return 0;
  int64_t b[K_MAX_RANK], e[K_MAX_RANK];
  for (int i = 0; i < w->nk; i++)
    b[i] = w->pad[i] + w->before[i] + v->pad_begin[i], e[i] = w->pad[i] + w->after[i] + v->pad_end[i];
  onnx_window_set(w, b, e);
  onnx_value *plain = ir_alloc(&c->g->arena, sizeof *plain);
  *plain = (onnx_value){.tensor = v->tensor};
  *xv = plain;
  onnx_shape_of(c, plain, xs);
  return 0;
}

/* The op's input as a tensor, after a pad node with `fill` for asymmetric pads' excess when
 * the window still asks for one (w->asym), so that the op itself pads both sides alike. */
static int onnx_window_input(onnx_ctx *c, const Onnx__NodeProto *n, onnx_value *xv, const onnx_window *w, float fill) {
  int x = onnx_tensor(c, xv, IR_T_PARAM);
  if (x < 0 || !w->asym) return x;
  int r = w->nk + 2;
  int64_t pads[2 * K_MAX_RANK] = {0};
  for (int i = 0; i < w->nk; i++) pads[2 + i] = w->before[i], pads[r + 2 + i] = w->after[i];
  int k = onnx_step(c, n, false, IR_OP_pad, &x, 1);
  if (k < 0) return -1;
  k_pad_param *p = onnx_param(c, k);
  onnx_pad_tuple(&p->pad, pads, r);
  p->mode = K_PAD_CONSTANT, p->value = fill;
  return onnx_step_done(c, k);
}

/* A convolution's or pool's pad attribute: one per axis, or with direct asymmetric pads every
 * start then every end (k_params.h). */
static void onnx_window_pad_attr(k_ints *dst, const onnx_window *w, bool direct) {
  onnx_set_ints(dst, w->pad, w->nk);
  for (int i = 0; direct && i < w->nk; i++)
    dst->v[i] = w->pad[i] + w->before[i], dst->v[w->nk + i] = w->pad[i] + w->after[i];
  dst->n = direct ? 2 * w->nk : w->nk;
}

int onnx_conv(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_value *xv = onnx_input(c, n, 0), *wv = onnx_input(c, n, 1), *bv = onnx_input(c, n, 2);
  k_shape xs, ws;
  if (!xv || !wv) return onnx_fail(c, "X and W are required");
  onnx_shape_of(c, xv, &xs), onnx_shape_of(c, wv, &ws);
  onnx_window w = {0};
  if (ws.rank != xs.rank) return onnx_fail(c, "W has rank %d but X rank %d", ws.rank, xs.rank);
  if (onnx_attr_ints(n, "kernel_shape", w.kernel, K_MAX_RANK) == 0) {
    w.nk = ws.rank - 2;
    for (int i = 0; i < w.nk; i++) w.kernel[i] = ws.d[2 + i];
  }
  if (onnx_window_read(c, n, &xs, &w) || onnx_take_pad(c, &xv, &w, &xs, false)) return 1;
  /* asymmetric pads are the convolution's own start and end pads, with no pad node (a copy of
   * the input) before it */
  int in[3] = {onnx_tensor(c, xv, IR_T_PARAM), onnx_tensor(c, wv, IR_T_PARAM), bv ? onnx_tensor(c, bv, IR_T_PARAM) : 0};
  int k = onnx_emit(c, n, kop, in, bv ? 3 : 2);
  if (k < 0) return 1;
  k_conv_param *p = onnx_param(c, k);
  p->num_filter = ws.d[0], p->num_group = onnx_attr_int(n, "group", 1), p->no_bias = !bv;
  onnx_set_ints(&p->kernel, w.kernel, w.nk), onnx_set_ints(&p->stride, w.stride, w.nk);
  onnx_window_pad_attr(&p->pad, &w, w.asym), onnx_set_ints(&p->dilate, w.dilate, w.nk);
  return 0;
}

/* ceil_mode = 1 where it changes the output size: the row's ceil_mode (torch's: the last
 * window may run past the end, a max pool taking the largest element it holds, an average
 * counting what it holds of the padded input, or of the input with count_include_pad = 0), so
 * *ceil is set. A window of padding alone is refused (torch drops it, ONNX's formula keeps
 * it); every other window holds an input element, so ONNX's result is the row's. */
static int onnx_ceil_mode(onnx_ctx *c, const onnx_window *w, const k_shape *x, bool *ceil) {
  for (int i = 0; i < w->nk; i++) {
    int64_t span = x->d[2 + i] + 2 * w->pad[i] + w->before[i] + w->after[i] - w->kernel[i];
    if (span < 0 || span % w->stride[i] == 0) continue;
    int64_t last = (span / w->stride[i] + 1) * w->stride[i];    /* the extra window's start */
    if (last >= x->d[2 + i] + w->pad[i] + w->before[i])
      return onnx_unsupported_attr(c, "ceil_mode", "= 1 where a window would hold padding only");
    *ceil = true;
  }
  return 0;
}

/* AveragePool's count_include_pad = 0 is the row's attribute. A zero Pad before the pool is
 * data to ONNX, so it folds into the pool's pads only where the pool counts padding or has
 * none of its own (then Kiln's pool counts it). */
static int onnx_avg_count(onnx_ctx *c, const Onnx__NodeProto *n, onnx_value **xv, onnx_window *w, k_shape *xs, bool *cip) {
  bool padded = w->asym;                   /* by the op itself: a Pad before it counts as data */
  for (int i = 0; i < w->nk; i++) padded |= w->pad[i] != 0;
  *cip = onnx_attr_int(n, "count_include_pad", 0) != 0 || !padded;
  return *cip ? onnx_take_pad(c, xv, w, xs, true) : 0;
}

/* Asymmetric pads as the row's own start and end pads, with no pad node (a copy of the input)
 * before it, where every side is within half the kernel (the row's limit). Past it the excess
 * is a pad node (-FLT_MAX before a max pool, zeros before an average that counts its
 * padding), except for an average that does not count its padding, which must take them itself
 * (`must`: a pad node's zeros would count as elements; the caller refuses what does not fit).
 * The window then keeps its pads in before/after but asks for no pad node. */
static bool onnx_pool_direct(onnx_window *w, bool must) {
  bool fits = true;
  for (int i = 0; i < w->nk; i++)
    fits &= 2 * (w->pad[i] + w->before[i]) <= w->kernel[i] && 2 * (w->pad[i] + w->after[i]) <= w->kernel[i];
  bool direct = w->asym && (fits || must);
  w->asym &= !direct;
  return direct;
}

int onnx_pool(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_value *xv = onnx_input(c, n, 0);
  bool avg = strcmp(n->op_type, "AveragePool") == 0, cip = true, ceil = false, direct = false;
  k_shape xs;
  onnx_window w = {0};
  if (!xv || onnx_one_output(c, n, "Indices")) return 1;
  onnx_shape_of(c, xv, &xs);
  if (onnx_window_read(c, n, &xs, &w)) return 1;
  if (avg && onnx_avg_count(c, n, &xv, &w, &xs, &cip)) return 1;
  if (onnx_attr_int(n, "ceil_mode", 0) && onnx_ceil_mode(c, &w, &xs, &ceil)) return 1;
  direct = onnx_pool_direct(&w, avg && !cip);
  for (int i = 0; i < w.nk; i++) {
    if (w.dilate[i] != 1) return onnx_unsupported_attr(c, "dilations", "other than 1");
    int64_t side = w.pad[i] + (direct ? (w.before[i] > w.after[i] ? w.before[i] : w.after[i]) : 0);
    if (2 * side > w.kernel[i]) return onnx_unsupported_attr(c, "pads", "larger than half the kernel (PyTorch's limit, which Kiln keeps)");
    /* max pools pad with -FLT_MAX for ONNX's "ignored": the same while every window holds an
     * element of the input */
    if (!avg && (w.pad[i] + w.before[i] >= w.kernel[i] || w.pad[i] + w.after[i] >= w.kernel[i]))
      return onnx_unsupported_attr(c, "pads", "as large as the kernel");
  }
  if (onnx_attr_int(n, "storage_order", 0)) return onnx_unsupported_attr(c, "storage_order", "= 1");
  int x = onnx_window_input(c, n, xv, &w, avg ? 0.0f : -FLT_MAX), k = onnx_emit(c, n, kop, &x, 1);
  if (k < 0) return 1;
  k_pool_param *p = onnx_param(c, k);
  p->pool_type = avg ? 1 : 0, p->count_include_pad = cip, p->ceil_mode = ceil;
  onnx_set_ints(&p->kernel, w.kernel, w.nk), onnx_set_ints(&p->stride, w.stride, w.nk);
  onnx_window_pad_attr(&p->pad, &w, direct);
  return 0;
}

int onnx_global_pool(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  int x = onnx_in(c, n, 0, IR_T_PARAM), k = onnx_emit(c, n, kop, &x, 1);
  if (k < 0) return 1;
  k_pool_param *p = onnx_param(c, k);
  p->global_pool = 1, p->pool_type = strcmp(n->op_type, "GlobalAveragePool") == 0 ? 1 : 0;
  return 0;
}

/* ---- normalisation, dropout, softmax, reductions ---- */

int onnx_batch_norm(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  if (onnx_one_output(c, n, "the running statistics")) return 1;
  int in[5] = {onnx_in(c, n, 0, IR_T_PARAM), onnx_in(c, n, 1, IR_T_PARAM), onnx_in(c, n, 2, IR_T_PARAM),
               onnx_in(c, n, 3, IR_T_AUX), onnx_in(c, n, 4, IR_T_AUX)};
  int k = onnx_emit(c, n, kop, in, 5);
  if (k < 0) return 1;
  k_batch_norm_param *p = onnx_param(c, k);
  p->eps = onnx_attr_float(n, "epsilon", 1e-5f), p->momentum = onnx_attr_float(n, "momentum", 0.9f), p->axis = 1;
  return 0;
}

/* LayerNormalization's Scale or B read flat as [D] (layer_norm's gamma and beta): its dims,
 * right-aligned against the normalised ones xs[axis..], must be theirs (leading 1s aside); a
 * constant keeps its values and origin, a computed one gets a reshape. -1 after an error. */
static int onnx_ln_param(onnx_ctx *c, const Onnx__NodeProto *n, int i, const k_shape *xs, int axis, int64_t d) {
  onnx_value *v = onnx_input(c, n, i);
  k_shape s, flat = {1, {d}};
  onnx_shape_of(c, v, &s);
  bool ok = k_shape_numel(&s) == d;
  for (int j = 0; ok && j < s.rank; j++) {
    int xa = xs->rank - s.rank + j;
    ok = xa >= axis ? s.d[j] == xs->d[xa] : s.d[j] == 1;
  }
  if (!ok)
    return onnx_fail(c, "input %d must have the normalised shape (%lld elements); broadcasting it over the normalised axes is not "
                     "supported", i + 1, (long long)d), -1;
  if (!v->k) return onnx_b_reshape(c, n, NULL, onnx_tensor(c, v, IR_T_PARAM), &flat);
  onnx_const *k = ir_alloc(&c->g->arena, sizeof *k);
  *k = *v->k;
  k->shape = flat, k->tensor = -1;
  onnx_value fv = {.tensor = -1, .k = k};
  return onnx_tensor(c, &fv, IR_T_PARAM);
}

/* Mean and InvStdDev (outputs 2 and 3) where the graph reads them, which layer_norm keeps
 * hidden: a mean over the normalised axes, kept as ONNX's 1s, and rsqrt(mean((x - mean)^2) +
 * epsilon), the two passes layer_norm's kernel makes. */
static int onnx_ln_stats(onnx_ctx *c, const Onnx__NodeProto *n, int x, int axis, float eps) {
  int64_t axes[K_MAX_RANK];
  int r = onnx_tshape(c, x)->rank, na = 0;
  bool inv = onnx_out_read(c, n, 2);
  for (int a = axis; a < r; a++) axes[na++] = a;
  int m = onnx_b_reduce(c, n, onnx_out_read(c, n, 1) ? n->output[1] : NULL, IR_OP_mean, x, axes, na, true);
  if (!inv || m < 0) return m < 0;
  int sq = onnx_b_op(c, n, NULL, IR_OP_square, onnx_b_op(c, n, NULL, IR_OP_sub, x, m), -1);
  int var = onnx_b_reduce(c, n, NULL, IR_OP_mean, sq, axes, na, true);
  return onnx_b_op(c, n, n->output[2], IR_OP_rsqrt, onnx_b_op(c, n, NULL, IR_OP_add, var, onnx_scalar(c, eps)), -1) < 0;
}

/* LayerNormalization (opset 17) normalises every axis from `axis` on; layer_norm normalises
 * the last, so x is reshaped to [rows, D] around it where axis is not the last (the same
 * elements in the same order). B absent is zeros. stash_type only says the statistics are
 * f32, which Kiln's are. */
int onnx_layer_norm(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_value *xv = onnx_input(c, n, 0);
  k_shape xs;
  if (!xv || !onnx_input(c, n, 1)) return onnx_fail(c, "X and Scale are required");
  onnx_shape_of(c, xv, &xs);
  int64_t axis = onnx_attr_int(n, "axis", -1), d = 1, rows = 1;
  float eps = onnx_attr_float(n, "epsilon", 1e-5f);
  if (axis < 0) axis += xs.rank;
  if (axis < 0 || axis >= xs.rank) return onnx_fail(c, "axis %lld is out of range for rank %d", (long long)onnx_attr_int(n, "axis", -1), xs.rank);
  if (onnx_attr_int(n, "stash_type", 1) != 1) return onnx_unsupported_attr(c, "stash_type", "other than 1 (float)");
  for (int a = 0; a < xs.rank; a++) *(a < axis ? &rows : &d) *= xs.d[a];
  int x = onnx_tensor(c, xv, IR_T_PARAM), gamma = onnx_ln_param(c, n, 1, &xs, (int)axis, d);
  int beta = onnx_input(c, n, 2) ? onnx_ln_param(c, n, 2, &xs, (int)axis, d) : onnx_b_const(c, onnx_const_new(c, false, &(k_shape){1, {d}}));
  bool last = axis == xs.rank - 1;
  int in[3] = {last ? x : onnx_b_reshape(c, n, NULL, x, &(k_shape){2, {rows, d}}), gamma, beta};
  int k = onnx_step(c, n, last, kop, in, 3);
  if (k < 0) return 1;
  ((k_layer_norm_param *)onnx_param(c, k))->eps = eps;
  int y = onnx_step_done(c, k);
  if (!last) y = onnx_b_reshape(c, n, n->output[0], y, &xs);
  if (y < 0) return 1;
  return onnx_out_read(c, n, 1) || onnx_out_read(c, n, 2) ? onnx_ln_stats(c, n, x, (int)axis, eps) : 0;
}

int onnx_dropout(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  float ratio = onnx_attr_float(n, "ratio", 0.5f);
  if (onnx_one_output(c, n, "mask") || (c->opset >= 12 && onnx_scalar_input(c, n, 1, "ratio", 0.5f, &ratio))) return 1;
  int x = onnx_in(c, n, 0, IR_T_PARAM), k = onnx_emit(c, n, kop, &x, 1);
  if (k < 0) return 1;
  ((k_dropout_param *)onnx_param(c, k))->p = ratio;
  return 0;
}

int onnx_softmax(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_value *xv = onnx_input(c, n, 0);
  k_shape xs;
  if (!xv) return onnx_fail(c, "input 1 is required");
  onnx_shape_of(c, xv, &xs);
  int64_t axis = onnx_attr_int(n, "axis", c->opset >= 13 ? -1 : 1);
  if (axis < 0) axis += xs.rank;
  /* Before opset 13 the op normalised over all axes from `axis` on, as one. */
  if (c->opset < 13 && axis != xs.rank - 1) return onnx_unsupported_attr(c, "axis", "other than the last (opset < 13 coerces to 2-d)");
  int x = onnx_tensor(c, xv, IR_T_PARAM), k = onnx_emit(c, n, kop, &x, 1);
  if (k < 0) return 1;
  ((k_softmax_param *)onnx_param(c, k))->axis = (int32_t)axis;
  return 0;
}

/* The axes: an attribute, or (ReduceSum since opset 13) a constant input; the count, or -1. */
static int onnx_reduce_axes(onnx_ctx *c, const Onnx__NodeProto *n, int64_t *axes) {
  int na = onnx_attr_ints(n, "axes", axes, K_MAX_RANK);
  if (onnx_input(c, n, 1)) {
    onnx_const *k = onnx_input_const(c, n, 1, "axes");
    if (!k) return -1;
    if (!k->is_int || k->n > K_MAX_RANK) return onnx_fail(c, "axes must be at most %d integers", K_MAX_RANK), -1;
    na = (int)k->n;
    memcpy(axes, k->i, (size_t)na * sizeof *axes);
  }
  if (na < 0) onnx_fail(c, "too many axes");
  return na;
}

/* The elementwise op ReduceSumSquare and ReduceLogSum apply to the reduction's output, which
 * is no larger than x: square(norm(x)) and log(sum(x)) cost one pass over x, as a row of
 * their own would. -1 for the others. */
static int onnx_reduce_tail(const Onnx__NodeProto *n) {
  if (strcmp(n->op_type, "ReduceSumSquare") == 0) return IR_OP_square;
  if (strcmp(n->op_type, "ReduceLogSum") == 0) return IR_OP_log;
  return -1;
}

/* Reduce*: one Kiln reduction (norm's ord from the op: 1 for ReduceL1, else 2), and for two of
 * them an elementwise op after it. noop_with_empty_axes = 1 with no axes is the identity. */
int onnx_reduce(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  int64_t axes[K_MAX_RANK];
  int na = onnx_reduce_axes(c, n, axes), tail = onnx_reduce_tail(n);
  if (na < 0) return 1;
  if (na == 0 && onnx_attr_int(n, "noop_with_empty_axes", 0)) return onnx_fold_identity(c, n, kop);
  int x = onnx_in(c, n, 0, IR_T_PARAM), k = onnx_step(c, n, tail < 0, kop, &x, 1);
  if (k < 0) return 1;
  k_reduce_param *p = onnx_param(c, k);
  onnx_set_ints(&p->axis, axes, na);
  p->keepdims = onnx_attr_int(n, "keepdims", 1) != 0;
  if (kop == IR_OP_norm) p->ord = strcmp(n->op_type, "ReduceL1") == 0 ? 1 : 2;
  if (tail < 0) return 0;
  int r = onnx_step_done(c, k);
  return r < 0 || onnx_step(c, n, true, tail, &r, 1) < 0;
}

/* ---- layout: a constant folds; a computed tensor becomes a reshape to the static shape ---- */

/* out = the input reshaped to s: a constant's values are shared, a tensor gets a reshape node. */
static int onnx_reshape_to(onnx_ctx *c, const Onnx__NodeProto *n, onnx_value *xv, const k_shape *s) {
  if (xv->k) {
    onnx_const *k = ir_alloc(&c->g->arena, sizeof *k);
    *k = *xv->k;
    k->shape = *s, k->tensor = -1;
    onnx_bind(c, n->output[0], -1, k);
    return 0;
  }
  int x = onnx_tensor(c, xv, IR_T_PARAM), k = onnx_emit(c, n, IR_OP_reshape, &x, 1);
  if (k < 0) return 1;
  onnx_set_ints(&((k_reshape_param *)onnx_param(c, k))->shape, s->d, s->rank);
  return 0;
}

int onnx_flatten(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_value *xv = onnx_input(c, n, 0);
  k_shape xs;
  if (!xv || !n->n_output) return onnx_fail(c, "input 1 and output 1 are required");
  onnx_shape_of(c, xv, &xs);
  int64_t axis = onnx_attr_int(n, "axis", 1);
  if (axis < 0) axis += xs.rank;
  if (axis < 0 || axis > xs.rank) return onnx_fail(c, "axis %lld is out of range for rank %d", (long long)axis, xs.rank);
  if (axis == 1 && xs.rank >= 2 && !xv->k) {            /* torch.flatten(x, 1): Kiln's own row */
    int x = onnx_tensor(c, xv, IR_T_PARAM);
    return onnx_emit(c, n, kop, &x, 1) < 0;
  }
  k_shape s = {2, {1, 1}};
  for (int i = 0; i < xs.rank; i++) s.d[i >= axis] *= xs.d[i];
  return onnx_reshape_to(c, n, xv, &s);
}

int onnx_reshape(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_value *xv = onnx_input(c, n, 0);
  onnx_const *sh = onnx_input_const(c, n, 1, "the shape");
  k_shape xs, s;
  if (!xv || !sh) return 1;
  onnx_shape_of(c, xv, &xs);
  if (!sh->is_int || sh->shape.rank != 1 || sh->n > K_MAX_RANK) return onnx_fail(c, "the shape must be at most %d integers", K_MAX_RANK);
  bool allowzero = onnx_attr_int(n, "allowzero", 0) != 0;
  int64_t known = 1, numel = k_shape_numel(&xs), infer = -1;
  s.rank = (int)sh->n;
  for (int i = 0; i < s.rank; i++) {
    int64_t v = sh->i[i] == 0 && !allowzero && i < xs.rank ? xs.d[i] : sh->i[i];
    if (v == -1 && infer < 0) infer = i, v = 1;
    else if (v < 0 || v > ONNX_MAX_DIM) return onnx_fail(c, "the shape has a bad entry %lld", (long long)sh->i[i]);
    s.d[i] = v;
    if (__builtin_mul_overflow(known, v, &known)) return onnx_fail(c, "the shape holds too many elements");
  }
  if (infer >= 0) s.d[infer] = known ? numel / known : 0, known *= s.d[infer];
  if (known != numel) return onnx_fail(c, "cannot reshape %lld elements into a shape of %lld", (long long)numel, (long long)known);
  return onnx_reshape_to(c, n, xv, &s);
}

/* Expand: NumPy broadcasting of the input and the target shape (either may be larger along an
 * axis); a constant folds, a computed tensor becomes a broadcast_to of the result's shape. */
int onnx_expand(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_value *xv = onnx_input(c, n, 0);
  onnx_const *sh = onnx_input_const(c, n, 1, "the shape");
  k_shape xs, want = {0, {0}}, s;
  if (!xv || !sh) return 1;
  if (!n->n_output) return onnx_fail(c, "the node has no output");
  if (!sh->is_int || sh->shape.rank != 1 || sh->n > K_MAX_RANK) return onnx_fail(c, "the shape must be at most %d integers", K_MAX_RANK);
  want.rank = (int)sh->n;
  for (int i = 0; i < want.rank; i++) {
    if (sh->i[i] < 0 || sh->i[i] > ONNX_MAX_DIM) return onnx_fail(c, "the shape has a bad entry %lld", (long long)sh->i[i]);
    want.d[i] = sh->i[i];
  }
  onnx_shape_of(c, xv, &xs);
  if (!ir_shape_broadcast(&xs, &want, &s)) return onnx_fail(c, "the input's shape does not broadcast to the target");
  if (xv->k) return onnx_fold_expand(c, n, xv->k, &s);
  int x = onnx_tensor(c, xv, IR_T_PARAM);
  if (ir_shape_eq(&xs, &s)) return onnx_bind(c, n->output[0], x, NULL), 0;   /* nothing to broadcast */
  int k = onnx_emit(c, n, kop, &x, 1);
  if (k < 0) return 1;
  onnx_set_ints(&((k_broadcast_to_param *)onnx_param(c, k))->shape, s.d, s.rank);
  return 0;
}

/* Squeeze and Unsqueeze: axes from the attribute (opset < 13) or input 2. */
static int onnx_axes(onnx_ctx *c, const Onnx__NodeProto *n, int64_t *axes, int *na) {
  *na = onnx_attr_ints(n, "axes", axes, K_MAX_RANK);
  if (onnx_input(c, n, 1)) {
    onnx_const *k = onnx_input_const(c, n, 1, "axes");
    if (!k) return 1;
    if (!k->is_int || k->n > K_MAX_RANK) return onnx_fail(c, "axes must be at most %d integers", K_MAX_RANK);
    *na = (int)k->n;
    memcpy(axes, k->i, (size_t)k->n * sizeof *axes);
  }
  return *na < 0 ? onnx_fail(c, "too many axes") : 0;
}

int onnx_squeeze(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_value *xv = onnx_input(c, n, 0);
  int64_t axes[K_MAX_RANK];
  int na;
  k_shape xs, s = {0, {0}};
  bool unsq = strcmp(n->op_type, "Unsqueeze") == 0, mark[2 * K_MAX_RANK] = {0};
  if (!xv || onnx_axes(c, n, axes, &na)) return xv ? 1 : onnx_fail(c, "input 1 is required");
  onnx_shape_of(c, xv, &xs);
  int out_rank = unsq ? xs.rank + na : xs.rank;
  if (out_rank > K_MAX_RANK) return onnx_fail(c, "the result would have rank %d; Kiln tensors have rank <= %d", out_rank, K_MAX_RANK);
  for (int i = 0; i < na; i++) {
    int64_t a = axes[i] < 0 ? axes[i] + out_rank : axes[i];
    if (a < 0 || a >= out_rank || mark[a] || (!unsq && xs.d[a] != 1)) return onnx_fail(c, "axis %lld cannot be %ssqueezed", (long long)axes[i], unsq ? "un" : "");
    mark[a] = true;
  }
  for (int i = 0, j = 0; i < (unsq ? out_rank : xs.rank); i++) {
    if (unsq) s.d[s.rank++] = mark[i] ? 1 : xs.d[j++];
    else if (!(na ? mark[i] : xs.d[i] == 1)) s.d[s.rank++] = xs.d[i];
  }
  return onnx_reshape_to(c, n, xv, &s);
}

int onnx_transpose(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  int64_t perm[K_MAX_RANK];
  int np = onnx_attr_ints(n, "perm", perm, K_MAX_RANK);
  if (np < 0) return onnx_fail(c, "perm is too long");
  onnx_value *xv = onnx_input(c, n, 0);
  if (xv && xv->k && xv->k->is_int) return onnx_fold_transpose(c, n, xv->k, perm, np);
  int x = onnx_in(c, n, 0, IR_T_PARAM), k = onnx_emit(c, n, kop, &x, 1);
  if (k < 0) return 1;
  onnx_set_ints(&((k_transpose_param *)onnx_param(c, k))->axes, perm, np);
  return 0;
}

/* Concat: of constants (shape arithmetic) folds; otherwise Kiln's concat. */
int onnx_concat(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  int64_t axis = onnx_attr_int(n, "axis", 0);
  bool all_const = n->n_input > 0;
  for (size_t i = 0; i < n->n_input; i++) {
    onnx_value *v = onnx_input(c, n, (int)i);
    if (!v) return onnx_fail(c, "input %zu is absent", i + 1);
    all_const &= v->k != NULL;
  }
  if (all_const) return onnx_fold_concat(c, n, (int)axis);
  if (n->n_input > 64) return onnx_fail(c, "more than 64 inputs");
  int in[64];
  for (size_t i = 0; i < n->n_input; i++) in[i] = onnx_in(c, n, (int)i, IR_T_PARAM);
  int k = onnx_emit(c, n, kop, in, (int)n->n_input);
  if (k < 0) return 1;
  ((k_concat_param *)onnx_param(c, k))->dim = (int32_t)axis;
  return 0;
}

/* ---- Slice: starts, ends, axes, steps from attributes (opset < 10) or constant inputs; one
 * Kiln slice per axis ---- */

static int onnx_slice_arg(onnx_ctx *c, const Onnx__NodeProto *n, int input, const char *attr, int64_t *v, int *cnt) {
  if (c->opset < 10) {
    int got = onnx_attr_ints(n, attr, v, K_MAX_RANK);
    return got < 0 ? onnx_fail(c, "%s has more than %d values", attr, K_MAX_RANK) : (*cnt = got, 0);
  }
  if (!onnx_input(c, n, input)) return *cnt = 0, 0;
  onnx_const *k = onnx_input_const(c, n, input, attr);
  if (!k) return 1;
  if (!k->is_int || k->shape.rank != 1 || k->n > K_MAX_RANK) return onnx_fail(c, "%s must be at most %d integers", attr, K_MAX_RANK);
  memcpy(v, k->i, (size_t)k->n * sizeof *v);
  return *cnt = (int)k->n, 0;
}

/* ONNX's clamping: negative indices count from the end; out-of-range ones are clamped. */
static void onnx_slice_norm(int64_t d, int64_t step, int64_t *b, int64_t *e) {
  if (*b < 0) *b += d;
  if (*e < 0) *e += d;
  int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? d : d - 1;
  *b = *b < lo ? lo : *b > hi ? hi : *b;
  *e = *e < lo ? lo : *e > hi ? hi : *e;
}

int onnx_slice(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_value *xv = onnx_input(c, n, 0);
  int64_t b[K_MAX_RANK], e[K_MAX_RANK], axes[K_MAX_RANK], steps[K_MAX_RANK];
  int nb, ne, na, ns;
  k_shape xs;
  if (!xv || !n->n_output) return onnx_fail(c, "input 1 and output 1 are required");
  onnx_shape_of(c, xv, &xs);
  if (onnx_slice_arg(c, n, 1, "starts", b, &nb) || onnx_slice_arg(c, n, 2, "ends", e, &ne) ||
      onnx_slice_arg(c, n, 3, "axes", axes, &na) || onnx_slice_arg(c, n, 4, "steps", steps, &ns)) return 1;
  if (nb != ne || (na && na != nb) || (ns && ns != nb)) return onnx_fail(c, "starts, ends, axes and steps differ in length");
  for (int i = 0; i < nb; i++) {
    if (!na) axes[i] = i;
    if (!ns) steps[i] = 1;
    if (axes[i] < 0) axes[i] += xs.rank;
    if (axes[i] < 0 || axes[i] >= xs.rank || steps[i] == 0) return onnx_fail(c, "axis %lld or its step is out of range", (long long)axes[i]);
    onnx_slice_norm(xs.d[axes[i]], steps[i], &b[i], &e[i]);
  }
  if (xv->k) return onnx_fold_slice(c, n, n->output[0], xv->k, nb, axes, b, e, steps);
  int cur = onnx_tensor(c, xv, IR_T_PARAM);
  for (int i = 0; i < nb && cur >= 0; i++) {
    if (steps[i] > 0 ? b[i] >= e[i] : b[i] <= e[i]) return onnx_fail(c, "an empty slice is not supported (Kiln tensors are never empty)");
    int k = onnx_step(c, n, i == nb - 1, kop, &cur, 1);
    if (k < 0) return 1;
    k_slice_param *p = onnx_param(c, k);
    /* Kiln's slice names the range [begin, end) that a negative step walks down from end - 1
     * (ONNX's start), so ONNX's exclusive end below is that range's begin - 1. */
    p->axis = (int32_t)axes[i], p->step = steps[i];
    p->begin = steps[i] > 0 ? b[i] : e[i] + 1, p->end = steps[i] > 0 ? e[i] : b[i] + 1;
    cur = onnx_step_done(c, k);
  }
  if (nb == 0) onnx_bind(c, n->output[0], cur, NULL);
  return cur < 0;
}

/* Gather: of a constant, folded (shape arithmetic); of a computed tensor at one constant index
 * (ViT's class token, x[:, 0]), a slice of that index, reshaped to drop the axis when the
 * index is a scalar. Several indices of a computed tensor are refused. */
int onnx_gather(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_value *xv = onnx_input(c, n, 0);
  onnx_const *idx = xv ? onnx_input_const(c, n, 1, "indices") : NULL;
  if (!idx) return 1;
  if (!n->n_output) return onnx_fail(c, "the node has no output");
  if (xv->k) return onnx_fold_gather(c, n, xv->k, idx);
  k_shape xs, s = {0, {0}};
  onnx_shape_of(c, xv, &xs);
  int64_t axis = onnx_attr_int(n, "axis", 0);
  if (axis < 0) axis += xs.rank;
  if (!idx->is_int || axis < 0 || axis >= xs.rank) return onnx_fail(c, "indices must be integers and axis within the data's rank %d", xs.rank);
  if (idx->n != 1 || idx->shape.rank > 1)
    return onnx_fail(c, "more than one index of a computed tensor is not supported (Kiln gathers one, a slice); this Gather takes %lld",
                     (long long)idx->n);
  int64_t at = idx->i[0] < 0 ? idx->i[0] + xs.d[axis] : idx->i[0];
  if (at < 0 || at >= xs.d[axis]) return onnx_fail(c, "index %lld is out of range for a dimension of %lld", (long long)idx->i[0], (long long)xs.d[axis]);
  bool squeeze = idx->shape.rank == 0;
  int cur = onnx_tensor(c, xv, IR_T_PARAM), k = onnx_step(c, n, !squeeze, kop, &cur, 1);
  if (k < 0) return 1;
  *(k_slice_param *)onnx_param(c, k) = (k_slice_param){(int32_t)axis, at, at + 1, 1};
  cur = onnx_step_done(c, k);
  if (!squeeze || cur < 0) return cur < 0;
  for (int i = 0; i < xs.rank; i++)
    if (i != axis) s.d[s.rank++] = xs.d[i];
  k = onnx_step(c, n, true, IR_OP_reshape, &cur, 1);
  if (k < 0) return 1;
  onnx_set_ints(&((k_reshape_param *)onnx_param(c, k))->shape, s.d, s.rank);
  return onnx_step_done(c, k) < 0;
}

/* ---- Split: one slice per output. Each output is one copy of its part whichever way it is
 * computed, and the gradients of the slices meet by kAddTo in one buffer (the first zeroes
 * it, the others add their part), so a multi-output split row would be no faster ---- */

#define ONNX_MAX_SPLIT 64     /* outputs of one Split, as Concat's inputs */

/* The sizes of the parts: the `split` attribute (opset < 13) or constant input 2, else equal. */
static int onnx_split_sizes(onnx_ctx *c, const Onnx__NodeProto *n, int64_t d, int64_t *sz, int parts) {
  int got = 0;
  if (c->opset < 13) {
    got = onnx_attr_ints(n, "split", sz, parts);
    if (got < 0) return onnx_fail(c, "split has more entries than the node's %d outputs", parts);
  } else if (onnx_input(c, n, 1)) {
    onnx_const *k = onnx_input_const(c, n, 1, "split");
    if (!k) return 1;
    if (!k->is_int || k->shape.rank != 1 || k->n != parts) return onnx_fail(c, "split must be %d integers, one per output", parts);
    memcpy(sz, k->i, (size_t)parts * sizeof *sz);
    got = parts;
  }
  if (got && got != parts) return onnx_fail(c, "split has %d entries for %d outputs", got, parts);
  if (!got && d % parts) return onnx_fail(c, "axis of size %lld does not split into %d equal parts", (long long)d, parts);
  int64_t sum = 0;
  for (int i = 0; i < parts; i++) {
    if (!got) sz[i] = d / parts;
    if (sz[i] <= 0) return onnx_fail(c, "output %d would be empty (Kiln tensors are never empty)", i + 1);
    if (sz[i] > d - sum) return onnx_fail(c, "the split sizes add up to more than the axis's size %lld", (long long)d);
    sum += sz[i];
  }
  if (sum != d) return onnx_fail(c, "the split sizes add up to %lld, not the axis's size %lld", (long long)sum, (long long)d);
  return 0;
}

int onnx_split(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_value *xv = onnx_input(c, n, 0);
  int64_t sz[ONNX_MAX_SPLIT], axis = onnx_attr_int(n, "axis", 0), begin = 0, one = 1;
  int parts = (int)n->n_output;
  k_shape xs;
  if (!xv) return onnx_fail(c, "input 1 is required");
  if (parts > ONNX_MAX_SPLIT) return onnx_fail(c, "more than %d outputs", ONNX_MAX_SPLIT);
  onnx_shape_of(c, xv, &xs);
  if (axis < 0) axis += xs.rank;
  if (axis < 0 || axis >= xs.rank) return onnx_fail(c, "axis %lld is out of range", (long long)onnx_attr_int(n, "axis", 0));
  if (onnx_split_sizes(c, n, xs.d[axis], sz, parts)) return 1;
  int x = xv->k ? -1 : onnx_tensor(c, xv, IR_T_PARAM);
  if (!xv->k && x < 0) return 1;
  for (int i = 0; i < parts; begin += sz[i++]) {
    const char *out = n->output[i];
    if (!out || !*out) continue;                         /* an output nothing names */
    int64_t end = begin + sz[i];
    if (xv->k) {
      if (onnx_fold_slice(c, n, out, xv->k, 1, &axis, &begin, &end, &one)) return 1;
      continue;
    }
    int k = onnx_emit_as(c, out, out, kop, &x, 1);
    if (k < 0) return 1;
    k_slice_param *p = onnx_param(c, k);
    p->axis = (int32_t)axis, p->begin = begin, p->end = end, p->step = 1;
    if (onnx_step_done(c, k) < 0) return 1;
  }
  return 0;
}
