/* onnx_fold.c — ONNX ops computed at import: constants, identities, and the shape arithmetic
 * exporters emit (Shape -> Gather -> Unsqueeze -> Concat -> Reshape), so that a model with
 * static input shapes comes out with no shape computation left in the graph. */
#include "onnx_int.h"

#include <string.h>

/* The value of element i as a double, whatever the constant holds. */
static double onnx_get(const onnx_const *k, int64_t i) { return k->is_int ? (double)k->i[i] : (double)k->f[i]; }

/* A computed value into element i: an integer result outside int64 saturates (NaN gives 0),
 * where a plain cast would be undefined. */
static void onnx_set(onnx_const *k, int64_t i, double v) {
  if (!k->is_int) k->f[i] = (float)v;
  else k->i[i] = v != v ? 0 : v >= 0x1p63 ? INT64_MAX : v <= -0x1p63 ? INT64_MIN : (int64_t)v;
}

/* Element j of src into element i of k, exact between integers (through a double, INT64_MAX
 * — Slice's "to the end" — would not survive). */
static void onnx_copy(onnx_const *k, int64_t i, const onnx_const *src, int64_t j) {
  if (k->is_int && src->is_int) k->i[i] = src->i[j];
  else onnx_set(k, i, onnx_get(src, j));
}

static onnx_const *onnx_fold_new(onnx_ctx *c, const Onnx__NodeProto *n, bool is_int, const k_shape *s) {
  int64_t elems = 1;
  for (int i = 0; i < s->rank && elems <= ONNX_MAX_FOLD_ELEMS; i++) elems *= s->d[i] < ONNX_MAX_DIM ? s->d[i] : ONNX_MAX_DIM;
  onnx_const *k = elems <= ONNX_MAX_FOLD_ELEMS ? onnx_const_new(c, is_int, s) : NULL;
  if (!k) return onnx_fail(c, "the folded constant would be too large"), NULL;
  k->onnx_name = n->n_output ? n->output[0] : "";
  return k;
}

static int onnx_fold_done(onnx_ctx *c, const Onnx__NodeProto *n, onnx_const *k) {
  if (!k) return 1;
  if (!n->n_output || !n->output[0]) return onnx_fail(c, "the node has no output");
  onnx_bind(c, n->output[0], -1, k);
  return 0;
}

int onnx_fold_identity(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_value *v = onnx_input(c, n, 0);
  if (!v || !n->n_output) return onnx_fail(c, "Identity needs one input and one output");
  onnx_bind(c, n->output[0], v->tensor, v->k);
  return 0;
}

/* Constant: value (a tensor), value_float(s), value_int(s). */
int onnx_fold_constant(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  const Onnx__AttributeProto *a = n->n_attribute == 1 ? n->attribute[0] : NULL;
  const char *an = a && a->name ? a->name : "";
  onnx_const *k = NULL;
  if (a && a->t && strcmp(an, "value") == 0) k = onnx_read_tensor(c, a->t);
  else if (a && (strcmp(an, "value_float") == 0 || strcmp(an, "value_int") == 0)) {
    k = onnx_fold_new(c, n, an[6] == 'i', &(k_shape){0, {0}});
    if (k) onnx_set(k, 0, an[6] == 'i' ? (double)a->i : (double)a->f);
  } else if (a && (strcmp(an, "value_floats") == 0 || strcmp(an, "value_ints") == 0)) {
    bool ints = an[6] == 'i';
    int64_t cnt = (int64_t)(ints ? a->n_ints : a->n_floats);
    k = onnx_fold_new(c, n, ints, &(k_shape){1, {cnt}});
    for (int64_t i = 0; k && i < cnt; i++) onnx_set(k, i, ints ? (double)a->ints[i] : (double)a->floats[i]);
  } else return onnx_fail(c, "Constant must have one attribute: value, value_float(s) or value_int(s)%s%s", *an ? ", not " : "", an);
  if (k) k->onnx_name = n->n_output ? n->output[0] : "";
  return onnx_fold_done(c, n, k);
}

/* Shape: the input's static shape (opset 15: the [start, end) slice of it). */
int onnx_fold_shape(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_value *v = onnx_input(c, n, 0);
  k_shape s;
  if (!v) return onnx_fail(c, "input 1 is required");
  onnx_shape_of(c, v, &s);
  int64_t lo = onnx_attr_int(n, "start", 0), hi = onnx_attr_int(n, "end", s.rank);
  if (lo < 0) lo += s.rank;
  if (hi < 0) hi += s.rank;
  lo = lo < 0 ? 0 : lo > s.rank ? s.rank : lo, hi = hi < lo ? lo : hi > s.rank ? s.rank : hi;
  onnx_const *k = onnx_fold_new(c, n, true, &(k_shape){1, {hi - lo}});
  for (int64_t i = lo; k && i < hi; i++) k->i[i - lo] = s.d[i];
  return onnx_fold_done(c, n, k);
}

