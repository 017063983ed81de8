/* test_backward.c — backward derivation, backward-dependency pruning and optimizer updates,
 * checked structurally on models from strings and on every example: which backward nodes
 * exist, their exact input slots before and after pruning, kWriteTo/kAddTo accumulation,
 * the bytes pruning releases, update nodes and their state, and ir_verify after each pass.
 * The passes run one by one, not through pass_compile. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_test.h"

#define t_check(ok, line, ...) ts_check((ok), __FILE__, (line), __VA_ARGS__)

#define MODEL(body) "model m {\n" body "\n}\n"

/* ---- the harness: parse, lower, then the passes in table order up to the optimizer ---- */

enum { T_PRUNE = 1, T_OPTIM = 2, T_ALL = 3 };

typedef struct {
  ts_front fr;
  ir_graph *lowered, *g;
  pass_ctx cx;
  int nfwd;          /* forward nodes after select */
} t_model;

static bool t_step(t_model *m, int (*pass)(ir_graph *, pass_ctx *), const char *name, int line) {
  int rc = pass(m->g, &m->cx);
  bool ok = t_check(rc == 0 && m->fr.diag.errors == 0, line, "pass %s failed on %s", name, m->g->name);
  return ok && t_check(ir_verify(m->g) == 0, line, "ir_verify fails after pass %s on %s", name, m->g->name);
}

static int t_infer(ir_graph *g, pass_ctx *cx) { return ir_infer_shapes(g, cx->diag); }

/* Runs infer, select, backward, then prune and optimizer as `steps` asks. */
static bool t_run(t_model *m, int steps, int line) {
  m->g = ir_graph_clone(m->lowered);
  m->g->mode = IR_MODE_TRAIN;
  pass_ctx_init(&m->cx, IR_MODE_TRAIN, &m->fr.diag);
  bool ok = t_step(m, t_infer, "infer", line) && t_step(m, pass_select, "select", line);
  m->nfwd = ir_nnodes(m->g);
  ok = ok && t_step(m, pass_backward, "backward", line);
  if (ok && (steps & T_PRUNE)) ok = t_step(m, pass_prune, "prune", line);
  if (ok && (steps & T_OPTIM)) ok = t_step(m, pass_optimizer, "optimizer", line);
  return ok;
}

static void t_free(t_model *m) {
  if (!m) return;
  ir_graph_free(m->g);
  ir_graph_free(m->lowered);
  ts_front_free(&m->fr);
  free(m);
}

static t_model *t_lower(const char *name, const char *src, int line) {
  t_model *m = calloc(1, sizeof *m);
  m->lowered = ts_lower_text(&m->fr, name, src, NULL, 0);
  if (!t_check(m->lowered != NULL, line, "%s did not lower", name)) return t_free(m), NULL;
  return m;
}

/* A model through the passes `steps` names; NULL (a failure counted) if anything broke. */
static t_model *t_model_line(const char *src, int steps, int line) {
  t_model *m = t_lower("t.kiln", src, line);
  if (m && !t_run(m, steps, line)) return t_free(m), NULL;
  return m;
}
#define t_model(src, steps) t_model_line((src), (steps), __LINE__)

static t_model *t_file_line(const char *path, int steps, int line) {
  t_model *m = t_lower(path, NULL, line);
  if (m && !t_run(m, steps, line)) return t_free(m), NULL;
  return m;
}
#define t_file(path, steps) t_file_line((path), (steps), __LINE__)

/* ---- looking things up ---- */

static int t_tensor(const t_model *m, const char *name) { return ir_graph_find_tensor(m->g, name); }

static const ir_node *t_node(const t_model *m, const char *name) {
  for (int i = 0; i < ir_nnodes(m->g); i++)
    if (strcmp(ir_node_at(m->g, i)->name, name) == 0) return ir_node_at(m->g, i);
  return NULL;
}

static int t_count_kind(const t_model *m, ir_node_kind k) {
  int c = 0;
  for (int i = 0; i < ir_nnodes(m->g); i++) c += ir_node_at(m->g, i)->kind == k;
  return c;
}

static int t_count_named(const t_model *m, const char *name) {
  int c = 0;
  for (int i = 0; i < ir_ntensors(m->g); i++) c += strcmp(ir_tensor_at(m->g, i)->name, name) == 0;
  return c;
}

