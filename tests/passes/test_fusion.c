/* test_fusion.c — the fusion pass on small models: which nodes form a group, which tensors
 * the fused node takes and gives, that values used only inside a group get no buffer, the
 * explain line for every unfused neighbour, backward nodes in train mode, and the DOT writer. */
#define _GNU_SOURCE   /* open_memstream */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_test.h"

/* ---- the harness: a model from text through the pipeline, explain lines kept ---- */

typedef ts_run t_run;

static t_run *t_compile(const char *src, ir_mode mode, uint32_t disabled) { return ts_run_new("t.kiln", src, mode, disabled); }
#define t_free ts_run_free

static int t_count_kind(const ir_graph *g, ir_node_kind k) {
  int c = 0;
  for (int i = 0; i < ir_nnodes(g); i++) c += ir_node_at(g, i)->kind == k;
  return c;
}

static const ir_node *t_fused(const ir_graph *g, int which) {
  for (int i = 0; i < ir_nnodes(g); i++)
    if (ir_node_at(g, i)->kind == IR_N_FUSED && which-- == 0) return ir_node_at(g, i);
  return NULL;
}

/* The members' kinds joined by spaces, e.g. "mul add relu". */
static const char *t_members(const ir_node *n) {
  static char buf[512];
  buf[0] = 0;
  for (int k = 0; n && k < n->nsub; k++) {
    if (k) strcat(buf, " ");
    strncat(buf, ir_node_kind_name(&n->sub[k]), sizeof buf - strlen(buf) - 1);
  }
  return buf;
}

static bool t_has_tensor(const ir_graph *g, const int *ts, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (ts[i] >= 0 && strcmp(ir_tensor_at(g, ts[i])->name, name) == 0) return true;
  return false;
}

/* An explain line containing every given substring. */
static bool t_explained(const t_run *r, ...) {
  for (int i = 0; i < r->cx.explain.len; i++) {
    const char *line = IR_VEC_AT(r->cx.explain, char *, i);
    va_list ap;
    va_start(ap, r);
    bool all = true;
    for (const char *s; all && (s = va_arg(ap, const char *));) all = strstr(line, s) != NULL;
    va_end(ap);
    if (all) return true;
  }
  return false;
}

static void t_dump_explain(const t_run *r) {
  for (int i = 0; i < r->cx.explain.len; i++) fprintf(stderr, "    %s\n", IR_VEC_AT(r->cx.explain, char *, i));
}

#define MODEL(body) "model m {\n" body "\n}\n"
#define NO_INPLACE (1u << PASS_inplace)
#define NO_EPI (1u << PASS_epilogue)    /* the groups around a GEMM, as when the FC had no epilogue */

/* ---- forward groups ---- */

static void test_chain(void) {
  t_run *r = t_compile(MODEL("input x : f32[4, 8]\n y = relu(x * 2 + 1)\n output y"), IR_MODE_PREDICT, 0);
  if (!CHECK(r->g, "relu(x*2+1) did not compile")) return t_free(r);
  const ir_node *fn = t_fused(r->g, 0);
  CHECK(ir_nnodes(r->g) == 1 && fn, "relu(x*2+1): one fused node, got %d nodes", ir_nnodes(r->g));
  CHECK(fn && strcmp(t_members(fn), "mul add relu") == 0, "members: '%s'", t_members(fn));
  CHECK(fn && fn->nout == 1 && t_has_tensor(r->g, fn->out, fn->nout, "y"), "the only output is y");
  CHECK(fn && fn->nin == 3 && t_has_tensor(r->g, fn->in, fn->nin, "x"), "inputs: x and two constants (%d)", fn ? fn->nin : -1);
  CHECK(r->cx.stats[PASS_fusion].fused_groups == 1, "stats: %d groups", r->cx.stats[PASS_fusion].fused_groups);
  CHECK(t_explained(r, "group fused0", "3 nodes", "out: y", NULL), "a group line");
  /* the values between the members are in no top-level node, so they get no buffer */
  int internal = 0;
  for (int t = 0; t < ir_ntensors(r->g); t++)
    if (ir_tensor_at(r->g, t)->kind == IR_T_VALUE && r->g->plan->buf[t].cls == IR_MEM_NONE) internal++;
  CHECK(internal == 2, "two internal values without storage, got %d", internal);
  CHECK(pass_plan_validate(r->g, r->g->plan, stderr) == 0, "plan valid");
  t_free(r);
}

