/* test_plan.c — in-place legality, the memory plan on every example in predict and train with
 * each optional pass on and off (validated, never larger than naive), the validator rejecting
 * broken plans, and the ResNet figures (arena against naive) that docs/passes.md quotes. */
#define _GNU_SOURCE   /* open_memstream */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_test.h"

/* ---- the harness ---- */

typedef ts_run t_run;

static t_run *t_text(const char *src, ir_mode mode, uint32_t disabled) { return ts_run_new("t.kiln", src, mode, disabled); }
#define t_free ts_run_free

/* The node whose first output is tensor `name`, or NULL. */
static const ir_node *t_writer(const ir_graph *g, const char *name) {
  int t = ir_graph_find_tensor(g, name);
  for (int i = 0; t >= 0 && i < ir_nnodes(g); i++)
    if (ir_node_at(g, i)->nout && ir_node_at(g, i)->out[0] == t) return ir_node_at(g, i);
  return NULL;
}

/* The tensor output 0 of the node writing `name` reuses, or "" when none. */
static const char *t_reuses(const ir_graph *g, const char *name) {
  const ir_node *n = t_writer(g, name);
  if (!n || !n->inplace || n->inplace[0] < 0) return "";
  return ir_tensor_at(g, n->in[n->inplace[0]])->name;
}

#define MODEL(body) "model m {\n" body "\n}\n"
#define OFF(p) (1u << PASS_##p)
#define NO_FUSION (OFF(fusion) | OFF(epilogue))   /* an FC and its tail would be one node */

/* ---- in-place legality ---- */

static void test_inplace_basic(void) {
  t_run *r = t_text(MODEL("input x : f32[4, 8]\n f = fully_connected(x, num_hidden=8)\n y = relu(f)\n output y"),
                    IR_MODE_PREDICT, NO_FUSION);
  if (!CHECK(r->g, "model did not compile")) return t_free(r);
  const ir_node *n = t_writer(r->g, "y");
  CHECK(strcmp(t_reuses(r->g, "y"), "f") == 0 && n->req[0] == kWriteInplace, "relu reuses f with kWriteInplace");
  CHECK(r->cx.stats[PASS_inplace].inplace_pairs == 1, "one pair, got %d", r->cx.stats[PASS_inplace].inplace_pairs);
  int y = ir_graph_find_tensor(r->g, "y"), f = ir_graph_find_tensor(r->g, "f");
  CHECK(r->g->plan->buf[y].share == f && r->g->plan->buf[y].offset == r->g->plan->buf[f].offset, "one buffer for the pair");
  t_free(r);
}

static void test_inplace_read_later(void) {
  t_run *r = t_text(MODEL("input x : f32[4, 8]\n a = fully_connected(x, num_hidden=8)\n b = relu(a)\n c = a + b\n output c"),
                    IR_MODE_PREDICT, NO_FUSION);
  if (!CHECK(r->g, "model did not compile")) return t_free(r);
  CHECK(strcmp(t_reuses(r->g, "b"), "") == 0, "relu must not reuse a, which add reads later");
  CHECK(strcmp(t_reuses(r->g, "c"), "a") == 0, "add, a's last reader, reuses a (got '%s')", t_reuses(r->g, "c"));
  t_free(r);
}

/* A copy op (reshape) takes its input's buffer at another shape of the same size: no copy. */
static void test_inplace_reshape(void) {
  t_run *r = t_text(MODEL("input x : f32[4, 8]\n a = fully_connected(x, num_hidden=8)\n b = reshape(a, shape=(2, 16))\n output b"),
                    IR_MODE_PREDICT, NO_FUSION);
  if (!CHECK(r->g, "model did not compile")) return t_free(r);
  CHECK(strcmp(t_reuses(r->g, "b"), "a") == 0, "reshape reuses a (got '%s')", t_reuses(r->g, "b"));
  t_free(r);
  r = t_text(MODEL("input x : f32[4, 8]\n b = reshape(x, shape=(2, 16))\n output b"), IR_MODE_PREDICT, NO_FUSION);
  CHECK(r->g && !*t_reuses(r->g, "b"), "reshape never takes a caller input's buffer");
  t_free(r);
}