/* The tensor names of a node's inputs or outputs, '-' for -1, joined by spaces. */
static const char *t_slots(const t_model *m, const int *idx, int n, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < n && len < cap; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? " " : "", idx[i] < 0 ? "-" : ir_tensor_at(m->g, idx[i])->name);
  return buf;
}

/* Checks a node's exact inputs, outputs and req (a string of W, A, N per output, or NULL). */
static void t_expect_line(const t_model *m, const char *node, const char *in, const char *out, const char *req, int line) {
  const ir_node *n = t_node(m, node);
  if (!t_check(n != NULL, line, "no node %s", node)) return;
  char buf[1024];
  t_check(strcmp(t_slots(m, n->in, n->nin, buf, sizeof buf), in) == 0, line, "%s in: got [%s], want [%s]", node, buf, in);
  if (out) t_check(strcmp(t_slots(m, n->out, n->nout, buf, sizeof buf), out) == 0, line, "%s out: got [%s], want [%s]", node, buf, out);
  for (int i = 0; req && i < n->nout; i++) {
    char want = req[i], got = "NWIA"[ir_node_req(n, i)];
    t_check(got == want, line, "%s req[%d]: got %c, want %c", node, i, got, want);
  }
}
#define t_expect(m, node, in, out, req) t_expect_line((m), (node), (in), (out), (req), __LINE__)


static void t_dump(const t_model *m) {
  if (getenv("T_PRINT")) ir_print(m->g, stderr);
}

/* ---- invariants every model must keep ---- */

/* Each gradient has one kWriteTo writer, which runs before every kAddTo writer. */
static void t_check_accumulation(const t_model *m) {
  for (int i = 0; i < ir_nnodes(m->g); i++) {
    const ir_node *n = ir_node_at(m->g, i);
    for (int j = 0; n->kind == IR_N_BACKWARD && j < n->nout; j++) {
      if (n->out[j] < 0) {
        CHECK(ir_node_req(n, j) == kNullOp, "%s: an absent gradient must be kNullOp", n->name);
        continue;
      }
      const ir_tensor *t = ir_tensor_at(m->g, n->out[j]);
      bool first = t->producer == i;
      for (int k = 0; k < j; k++) first &= n->out[k] != n->out[j];
      CHECK(ir_node_req(n, j) == (first ? kWriteTo : kAddTo), "%s writes %s with req %d", n->name, t->name, ir_node_req(n, j));
      CHECK(strstr(t->name, "@grad") && t->kind == IR_T_VALUE && t->shape_known, "%s: gradient %s", n->name, t->name);
    }
  }
}

/* Aux states are read by no backward or update node and have no gradient or state. A const
 * (an aux state nothing writes) may be read by a backward node, as an input is: a fixed
 * weight is needed for the data's gradient; an update never reads one. */
static void t_check_aux(const t_model *m) {
  for (int i = 0; i < ir_nnodes(m->g); i++) {
    const ir_node *n = ir_node_at(m->g, i);
    for (int j = 0; n->kind != IR_N_OP && j < n->nin; j++) {
      const ir_tensor *t = n->in[j] >= 0 ? ir_tensor_at(m->g, n->in[j]) : NULL;
      if (t) CHECK(t->kind != IR_T_AUX || (t->fixed && n->kind == IR_N_BACKWARD), "%s reads aux %s", n->name, t->name);
    }
  }
}

/* Forward nodes, then backward nodes, then one update per parameter with a gradient. */
static void t_check_order(const t_model *m) {
  int phase = 0;
  for (int i = 0; i < ir_nnodes(m->g); i++) {
    int k = (int)ir_node_at(m->g, i)->kind;
    CHECK(k >= phase, "node %s (kind %d) after kind %d", ir_node_at(m->g, i)->name, k, phase);
    phase = k;
  }
  for (int i = 0; i < ir_nnodes(m->g); i++) {
    const ir_node *n = ir_node_at(m->g, i);
    if (n->kind != IR_N_UPDATE) continue;
    const ir_tensor *p = ir_tensor_at(m->g, n->in[0]), *gr = ir_tensor_at(m->g, n->in[1]);
    char want[512];
    snprintf(want, sizeof want, "%s@grad", p->name);
    CHECK(p->kind == IR_T_PARAM && strcmp(gr->name, want) == 0 && n->nout == 0, "%s: in %s, %s", n->name, p->name, gr->name);
  }
}