static void test_outside_reader(void) {
  t_run *r = t_compile(MODEL("input x : f32[4, 8]\n a = x * 2\n b = relu(a)\n c = fully_connected(a, num_hidden=3)\n"
                             " output b, c"), IR_MODE_PREDICT, 0);
  if (!CHECK(r->g, "outside reader model did not compile")) return t_free(r);
  const ir_node *fn = t_fused(r->g, 0);
  CHECK(fn && strcmp(t_members(fn), "mul relu") == 0, "members: '%s'", t_members(fn));
  CHECK(fn && fn->nout == 2 && t_has_tensor(r->g, fn->out, fn->nout, "a") && t_has_tensor(r->g, fn->out, fn->nout, "b"),
        "a (read by fully_connected) and b (an output) are both outputs of the group");
  CHECK(t_explained(r, "a (mul) -> c (fully_connected): fully_connected is not elementwise", NULL), "the FC neighbour is explained");
  t_free(r);
}

static void test_split_by_gemm(void) {
  t_run *r = t_compile(MODEL("input x : f32[4, 8]\n h = relu(x * 2)\n f = fully_connected(h, num_hidden=8)\n"
                             " y = sigmoid(f + 1)\n output y"), IR_MODE_PREDICT, NO_EPI);
  if (!CHECK(r->g, "split model did not compile")) return t_free(r);
  CHECK(t_count_kind(r->g, IR_N_FUSED) == 2, "two groups around the FC, got %d", t_count_kind(r->g, IR_N_FUSED));
  CHECK(strcmp(t_members(t_fused(r->g, 0)), "mul relu") == 0, "first group '%s'", t_members(t_fused(r->g, 0)));
  CHECK(strcmp(t_members(t_fused(r->g, 1)), "add sigmoid") == 0, "second group '%s'", t_members(t_fused(r->g, 1)));
  CHECK(t_explained(r, "h (relu) -> f (fully_connected): fully_connected is not elementwise", NULL) &&
        t_explained(r, "f (fully_connected) -> ", "(add): fully_connected is not elementwise", NULL),
        "both edges of the FC are explained");
  if (ts_failed) t_dump_explain(r);
  t_free(r);
}

static void test_shape_change(void) {
  t_run *r = t_compile(MODEL("input x : f32[4, 8]\n input z : f32[3, 4, 8]\n a = exp(x)\n b = a + z\n output b"),
                       IR_MODE_PREDICT, 0);
  if (!CHECK(r->g, "broadcast model did not compile")) return t_free(r);
  CHECK(t_count_kind(r->g, IR_N_FUSED) == 0, "a [4,8] and b [3,4,8] are not grouped");
  CHECK(t_explained(r, "a (exp) -> b (add): output f32[3, 4, 8] differs from the group's f32[4, 8]", NULL), "shape reason");
  t_free(r);
}

/* b needs the FC's output, which needs a: a cannot move to b's position. */
static void test_order(void) {
  t_run *r = t_compile(MODEL("input x : f32[4, 8]\n a = exp(x)\n f = fully_connected(a, num_hidden=8)\n b = a * f\n output b"),
                       IR_MODE_PREDICT, NO_EPI);
  if (!CHECK(r->g, "order model did not compile")) return t_free(r);
  CHECK(t_count_kind(r->g, IR_N_FUSED) == 0, "no group across the FC");
  CHECK(t_explained(r, "a (exp) -> b (mul): the group would run a after f, which reads a", NULL), "order reason");
  if (ts_failed) t_dump_explain(r);
  t_free(r);
}

/* Two groups meeting at one node become one group. */
static void test_join(void) {
  t_run *r = t_compile(MODEL("input x : f32[4, 8]\n input y : f32[4, 8]\n a = exp(x)\n b = tanh(y)\n c = a + b\n output c"),
                       IR_MODE_PREDICT, 0);
  if (!CHECK(r->g, "join model did not compile")) return t_free(r);
  CHECK(ir_nnodes(r->g) == 1 && strcmp(t_members(t_fused(r->g, 0)), "exp tanh add") == 0, "one group: '%s'",
        t_members(t_fused(r->g, 0)));
  t_free(r);
}

/* In-place onto a group input survives fusion; onto an internal value it follows the chain. */
static void test_inplace_through_group(void) {
  t_run *r = t_compile(MODEL("input x : f32[4, 8]\n f = fully_connected(x, num_hidden=8)\n y = sigmoid(relu(f) * 3)\n output y"),
                       IR_MODE_PREDICT, NO_EPI);
  if (!CHECK(r->g, "in-place model did not compile")) return t_free(r);
  const ir_node *fn = t_fused(r->g, 0);
  bool ok = fn && fn->nout == 1 && fn->inplace && fn->inplace[0] >= 0 && fn->req[0] == kWriteInplace;
  CHECK(ok && strcmp(ir_tensor_at(r->g, fn->in[fn->inplace[0]])->name, "f") == 0, "y reuses f through the chain");
  int y = ir_graph_find_tensor(r->g, "y"), f = ir_graph_find_tensor(r->g, "f");
  CHECK(r->g->plan->buf[y].share == f && r->g->plan->buf[y].offset == r->g->plan->buf[f].offset, "y shares f's buffer");
  t_free(r);
  r = t_compile(MODEL("input x : f32[4, 8]\n f = fully_connected(x, num_hidden=8)\n y = sigmoid(relu(f) * 3)\n output y"),
                IR_MODE_PREDICT, NO_INPLACE | NO_EPI);
  fn = r->g ? t_fused(r->g, 0) : NULL;
  CHECK(fn && (!fn->inplace || fn->inplace[0] < 0), "without the in-place pass nothing is shared");
  t_free(r);
}