static void test_inplace_never(void) {
  t_run *r = t_text(MODEL("input x : f32[4, 8]\n param w : f32[4, 8] = ones()\n y = relu(x)\n z = exp(w)\n output y, z"),
                    IR_MODE_PREDICT, NO_FUSION);
  if (!CHECK(r->g, "model did not compile")) return t_free(r);
  CHECK(!*t_reuses(r->g, "y") && !*t_reuses(r->g, "z"), "a caller input and a parameter are never reused");
  t_free(r);
  r = t_text(MODEL("input x : f32[4, 8]\n a = fully_connected(x, num_hidden=8)\n b = relu(a)\n output a, b"),
             IR_MODE_PREDICT, NO_FUSION);
  CHECK(r->g && !*t_reuses(r->g, "b"), "a graph output is never reused");
  t_free(r);
  r = t_text(MODEL("input x : f32[4, 8]\n a = fully_connected(x, num_hidden=1)\n b = a + x\n output b"),
             IR_MODE_PREDICT, NO_FUSION);
  CHECK(r->g && !*t_reuses(r->g, "b"), "a [4, 1] slot cannot hold a broadcast [4, 8] output");
  t_free(r);
  r = t_text(MODEL("input x : f32[4, 8]\n a = fully_connected(x, num_hidden=8)\n b = relu(a)\n output b"),
             IR_MODE_PREDICT, NO_FUSION | OFF(inplace));
  CHECK(r->g && !*t_reuses(r->g, "b") && r->cx.stats[PASS_inplace].inplace_pairs == 0, "switched off: no pairs");
  t_free(r);
}

/* mul(y, y)'s backward adds both operands' terms into y@grad; the second reads the out_grad,
 * so the first must not be written over it (it gave y + y*y for 2y). */
static void test_inplace_same_operand(void) {
  t_run *r = t_text(MODEL("input x : f32[3, 4]\n param d : f32[3, 4]\n a = x + d\n y = reshape(a, shape=(4, 3))\n"
                          " loss = sum(y * y)\n output y\n train loss with sgd(lr=1.0)"),
                    IR_MODE_TRAIN, NO_FUSION);
  if (!CHECK(r->g, "model did not compile")) return t_free(r);
  const ir_node *n = t_writer(r->g, "y@grad");
  if (CHECK(n && n->nout == 2 && n->out[1] == n->out[0], "mul's backward writes y@grad twice"))
    CHECK(!*t_reuses(r->g, "y@grad") && ir_node_req(n, 0) == kWriteTo && ir_node_req(n, 1) == kAddTo,
          "the first term is written to its own buffer (reuses '%s'), the second added", t_reuses(r->g, "y@grad"));
  t_free(r);
}

/* Every pair in a compiled graph obeys the rules, whoever made it. */
static void t_check_pairs(const ir_graph *g, const char *what) {
  int nn = ir_nnodes(g);
  int *last = malloc(sizeof(int) * ((size_t)ir_ntensors(g) + 1));
  for (int t = 0; t < ir_ntensors(g); t++) last[t] = -1;
  for (int i = 0; i < nn; i++) {
    const ir_node *n = ir_node_at(g, i);
    for (int j = 0; j < n->nin + n->nout; j++) {
      int t = j < n->nin ? n->in[j] : n->out[j - n->nin];
      if (t >= 0) last[t] = i;
    }
  }
  for (int i = 0; i < g->outputs.len; i++) last[IR_VEC_AT(g->outputs, int, i)] = nn;
  if (g->mode == IR_MODE_TRAIN && g->loss >= 0) last[g->loss] = nn;
  for (int i = 0; i < nn; i++) {
    const ir_node *n = ir_node_at(g, i);
    for (int j = 0; n->inplace && j < n->nout; j++) {
      if (n->inplace[j] < 0) continue;
      int t = n->in[n->inplace[j]];
      const ir_tensor *x = ir_tensor_at(g, t);
      const ir_tensor *o = ir_tensor_at(g, n->out[j]);
      bool copy = n->kind != IR_N_FUSED && ir_ops[n->op].fusion == IR_FUSE_NONE;   /* reshape and kin: bytes */
      bool ok = x->kind == IR_T_VALUE && last[t] == i && n->req[j] == kWriteInplace &&
                (ir_shape_eq(&x->shape, &o->shape) || (copy && ir_tensor_numel(x) == ir_tensor_numel(o)));
      CHECK(ok, "%s: %s reuses %s illegally", what, n->name, x->name);
    }
  }
  free(last);
}