/* in_data and out_data are exactly the forward node's args (not aux) and outputs. */
static void t_check_forward_slots(const t_model *m, const ir_node *n) {
  const ir_node *f = t_node(m, n->name + strlen("_backward_"));
  if (!CHECK(f && f->kind == IR_N_OP && f->op == n->op, "%s: no forward node", n->name)) return;
  int nout = f->nout, nargs = f->nin - ir_op_naux(&ir_ops[f->op]);
  if (!CHECK(n->nin == 2 * nout + nargs && n->nout == nargs, "%s: %d inputs, %d outputs", n->name, n->nin, n->nout)) return;
  for (int a = 0; a < nargs; a++) CHECK(n->in[nout + a] == f->in[a], "%s: in_data[%d]", n->name, a);
  for (int j = 0; j < nout; j++) CHECK(n->in[nout + nargs + j] == f->out[j], "%s: out_data[%d]", n->name, j);
}

/* Before pruning every backward slot is filled, bar the out_grads of hidden outputs. */
static void t_check_all_slots(const t_model *m) {
  for (int i = 0; i < ir_nnodes(m->g); i++) {
    const ir_node *n = ir_node_at(m->g, i);
    if (n->kind != IR_N_BACKWARD) continue;
    int nout = ir_op_nouts(&ir_ops[n->op]);
    for (int j = 0; j < n->nin; j++) {
      bool hidden_og = j < nout && j >= ir_ops[n->op].nvisible;
      CHECK(hidden_og ? n->in[j] < 0 : n->in[j] >= 0, "%s: slot %d unfilled without pruning", n->name, j);
    }
    t_check_forward_slots(m, n);
  }
}

static void t_check_invariants(const t_model *m) {
  t_check_accumulation(m);
  t_check_aux(m);
  t_check_order(m);
}

static int t_count_prefix(const t_model *m, const char *prefix) {
  int c = 0;
  for (int i = 0; i < ir_ntensors(m->g); i++) c += strncmp(ir_tensor_at(m->g, i)->name, prefix, strlen(prefix)) == 0;
  return c;
}

/* ---- the MLP of examples/mlp.kiln ---- */

#define T_MLP(optim) \
  "dim batch = 64\n" \
  MODEL("input image : f32[batch, 784]\n input label : i32[batch]\n" \
        "hidden = relu(fully_connected(image, num_hidden=128))\n" \
        "logits = fully_connected(hidden, num_hidden=10)\n prob = softmax(logits)\n" \
        "loss = softmax_cross_entropy(logits, label)\n output prob\n train loss with " optim)

static void test_mlp_pruned(void) {
  t_model *m = t_model(T_MLP("sgd(lr=0.1, momentum=0.9)"), T_PRUNE);
  if (!m) return;
  t_dump(m);
  CHECK(m->nfwd == 4 && ir_nnodes(m->g) == 8, "mlp: %d forward, %d in all", m->nfwd, ir_nnodes(m->g));
  const char *order[] = {"_backward_loss", "_backward_logits", "_backward_hidden", "_backward_hidden.fully_connected"};
  for (int i = 0; i < 4 && m->nfwd + i < ir_nnodes(m->g); i++)
    CHECK(strcmp(ir_node_at(m->g, m->nfwd + i)->name, order[i]) == 0, "backward node %d is %s", i, ir_node_at(m->g, m->nfwd + i)->name);
  t_expect(m, "_backward_loss", "loss@grad logits label -", "logits@grad -", "WN");
  t_expect(m, "_backward_logits", "logits@grad hidden logits.weight - -", "hidden@grad logits.weight@grad logits.bias@grad", "WWW");
  t_expect(m, "_backward_hidden", "hidden@grad - hidden", "hidden.fully_connected@grad", "W");
  t_expect(m, "_backward_hidden.fully_connected", "hidden.fully_connected@grad image hidden.weight - -",
           "- hidden.weight@grad hidden.bias@grad", "NWW");
  CHECK(t_node(m, "_backward_prob") == NULL, "prob is not on the loss's path");
  CHECK(t_tensor(m, "image@grad") < 0 && t_tensor(m, "label@grad") < 0, "inputs get no gradient");
  t_check_invariants(m);
  t_free(m);
}

