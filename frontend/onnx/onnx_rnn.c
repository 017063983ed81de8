/* onnx_rnn.c — LSTM, GRU and RNN unrolled at import over their sequence length, which Kiln's
 * static shapes fix. Per direction, the input's projection for every step is one
 * fully_connected of X [T, B, I] by W (bias Wb); each step then slices its row of it
 * ([1, B, gates * H]), adds the recurrent fully_connected of the previous state by R (bias Rb)
 * and applies the gates (ONNX's equations, gate order i o f c for LSTM, z r h for GRU). The
 * states stay [1, B, H], so Y is a concat of the steps' states, Y_h and Y_c the last ones.
 * W, R and B are read per direction (a constant sliced at import, keeping its initializer's
 * name, so train_step trains W, R, Wb and Rb apart as torch trains weight_ih, weight_hh,
 * bias_ih and bias_hh). Supported: forward, reverse and bidirectional; the default
 * activations; B, initial_h and initial_c given or absent; sequence_lens absent or all the
 * sequence's length; GRU's linear_before_reset 0 and 1; layout 0. Refused: clip, other
 * activations, LSTM's peepholes (P) and input_forget, layout 1, shorter sequences. */
#include "onnx_int.h"

#include <strings.h>
#include <string.h>

typedef struct {
  int gates;                           /* 4 LSTM, 3 GRU, 1 RNN */
  bool lstm, gru, lbr;                 /* lbr: GRU's linear_before_reset */
  int dirs;
  bool reverse;                        /* a single direction, backward */
  int64_t t, b, h;                     /* sequence, batch, hidden */
} onnx_rnn;

/* The activations attribute, when given, must name the defaults for every direction. */
static int onnx_rnn_activations(onnx_ctx *c, const Onnx__NodeProto *n, const onnx_rnn *r) {
  static const char *const lstm[] = {"Sigmoid", "Tanh", "Tanh"}, *const gru[] = {"Sigmoid", "Tanh"}, *const rnn[] = {"Tanh"};
  const char *const *want = r->lstm ? lstm : r->gru ? gru : rnn;
  size_t per = r->lstm ? 3 : r->gru ? 2 : 1;
  const Onnx__AttributeProto *a = onnx_attr(n, "activations");
  bool ok = !a || a->n_strings == per * (size_t)r->dirs;
  for (size_t i = 0; a && ok && i < a->n_strings; i++)
    ok = a->strings[i].len == strlen(want[i % per]) && strncasecmp((const char *)a->strings[i].data, want[i % per], a->strings[i].len) == 0;
  return ok ? 0 : onnx_unsupported_attr(c, "activations", "other than the defaults");
}

static int onnx_rnn_attrs(onnx_ctx *c, const Onnx__NodeProto *n, onnx_rnn *r) {
  static const char *const dirs[] = {"forward", "reverse", "bidirectional"};
  const Onnx__AttributeProto *d = onnx_attr(n, "direction");
  int dir = 0;
  while (d && dir < 3 && !(d->s.len == strlen(dirs[dir]) && memcmp(d->s.data, dirs[dir], d->s.len) == 0)) dir++;
  if (dir == 3) return onnx_fail(c, "direction must be forward, reverse or bidirectional");
  r->dirs = dir == 2 ? 2 : 1, r->reverse = dir == 1;
  r->lstm = strcmp(n->op_type, "LSTM") == 0, r->gru = strcmp(n->op_type, "GRU") == 0;
  r->gates = r->lstm ? 4 : r->gru ? 3 : 1;
  r->lbr = onnx_attr_int(n, "linear_before_reset", 0) != 0;
  if (onnx_attr(n, "clip")) return onnx_unsupported_attr(c, "clip", "(clipping the gates' inputs)");
  if (onnx_attr_int(n, "layout", 0)) return onnx_unsupported_attr(c, "layout", "= 1 (batch first)");
  if (onnx_attr_int(n, "input_forget", 0)) return onnx_unsupported_attr(c, "input_forget", "= 1");
  if (r->lstm && onnx_input(c, n, 7)) return onnx_fail(c, "peepholes (input P) are not supported");
  return onnx_rnn_activations(c, n, r);
}