/* ---- the plan on every example ---- */

static t_run *t_example(const char *path, ir_mode mode, uint32_t disabled) { return ts_run_new(path, NULL, mode, disabled); }

static const uint32_t t_masks[] = {0, OFF(inplace), OFF(fusion), OFF(plan), OFF(prune),
                                   OFF(inplace) | OFF(fusion), OFF(inplace) | OFF(fusion) | OFF(plan) | OFF(prune)};

static void t_plan_one(const char *path, ir_mode mode, uint32_t mask) {
  t_run *r = t_example(path, mode, mask);
  const char *m = mode == IR_MODE_TRAIN ? "train" : "predict";
  if (CHECK(r->g && r->g->plan, "%s (%s, off %#x) did not compile", path, m, mask)) {
    char *msg = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&msg, &len);
    int bad = pass_plan_validate(r->g, r->g->plan, o);
    fclose(o);
    CHECK(!bad, "%s (%s, off %#x): %s", path, m, mask, msg);
    free(msg);
    CHECK(r->g->plan->arena_bytes <= r->g->plan->naive_bytes, "%s (%s): arena above naive", path, m);
    CHECK(ir_verify(r->g) == 0, "%s (%s, off %#x): graph invalid", path, m, mask);
    t_check_pairs(r->g, path);
  }
  t_free(r);
}

static void t_plan_all(const char *path, void *ctx) {
  for (size_t k = 0; k < sizeof t_masks / sizeof *t_masks; k++) {
    t_plan_one(path, IR_MODE_PREDICT, t_masks[k]);
    t_plan_one(path, IR_MODE_TRAIN, t_masks[k]);
  }
}

static void test_examples(void) {
  int n = ts_each_model("examples", t_plan_all, NULL);
  if (!CHECK(n >= 0, "cannot open %sexamples", ts_root())) return;
  CHECK(n >= 4, "found %d examples", n);
}

/* ---- the validator rejects broken plans ---- */

static bool t_rejects(const ir_graph *g, const ir_plan *p, const char *want) {
  char *msg = NULL;
  size_t len = 0;
  FILE *o = open_memstream(&msg, &len);
  int bad = pass_plan_validate(g, p, o);
  fclose(o);
  bool ok = bad && msg && strstr(msg, want);
  if (!ok) fprintf(stderr, "  validator said: %s\n", msg ? msg : "(nothing)");
  free(msg);
  return ok;
}

static ir_plan *t_copy_plan(const ir_graph *g) {
  ir_plan *p = pass_plan_naive(g);
  const ir_plan *q = g->plan;
  memcpy(p->buf, q->buf, sizeof *p->buf * (size_t)ir_ntensors(g));
  memcpy(p->temp_offset, q->temp_offset, sizeof(int64_t) * (size_t)ir_nnodes(g));
  memcpy(p->temp_bytes, q->temp_bytes, sizeof(int64_t) * (size_t)ir_nnodes(g));
  memcpy(p->samples, q->samples, sizeof(int32_t) * (size_t)ir_nnodes(g));
  p->arena_bytes = q->arena_bytes, p->naive_bytes = q->naive_bytes;
  return p;
}