/* Gather of a constant along axis: out = data[:axis] + indices + data[axis+1:]. */
int onnx_fold_gather(onnx_ctx *c, const Onnx__NodeProto *n, onnx_const *data, onnx_const *idx) {
  const k_shape *ds = &data->shape;
  int64_t axis = onnx_attr_int(n, "axis", 0);
  if (axis < 0) axis += ds->rank;
  if (!idx->is_int || axis < 0 || axis >= ds->rank || ds->rank - 1 + idx->shape.rank > K_MAX_RANK)
    return onnx_fail(c, "indices must be integers and axis within the data's rank %d", ds->rank);
  k_shape s = {0, {0}};
  for (int i = 0; i < axis; i++) s.d[s.rank++] = ds->d[i];
  for (int i = 0; i < idx->shape.rank; i++) s.d[s.rank++] = idx->shape.d[i];
  for (int i = (int)axis + 1; i < ds->rank; i++) s.d[s.rank++] = ds->d[i];
  int64_t outer = 1, inner = 1, dim = ds->d[axis];
  for (int i = 0; i < axis; i++) outer *= ds->d[i];
  for (int i = (int)axis + 1; i < ds->rank; i++) inner *= ds->d[i];
  onnx_const *k = onnx_fold_new(c, n, data->is_int, &s);
  if (k) k->origin = data->origin;                     /* a part of one initializer */
  for (int64_t o = 0; k && o < outer; o++)
    for (int64_t j = 0; j < idx->n; j++) {
      int64_t at = idx->i[j] < 0 ? idx->i[j] + dim : idx->i[j];
      if (at < 0 || at >= dim) return onnx_fail(c, "index %lld is out of range for a dimension of %lld", (long long)idx->i[j], (long long)dim);
      for (int64_t q = 0; q < inner; q++) onnx_copy(k, (o * idx->n + j) * inner + q, data, (o * dim + at) * inner + q);
    }
  return onnx_fold_done(c, n, k);
}

/* ConstantOfShape: a tensor of the given shape filled with value (default float 0). */
int onnx_fold_const_of_shape(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_const *sh = onnx_input_const(c, n, 0, "the shape");
  if (!sh) return 1;
  if (!sh->is_int || sh->shape.rank != 1 || sh->n > K_MAX_RANK) return onnx_fail(c, "the shape must be at most %d integers", K_MAX_RANK);
  k_shape s = {(int)sh->n, {0}};
  for (int i = 0; i < s.rank; i++) {
    if (sh->i[i] < 0) return onnx_fail(c, "the shape has a negative entry");
    s.d[i] = sh->i[i];
  }
  const Onnx__AttributeProto *a = onnx_attr(n, "value");
  onnx_const *v = a && a->t ? onnx_read_tensor(c, a->t) : NULL;
  if (a && (!v || v->n != 1)) return v ? onnx_fail(c, "value must hold one element") : 1;
  onnx_const *k = onnx_fold_new(c, n, v ? v->is_int : false, &s);
  for (int64_t i = 0; k && i < k->n; i++) onnx_set(k, i, v ? onnx_get(v, 0) : 0.0);
  return onnx_fold_done(c, n, k);
}

/* Cast: of a constant, converted; of a float tensor to float, nothing to do. */
int onnx_fold_cast(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_value *v = onnx_input(c, n, 0);
  int64_t to = onnx_attr_int(n, "to", 0);
  bool to_float = to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || to == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
  if (!v || !n->n_output) return onnx_fail(c, "Cast needs one input and one output");
  if (!v->k && to_float && ir_tensor_at(c->g, v->tensor)->dtype == K_F32) return onnx_bind(c, n->output[0], v->tensor, NULL), 0;
  if (!v->k) return onnx_fail(c, "Cast of a computed tensor to type %lld is not supported (only float to float)", (long long)to);
  onnx_const *k = onnx_fold_new(c, n, !to_float, &v->k->shape);
  if (k && to_float) k->origin = v->k->origin;         /* the same values, as f32 */
  for (int64_t i = 0; k && i < k->n; i++) onnx_copy(k, i, v->k, i);
  return onnx_fold_done(c, n, k);
}