static void test_mlp_head_and_grads(void) {
  t_model *m = t_model(T_MLP("sgd(lr=0.1)"), 0);
  if (!m) return;
  int h = t_tensor(m, "loss@grad");
  const ir_tensor *ht = h >= 0 ? ir_tensor_at(m->g, h) : NULL;
  CHECK(ht && ht->kind == IR_T_CONST && ht->value == 1.0f && ht->shape.rank == 0 && ht->shape_known, "head gradient: a constant 1, shape []");
  int w = t_tensor(m, "hidden.weight@grad");
  const ir_tensor *wt = w >= 0 ? ir_tensor_at(m->g, w) : NULL;
  CHECK(wt && wt->kind == IR_T_VALUE && wt->dtype == K_F32 && wt->shape_known &&
        ir_shape_eq(&wt->shape, &ir_tensor_at(m->g, t_tensor(m, "hidden.weight"))->shape), "hidden.weight@grad: f32 like the weight");
  const ir_node *b = t_node(m, "_backward_logits");
  CHECK(b && b->kind == IR_N_BACKWARD && b->op == IR_OP_fully_connected && b->param == t_node(m, "logits")->param,
        "_backward_logits: the forward op and its param struct");
  t_free(m);
}

/* Switched off (backward without prune), every slot holds its tensor. */
static void test_mlp_unpruned(void) {
  t_model *m = t_model(T_MLP("sgd(lr=0.1, momentum=0.9)"), T_OPTIM);
  if (!m) return;
  t_expect(m, "_backward_loss", "loss@grad logits label loss", "logits@grad -", "WN");
  t_expect(m, "_backward_logits", "logits@grad hidden logits.weight logits.bias logits", NULL, "WWW");
  t_expect(m, "_backward_hidden", "hidden@grad hidden.fully_connected hidden", NULL, "W");
  t_expect(m, "_backward_hidden.fully_connected",
           "hidden.fully_connected@grad image hidden.weight hidden.bias hidden.fully_connected", NULL, "NWW");
  t_check_all_slots(m);
  t_check_invariants(m);
  t_free(m);
}

/* ---- pruning's figure ---- */

/* Whether slot j of backward node n is one its op declares (computed from the deps masks
 * on the unpruned graph, apart from how pass_prune.c does it). */
static bool t_declared(const ir_node *n, int j) {
  const ir_opdef *op = &ir_ops[n->op];
  int nout = ir_op_nouts(op), nargs = n->nin - 2 * nout;
  if (j < nout) return op->deps.out_grad >> j & 1;
  if (j < nout + nargs) return op->deps.in_data >> (op->variadic ? 0 : j - nout) & 1;
  return op->deps.out_data >> (j - nout - nargs) & 1;
}

/* Bytes of the forward values that backward nodes read only through undeclared slots. */
static int64_t t_expected_freed(const t_model *m) {
  int nt = ir_ntensors(m->g);
  char *st = calloc((size_t)nt, 1);    /* 1: read undeclared only, 2: read declared */
  for (int i = m->nfwd; i < ir_nnodes(m->g); i++) {
    const ir_node *n = ir_node_at(m->g, i);
    for (int j = 0; n->kind == IR_N_BACKWARD && j < n->nin; j++) {
      int t = n->in[j];
      if (t < 0 || ir_tensor_at(m->g, t)->kind != IR_T_VALUE || ir_tensor_at(m->g, t)->producer >= m->nfwd) continue;
      st[t] = t_declared(n, j) ? 2 : st[t] ? st[t] : 1;
    }
  }
  int64_t bytes = 0;
  for (int t = 0; t < nt; t++) bytes += st[t] == 1 ? ir_tensor_numel(ir_tensor_at(m->g, t)) * 4 : 0;
  free(st);
  return bytes;
}

/* The figure pruning reports on `on`, against one computed from the same model unpruned
 * (`off`) and, when want >= 0, against a figure worked out by hand. */
static void t_check_freed_line(t_model *off, t_model *on, int64_t want, int line) {
  if (!off || !on) return t_free(off), t_free(on);
  int64_t got = on->cx.stats[PASS_prune].bytes_freed, calc = t_expected_freed(off);
  t_check(got > 0 && got == calc, line, "%s: bytes_freed %lld, computed %lld", on->g->name, (long long)got, (long long)calc);
  if (want >= 0) t_check(got == want, line, "%s: bytes_freed %lld, by hand %lld", on->g->name, (long long)got, (long long)want);
  t_free(off);
  t_free(on);
}