static void test_validator(void) {
  t_run *r = t_text(MODEL("input x : f32[4, 8]\n a = fully_connected(x, num_hidden=8)\n b = fully_connected(a, num_hidden=8)\n"
                          " c = relu(b)\n d = a * c\n output d"), IR_MODE_PREDICT, NO_FUSION);
  if (!CHECK(r->g, "model did not compile")) return t_free(r);
  ir_graph *g = r->g;
  int a = ir_graph_find_tensor(g, "a"), b = ir_graph_find_tensor(g, "b"), c = ir_graph_find_tensor(g, "c");
  int x = ir_graph_find_tensor(g, "x"), d = ir_graph_find_tensor(g, "d");
  CHECK(pass_plan_validate(g, g->plan, stderr) == 0, "the real plan is valid");
  CHECK(g->plan->buf[c].share == b, "c reuses b");

  ir_plan *p = t_copy_plan(g);            /* a and b are live together (a is read by d) */
  p->buf[b].offset = p->buf[a].offset, p->buf[c].offset = p->buf[a].offset;
  CHECK(t_rejects(g, p, "overlap"), "overlapping live tensors are rejected");
  ir_plan_free(p);

  p = t_copy_plan(g);                     /* c reusing a, which d reads later */
  p->buf[c].share = a, p->buf[c].offset = p->buf[a].offset;
  CHECK(t_rejects(g, p, "still read after"), "reusing a tensor read later is rejected");
  ir_plan_free(p);

  p = t_copy_plan(g);                     /* d reusing the caller's input */
  p->buf[d].share = x, p->buf[d].offset = p->arena_bytes;   /* alone in the arena, so only the pair is wrong */
  p->arena_bytes += p->buf[d].bytes;
  CHECK(t_rejects(g, p, "not an arena value"), "reusing a caller input is rejected");
  ir_plan_free(p);

  p = t_copy_plan(g);                     /* a pair at different offsets */
  p->buf[c].offset += 64;
  p->arena_bytes += 64;
  CHECK(t_rejects(g, p, "another offset") || t_rejects(g, p, "overlap"), "a pair split across offsets is rejected");
  ir_plan_free(p);

  p = t_copy_plan(g);                     /* b written only at node 3: read before write */
  p->buf[b].first = p->buf[c].first;
  CHECK(t_rejects(g, p, "before its write") || t_rejects(g, p, "still read after"), "read before write is rejected");
  ir_plan_free(p);

  p = t_copy_plan(g);
  p->buf[a].offset = p->arena_bytes;
  CHECK(t_rejects(g, p, "past the arena"), "a buffer past the arena end is rejected");
  ir_plan_free(p);

  p = t_copy_plan(g);
  p->buf[a].cls = IR_MEM_NONE;
  CHECK(t_rejects(g, p, "wrong storage class"), "a used value without storage is rejected");
  ir_plan_free(p);
  t_free(r);
}

/* A workspace must not overlap what is live at its node. */
static void test_validator_workspace(void) {
  t_run *r = t_text(MODEL("input x : f32[2, 3, 8, 8]\n c = convolution(x, kernel=(3, 3), num_filter=4, pad=(1, 1))\n"
                          " y = relu(c)\n output y"), IR_MODE_PREDICT, OFF(epilogue));
  if (!CHECK(r->g && r->g->plan, "conv model did not compile")) return t_free(r);
  const ir_plan *q = r->g->plan;
  int conv = -1;
  for (int i = 0; i < ir_nnodes(r->g); i++)
    if (q->temp_bytes[i]) conv = i;
  if (CHECK(conv >= 0, "the convolution has a workspace")) {
    ir_plan *p = t_copy_plan(r->g);
    int c = ir_graph_find_tensor(r->g, "c");
    p->temp_offset[conv] = p->buf[c].offset;
    if (p->temp_offset[conv] + p->temp_bytes[conv] > p->arena_bytes) p->arena_bytes = p->temp_offset[conv] + p->temp_bytes[conv];
    CHECK(t_rejects(r->g, p, "workspace"), "a workspace over a live output is rejected");
    ir_plan_free(p);
  }
  t_free(r);
}

/* ---- concat in place (pass_plan_concat) ---- */

static const ir_buffer *t_buf(const ir_graph *g, const char *name) { return &g->plan->buf[ir_graph_find_tensor(g, name)]; }

