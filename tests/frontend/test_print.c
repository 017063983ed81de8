/* test_print.c — the printer round trip: each model (together covering every op) is lowered,
 * printed with ir_print, parsed and lowered again and printed again. The two texts must be
 * equal and the two graphs structurally equal: nodes, inputs, shapes, attributes, parameters
 * with their kinds and initializers, outputs and the optimizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_test.h"

static bool covered[IR_OP_COUNT];

#define MODEL(body) "model m {\n" body "\n}\n"

static const char *const models[] = {
  /* binary with broadcasting and scalar constants, every unary op */
  MODEL("input a : f32[2, 1, 4]\n input b : f32[3, 1]\n input s : f32[]\n"
        "c = add(a, b)\n d = sub(a, b)\n e = mul(a, b)\n f = div(a, b)\n g = pow(a, 2)\n h = maximum(a, b)\n i = minimum(a, s)\n"
        "j = 0.5 * a - -1 + s / 3\n k = 2 ** a ** 0.5\n"
        "output c, d, e, f, g, h, i, j, k"),
  MODEL("input x : f32[2, 3]\n a = neg(x)\n b = abs(a)\n c = exp(b)\n d = log(c)\n e = sqrt(c)\n f = rsqrt(c)\n g = square(f)\n"
        "h = sin(g)\n i = cos(h)\n j = sign(i)\n k = reciprocal(c)\n l = relu(k)\n m2 = sigmoid(l)\n n = tanh(m2)\n"
        "o = softplus(n)\n p = gelu(o)\n q = leaky_relu(p, slope=0.2)\n r = clip(q, a_min=-0.5, a_max=0.75)\n"
        "s = smooth_l1(r, sigma=3)\n t = activation(s, act_type=\"softrelu\")\n u = activation(t, act_type=\"relu\")\n"
        "v = leaky_relu(u)\n w = smooth_l1(v)\n e1 = erf(w)\n e2 = hard_sigmoid(e1)\n"
        "e3 = hard_sigmoid(e2, alpha=0.2, beta=0.25)\n e4 = hard_swish(e3)\n e5 = silu(e4)\n output e5"),
  /* reductions and layout */
  MODEL("input x : f32[2, 1, 3, 4]\n a = sum(x)\n b = mean(x, axis=(0, -1), keepdims=true)\n c = max(x, axis=2)\n"
        "d = reshape(x, shape=(6, -1))\n e = flatten(x)\n f = transpose(x)\n g = transpose(x, axes=(0, 2, 1, -1))\n"
        "h = expand_dims(x, axis=-1)\n i = squeeze(x)\n j = squeeze(x, axis=0)\n k = broadcast_to(x, shape=(5, 2, 2, 3, 4))\n"
        "l = slice(x, axis=-1, begin=-3, end=-1)\n l2 = slice(x, axis=2, end=3, step=-2)\n n = concat(x, x, dim=0)\n o = concat(x, x, x)\n"
        "p = pad(x, pad=(1, 2))\n q = pad(x, pad=(0, 1, 2, 0, 0, 0, -1, 1), value=-0.5)\n"
        "r = pad(x, pad=(1, 1, 1, 1), mode=\"reflect\")\n s = pad(x, pad=(2, 0), mode=\"replicate\")\n"
        "t = min(x, axis=(1, 3))\n u = prod(x, keepdims=true)\n v = logsumexp(x, axis=-1)\n w = norm(x, ord=1, axis=2)\n"
        "z = norm(x)\n"
        "output a, b, c, d, e, f, g, h, i, j, k, l, l2, n, o, p, q, r, s, t, u, v, w, z"),
  /* GEMM family, parameters created and declared */
  MODEL("input a : f32[2, 1, 3, 4]\n input b : f32[5, 4, 6]\n input x : f32[8, 2, 3]\n"
        "param w : f32[7, 6] = normal(std=0.01)\n param bias = constant(0.25)\n"
        "m1 = matmul(a, b)\n m2 = matmul(a, b, transpose_a=false, transpose_b=false)\n m3 = matmul(x, x, transpose_b=true)\n"
        "f1 = fully_connected(x, num_hidden=5)\n f2 = fully_connected(x, num_hidden=4, flatten=false, no_bias=true)\n"
        "f3 = fully_connected(x, w, bias, num_hidden=7)\n h = relu(fully_connected(x, num_hidden=3))\n"
        "output m1, m2, m3, f1, f2, f3, h"),
  /* convolution and pooling */
  MODEL("input x : f32[2, 4, 9, 11]\n input s : f32[2, 4, 10]\n param cw = uniform(-0.1, 0.2)\n"
        "c1 = convolution(x, num_filter=8, kernel=(3, 5), stride=(2, 3), pad=(1, 2))\n"
        "c2 = convolution(s, num_filter=6, kernel=3, stride=2, pad=1, dilate=2, num_group=2, no_bias=true)\n"
        "c3 = convolution(x, cw, num_filter=2, kernel=(1, 1), no_bias=true)\n"
        "p1 = pooling(c1, kernel=(3, 2), stride=(2, 2), pad=(1, 0), pool_type=\"avg\")\n p2 = pooling(x, kernel=2)\n"
        "p3 = pooling(c1, global_pool=true, pool_type=\"avg\")\n p4 = pooling(c2, kernel=2, stride=1)\n"
        "p5 = pooling(x, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type=\"avg\", count_include_pad=false, ceil_mode=true)\n"
        "p6 = pooling(x, kernel=(3, 3), pad=(0, 1, 1, 1), pool_type=\"avg\", count_include_pad=false)\n"
        "c4 = convolution(x, num_filter=3, kernel=(3, 3), stride=(2, 1), pad=(0, 1, 1, 2))\n"
        "c5 = convolution(s, num_filter=2, kernel=2, pad=(1, 0), dilate=2, no_bias=true)\n"
        "c6 = convolution(x, num_filter=4, kernel=(2, 2), pad=(1, 2, 1, 2), num_group=2)\n"
        "output c3, p1, p2, p3, p4, p5, p6, c4, c5, c6"),
  /* normalisation, dropout, softmax, embedding, loss, sgd */
  MODEL("input x : f32[4, 3, 5, 5]\n input z : f32[4, 6, 7]\n input i : i32[4, 2]\n input y : i32[4]\n"
        "bn = batch_norm(x)\n b2 = batch_norm(z, axis=-1, eps=0.001, momentum=0.5)\n ln = layer_norm(z)\n"
        "d = dropout(ln, p=0.25)\n s = softmax(d)\n ls = log_softmax(z, axis=1)\n e = embedding(i, input_dim=10, output_dim=3)\n"
        "logits = fully_connected(bn, num_hidden=5)\n loss = softmax_cross_entropy(logits, y)\n"
        "output s, ls, e, b2\n train loss with sgd(lr=0.05, momentum=0.9, wd=0.0001)"),
  /* defs, nested prefixes, multiple return values, dims, initializers, adam */
  "dim batch = 4\n dim hidden = 6\n"
  "def blk(x, n: int, k: int = 2) {\n c = fully_connected(x, num_hidden=n * k)\n return relu(fully_connected(c, num_hidden=n))\n}\n"
  "def two(x) {\n a = tanh(x)\n return a, sigmoid(x)\n}\n"
  MODEL("input x : f32[batch, hidden]\n input y : i32[batch]\n param g = ones()\n param w3 = xavier()\n"
        "b1 = blk(x, n=3)\n p, q = two(b1)\n r = layer_norm(p + q, g)\n t = fully_connected(r, w3, num_hidden=5, no_bias=true)\n"
        "loss = softmax_cross_entropy(t, y)\n output q\n train loss with adam(lr=0.01, beta2=0.99)"),
  /* consts: in arithmetic, in learnable slots (fixed weights), beside batch_norm's aux states */
  MODEL("input x : f32[4, 3, 5, 5]\n input i : i32[4, 2]\n input y : i32[4]\n"
        "const scale : f32[1, 3, 1, 1] = uniform(0.5, 1.5)\n const k : f32[2, 3, 3, 3]\n const table : f32[10, 6] = normal(std=0.5)\n"
        "const g : f32[6] = ones()\n"
        "c = convolution(x * scale, k, num_filter=2, kernel=(3, 3), no_bias=true)\n n = batch_norm(c)\n"
        "e = layer_norm(embedding(i, table, input_dim=10, output_dim=6), g)\n"
        "logits = fully_connected(n, num_hidden=5) + mean(e)\n loss = softmax_cross_entropy(logits, y)\n"
        "output logits\n train loss with sgd(lr=0.1)"),
  /* adam defaults; a model with only a train statement */
  MODEL("input x : f32[3, 2]\n loss = mean(square(fully_connected(x, num_hidden=1)))\n train loss with adam()"),
  /* the whole train clause: Nesterov, a schedule, clip_norm, wd_exclude */
  MODEL("input x : f32[3, 2]\n h = fully_connected(x, num_hidden=4)\n loss = mean(square(layer_norm(h)))\n"
        "train loss with sgd(lr=0.1, momentum=0.9, wd=0.01, nesterov=true) schedule multistep(milestones=(3, 7), gamma=0.5) "
        "clip_norm=0.25 wd_exclude=norm,bias"),
};
enum { NMODELS = sizeof models / sizeof *models };