/* MLP: the first layer's output (read by relu's backward as in_data and by the layer's own
 * backward as out_data, neither declared) and the loss (out_data of the loss's backward). */
static void test_prune_bytes(void) {
  const char *src = T_MLP("sgd(lr=0.1, momentum=0.9)");
  t_check_freed_line(t_model(src, 0), t_model(src, T_PRUNE), 64 * 128 * 4 + 4, __LINE__);
}

/* ---- accumulation, branches without parameters, aux states ---- */

#define T_SHARED MODEL("input x : f32[4, 8]\n input label : i32[4]\n param w : f32[8, 8]\n" \
                       "a = fully_connected(x, w, num_hidden=8, no_bias=true)\n" \
                       "b = fully_connected(a, w, num_hidden=8, no_bias=true)\n" \
                       "loss = softmax_cross_entropy(b, label)\n train loss with sgd(lr=0.1)")

/* One `param w` read by two layers: one gradient tensor, written then accumulated. */
static void test_shared_param(void) {
  t_model *m = t_model(T_SHARED, T_ALL);
  if (!m) return;
  t_expect(m, "_backward_b", "b@grad a w -", "a@grad w@grad", "WW");   /* no_bias: no bias slot */
  t_expect(m, "_backward_a", "a@grad x w -", "- w@grad", "NA");
  CHECK(t_count_named(m, "w@grad") == 1 && t_count_kind(m, IR_N_UPDATE) == 1, "one gradient and one update for w");
  t_expect(m, "_update_w", "w w@grad", "", NULL);
  CHECK(t_count_prefix(m, "w@momentum") == 0, "sgd without momentum keeps no state");
  t_check_invariants(m);
  t_free(m);
  m = t_model(T_SHARED, 0);
  if (m) t_expect(m, "_backward_a", "a@grad x w a", "- w@grad", "NA");
  t_free(m);
}

/* A value with two consumers, one of which reads it twice (h * h): kWriteTo once, then kAddTo. */
static void test_fanout(void) {
  t_model *m = t_model(MODEL("input x : f32[4, 8]\n input label : i32[4]\n"
                             "h = fully_connected(x, num_hidden=8)\n s = h * h\n r = relu(h)\n y = s + r\n"
                             "loss = softmax_cross_entropy(y, label)\n train loss with adam()"), T_ALL);
  if (!m) return;
  t_expect(m, "_backward_y", "y@grad - - -", "s@grad r@grad", "WW");
  t_expect(m, "_backward_r", "r@grad - r", "h@grad", "W");
  t_expect(m, "_backward_s", "s@grad h h -", "h@grad h@grad", "AA");
  t_expect(m, "_backward_h", "h@grad x h.weight - -", "- h.weight@grad h.bias@grad", "NWW");
  t_expect(m, "_update_h.weight", "h.weight h.weight@grad h.weight@adam_m h.weight@adam_v", "", NULL);
  t_expect(m, "_update_h.bias", "h.bias h.bias@grad h.bias@adam_m h.bias@adam_v", "", NULL);
  const ir_node *u = t_node(m, "_update_h.bias");
  int st = t_tensor(m, "h.bias@adam_v");
  CHECK(u && u->op == K_OPT_ADAM && st >= 0 && ir_tensor_at(m->g, st)->kind == IR_T_STATE &&
        ir_tensor_at(m->g, st)->shape.rank == 1 && ir_tensor_at(m->g, st)->shape.d[0] == 8, "adam: state shaped like the parameter");
  t_check_invariants(m);
  t_free(m);
}

/* sigmoid(x) and the constant 0.5 reach no parameter: no backward for them, no gradient. */
static void test_branch_without_param(void) {
  t_model *m = t_model(MODEL("input x : f32[4, 8]\n input label : i32[4]\n s = sigmoid(x)\n"
                             "h = fully_connected(x, num_hidden=8)\n t = s * 0.5\n y = h + t\n"
                             "loss = softmax_cross_entropy(y, label)\n train loss with sgd(lr=0.1)"), T_ALL);
  if (!m) return;
  CHECK(m->nfwd == 5 && t_count_kind(m, IR_N_BACKWARD) == 3, "3 backward nodes (loss, y, h), got %d", t_count_kind(m, IR_N_BACKWARD));
  CHECK(!t_node(m, "_backward_s") && !t_node(m, "_backward_t"), "no backward for the branch without parameters");
  t_expect(m, "_backward_y", "y@grad - - -", "h@grad -", "WN");
  CHECK(t_tensor(m, "s@grad") < 0 && t_tensor(m, "t@grad") < 0 && t_tensor(m, "x@grad") < 0, "no gradient for s, t or x");
  t_check_invariants(m);
  t_free(m);
}

