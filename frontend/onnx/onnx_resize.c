/* onnx_resize.c — Resize (opsets 10 to 17) and Upsample (9) with constant scales or sizes,
 * as Kiln's layout ops and matmuls. Each axis is resized on its own (ONNX's interpolation is
 * separable): its output index o reads the input at ONNX's x_original(o) (the
 * coordinate_transformation_mode), which gives a matrix [out, in] per axis: one 1 per row for
 * nearest (nearest_mode's rounding), two weights (1 - r, r) for linear, indices clamped to the
 * edge as ONNX's reference pads. The matrices are consts applied with a matmul along their
 * axis (the rows before it as the matmul's batch, the elements after it as its columns), so
 * gradients come from matmul's row. Nearest upsampling by an integer factor, each input read
 * `factor` times in a row, is instead a reshape, a broadcast_to and a reshape. Cubic and
 * tf_crop_and_resize are refused. */
#include "onnx_int.h"

#include <math.h>
#include <string.h>

enum { ONNX_RS_HALF_PIXEL, ONNX_RS_PYTORCH_HALF_PIXEL, ONNX_RS_ALIGN_CORNERS, ONNX_RS_ASYMMETRIC, ONNX_RS_TF_HALF_PIXEL_NN };
enum { ONNX_RS_PREFER_FLOOR, ONNX_RS_PREFER_CEIL, ONNX_RS_FLOOR, ONNX_RS_CEIL };

typedef struct {
  bool linear;
  int coord, nearest;                  /* ONNX_RS_* */
  int rank;
  int64_t in[K_MAX_RANK], out[K_MAX_RANK];
  double scale[K_MAX_RANK];            /* ONNX's: given, or out / in from sizes */
} onnx_rs;

/* The string attribute `name` as an index into values, dflt when absent, -1 when another. */
static int onnx_attr_choice(const Onnx__NodeProto *n, const char *name, const char *const *values, int nv, int dflt) {
  const Onnx__AttributeProto *a = onnx_attr(n, name);
  if (!a) return dflt;
  for (int i = 0; a->has_s && i < nv; i++)
    if (a->s.len == strlen(values[i]) && memcmp(a->s.data, values[i], a->s.len) == 0) return i;
  return -1;
}

/* mode, coordinate_transformation_mode and nearest_mode; Upsample and Resize-10 read as
 * asymmetric with floor (their only rule). */