/* ---- lowering and printing ---- */

typedef struct {
  ts_front fr;
  ir_graph *g;
  const char *msg;             /* the diagnostics */
  char *text;
  size_t textlen;
} p_model;

static p_model *p_lower(const char *name, const char *src) {
  p_model *m = calloc(1, sizeof *m);
  m->fr.capture = true;
  m->g = ts_lower_text(&m->fr, name, src, NULL, 0);
  m->msg = ts_diags(&m->fr);
  if (m->g) {
    FILE *out = open_memstream(&m->text, &m->textlen);
    ir_print(m->g, out);
    fclose(out);
  }
  return m;
}

static void p_free(p_model *m) {
  ir_graph_free(m->g);
  ts_front_free(&m->fr);
  free(m->text);
  free(m);
}

/* ---- structural comparison ---- */

static const char *p_tname(const ir_graph *g, int t) {
  const ir_tensor *x = ir_tensor_at(g, t);
  return x->kind == IR_T_CONST ? "<const>" : x->name;
}

static bool p_same_type(const ir_tensor *a, const ir_tensor *b) {
  return a->dtype == b->dtype && a->shape_known == b->shape_known && ir_shape_eq(&a->shape, &b->shape);
}

/* The node's attributes as text: normalised structs compare without their unused tails. */
static void p_attrs(const ir_node *n, char *buf, size_t len) {
  FILE *f = fmemopen(buf, len, "w");
  if (ir_ops[n->op].attrs) ir_attr_print(ir_ops[n->op].attrs, n->param, f);
  fclose(f);
}

