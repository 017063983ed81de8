/* onnx_build.c — the steps of an ONNX op that becomes several Kiln nodes (Gemm's matmul and
 * add, Einsum's transposes and matmul, an LSTM unrolled over its sequence): each builder emits
 * one node, fills its param, infers its shapes at once (the next step reads them) and returns
 * its output tensor, or -1 after an error. A step is named after the ONNX node's first named
 * output and numbered, unless it is bound to an ONNX output (`bind`), whose name it takes. */
#include "onnx_int.h"

#include <string.h>

int onnx_in(onnx_ctx *c, const Onnx__NodeProto *n, int i, ir_tensor_kind kind) {
  onnx_value *v = onnx_input(c, n, i);
  if (!v) return onnx_fail(c, "input %d is required", i + 1), -1;
  return onnx_tensor(c, v, kind);
}

void *onnx_param(onnx_ctx *c, int node) { return ir_node_at(c->g, node)->param; }

void onnx_set_ints(k_ints *dst, const int64_t *v, int n) {
  dst->n = n;
  memcpy(dst->v, v, (size_t)n * sizeof *v);
}

/* The name the steps of n are numbered after: its first named output (an LSTM may leave Y,
 * its first, unnamed). */
static const char *onnx_base_name(const Onnx__NodeProto *n) {
  for (size_t i = 0; i < n->n_output; i++)
    if (n->output[i] && *n->output[i]) return n->output[i];
  return n->name && *n->name ? n->name : "onnx";
}

int onnx_step_to(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int kop, const int *in, int nin) {
  const char *nm = bind ? bind : ir_strfmt(&c->g->arena, "%s_%d", onnx_base_name(n), ir_nnodes(c->g));
  return onnx_emit_as(c, nm, bind, kop, in, nin);
}

int onnx_step(onnx_ctx *c, const Onnx__NodeProto *n, bool last, int kop, const int *in, int nin) {
  return onnx_step_to(c, n, last ? n->output[0] : NULL, kop, in, nin);
}

int onnx_step_done(onnx_ctx *c, int k) {
  return k < 0 || ir_infer_one(c->g, c->d, k) ? -1 : ir_node_at(c->g, k)->out[0];
}

const k_shape *onnx_tshape(onnx_ctx *c, int t) { return &ir_tensor_at(c->g, t)->shape; }

/* x itself where no node is needed: bound to `bind` when there is one. */
static int onnx_same(onnx_ctx *c, const char *bind, int x) {
  if (bind && x >= 0) onnx_bind(c, bind, x, NULL);
  return x;
}

int onnx_b_op(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int kop, int a, int b) {
  int in[2] = {a, b};
  return onnx_step_done(c, onnx_step_to(c, n, bind, kop, in, b < 0 ? 1 : 2));
}

int onnx_b_reshape(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int x, const k_shape *s) {
  if (x < 0 || ir_shape_eq(onnx_tshape(c, x), s)) return onnx_same(c, bind, x);
  int k = onnx_step_to(c, n, bind, IR_OP_reshape, &x, 1);
  if (k < 0) return -1;
  onnx_set_ints(&((k_reshape_param *)onnx_param(c, k))->shape, s->d, s->rank);
  return onnx_step_done(c, k);
}

int onnx_b_transpose(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int x, const int64_t *perm) {
  int r = x < 0 ? 0 : onnx_tshape(c, x)->rank;
  bool same = true;
  for (int i = 0; i < r; i++) same &= perm[i] == i;
  if (x < 0 || same) return onnx_same(c, bind, x);
  int k = onnx_step_to(c, n, bind, IR_OP_transpose, &x, 1);
  if (k < 0) return -1;
  onnx_set_ints(&((k_transpose_param *)onnx_param(c, k))->axes, perm, r);
  return onnx_step_done(c, k);
}

int onnx_b_slice(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int x, int axis, int64_t begin, int64_t end) {
  if (x >= 0 && begin == 0 && end == onnx_tshape(c, x)->d[axis]) return onnx_same(c, bind, x);
  int k = onnx_step_to(c, n, bind, IR_OP_slice, &x, 1);
  if (k < 0) return -1;
  *(k_slice_param *)onnx_param(c, k) = (k_slice_param){axis, begin, end, 1};
  return onnx_step_done(c, k);
}

int onnx_b_matmul(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int a, int b, bool ta, bool tb) {
  int in[2] = {a, b}, k = onnx_step_to(c, n, bind, IR_OP_matmul, in, 2);
  if (k < 0) return -1;
  k_matmul_param *p = onnx_param(c, k);
  p->transpose_a = ta, p->transpose_b = tb;
  return onnx_step_done(c, k);
}

int onnx_b_fc(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int x, int w, int bias) {
  int in[3] = {x, w, bias}, k = onnx_step_to(c, n, bind, IR_OP_fully_connected, in, bias >= 0 ? 3 : 2);
  if (k < 0) return -1;
  k_fc_param *p = onnx_param(c, k);
  p->num_hidden = onnx_tshape(c, w)->d[0], p->no_bias = bias < 0, p->flatten = 0;
  return onnx_step_done(c, k);
}

int onnx_b_concat(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, const int *in, int nin, int axis) {
  if (nin == 1) return onnx_same(c, bind, in[0]);
  int k = onnx_step_to(c, n, bind, IR_OP_concat, in, nin);
  if (k < 0) return -1;
  ((k_concat_param *)onnx_param(c, k))->dim = axis;
  return onnx_step_done(c, k);
}

int onnx_b_reduce(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int kop, int x, const int64_t *axes, int na,
                  bool keepdims) {
  int k = onnx_step_to(c, n, bind, kop, &x, 1);
  if (k < 0) return -1;
  k_reduce_param *p = onnx_param(c, k);
  onnx_set_ints(&p->axis, axes, na);
  p->keepdims = keepdims;
  return onnx_step_done(c, k);
}

int onnx_b_const(onnx_ctx *c, onnx_const *k) {
  if (!k) return onnx_fail(c, "a constant the import needs is too large"), -1;
  onnx_value v = {.tensor = -1, .k = k};
  return onnx_tensor(c, &v, IR_T_PARAM);
}

bool onnx_out_read(onnx_ctx *c, const Onnx__NodeProto *n, int i) {
  return i < (int)n->n_output && n->output[i] && *n->output[i] && fe_map_get(&c->file->read, n->output[i]);
}