/* The shapes: X [T, B, I], W [D, G*H, I], R [D, G*H, H], B [D, 2*G*H]; sequence_lens, when
 * given, a constant of T for every sequence. */
static int onnx_rnn_shapes(onnx_ctx *c, const Onnx__NodeProto *n, onnx_rnn *r) {
  onnx_value *xv = onnx_input(c, n, 0), *wv = onnx_input(c, n, 1), *rv = onnx_input(c, n, 2), *bv = onnx_input(c, n, 3);
  k_shape x, w, rs, b;
  if (!xv || !wv || !rv) return onnx_fail(c, "X, W and R are required");
  onnx_shape_of(c, xv, &x), onnx_shape_of(c, wv, &w), onnx_shape_of(c, rv, &rs);
  if (x.rank != 3 || w.rank != 3 || rs.rank != 3) return onnx_fail(c, "X, W and R must have rank 3");
  r->t = x.d[0], r->b = x.d[1], r->h = rs.d[2];
  int64_t gh = r->gates * r->h, hs = onnx_attr_int(n, "hidden_size", r->h);
  if (hs != r->h || w.d[0] != r->dirs || w.d[1] != gh || w.d[2] != x.d[2] || rs.d[0] != r->dirs || rs.d[1] != gh)
    return onnx_fail(c, "W and R must be [%d, %lld, I] and [%d, %lld, %lld] for hidden_size %lld", r->dirs, (long long)gh, r->dirs,
                     (long long)gh, (long long)r->h, (long long)hs);
  if (bv) onnx_shape_of(c, bv, &b);
  if (bv && (b.rank != 2 || b.d[0] != r->dirs || b.d[1] != 2 * gh)) return onnx_fail(c, "B must be [%d, %lld]", r->dirs, (long long)(2 * gh));
  if (!onnx_input(c, n, 4)) return 0;
  onnx_const *sl = onnx_input_const(c, n, 4, "sequence_lens");
  if (!sl) return 1;
  for (int64_t i = 0; i < sl->n; i++)
    if (!sl->is_int || sl->i[i] != r->t)
      return onnx_fail(c, "sequence_lens shorter than the sequence (%lld) are not supported", (long long)r->t);
  return 0;
}

/* Rows [lo, hi) of direction d of input i (W and R: [D, rows, K], B: [D, rows]) as a tensor
 * without the direction's axis: a constant sliced at import (its origin kept: a part of one
 * initializer), a computed one by slice nodes. -1 after an error. */
static int onnx_rnn_part(onnx_ctx *c, const Onnx__NodeProto *n, int i, int d, int64_t lo, int64_t hi) {
  onnx_value *v = onnx_input(c, n, i);
  k_shape s, p;
  onnx_shape_of(c, v, &s);
  p.rank = s.rank - 1, p.d[0] = hi - lo, p.d[1] = s.rank > 2 ? s.d[2] : 0;
  if (!v->k) {
    int x = onnx_b_slice(c, n, NULL, onnx_tensor(c, v, IR_T_PARAM), 0, d, d + 1);
    return onnx_b_reshape(c, n, NULL, onnx_b_slice(c, n, NULL, x, 1, lo, hi), &p);
  }
  onnx_const *k = onnx_const_new(c, false, &p);
  if (!k) return onnx_fail(c, "input %d is too large", i + 1), -1;
  int64_t cols = s.rank > 2 ? s.d[2] : 1;
  for (int64_t j = 0; j < k->n; j++) {
    int64_t at = (d * s.d[1] + lo) * cols + j;
    k->f[j] = v->k->is_int ? (float)v->k->i[at] : v->k->f[at];
  }
  k->onnx_name = v->k->onnx_name, k->origin = v->k->origin;
  return onnx_b_const(c, k);
}

/* The weights of one direction: W, R and the biases Wb and Rb (-1: absent); a GRU with
 * linear_before_reset = 0 has R and Rb split, the h gate's rows in rh and rbh. */
typedef struct { int w, r, wb, rb, rh, rbh; } onnx_rnn_w;