int onnx_fold_concat(onnx_ctx *c, const Onnx__NodeProto *n, int axis) {
  onnx_const *first = onnx_input(c, n, 0)->k;
  k_shape s = first->shape;
  if (axis < 0) axis += s.rank;
  if (axis < 0 || axis >= s.rank) return onnx_fail(c, "axis %d is out of range for rank %d", axis, s.rank);
  s.d[axis] = 0;
  for (size_t i = 0; i < n->n_input; i++) {
    const onnx_const *k = onnx_input(c, n, (int)i)->k;
    bool same = k->shape.rank == s.rank && k->is_int == first->is_int;
    for (int d = 0; same && d < s.rank; d++) same = d == axis || k->shape.d[d] == s.d[d];
    if (!same) return onnx_fail(c, "input %zu does not match the others' type and shape", i + 1);
    s.d[axis] += k->shape.d[axis];
  }
  int64_t outer = 1, inner = 1, off = 0;
  for (int d = 0; d < axis; d++) outer *= s.d[d];
  for (int d = axis + 1; d < s.rank; d++) inner *= s.d[d];
  onnx_const *out = onnx_fold_new(c, n, first->is_int, &s);
  for (size_t i = 0; out && i < n->n_input; i++) {
    const onnx_const *k = onnx_input(c, n, (int)i)->k;
    int64_t run = k->shape.d[axis] * inner;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t q = 0; q < run; q++) onnx_copy(out, o * s.d[axis] * inner + off + q, k, o * run + q);
    off += run;
  }
  return onnx_fold_done(c, n, out);
}

int onnx_fold_transpose(onnx_ctx *c, const Onnx__NodeProto *n, const onnx_const *x, const int64_t *perm, int np) {
  int r = x->shape.rank;
  int64_t p[K_MAX_RANK], xst[K_MAX_RANK], stride = 1;
  bool seen[K_MAX_RANK] = {false};
  if (np != 0 && np != r) return onnx_fail(c, "perm has %d entries for a tensor of rank %d", np, r);
  for (int d = 0; d < r; d++) {
    p[d] = np ? perm[d] : r - 1 - d;
    if (p[d] < 0 || p[d] >= r || seen[p[d]]) return onnx_fail(c, "perm is not a permutation of the %d axes", r);
    seen[p[d]] = true;
  }
  for (int d = r - 1; d >= 0; d--) xst[d] = stride, stride *= x->shape.d[d];
  k_shape s = {r, {0}};
  for (int d = 0; d < r; d++) s.d[d] = x->shape.d[p[d]];
  onnx_const *k = onnx_fold_new(c, n, x->is_int, &s);
  for (int64_t o = 0; k && o < k->n; o++) {   /* output axis d reads input axis p[d] */
    int64_t rem = o, src = 0;
    for (int d = r - 1; d >= 0; d--) src += (rem % s.d[d]) * xst[p[d]], rem /= s.d[d];
    onnx_copy(k, o, x, src);
  }
  return onnx_fold_done(c, n, k);
}

int onnx_fold_slice(onnx_ctx *c, const Onnx__NodeProto *n, const char *out, const onnx_const *x, int na,
                    const int64_t *axes, const int64_t *begin, const int64_t *end, const int64_t *step) {
  int64_t lo[K_MAX_RANK], st[K_MAX_RANK];
  k_shape s = x->shape;
  for (int d = 0; d < s.rank; d++) lo[d] = 0, st[d] = 1;
  for (int i = 0; i < na; i++) {
    int64_t span = step[i] > 0 ? end[i] - begin[i] : begin[i] - end[i], mag = step[i] > 0 ? step[i] : -step[i];
    lo[axes[i]] = begin[i], st[axes[i]] = step[i], s.d[axes[i]] = span > 0 ? (span + mag - 1) / mag : 0;
  }
  onnx_const *k = onnx_fold_new(c, n, x->is_int, &s);
  for (int64_t o = 0; k && o < k->n; o++) {
    int64_t rem = o, src = 0, stride = 1;
    for (int d = s.rank - 1; d >= 0; d--) {
      int64_t at = lo[d] + (rem % s.d[d]) * st[d];
      rem /= s.d[d];
      src += at * stride;
      stride *= x->shape.d[d];
    }
    onnx_copy(k, o, x, src);
  }
  if (!k) return 1;
  k->onnx_name = out, k->origin = x->origin;           /* a part of one initializer */
  onnx_bind(c, out, -1, k);
  return 0;
}

/* ---- arithmetic on constants (shape computations: Add, Sub, Mul, Div of sizes) ---- */

static double onnx_apply(int kop, double a, double b, bool is_int) {
  switch (kop) {
  case IR_OP_add: return a + b;
  case IR_OP_sub: return a - b;
  case IR_OP_mul: return a * b;
  case IR_OP_div: return is_int ? (b != 0 ? (double)((int64_t)a / (int64_t)b) : 0) : a / b;
  case IR_OP_maximum: return a > b ? a : b;
  case IR_OP_minimum: return a < b ? a : b;
  default: return 0;
  }
}

/* Element o of the broadcast result s read from a constant of shape ks. */
static int64_t onnx_bcast_index(const k_shape *s, const k_shape *ks, int64_t o) {
  int64_t src = 0, stride = 1;
  for (int d = s->rank - 1, kd = ks->rank - 1; d >= 0; d--, kd--) {
    int64_t i = o % s->d[d];
    o /= s->d[d];
    if (kd >= 0 && ks->d[kd] != 1) src += i * stride;
    if (kd >= 0) stride *= ks->d[kd];
  }
  return src;
}