/* At batch 1 each piece read last by a concat is planned inside its output at the byte the
 * concat copies it to, its in-place chain with it (a = relu(ac): ac too), and a concat of a
 * concat nests; a piece read after the concat, a tensor given twice and a piece off the
 * 64-byte alignment keep buffers of their own; at batch 2 (two rows before the axis) no piece
 * an elementwise op writes is placed (test_concat_samples: those that can run per sample).
 * Every plan validates, and the validator rejects a piece moved off its byte. */
static void test_concat_in_place(void) {
  const char *src = MODEL("input x : f32[1, 16, 4, 4]\n input y : f32[1, 5]\n"
                          " ac = x * 2.0\n a = relu(ac)\n b = sigmoid(x)\n c = tanh(x)\n"
                          " f = concat(a, b, dim=1)\n h = concat(f, c, dim=1)\n bb = concat(b, x, dim=1)\n"
                          " u = exp(x)\n k = concat(u, u, dim=1)\n"
                          " v = sin(x)\n w = concat(v, x, dim=1)\n vs = exp(v)\n"
                          " p1 = exp(y)\n p2 = tanh(y)\n q = concat(p1, p2, dim=1)\n"
                          " output h, bb, k, w, vs, q");
  t_run *r = t_text(src, IR_MODE_PREDICT, NO_FUSION);
  if (!CHECK(r->g && r->g->plan, "concat model did not compile")) return t_free(r);
  const ir_graph *g = r->g;
  int f = ir_graph_find_tensor(g, "f"), h = ir_graph_find_tensor(g, "h"), c = ir_graph_find_tensor(g, "c");
  CHECK(t_buf(g, "f")->within == h && t_buf(g, "f")->within_at == 0, "f inside h at byte 0");
  CHECK(t_buf(g, "c")->within == h && t_buf(g, "c")->within_at == 32 * 16 * 4, "c inside h after f");
  const ir_buffer *a = t_buf(g, "a"), *ac = t_buf(g, "ac");
  CHECK(a->share == ir_graph_find_tensor(g, "ac") && ac->within == f && ac->within_at == 0,
        "a's chain (root ac) inside f at byte 0 (a reuses %d, ac inside %d)", a->share, ac->within);
  CHECK(a->offset == t_buf(g, "h")->offset && t_buf(g, "c")->offset == t_buf(g, "h")->offset + 2048,
        "the offsets follow the placements");
  CHECK(t_buf(g, "b")->within == ir_graph_find_tensor(g, "bb") && t_buf(g, "b")->within_at == 0,
        "b inside bb, its last reader, not inside f");
  CHECK(t_buf(g, "u")->within < 0, "a tensor given twice is not placed");
  CHECK(t_buf(g, "v")->within < 0, "v, read after the concat, is not placed");
  CHECK(t_buf(g, "p1")->within == ir_graph_find_tensor(g, "q") && t_buf(g, "p2")->within < 0,
        "p1 inside q; p2, 20 bytes in, off the alignment, is not placed");
  CHECK(pass_plan_validate(g, g->plan, stderr) == 0, "the plan is valid");
  ir_plan *p = t_copy_plan(g);
  p->buf[c].within_at += 2048, p->buf[c].offset += 2048;
  CHECK(t_rejects(g, p, "does not fit"), "a piece placed past its output's end is rejected");
  ir_plan_free(p);
  p = t_copy_plan(g);                     /* c alone past the arena: only the placement is wrong */
  p->buf[c].offset = p->arena_bytes, p->arena_bytes += p->buf[c].bytes;
  CHECK(t_rejects(g, p, "not at its byte"), "a piece's offset off its placement is rejected");
  ir_plan_free(p);
  t_free(r);

  char *two = strdup(src);
  two[strlen("model m {\ninput x : f32[")] = '2';
  r = t_text(two, IR_MODE_PREDICT, NO_FUSION);
  if (CHECK(r->g && r->g->plan, "batch-2 concat model did not compile"))
    CHECK(t_buf(r->g, "ac")->within < 0 && t_buf(r->g, "c")->within < 0 && t_buf(r->g, "b")->within < 0,
          "at batch 2 no piece an elementwise op writes is placed");
  t_free(r);
  free(two);
}