static void p_same_node(const ir_graph *g1, const ir_node *a, const ir_graph *g2, const ir_node *b, int k) {
  CHECK(a->op == b->op && strcmp(a->name, b->name) == 0, "node %d: %s %s vs %s %s", k, ir_ops[a->op].name, a->name, ir_ops[b->op].name, b->name);
  CHECK(a->nin == b->nin && a->nout == b->nout && a->flops == b->flops, "node %s: inputs/outputs/flops differ", a->name);
  for (int i = 0; i < a->nin && i < b->nin; i++) {
    const ir_tensor *x = ir_tensor_at(g1, a->in[i]), *y = ir_tensor_at(g2, b->in[i]);
    CHECK(strcmp(p_tname(g1, a->in[i]), p_tname(g2, b->in[i])) == 0 && x->kind == y->kind && p_same_type(x, y),
          "node %s input %d: %s vs %s", a->name, i, p_tname(g1, a->in[i]), p_tname(g2, b->in[i]));
    if (x->kind == IR_T_CONST) CHECK(y->kind == IR_T_CONST && x->value == y->value, "node %s: constant %g vs %g", a->name, x->value, y->value);
  }
  for (int i = 0; i < a->nout && i < b->nout; i++) {
    const ir_tensor *x = ir_tensor_at(g1, a->out[i]), *y = ir_tensor_at(g2, b->out[i]);
    CHECK(strcmp(x->name, y->name) == 0 && p_same_type(x, y), "node %s output %d: %s vs %s", a->name, i, x->name, y->name);
  }
  char pa[1024] = "", pb[1024] = "";
  p_attrs(a, pa, sizeof pa), p_attrs(b, pb, sizeof pb);
  CHECK(strcmp(pa, pb) == 0, "node %s attributes: %s vs %s", a->name, pa, pb);
}

static bool p_same_init(const ir_tensor *a, const ir_tensor *b) {
  return a->has_init == b->has_init && a->init.kind == b->init.kind && a->init.a == b->init.a && a->init.b == b->init.b;
}

/* Inputs, parameters and aux states of g1 appear in g2 with the same kind, type and init. */
static void p_same_tensors(const ir_graph *g1, const ir_graph *g2) {
  int n1 = 0, n2 = 0;
  for (int i = 0; i < ir_ntensors(g2); i++) n2 += ir_tensor_at(g2, i)->kind != IR_T_VALUE && ir_tensor_at(g2, i)->kind != IR_T_CONST;
  for (int i = 0; i < ir_ntensors(g1); i++) {
    const ir_tensor *a = ir_tensor_at(g1, i);
    if (a->kind == IR_T_VALUE || a->kind == IR_T_CONST) continue;
    n1++;
    int j = ir_graph_find_tensor(g2, a->name);
    const ir_tensor *b = j >= 0 ? ir_tensor_at(g2, j) : NULL;
    if (!CHECK(b != NULL, "tensor %s is missing after the round trip", a->name)) continue;
    CHECK(a->kind == b->kind && a->fixed == b->fixed, "tensor %s: kind %d%s vs %d%s", a->name, a->kind, a->fixed ? " const" : "",
          b->kind, b->fixed ? " const" : "");
    CHECK(p_same_type(a, b), "tensor %s: type differs", a->name);
    if (a->kind != IR_T_INPUT) CHECK(p_same_init(a, b), "tensor %s: initializer %s(%g, %g) vs %s(%g, %g)", a->name,
                                     ir_inits[a->init.kind].name, a->init.a, a->init.b, ir_inits[b->init.kind].name, b->init.a, b->init.b);
  }
  CHECK(n1 == n2, "%d inputs/params/aux vs %d", n1, n2);
}