static onnx_rnn_w onnx_rnn_weights(onnx_ctx *c, const Onnx__NodeProto *n, const onnx_rnn *r, int d) {
  int64_t gh = r->gates * r->h, split = r->gru && !r->lbr ? 2 * r->h : gh;
  bool bias = onnx_input(c, n, 3) != NULL;
  onnx_rnn_w w = {onnx_rnn_part(c, n, 1, d, 0, gh), onnx_rnn_part(c, n, 2, d, 0, split), -1, -1, -1, -1};
  if (bias) w.wb = onnx_rnn_part(c, n, 3, d, 0, gh), w.rb = onnx_rnn_part(c, n, 3, d, gh, gh + split);
  if (split < gh) w.rh = onnx_rnn_part(c, n, 2, d, split, gh);
  if (split < gh && bias) w.rbh = onnx_rnn_part(c, n, 3, d, gh + split, 2 * gh);
  return w;
}

/* Gate g ([1, B, H]) of a step's [1, B, gates * H] tensor. */
static int onnx_rnn_gate(onnx_ctx *c, const Onnx__NodeProto *n, const onnx_rnn *r, int x, int g) {
  return onnx_b_slice(c, n, NULL, x, 2, g * r->h, (g + 1) * r->h);
}

static int onnx_rnn_act(onnx_ctx *c, const Onnx__NodeProto *n, int kop, int a, int b) {
  return onnx_b_op(c, n, NULL, kop, onnx_b_op(c, n, NULL, IR_OP_add, a, b), -1);
}

/* One LSTM step: i o f c gates from xt + R h; *cell updated; the new h. */
static int onnx_lstm_step(onnx_ctx *c, const Onnx__NodeProto *n, const onnx_rnn *r, const onnx_rnn_w *w, int xt, int h, int *cell) {
  int g = onnx_b_op(c, n, NULL, IR_OP_add, xt, onnx_b_fc(c, n, NULL, h, w->r, w->rb)), gate[4];
  for (int i = 0; i < 4; i++) gate[i] = onnx_b_op(c, n, NULL, i == 3 ? IR_OP_tanh : IR_OP_sigmoid, onnx_rnn_gate(c, n, r, g, i), -1);
  int keep = onnx_b_op(c, n, NULL, IR_OP_mul, gate[2], *cell), write = onnx_b_op(c, n, NULL, IR_OP_mul, gate[0], gate[3]);
  *cell = onnx_b_op(c, n, NULL, IR_OP_add, keep, write);
  return onnx_b_op(c, n, NULL, IR_OP_mul, gate[1], onnx_b_op(c, n, NULL, IR_OP_tanh, *cell, -1));
}

/* One GRU step: z and r from xt + R h; h~ from xt and r * (R_h h + Rb_h) (linear_before_reset)
 * or R_h (r * h) + Rb_h; the new h = h~ + z * (h - h~), which is (1 - z) h~ + z h. */
static int onnx_gru_step(onnx_ctx *c, const Onnx__NodeProto *n, const onnx_rnn *r, const onnx_rnn_w *w, int xt, int h) {
  int hr = onnx_b_fc(c, n, NULL, h, w->r, w->rb);
  int z = onnx_rnn_act(c, n, IR_OP_sigmoid, onnx_rnn_gate(c, n, r, xt, 0), onnx_rnn_gate(c, n, r, hr, 0));
  int rg = onnx_rnn_act(c, n, IR_OP_sigmoid, onnx_rnn_gate(c, n, r, xt, 1), onnx_rnn_gate(c, n, r, hr, 1));
  int rec = r->lbr ? onnx_b_op(c, n, NULL, IR_OP_mul, rg, onnx_rnn_gate(c, n, r, hr, 2))
                   : onnx_b_fc(c, n, NULL, onnx_b_op(c, n, NULL, IR_OP_mul, rg, h), w->rh, w->rbh);
  int ht = onnx_rnn_act(c, n, IR_OP_tanh, onnx_rnn_gate(c, n, r, xt, 2), rec);
  return onnx_b_op(c, n, NULL, IR_OP_add, ht, onnx_b_op(c, n, NULL, IR_OP_mul, z, onnx_b_op(c, n, NULL, IR_OP_sub, h, ht)));
}