/* DenseNet's concats, each of every earlier piece (flat): in predict, simplify makes each read
 * the concat before it in place of its first pieces (pass_simp_concats), so at batch 1 every
 * piece and every concat but the last is planned inside the next concat and nothing is
 * copied; in train_step the concats stay flat. A concat along another axis is not nested. */
static void test_concat_dense(void) {
  const char *src = MODEL("input x : f32[1, 16, 4, 4]\n input y : i32[1]\n"
                          " a = exp(x)\n c1 = concat(x, a, dim=1)\n b = tanh(c1)\n c2 = concat(x, a, b, dim=1)\n"
                          " d = sigmoid(c2)\n c3 = concat(x, a, b, d, dim=1)\n e = concat(x, a, dim=2)\n"
                          " logits = fully_connected(flatten(c3), num_hidden=2)\n"
                          " loss = softmax_cross_entropy(logits, y)\n"
                          " output c3, e\n train loss with sgd(lr=0.1)");
  t_run *r = t_text(src, IR_MODE_PREDICT, NO_FUSION);
  if (!CHECK(r->g && r->g->plan, "dense concat model did not compile")) return t_free(r);
  const ir_graph *g = r->g;
  const ir_node *n2 = t_writer(g, "c2"), *n3 = t_writer(g, "c3"), *ne = t_writer(g, "e");
  int c1 = ir_graph_find_tensor(g, "c1"), c2 = ir_graph_find_tensor(g, "c2");
  CHECK(n2 && n2->nin == 2 && n2->in[0] == c1 && n3 && n3->nin == 2 && n3->in[0] == c2,
        "c2 reads c1 and b, c3 reads c2 and d");
  CHECK(ne && ne->nin == 2 && ne->in[0] == ir_graph_find_tensor(g, "x"), "a concat along axis 2 keeps its pieces");
  CHECK(t_buf(g, "c1")->within == c2 && t_buf(g, "c2")->within == ir_graph_find_tensor(g, "c3") &&
        t_buf(g, "b")->within == c2 && t_buf(g, "d")->within == ir_graph_find_tensor(g, "c3"),
        "each concat and each new piece inside the next concat");
  CHECK(pass_plan_validate(g, g->plan, stderr) == 0, "the plan is valid");
  t_free(r);
  r = t_text(src, IR_MODE_TRAIN, NO_FUSION);
  if (CHECK(r->g, "dense concat model did not compile for train_step"))
    CHECK(t_writer(r->g, "c3") && t_writer(r->g, "c3")->nin == 4, "in train_step c3 keeps its four pieces");
  t_free(r);
}

/* A concat of one piece (DenseNet's torch.cat([x0]) before each block's first layer) is
 * its piece in predict: its reader reads the piece, the block's next concat has no earlier
 * one to nest in and the third nests in it; at batch 1 the piece is placed inside that
 * concat. One that is a graph output stays; train_step keeps every one. */