/* ---- train: backward nodes of elementwise ops fuse; broadcast backward does not ---- */

static void test_backward(void) {
  const char *src = MODEL("input x : f32[4, 8]\n input l : i32[4]\n param s : f32[8] = ones()\n"
                          " h = tanh(fully_connected(x, num_hidden=8)) * 2\n g = h * s\n"
                          " loss = softmax_cross_entropy(fully_connected(g, num_hidden=3), l)\n"
                          " train loss with sgd(lr=0.1)");
  t_run *r = t_compile(src, IR_MODE_TRAIN, 0);
  if (!CHECK(r->g, "backward model did not compile")) return t_free(r);
  bool bwd_group = false;
  for (int k = 0; t_fused(r->g, k); k++) bwd_group |= strstr(t_members(t_fused(r->g, k)), "_backward_mul _backward_tanh") != NULL;
  CHECK(bwd_group, "_backward_mul and _backward_tanh form one group");
  CHECK(t_explained(r, "_backward_mul broadcasts", NULL), "the broadcast backward (s is [8]) is explained");
  CHECK(pass_plan_validate(r->g, r->g->plan, stderr) == 0, "train plan valid");
  if (ts_failed) t_dump_explain(r);
  t_free(r);
}

/* ---- DOT ---- */

/* The DOT text of r's graph, collapsed or full; the caller frees it. */
static char *dot_text(const t_run *r, bool full, size_t *len) {
  char *s = NULL;
  FILE *o = open_memstream(&s, len);
  pass_write_dot(r->g, full, NULL, o);
  fclose(o);
  return s;
}

static bool dot_balanced(const char *s, size_t len) {
  int depth = 0, min = 0;
  for (size_t i = 0; i < len; i++) {
    depth += s[i] == '{' ? 1 : s[i] == '}' ? -1 : 0;
    if (depth < min) min = depth;
  }
  return depth == 0 && min == 0 && strncmp(s, "digraph", 7) == 0;
}

static void test_dot(void) {
  t_run *r = t_compile(MODEL("input x : f32[4, 8]\n input l : i32[4]\n h = relu(fully_connected(x, num_hidden=8) * 2 + 1)\n"
                             " loss = softmax_cross_entropy(fully_connected(h, num_hidden=3), l)\n"
                             " train loss with sgd(lr=0.1)"), IR_MODE_TRAIN, 0);
  if (!CHECK(r->g, "dot model did not compile")) return t_free(r);
  size_t len = 0, flen = 0;
  char *s = dot_text(r, false, &len), *f = dot_text(r, true, &flen);
  CHECK(dot_balanced(s, len) && dot_balanced(f, flen), "balanced braces");
  CHECK(!strstr(s, "subgraph") && !strstr(f, "subgraph"), "no clusters (graphviz lays them out slowly or not at all)");
  int members = 0;
  for (int i = 0; i < ir_nnodes(r->g); i++) {
    const ir_node *n = ir_node_at(r->g, i);
    char id[48];
    snprintf(id, sizeof id, "  n%d [", i);
    CHECK(strstr(s, id) != NULL, "collapsed view: a DOT node for node %d (%s)", i, n->name);
    CHECK((strstr(f, id) != NULL) == (n->kind != IR_N_FUSED), "full view: node %d (%s) drawn as itself unless fused", i, n->name);
    members += n->nsub;
    for (int k = 0; k < n->nsub; k++) {
      snprintf(id, sizeof id, "n%d_%d [", i, k);
      CHECK(strstr(f, id) != NULL && !strstr(s, id), "member %d of %s: its own node in the full view only", k, n->name);
    }
    if (n->kind == IR_N_FUSED) {
      snprintf(id, sizeof id, "(%d ops)", n->nsub);
      CHECK(strstr(s, id) != NULL, "the collapsed group %s says how many ops it holds", n->name);
    }
  }
  CHECK(members > 0 && strstr(s, "fillcolor=\"#f4cccc\"") && strstr(s, "shape=hexagon") && strstr(s, "shape=box3d"),
        "fused members, backward colour, update hexagons and parameter boxes present");
  free(s);
  free(f);
  t_free(r);
}

int main(void) {
  test_chain();
  test_outside_reader();
  test_split_by_gemm();
  test_shape_change();
  test_order();
  test_join();
  test_inplace_through_group();
  test_backward();
  test_dot();
  return ts_summary("test_fusion");
}