static void p_same_optim(const ir_graph *g1, const ir_graph *g2) {
  CHECK(g1->has_train == g2->has_train, "train statement lost");
  if (!g1->has_train || !g2->has_train) return;
  const ir_optimizer *a = &g1->optim, *b = &g2->optim;
  CHECK(strcmp(ir_tensor_at(g1, g1->loss)->name, ir_tensor_at(g2, g2->loss)->name) == 0, "train target differs");
  CHECK(a->kind == b->kind && a->lr == b->lr && a->sgd.momentum == b->sgd.momentum && a->sgd.wd == b->sgd.wd &&
        a->adam.beta1 == b->adam.beta1 && a->adam.beta2 == b->adam.beta2 && a->adam.eps == b->adam.eps && a->adam.wd == b->adam.wd,
        "optimizer differs");
  CHECK(a->sgd.nesterov == b->sgd.nesterov && a->clip_norm == b->clip_norm && a->wd_exclude == b->wd_exclude &&
        memcmp(&a->sched, &b->sched, sizeof a->sched) == 0, "nesterov, schedule, clip_norm or wd_exclude differs");
}

static void p_same_graph(const ir_graph *g1, const ir_graph *g2) {
  CHECK(strcmp(g1->name, g2->name) == 0, "model name %s vs %s", g1->name, g2->name);
  if (!CHECK(ir_nnodes(g1) == ir_nnodes(g2), "%d nodes vs %d", ir_nnodes(g1), ir_nnodes(g2))) return;
  for (int i = 0; i < ir_nnodes(g1); i++) p_same_node(g1, ir_node_at(g1, i), g2, ir_node_at(g2, i), i);
  p_same_tensors(g1, g2);
  CHECK(g1->outputs.len == g2->outputs.len, "%d outputs vs %d", g1->outputs.len, g2->outputs.len);
  for (int i = 0; i < g1->outputs.len && i < g2->outputs.len; i++)
    CHECK(strcmp(ir_tensor_at(g1, IR_VEC_AT(g1->outputs, int, i))->name, ir_tensor_at(g2, IR_VEC_AT(g2->outputs, int, i))->name) == 0,
          "output %d differs", i);
  p_same_optim(g1, g2);
}

/* Where a window op's pads print in their start-then-end form and where as one per axis. */
static void p_window_pads(void) {
  p_model *m = p_lower("t.kiln", models[4]);
  if (CHECK(m->text != NULL, "the convolution model prints")) {
    CHECK(strstr(m->text, "c4.bias, num_filter=3, kernel=(3, 3), stride=(2, 1), pad=(0, 1, 1, 2),") != NULL,
          "pads that differ at start and end print as all four:\n%s", m->text);
    CHECK(strstr(m->text, "kernel=(2,), stride=(1,), pad=(1, 0), dilate=(2,)") != NULL, "a 1-D start and end:\n%s", m->text);
    CHECK(strstr(m->text, "kernel=(2, 2), stride=(1, 1), pad=(1, 2), dilate=(1, 1), num_group=2") != NULL,
          "starts equal to their ends print one per axis:\n%s", m->text);
    CHECK(strstr(m->text, "pad=(0, 1, 1, 1), pool_type=\"avg\"") != NULL, "pooling's start and end pads:\n%s", m->text);
  }
  p_free(m);
}

static void p_roundtrip(int k, const char *src) {
  p_model *m1 = p_lower("t.kiln", src);
  if (!CHECK(m1->g != NULL, "model %d does not lower:\n%s", k, m1->msg ? m1->msg : "")) return p_free(m1);
  for (int i = 0; i < ir_nnodes(m1->g); i++) covered[ir_node_at(m1->g, i)->op] = true;
  p_model *m2 = p_lower("printed.kiln", m1->text);
  if (CHECK(m2->g != NULL, "model %d: the printed text does not lower:\n%s\n%s", k, m1->text, m2->msg ? m2->msg : "")) {
    CHECK(strcmp(m1->text, m2->text) == 0, "model %d: texts differ:\n%s\n---\n%s", k, m1->text, m2->text);
    CHECK(ir_verify(m2->g) == 0, "model %d: reparsed graph fails ir_verify", k);
    p_same_graph(m1->g, m2->g);
  }
  p_free(m1);
  p_free(m2);
}

int main(void) {
  for (int k = 0; k < NMODELS; k++) p_roundtrip(k, models[k]);
  p_window_pads();
  for (int op = 0; op < IR_OP_COUNT; op++) CHECK(covered[op], "op %s is not in any round-trip model", ir_ops[op].name);
  return ts_summary("print");
}