static void test_concat_single(void) {
  const char *src = MODEL("input x : f32[1, 16, 4, 4]\n input y : i32[1]\n"
                          " c0 = concat(exp(x), dim=1)\n a = tanh(c0)\n c1 = concat(c0, a, dim=1)\n"
                          " b = sigmoid(c1)\n c2 = concat(c0, a, b, dim=1)\n k = concat(b, dim=1)\n"
                          " logits = fully_connected(flatten(c2), num_hidden=2)\n"
                          " loss = softmax_cross_entropy(logits, y)\n"
                          " output c2, k\n train loss with sgd(lr=0.1)");
  t_run *r = t_text(src, IR_MODE_PREDICT, NO_FUSION);
  if (!CHECK(r->g && r->g->plan, "single concat model did not compile")) return t_free(r);
  const ir_graph *g = r->g;
  const ir_node *na = t_writer(g, "a"), *n1 = t_writer(g, "c1"), *n2 = t_writer(g, "c2");
  int e = na ? na->in[0] : -1, c1 = ir_graph_find_tensor(g, "c1");
  CHECK(!t_writer(g, "c0") && e >= 0 && e != ir_graph_find_tensor(g, "c0"), "c0 is gone: a reads exp(x)");
  CHECK(n1 && n1->nin == 2 && n1->in[0] == e && n2 && n2->nin == 2 && n2->in[0] == c1,
        "c1 reads exp(x) and a, c2 reads c1 and b");
  CHECK(t_writer(g, "k") && t_writer(g, "k")->nin == 1, "a concat that is a graph output stays");
  CHECK(e >= 0 && g->plan->buf[e].within == c1 && t_buf(g, "c1")->within == ir_graph_find_tensor(g, "c2"),
        "exp(x) inside c1, c1 inside c2");
  CHECK(pass_plan_validate(g, g->plan, stderr) == 0, "the plan is valid");
  t_free(r);
  r = t_text(src, IR_MODE_TRAIN, NO_FUSION);
  if (CHECK(r->g, "single concat model did not compile for train_step"))
    CHECK(t_writer(r->g, "c0") && t_writer(r->g, "c0")->nin == 1, "in train_step c0 stays");
  t_free(r);
}

/* At batch 3 a concat along axis 1 holds a sample of each piece in turn: in predict a piece
 * whose every node (writer, readers, what lies inside it) runs per sample is placed there,
 * its samples the top output's sample apart, and those nodes run per sample (plan->samples).
 * A piece an elementwise node writes keeps its buffer; with PASS_NO_SPLIT (the GPU) nothing
 * is placed. The validator rejects a piece made dense again. */
static void test_concat_samples(void) {
  const char *src = MODEL("input x : f32[3, 16, 4, 4]\n"
                          " a = convolution(x, kernel=(3, 3), num_filter=16, pad=(1, 1))\n"
                          " b = pooling(x, kernel=(3, 3), stride=(1, 1), pad=(1, 1), pool_type=\"max\")\n"
                          " c1 = concat(a, b, dim=1)\n d = convolution(c1, kernel=(1, 1), num_filter=16)\n"
                          " c2 = concat(c1, d, dim=1)\n e = exp(x)\n c3 = concat(e, a, dim=1)\n"
                          " output c2, c3");
  t_run *r = t_text(src, IR_MODE_PREDICT, NO_FUSION);
  if (!CHECK(r->g && r->g->plan, "batch-3 concat model did not compile")) return t_free(r);
  const ir_graph *g = r->g;
  int c1 = ir_graph_find_tensor(g, "c1"), c2 = ir_graph_find_tensor(g, "c2");
  const int64_t sample = 48 * 16 * 4;
  CHECK(t_buf(g, "c1")->within == c2 && t_buf(g, "c1")->within_at == 0 && t_buf(g, "d")->within == c2 &&
            t_buf(g, "d")->within_at == 32 * 16 * 4,
        "c1 and d inside c2 (c1 within %d, d at %lld)", t_buf(g, "c1")->within, (long long)t_buf(g, "d")->within_at);
  CHECK(t_buf(g, "b")->within == c1 && t_buf(g, "b")->within_at == 16 * 16 * 4 &&
            t_buf(g, "b")->offset == t_buf(g, "c2")->offset + 16 * 16 * 4,
        "b inside c1 after a's sample, at its offset");
  CHECK(t_buf(g, "a")->within == ir_graph_find_tensor(g, "c3") && t_buf(g, "a")->sample_bytes == 32 * 16 * 4,
        "a inside c3, its last reader, a sample of c3 apart");
  CHECK(t_buf(g, "b")->sample_bytes == sample && t_buf(g, "c1")->sample_bytes == sample &&
            t_buf(g, "d")->sample_bytes == sample && t_buf(g, "c2")->sample_bytes == 0,
        "the pieces' samples lie c2's sample (%lld bytes) apart, c2 is dense", (long long)sample);
  CHECK(t_buf(g, "e")->within < 0 && t_buf(g, "e")->sample_bytes == 0, "e, written by exp, keeps its buffer");
  const ir_node *nb = t_writer(g, "b"), *nd = t_writer(g, "d"), *n2 = t_writer(g, "c2");
  int ib = -1, id = -1, i2 = -1, ie = -1;
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *x = ir_node_at(g, i);
    ib = x == nb ? i : ib, id = x == nd ? i : id, i2 = x == n2 ? i : i2, ie = x == t_writer(g, "e") ? i : ie;
  }
  CHECK(ib >= 0 && id >= 0 && i2 >= 0 && ie >= 0 && g->plan->samples[ib] == 3 && g->plan->samples[id] == 3 &&
            g->plan->samples[i2] == 3 && g->plan->samples[ie] == 0,
        "pooling, the convolution and the concat run per sample, exp once");
  CHECK(nd && ir_plan_slot_stride(g, nd, 0) == sample && ir_plan_slot_stride(g, nd, 1) == 0,
        "d's convolution reads c1 a sample of c2 apart and its weight whole");
  CHECK(pass_plan_validate(g, g->plan, stderr) == 0, "the plan is valid");
  ir_plan *p = t_copy_plan(g);
  p->buf[ir_graph_find_tensor(g, "b")].sample_bytes = 0;
  CHECK(t_rejects(g, p, "samples are not c1's apart"), "a piece made dense again is rejected");
  ir_plan_free(p);
  t_free(r);

  r = t_text(src, IR_MODE_PREDICT, NO_FUSION | PASS_NO_SPLIT);
  if (CHECK(r->g && r->g->plan, "batch-3 concat model did not compile without splits"))
    CHECK(t_buf(r->g, "b")->within < 0 && t_buf(r->g, "d")->within < 0 && t_buf(r->g, "c1")->within < 0,
          "with PASS_NO_SPLIT nothing is placed");
  t_free(r);
}