static int onnx_rs_attrs(onnx_ctx *c, const Onnx__NodeProto *n, onnx_rs *r) {
  static const char *const modes[] = {"nearest", "linear", "bilinear"};
  static const char *const coords[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn"};
  static const char *const nearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  bool old = strcmp(n->op_type, "Upsample") == 0 || c->opset < 11;
  int mode = onnx_attr_choice(n, "mode", modes, old ? 3 : 2, 0);
  if (mode < 0) return onnx_unsupported_attr(c, "mode", "other than nearest or linear (cubic has no Kiln form)");
  r->linear = mode > 0;
  r->coord = old ? ONNX_RS_ASYMMETRIC : onnx_attr_choice(n, "coordinate_transformation_mode", coords, 5, ONNX_RS_HALF_PIXEL);
  if (r->coord < 0) return onnx_unsupported_attr(c, "coordinate_transformation_mode", "other than half_pixel, pytorch_half_pixel, "
                                                 "align_corners, asymmetric or tf_half_pixel_for_nn");
  r->nearest = old ? ONNX_RS_FLOOR : onnx_attr_choice(n, "nearest_mode", nearest, 4, ONNX_RS_PREFER_FLOOR);
  if (r->nearest < 0) return onnx_unsupported_attr(c, "nearest_mode", "other than round_prefer_floor, round_prefer_ceil, floor or ceil");
  return 0;
}

/* Each axis's scale and output size from the scales (input 1 of Upsample and Resize-10, 2
 * after) or, when those are absent or empty, the sizes (input 3). */
static int onnx_rs_sizes(onnx_ctx *c, const Onnx__NodeProto *n, onnx_rs *r) {
  bool old = strcmp(n->op_type, "Upsample") == 0 || c->opset < 11;
  onnx_value *sv = onnx_input(c, n, old ? 1 : 2), *zv = old ? NULL : onnx_input(c, n, 3);
  bool by_scales = sv && !(sv->k && sv->k->n == 0);
  if (!sv && !zv) return onnx_fail(c, "scales or sizes is required");
  onnx_const *k = by_scales || !zv ? onnx_input_const(c, n, old ? 1 : 2, "scales") : onnx_input_const(c, n, 3, "sizes");
  if (!k) return 1;
  if (k->n != r->rank || k->is_int == by_scales)
    return onnx_fail(c, "%s must hold %d %s, one per axis", by_scales ? "scales" : "sizes", r->rank, by_scales ? "floats" : "integers");
  for (int a = 0; a < r->rank; a++) {
    double s = by_scales ? (double)k->f[a] : (double)k->i[a] / (double)r->in[a];
    double o = by_scales ? floor(s * (double)r->in[a]) : (double)k->i[a];
    if (!(s > 0) || !(o >= 1) || o > ONNX_MAX_DIM)
      return onnx_fail(c, "axis %d would resize to %g elements (scale %g); Kiln tensors are never empty", a, o, s);
    r->scale[a] = s, r->out[a] = (int64_t)o;
  }
  return 0;
}

/* ONNX's x_original of output index o along axis a, as its reference computes it (in double,
 * the output's length taken as scale * in). */
static double onnx_rs_source(const onnx_rs *r, int a, int64_t o) {
  double s = r->scale[a], len = s * (double)r->in[a], x = (double)o;
  switch (r->coord) {
  case ONNX_RS_PYTORCH_HALF_PIXEL: return len == 1 ? -0.5 : (x + 0.5) / s - 0.5;
  case ONNX_RS_ALIGN_CORNERS: return len == 1 ? 0.0 : x * (double)(r->in[a] - 1) / (len - 1);
  case ONNX_RS_ASYMMETRIC: return x / s;
  case ONNX_RS_TF_HALF_PIXEL_NN: return (x + 0.5) / s;
  default: return (x + 0.5) / s - 0.5;
  }
}

static int64_t onnx_rs_clamp(int64_t i, int64_t in) { return i < 0 ? 0 : i >= in ? in - 1 : i; }

/* The taps of output o along axis a: input indices idx[0..1] with weights w[0..1] (nearest:
 * one index of weight 1, the second weight 0). */
static void onnx_rs_taps(const onnx_rs *r, int a, int64_t o, int64_t *idx, float *w) {
  double x = onnx_rs_source(r, a, o), f = floor(x), ratio = x - f;
  int64_t lo = (int64_t)f, in = r->in[a];
  if (r->linear) {
    idx[0] = onnx_rs_clamp(lo, in), idx[1] = onnx_rs_clamp(lo + 1, in);
    w[0] = (float)(1 - ratio), w[1] = (float)ratio;
    return;
  }
  bool up = ratio > 0 && (r->nearest == ONNX_RS_CEIL || (r->nearest == ONNX_RS_PREFER_FLOOR && ratio > 0.5) ||
                          (r->nearest == ONNX_RS_PREFER_CEIL && ratio >= 0.5));
  idx[0] = idx[1] = onnx_rs_clamp(up ? lo + 1 : lo, in);
  w[0] = 1.0f, w[1] = 0.0f;
}

/* What axis a needs: 0 nothing (every output reads its own index), f > 1 nearest upsampling
 * that reads each input f times in a row, -1 a matrix. */
static int64_t onnx_rs_kind(const onnx_rs *r, int a) {
  int64_t in = r->in[a], out = r->out[a], idx[2];
  float w[2];
  bool ident = out == in, rep = !r->linear && out % in == 0 && r->rank < K_MAX_RANK;
  int64_t f = rep ? out / in : 1;
  for (int64_t o = 0; o < out && (ident || rep); o++) {
    onnx_rs_taps(r, a, o, idx, w);
    bool one = w[0] + w[1] == 1.0f && (idx[0] == idx[1] || w[1] == 0.0f);
    ident &= one && idx[0] == o;
    rep &= one && idx[0] == o / f;
  }
  return ident ? 0 : rep ? f : -1;
}

/* Axis a's matrix [out, in] as a constant, NULL after an error. */
static onnx_const *onnx_rs_matrix(onnx_ctx *c, const Onnx__NodeProto *n, const onnx_rs *r, int a) {
  int64_t in = r->in[a], out = r->out[a], idx[2];
  float w[2];
  onnx_const *m = out <= ONNX_MAX_FOLD_ELEMS / in ? onnx_const_new(c, false, &(k_shape){2, {out, in}}) : NULL;
  if (!m) return onnx_fail(c, "axis %d's interpolation matrix (%lld x %lld) would be too large", a, (long long)out, (long long)in), NULL;
  m->onnx_name = ir_strfmt(&c->g->arena, "%s_resize%d", n->output[0], a);
  for (int64_t o = 0; o < out; o++) {
    onnx_rs_taps(r, a, o, idx, w);
    m->f[o * in + idx[0]] += w[0], m->f[o * in + idx[1]] += w[1];
  }
  return m;
}

/* x resized along axis a by matrix m [out, in]: the axes before it are the matmul's batch,
 * those after it its columns ([P, in, Q], or [P, in] read against m transposed). */
static int onnx_rs_apply(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int x, int a, onnx_const *m) {
  k_shape s = *onnx_tshape(c, x), y = s;
  int64_t p = 1, q = 1;
  for (int i = 0; i < s.rank; i++) *(i < a ? &p : &q) *= i == a ? 1 : s.d[i];
  y.d[a] = m->shape.d[0];
  int w = onnx_b_const(c, m);
  if (q == 1) {
    int prod = onnx_b_matmul(c, n, NULL, onnx_b_reshape(c, n, NULL, x, &(k_shape){2, {p, s.d[a]}}), w, false, true);
    return onnx_b_reshape(c, n, bind, prod, &y);
  }
  k_shape x3 = p == 1 ? (k_shape){2, {s.d[a], q}} : (k_shape){3, {p, s.d[a], q}};
  return onnx_b_reshape(c, n, bind, onnx_b_matmul(c, n, NULL, w, onnx_b_reshape(c, n, NULL, x, &x3), false, false), &y);
}

/* Nearest upsampling by integer factors rep[a] (1: untouched): each axis followed by one of
 * extent 1 broadcast to its factor, the pair then merged. */
static int onnx_rs_repeat(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int x, const int64_t *rep) {
  k_shape s = *onnx_tshape(c, x), split = {0, {0}}, wide = {0, {0}}, y = s;
  for (int a = 0; a < s.rank; a++) {
    split.d[split.rank++] = s.d[a], wide.d[wide.rank++] = s.d[a];
    if (rep[a] > 1) split.d[split.rank++] = 1, wide.d[wide.rank++] = rep[a], y.d[a] *= rep[a];
  }
  if (split.rank > K_MAX_RANK) {                        /* one axis at a time */
    for (int a = 0; a < s.rank && x >= 0; a++) {
      int64_t one[K_MAX_RANK];
      for (int i = 0; i < s.rank; i++) one[i] = i == a ? rep[a] : 1;
      bool later = false;
      for (int i = a + 1; i < s.rank; i++) later |= rep[i] > 1;
      if (rep[a] > 1) x = onnx_rs_repeat(c, n, later ? NULL : bind, x, one);
    }
    return x;
  }
  int k = onnx_step_to(c, n, NULL, IR_OP_broadcast_to, (int[]){onnx_b_reshape(c, n, NULL, x, &split)}, 1);
  if (k < 0) return -1;
  onnx_set_ints(&((k_broadcast_to_param *)onnx_param(c, k))->shape, wide.d, wide.rank);
  return onnx_b_reshape(c, n, bind, onnx_step_done(c, k), &y);
}

int onnx_resize(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_value *xv = onnx_input(c, n, 0);
  onnx_rs r = {0};
  k_shape xs;
  if (!xv) return onnx_fail(c, "input 1 is required");
  onnx_shape_of(c, xv, &xs);
  r.rank = xs.rank;
  memcpy(r.in, xs.d, sizeof r.in);
  if (onnx_rs_attrs(c, n, &r) || onnx_rs_sizes(c, n, &r)) return 1;
  onnx_const *m[K_MAX_RANK] = {0};
  int64_t rep[K_MAX_RANK];
  int nrep = 0, last = -1;
  for (int a = 0; a < r.rank; a++) {
    int64_t kind = onnx_rs_kind(&r, a);
    rep[a] = kind > 1 ? kind : 1, nrep += kind > 1;
    if (kind < 0 && !(m[last = a] = onnx_rs_matrix(c, n, &r, a))) return 1;
  }
  int x = onnx_tensor(c, xv, IR_T_PARAM);
  if (nrep) x = onnx_rs_repeat(c, n, last < 0 ? n->output[0] : NULL, x, rep);
  for (int a = 0; a < r.rank && x >= 0; a++)
    if (m[a]) x = onnx_rs_apply(c, n, a == last ? n->output[0] : NULL, x, a, m[a]);
  if (x >= 0 && !nrep && last < 0) onnx_bind(c, n->output[0], x, NULL);   /* resized to itself */
  return x < 0;
}