#define T_BN MODEL("input x : f32[4, 3, 8, 8]\n input label : i32[4]\n" \
                   "c = convolution(x, kernel=(3, 3), num_filter=4)\n n = batch_norm(c)\n r = relu(n)\n" \
                   "f = fully_connected(r, num_hidden=10)\n loss = softmax_cross_entropy(f, label)\n" \
                   "train loss with sgd(lr=0.1, momentum=0.9)")

/* batch_norm: args only in in_data, hidden outputs get no out_grad, aux no gradient or update. */
static void test_batch_norm(void) {
  t_model *m = t_model(T_BN, T_ALL), *off = t_model(T_BN, 0);
  if (m) {
    t_expect(m, "_backward_n", "n@grad - - c n.gamma - - n.saved_mean n.saved_invstd", "c@grad n.gamma@grad n.beta@grad", "WWW");
    t_expect(m, "_backward_c", "c@grad x c.weight - -", "- c.weight@grad c.bias@grad", "NWW");
    CHECK(t_count_prefix(m, "n.moving_") == 2, "aux states: no gradient and no optimizer state");
    CHECK(t_count_kind(m, IR_N_UPDATE) == 6 && t_count_prefix(m, "n.gamma@momentum") == 1, "6 updates with momentum");
    t_check_invariants(m);
  }
  if (off) {
    t_expect(off, "_backward_n", "n@grad - - c n.gamma n.beta n n.saved_mean n.saved_invstd", NULL, "WWW");
    t_check_all_slots(off);
  }
  t_free(m);
  t_free(off);
}

/* Consts: no gradient, no update, no optimizer state, in the derived graph or the planned
 * one; fully_connected with a const weight computes its data's and its bias's gradients
 * only, and an embedding over a const table no gradient reaches has no backward at all. */
#define T_CONSTS MODEL("input x : f32[4, 6]\n input i : i32[4, 2]\n input label : i32[4]\n" \
                       "const scale : f32[8] = ones()\n const w : f32[10, 8]\n const table : f32[5, 10]\n" \
                       "h = fully_connected(x, num_hidden=8)\n o = fully_connected(h * scale, w, num_hidden=10)\n" \
                       "e = sum(embedding(i, table, input_dim=5, output_dim=10), axis=1)\n" \
                       "loss = softmax_cross_entropy(o + e, label)\n train loss with sgd(lr=0.1, momentum=0.9)")

static int t_count_const_derived(const ir_graph *g) {
  const char *consts[] = {"scale@", "w@", "table@"};
  int c = 0;
  for (int i = 0; i < ir_ntensors(g); i++)
    for (int k = 0; k < 3; k++) c += strncmp(ir_tensor_at(g, i)->name, consts[k], strlen(consts[k])) == 0;
  return c;
}

static void test_consts(void) {
  t_model *m = t_model(T_CONSTS, T_ALL);
  if (!m) return;
  t_dump(m);
  t_expect(m, "_backward_o", "o@grad o.mul w - -", "o.mul@grad - o.bias@grad", "WNW");
  t_expect(m, "_backward_o.mul", "o.mul@grad h scale -", "h@grad -", "WN");
  CHECK(!t_node(m, "_backward_e") && !t_node(m, "_backward_e.embedding"), "no backward for the embedding over a const table");
  CHECK(t_count_const_derived(m->g) == 0, "consts: no gradient and no optimizer state");
  CHECK(t_count_kind(m, IR_N_UPDATE) == 3 && t_count_prefix(m, "o.bias@momentum") == 1, "3 updates: h.weight, h.bias, o.bias");
  t_check_invariants(m);
  ir_graph *planned = ts_compile(m->lowered, IR_MODE_TRAIN, 0);
  if (CHECK(planned && planned->plan, "the train graph compiles")) {
    CHECK(t_count_const_derived(planned) == 0, "the planned graph holds no gradient or state of a const");
    int w = ir_graph_find_tensor(planned, "w");
    CHECK(w >= 0 && planned->plan->buf[w].cls == IR_MEM_PERSIST, "a const is model state (PERSIST)");
  }
  ts_graph_free(planned);
  t_free(m);
}