/* ---- the figures ---- */

static double t_mib(int64_t b) { return (double)b / (1 << 20); }

/* Arena with every pass on against naive with in-place, both fusions and planning off (every
 * intermediate, gradient and workspace its own buffer). */
static void t_figure(const char *path, ir_mode mode, double aim) {
  t_run *on = t_example(path, mode, 0);
  t_run *off = t_example(path, mode, OFF(inplace) | OFF(epilogue) | OFF(fusion) | OFF(plan));
  if (CHECK(on->g && off->g, "%s did not compile", path)) {
    int64_t arena = on->g->plan->arena_bytes, naive = off->g->plan->naive_bytes;
    double pct = 100.0 * (double)arena / (double)naive;
    printf("resnet %-7s: arena %.2f MiB, naive %.2f MiB: %.1f%% (aim <= %.0f%%); same graph's naive %.2f MiB; "
           "%d in-place pairs, %d epilogues, %d fused groups\n", mode == IR_MODE_TRAIN ? "train" : "predict", t_mib(arena), t_mib(naive),
           pct, aim, t_mib(on->g->plan->naive_bytes), on->cx.stats[PASS_inplace].inplace_pairs,
           on->cx.stats[PASS_epilogue].fused_groups, on->cx.stats[PASS_fusion].fused_groups);
    CHECK(pct <= aim, "resnet %s: %.1f%% of naive misses the aim", mode == IR_MODE_TRAIN ? "train" : "predict", pct);
  }
  t_free(on);
  t_free(off);
}

static void test_figures(void) {
  char path[1100];
  snprintf(path, sizeof path, "%sexamples/resnet.kiln", ts_root());
  t_figure(path, IR_MODE_PREDICT, 10);
  t_figure(path, IR_MODE_TRAIN, 45);
}

int main(void) {
  test_inplace_basic();
  test_inplace_read_later();
  test_inplace_never();
  test_inplace_reshape();
  test_inplace_same_operand();
  test_validator();
  test_validator_workspace();
  test_concat_in_place();
  test_concat_dense();
  test_concat_single();
  test_concat_samples();
  test_examples();
  test_figures();
  return ts_summary("test_plan");
}