int onnx_fold_binary(onnx_ctx *c, const Onnx__NodeProto *n, int kop, const onnx_const *a, const onnx_const *b) {
  k_shape s;
  if (a->is_int != b->is_int || kop == IR_OP_pow) return onnx_fail(c, "arithmetic on these two constants is not supported");
  if (!ir_shape_broadcast(&a->shape, &b->shape, &s)) return onnx_fail(c, "the constants' shapes do not broadcast");
  onnx_const *k = onnx_fold_new(c, n, a->is_int, &s);
  for (int64_t o = 0; k && o < k->n; o++)
    onnx_set(k, o, onnx_apply(kop, onnx_get(a, onnx_bcast_index(&s, &a->shape, o)), onnx_get(b, onnx_bcast_index(&s, &b->shape, o)), a->is_int));
  return onnx_fold_done(c, n, k);
}

/* ---- comparisons and Where on constants (torch's export of expand(-1, ...): the target
 * shape where the -1 entries were, Where(Equal(shape, -1), ones, shape)) ---- */

/* Equal, Less, Greater of two constants: a bool tensor, held widened as integers 0 and 1. A
 * comparison of computed tensors is refused (Kiln has no bool tensors). */
int onnx_fold_compare(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  (void)kop;
  onnx_value *av = onnx_input(c, n, 0), *bv = onnx_input(c, n, 1);
  if (!av || !bv || !n->n_output) return onnx_fail(c, "the node needs 2 inputs and an output");
  if (!av->k || !bv->k)
    return onnx_fail(c, "%s of computed tensors is not supported (only of constants, shape arithmetic: Kiln has no bool tensors)", n->op_type);
  const onnx_const *a = av->k, *b = bv->k;
  k_shape s;
  if (!ir_shape_broadcast(&a->shape, &b->shape, &s)) return onnx_fail(c, "the constants' shapes do not broadcast");
  int op = n->op_type[0];   /* 'E'qual, 'L'ess, 'G'reater: the table's three rows */
  onnx_const *k = onnx_fold_new(c, n, true, &s);
  for (int64_t o = 0; k && o < k->n; o++) {
    int64_t ia = onnx_bcast_index(&s, &a->shape, o), ib = onnx_bcast_index(&s, &b->shape, o);
    double x = onnx_get(a, ia), y = onnx_get(b, ib);
    bool both_int = a->is_int && b->is_int;   /* exact: int64 values past 2^53 do not survive a double */
    k->i[o] = op == 'E' ? (both_int ? a->i[ia] == b->i[ib] : x == y) : op == 'L' ? x < y : x > y;
  }
  return onnx_fold_done(c, n, k);
}

/* Where(cond, x, y) of constants, the three broadcast together: x where cond is nonzero. */
int onnx_fold_where(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  (void)kop;
  onnx_value *v[3];
  for (int i = 0; i < 3; i++) v[i] = onnx_input(c, n, i);
  if (!v[0] || !v[1] || !v[2] || !n->n_output) return onnx_fail(c, "Where needs 3 inputs and an output");
  if (!v[0]->k || !v[1]->k || !v[2]->k) return onnx_fail(c, "Where of computed tensors is not supported (only of constants, shape arithmetic)");
  const onnx_const *cond = v[0]->k, *x = v[1]->k, *y = v[2]->k;
  k_shape s, t;
  if (x->is_int != y->is_int) return onnx_fail(c, "Where's two values must have one type");
  if (!ir_shape_broadcast(&cond->shape, &x->shape, &t) || !ir_shape_broadcast(&t, &y->shape, &s))
    return onnx_fail(c, "the constants' shapes do not broadcast");
  onnx_const *k = onnx_fold_new(c, n, x->is_int, &s);
  for (int64_t o = 0; k && o < k->n; o++) {
    bool pick = onnx_get(cond, onnx_bcast_index(&s, &cond->shape, o)) != 0;
    const onnx_const *src = pick ? x : y;
    onnx_copy(k, o, src, onnx_bcast_index(&s, &src->shape, o));
  }
  return onnx_fold_done(c, n, k);
}

/* Expand of a constant to shape s (already the broadcast of its shape and the target). */
int onnx_fold_expand(onnx_ctx *c, const Onnx__NodeProto *n, const onnx_const *x, const k_shape *s) {
  onnx_const *k = onnx_fold_new(c, n, x->is_int, s);
  for (int64_t o = 0; k && o < k->n; o++) onnx_copy(k, o, x, onnx_bcast_index(s, &x->shape, o));
  return onnx_fold_done(c, n, k);
}