/* The initial state of direction d (input i: initial_h or initial_c) as [1, B, H], or zeros. */
static int onnx_rnn_initial(onnx_ctx *c, const Onnx__NodeProto *n, const onnx_rnn *r, int i, int d, int *zeros) {
  if (onnx_input(c, n, i)) return onnx_b_slice(c, n, NULL, onnx_in(c, n, i, IR_T_PARAM), 0, d, d + 1);
  if (*zeros < 0) {
    onnx_const *k = onnx_const_new(c, false, &(k_shape){3, {1, r->b, r->h}});
    if (k) k->onnx_name = ir_strfmt(&c->g->arena, "%s_zeros", n->name && *n->name ? n->name : "rnn");
    *zeros = onnx_b_const(c, k);
  }
  return *zeros;
}

/* Direction d over the whole sequence: each step's h into hs[t] (-1 entries after an error),
 * the last cell state (LSTM) into *cell. */
static void onnx_rnn_direction(onnx_ctx *c, const Onnx__NodeProto *n, const onnx_rnn *r, int d, int *hs, int *cell, int *zeros) {
  onnx_rnn_w w = onnx_rnn_weights(c, n, r, d);
  int xp = onnx_b_fc(c, n, NULL, onnx_in(c, n, 0, IR_T_PARAM), w.w, w.wb);
  int h = onnx_rnn_initial(c, n, r, 5, d, zeros);
  *cell = r->lstm ? onnx_rnn_initial(c, n, r, 6, d, zeros) : -1;
  bool back = d == 1 || r->reverse;
  for (int64_t s = 0; s < r->t; s++) {
    int64_t t = back ? r->t - 1 - s : s;
    int xt = onnx_b_slice(c, n, NULL, xp, 0, t, t + 1);
    if (r->lstm) h = onnx_lstm_step(c, n, r, &w, xt, h, cell);
    else if (r->gru) h = onnx_gru_step(c, n, r, &w, xt, h);
    else h = onnx_rnn_act(c, n, IR_OP_tanh, xt, onnx_b_fc(c, n, NULL, h, w.r, w.rb));
    hs[t] = h;
  }
}

/* Y [T, D, B, H]: each direction's states in sequence order, [T, 1, B, H], side by side. */
static int onnx_rnn_y(onnx_ctx *c, const Onnx__NodeProto *n, const onnx_rnn *r, int *const *hs) {
  int dir[2];
  for (int d = 0; d < r->dirs; d++) {
    int y = onnx_b_concat(c, n, NULL, hs[d], (int)r->t, 0);
    dir[d] = onnx_b_reshape(c, n, r->dirs == 1 ? n->output[0] : NULL, y, &(k_shape){4, {r->t, 1, r->b, r->h}});
  }
  return onnx_b_concat(c, n, n->output[0], dir, r->dirs, 1);
}

int onnx_rnn_op(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  onnx_rnn r = {0};
  if (onnx_rnn_attrs(c, n, &r) || onnx_rnn_shapes(c, n, &r)) return 1;
  if (r.t > 100000) return onnx_fail(c, "a sequence of %lld steps is too long to unroll", (long long)r.t);
  int *hs[2], last_h[2], last_c[2], zeros = -1;
  for (int d = 0; d < r.dirs; d++) {
    hs[d] = ir_alloc(&c->g->arena, (size_t)r.t * sizeof *hs[d]);
    onnx_rnn_direction(c, n, &r, d, hs[d], &last_c[d], &zeros);
    last_h[d] = hs[d][d == 1 || r.reverse ? 0 : r.t - 1];
    if (last_h[d] < 0 || (r.lstm && last_c[d] < 0)) return 1;
  }
  if (onnx_out_read(c, n, 0) && onnx_rnn_y(c, n, &r, hs) < 0) return 1;
  if (onnx_out_read(c, n, 1) && onnx_b_concat(c, n, n->output[1], last_h, r.dirs, 0) < 0) return 1;
  if (r.lstm && onnx_out_read(c, n, 2) && onnx_b_concat(c, n, n->output[2], last_c, r.dirs, 0) < 0) return 1;
  return 0;
}