/* sgd with momentum: one state per parameter, named <param>@momentum, persistent. */
static void test_sgd_momentum(void) {
  t_model *m = t_model(T_MLP("sgd(lr=0.1, momentum=0.9)"), T_ALL);
  if (!m) return;
  CHECK(t_count_kind(m, IR_N_UPDATE) == 4, "4 updates");
  t_expect(m, "_update_hidden.weight", "hidden.weight hidden.weight@grad hidden.weight@momentum", "", NULL);
  t_expect(m, "_update_logits.bias", "logits.bias logits.bias@grad logits.bias@momentum", "", NULL);
  const ir_node *u = t_node(m, "_update_logits.bias");
  int st = t_tensor(m, "logits.bias@momentum");
  CHECK(u && u->op == K_OPT_SGD && st >= 0 && ir_tensor_at(m->g, st)->kind == IR_T_STATE && ir_tensor_at(m->g, st)->dtype == K_F32,
        "sgd: momentum state");
  t_free(m);
}

/* ---- the LeNet and every example ---- */

static void test_lenet(void) {
  char path[1100];
  snprintf(path, sizeof path, "%sexamples/lenet.kiln", ts_root());
  t_model *m = t_file(path, T_ALL);
  if (!m) return;
  CHECK(m->nfwd == 11 && t_count_kind(m, IR_N_BACKWARD) == 11 && t_count_kind(m, IR_N_UPDATE) == 8, "lenet: %d forward, %d backward, %d updates",
        m->nfwd, t_count_kind(m, IR_N_BACKWARD), t_count_kind(m, IR_N_UPDATE));
  t_expect(m, "_backward_b1.c", "b1.c@grad data b1.c.weight - -", "- b1.c.weight@grad b1.c.bias@grad", "NWW");
  t_expect(m, "_backward_b2.c", "b2.c@grad b1 b2.c.weight - -", "b1@grad b2.c.weight@grad b2.c.bias@grad", "WWW");
  t_expect(m, "_backward_b1.a", "b1.a@grad - b1.a", "b1.c@grad", "W");
  t_expect(m, "_backward_b1", "b1@grad b1.a b1", "b1.a@grad", "W");
  t_check_invariants(m);
  t_free(m);
  t_check_freed_line(t_file(path, 0), t_file(path, T_PRUNE), -1, __LINE__);
}

/* Every example through every step, ir_verify after each; pruned or not. */
static void t_example(const char *path, void *ctx) {
  t_model *on = t_file(path, T_ALL), *off = t_file(path, T_OPTIM);
  if (on) t_check_invariants(on);
  if (off) t_check_all_slots(off), t_check_invariants(off);
  t_free(on);
  t_free(off);
}

static void test_examples(void) {
  int seen = ts_each_model("examples", t_example, NULL);
  if (!CHECK(seen >= 0, "cannot open %sexamples", ts_root())) return;
  CHECK(seen >= 4, "found %d examples", seen);
}

/* The transformer: embedding's i32 indices get no gradient; a constant scale neither. */
static void test_transformer(void) {
  char path[1100];
  snprintf(path, sizeof path, "%sexamples/transformer.kiln", ts_root());
  t_model *m = t_file(path, T_ALL);
  if (!m) return;
  t_dump(m);
  t_expect(m, "_backward_emb", "emb@grad tokens - -", "- emb.weight@grad", "NW");   /* reads the indices, not the table */
  CHECK(t_tensor(m, "tokens@grad") < 0 && t_tensor(m, "pos@grad") >= 0, "tokens: no gradient; pos: one");
  CHECK(t_count_prefix(m, "emb.weight@adam_") == 2, "adam state for the embedding");
  t_free(m);
}

int main(void) {
  test_mlp_pruned();
  test_mlp_head_and_grads();
  test_mlp_unpruned();
  test_prune_bytes();
  test_shared_param();
  test_fanout();
  test_branch_without_param();
  test_batch_norm();
  test_consts();
  test_sgd_momentum();
  test_lenet();
  test_transformer();
  test_examples();
  return ts_summary("passes.test_backward");
}
