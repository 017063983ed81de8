/* test_infer.c — shape inference for every op of the registry, through the front end: a model
 * from a string is parsed and lowered, then output shapes and dtypes, parameter shapes and
 * default initializers, normalised param structs and FLOPs are checked, and invalid models
 * must report an error naming the op and the shapes. Expected shapes follow PyTorch. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_test.h"

static bool covered[IR_OP_COUNT];     /* ops seen in a model that lowered cleanly */

#define t_check(ok, line, ...) ts_check((ok), __FILE__, (line), __VA_ARGS__)

#define MODEL(body) "model m {\n" body "\n}\n"

/* ---- the harness: parse + lower with diagnostics captured in a memory stream ---- */

typedef struct {
  ts_front fr;
  ir_graph *g;
  const char *msg;             /* the diagnostics */
} t_model;

static t_model *t_lower_defs(const char *src, const fe_define *defs, int ndefs) {
  t_model *m = calloc(1, sizeof *m);
  m->fr.capture = true;
  m->g = ts_lower_text(&m->fr, "t.kiln", src, defs, ndefs);
  m->msg = ts_diags(&m->fr);
  for (int i = 0; m->g && i < ir_nnodes(m->g); i++) covered[ir_node_at(m->g, i)->op] = true;
  return m;
}

static void t_free(t_model *m) {
  ir_graph_free(m->g);
  ts_front_free(&m->fr);
  free(m);
}

/* A model that must lower cleanly; on failure the diagnostics are shown. */
static t_model *t_ok_line(const char *src, int line) {
  t_model *m = t_lower_defs(src, NULL, 0);
  if (!t_check(m->g && m->fr.diag.errors == 0, line, "model did not lower:\n%s\n%s", src, m->msg ? m->msg : ""))
    return t_free(m), NULL;
  return m;
}
#define t_ok(src) t_ok_line((src), __LINE__)

/* A model that must fail with an error containing every given substring. */
static void t_err_line(int line, const char *src, ...) {
  t_model *m = t_lower_defs(src, NULL, 0);
  va_list ap;
  va_start(ap, src);
  bool ok = t_check(m->g == NULL && m->fr.diag.errors > 0, line, "expected an error for:\n%s", src);
  for (const char *s; ok && (s = va_arg(ap, const char *));)
    ok = t_check(m->msg && strstr(m->msg, s), line, "error lacks \"%s\":\n%s", s, m->msg ? m->msg : "");
  va_end(ap);
  t_free(m);
}
#define t_err(...) t_err_line(__LINE__, __VA_ARGS__, (const char *)NULL)

static const ir_tensor *t_tensor(const t_model *m, const char *name, int line) {
  int i = ir_graph_find_tensor(m->g, name);
  t_check(i >= 0, line, "no tensor '%s'", name);
  return i >= 0 ? ir_tensor_at(m->g, i) : NULL;
}

/* type is as the user reads it: "f32[2, 3]". */
static void t_type_line(const t_model *m, const char *name, const char *type, int line) {
  const ir_tensor *t = t_tensor(m, name, line);
  char buf[160] = "";
  if (t) ir_type_str(t->dtype, &t->shape, buf, sizeof buf);
  if (t) t_check(t->shape_known && strcmp(buf, type) == 0, line, "'%s' is %s, want %s", name, buf, type);
}
#define t_type(m, name, type) t_type_line((m), (name), (type), __LINE__)

static bool t_near(double a, double b) { return fabs(a - b) <= 1e-6 * (1 + fabs(b)); }

/* A parameter or aux state: its type, kind and initializer (a, b as in ir_init). */
static void t_param_line(const t_model *m, const char *name, const char *type, ir_tensor_kind kind,
                         k_init_kind ik, double a, double b, int line) {
  t_type_line(m, name, type, line);
  const ir_tensor *t = t_tensor(m, name, line);
  if (!t) return;
  t_check(t->kind == kind, line, "'%s' has kind %d, want %d", name, t->kind, kind);
  t_check(t->has_init && t->init.kind == ik, line, "'%s' has initializer %s, want %s", name,
          ir_inits[t->init.kind].name, ir_inits[ik].name);
  if (ik == K_INIT_CONSTANT || ik == K_INIT_UNIFORM || ik == K_INIT_NORMAL)
    t_check(t_near(t->init.a, a) && t_near(t->init.b, b), line, "'%s' init (%g, %g), want (%g, %g)", name,
            t->init.a, t->init.b, a, b);
}
#define t_param(m, name, type, ik, a, b) t_param_line((m), (name), (type), IR_T_PARAM, (ik), (a), (b), __LINE__)
#define t_aux(m, name, type, ik) t_param_line((m), (name), (type), IR_T_AUX, (ik), 0, 0, __LINE__)

/* The default weight init of Linear/Conv: U(-1/sqrt(fan_in), 1/sqrt(fan_in)). */
#define t_weight(m, name, type, fan_in) \
  t_param((m), (name), (type), K_INIT_UNIFORM, -1 / sqrt(fan_in), 1 / sqrt(fan_in))

static const ir_node *t_node_line(const t_model *m, const char *name, int op, int line) {
  for (int i = 0; i < ir_nnodes(m->g); i++) {
    const ir_node *n = ir_node_at(m->g, i);
    if (strcmp(n->name, name) != 0) continue;
    t_check(n->op == op, line, "node '%s' is %s, want %s", name, ir_ops[n->op].name, ir_ops[op].name);
    return n;
  }
  t_check(false, line, "no node '%s'", name);
  return NULL;
}
#define t_node(m, name, op) t_node_line((m), (name), IR_OP_##op, __LINE__)
/* The node's param struct, or zeros when the node is missing (already reported). */
static const void *t_pstruct_line(const t_model *m, const char *name, int op, int line) {
  static const int64_t zero[64];
  const ir_node *n = t_node_line(m, name, op, line);
  return n && n->param ? n->param : zero;
}
#define t_param_of(m, name, op, T) ((const T *)t_pstruct_line((m), (name), IR_OP_##op, __LINE__))

static void t_flops_line(const t_model *m, const char *name, int64_t want, int line) {
  for (int i = 0; i < ir_nnodes(m->g); i++)
    if (strcmp(ir_node_at(m->g, i)->name, name) == 0) {
      int64_t f = ir_node_at(m->g, i)->flops;
      t_check(f == want, line, "node '%s' has %lld FLOPs, want %lld", name, (long long)f, (long long)want);
      return;
    }
  t_check(false, line, "no node '%s'", name);
}
#define t_flops(m, name, want) t_flops_line((m), (name), (want), __LINE__)

/* "(0, 2)" against a normalised k_ints. */
static void t_ints_line(const k_ints *v, const char *want, int line) {
  char buf[128];
  int w = snprintf(buf, sizeof buf, "(");
  for (int i = 0; i < v->n; i++) w += snprintf(buf + w, sizeof buf - (size_t)w, i ? ", %lld" : "%lld", (long long)v->v[i]);
  snprintf(buf + w, sizeof buf - (size_t)w, ")");
  t_check(strcmp(buf, want) == 0, line, "ints %s, want %s", buf, want);
}
#define t_ints(v, want) t_ints_line((v), (want), __LINE__)

/* ---- elementwise ---- */

static void test_binary(void) {
  for (int op = 0; op < IR_OP_COUNT; op++) {
    if (ir_ops[op].infer != ir_infer_binary) continue;
    char src[512];
    snprintf(src, sizeof src, MODEL("input a : f32[2, 1, 4]\n input b : f32[3, 1]\n y = %s(a, b)\n output y"), ir_ops[op].name);
    t_model *m = t_ok(src);
    if (m) t_type(m, "y", "f32[2, 3, 4]"), t_flops(m, "y", 24), t_free(m);
    snprintf(src, sizeof src, MODEL("input a : f32[2, 3]\n input b : f32[4, 3, 2]\n y = %s(a, b)\n output y"), ir_ops[op].name);
    char want[64];
    snprintf(want, sizeof want, "%s: cannot broadcast [2, 3] with [4, 3, 2]", ir_ops[op].name);
    t_err(src, want, "a f32[2, 3], b f32[4, 3, 2]", "t.kiln:4:6:");
  }
  t_model *m = t_ok(MODEL("input x : f32[3]\n input s : f32[]\n"
                          "a = 0.5 * x\n b = x - 1\n c = -x\n d = x ** 2\n e = s * s\n f = 2 ** 3 ** 2 + x\n g = x / s\n"
                          "output a, b, c, d, e, f, g"));
  if (m) {
    t_type(m, "a", "f32[3]"), t_type(m, "b", "f32[3]"), t_type(m, "d", "f32[3]"), t_type(m, "e", "f32[]");
    t_type(m, "g", "f32[3]");
    t_node(m, "a", mul), t_node(m, "b", sub), t_node(m, "c", neg), t_node(m, "d", pow), t_node(m, "f", add);
    const ir_node *f = t_node(m, "f", add);
    const ir_tensor *k = f ? ir_tensor_at(m->g, f->in[0]) : NULL;
    CHECK(k && k->kind == IR_T_CONST && k->value == 512.0f && k->shape.rank == 0, "2 ** 3 ** 2 folds to 512, right-assoc");
    const ir_node *a = t_node(m, "a", mul);
    k = a ? ir_tensor_at(m->g, a->in[0]) : NULL;
    CHECK(k && k->kind == IR_T_CONST && k->value == 0.5f, "0.5 * x reads a constant 0.5");
    t_free(m);
  }
  t_err(MODEL("input x : f32[3]\n input y : i32[3]\n z = x + y\n output z"), "add: argument 'b' must be f32", "i32[3]");
  t_err(MODEL("input x : f32[3]\n y = x * (1 / 0)\n output y"), "the constant 1 / 0 is not a finite f32 number");
  t_err(MODEL("input x : f32[3]\n y = (0 - 1) ** 0.5 + x\n output y"), "the constant -1 ** 0.5 is not a finite f32 number");
  t_err(MODEL("input x : f32[3]\n y = x * (3e38 * 10)\n output y"), "not a finite f32 number");
}

/* Builds "y = op(x, <required attrs>)" for the unary family. */
static void t_unary_src(int op, char *src, size_t n) {
  const char *extra = op == IR_OP_clip ? ", a_min=-1, a_max=2" : op == IR_OP_activation ? ", act_type=\"tanh\"" : "";
  snprintf(src, n, MODEL("input x : f32[2, 3, 4]\n y = %s(x%s)\n output y"), ir_ops[op].name, extra);
}

static void test_unary(void) {
  for (int op = 0; op < IR_OP_COUNT; op++) {
    if (ir_ops[op].infer != ir_infer_unary) continue;
    char src[512];
    t_unary_src(op, src, sizeof src);
    t_model *m = t_ok(src);
    if (m) t_type(m, "y", "f32[2, 3, 4]"), t_flops(m, "y", 24), t_free(m);
  }
  t_model *m = t_ok(MODEL("input x : f32[5]\n a = leaky_relu(x)\n b = leaky_relu(x, slope=0.2)\n c = clip(x, a_min=-1, a_max=1)\n"
                          "d = smooth_l1(x)\n e = smooth_l1(x, sigma=3)\n f = activation(x, act_type=\"softrelu\")\n"
                          "g = relu(x)\n output a, b, c, d, e, f, g"));
  if (m) {
    CHECK(t_param_of(m, "a", leaky_relu, k_leaky_relu_param)->slope == 0.01f, "leaky_relu slope defaults to 0.01");
    CHECK(t_param_of(m, "b", leaky_relu, k_leaky_relu_param)->slope == 0.2f, "leaky_relu slope=0.2");
    const k_clip_param *c = t_param_of(m, "c", clip, k_clip_param);
    CHECK(c->a_min == -1 && c->a_max == 1, "clip bounds");
    CHECK(t_param_of(m, "d", smooth_l1, k_smooth_l1_param)->sigma == 1.0f, "smooth_l1 sigma defaults to 1");
    CHECK(t_param_of(m, "e", smooth_l1, k_smooth_l1_param)->sigma == 3.0f, "smooth_l1 sigma=3");
    CHECK(t_param_of(m, "f", activation, k_activation_param)->act_type == K_ACT_SOFTRELU, "act_type softrelu");
    const ir_node *g = t_node(m, "g", relu);
    CHECK(g && g->param == NULL, "relu has no param struct");
    t_free(m);
  }
  m = t_ok(MODEL("input x : f32[5]\n a = hard_sigmoid(x)\n b = hard_sigmoid(x, alpha=0.2, beta=0.25)\n output a, b"));
  if (m) {
    const k_hard_sigmoid_param *a = t_param_of(m, "a", hard_sigmoid, k_hard_sigmoid_param);
    const k_hard_sigmoid_param *b = t_param_of(m, "b", hard_sigmoid, k_hard_sigmoid_param);
    CHECK(a->alpha == 1.0f / 6.0f && a->beta == 0.5f, "hard_sigmoid defaults to torch's alpha 1/6, beta 1/2");
    CHECK(b->alpha == 0.2f && b->beta == 0.25f, "hard_sigmoid alpha=0.2, beta=0.25");
    t_free(m);
  }
  t_err(MODEL("input x : f32[5]\n y = activation(x, act_type=\"rleu\")\n output y"), "act_type", "\"rleu\"", "did you mean \"relu\"");
  t_err(MODEL("input x : f32[5]\n y = activation(x, act_type=\"swish\")\n output y"), "act_type", "\"swish\"", "\"softrelu\"");
  t_err(MODEL("input x : f32[5]\n y = activation(x)\n output y"), "activation needs attribute 'act_type'");
  t_err(MODEL("input x : f32[5]\n y = clip(x, a_min=0)\n output y"), "clip needs attribute 'a_max'");
  t_err(MODEL("input x : f32[5]\n y = leaky_relu(x, slope=\"big\")\n output y"), "slope", "expects a number");
  t_err(MODEL("input x : f32[5]\n y = relu(x, slope=1)\n output y"), "relu takes no attributes");
  t_err(MODEL("input x : f32[5]\n y = leaky_relu(x, slop=0.1)\n output y"), "leaky_relu has no attribute 'slop'", "did you mean 'slope'");
  t_err(MODEL("input x : i32[5]\n y = exp(x)\n output y"), "exp: argument 'x' must be f32", "i32[5]");
}

/* ---- reductions ---- */

static void test_reduce(void) {
  t_model *m = t_ok(MODEL("input x : f32[2, 3, 4]\n a = sum(x)\n b = mean(x, axis=1)\n c = max(x, axis=(0, -1), keepdims=true)\n"
                          "d = sum(x, axis=-2, keepdims=true)\n e = mean(x, axis=(2, 0))\n output a, b, c, d, e"));
  if (m) {
    t_type(m, "a", "f32[]"), t_type(m, "b", "f32[2, 4]"), t_type(m, "c", "f32[1, 3, 1]");
    t_type(m, "d", "f32[2, 1, 4]"), t_type(m, "e", "f32[3]");
    t_ints(&t_param_of(m, "a", sum, k_reduce_param)->axis, "(0, 1, 2)");
    t_ints(&t_param_of(m, "c", max, k_reduce_param)->axis, "(0, 2)");
    t_ints(&t_param_of(m, "d", sum, k_reduce_param)->axis, "(1)");
    t_ints(&t_param_of(m, "e", mean, k_reduce_param)->axis, "(0, 2)");
    CHECK(t_param_of(m, "c", max, k_reduce_param)->keepdims == 1, "keepdims normalised true");
    t_flops(m, "a", 24);
    t_free(m);
  }
  t_err(MODEL("input x : f32[2, 3, 4]\n y = sum(x, axis=(1, -2))\n output y"), "sum: axis 1 is listed twice", "x f32[2, 3, 4]");
  t_err(MODEL("input x : f32[2, 3, 4]\n y = mean(x, axis=3)\n output y"), "mean: axis 3 is out of range for a tensor of rank 3");
  t_err(MODEL("input x : f32[2, 3, 4]\n y = max(x, axis=-4)\n output y"), "max: axis -4 is out of range");
  t_err(MODEL("input x : f32[2, 3, 4]\n y = max(x, axis=1.5)\n output y"), "axis", "int");
}

/* The reductions beyond SPEC section 2: the same axes and keepdims; norm's ord 1 or 2. */
static void test_reduce_beyond(void) {
  t_model *m = t_ok(MODEL("input x : f32[2, 3, 4]\n a = min(x, axis=1)\n b = prod(x, keepdims=true)\n"
                          "c = logsumexp(x, axis=(0, -1))\n d = norm(x, axis=2, keepdims=true)\n e = norm(x, ord=1)\n"
                          "output a, b, c, d, e"));
  if (m) {
    t_type(m, "a", "f32[2, 4]"), t_type(m, "b", "f32[1, 1, 1]"), t_type(m, "c", "f32[3]");
    t_type(m, "d", "f32[2, 3, 1]"), t_type(m, "e", "f32[]");
    t_ints(&t_param_of(m, "c", logsumexp, k_reduce_param)->axis, "(0, 2)");
    CHECK(t_param_of(m, "d", norm, k_reduce_param)->ord == 2, "norm's ord defaults to 2");
    CHECK(t_param_of(m, "e", norm, k_reduce_param)->ord == 1, "norm ord=1");
    t_free(m);
  }
  t_err(MODEL("input x : f32[2, 3, 4]\n y = norm(x, ord=3)\n output y"), "norm: ord must be 1 or 2, not 3");
  t_err(MODEL("input x : f32[2, 3, 4]\n y = prod(x, axis=(0, 0))\n output y"), "prod: axis 0 is listed twice");
  t_err(MODEL("input x : f32[2, 3, 4]\n y = min(x, ord=1)\n output y"), "min has no attribute 'ord'");
}

/* ---- layout ---- */

static void test_reshape_flatten(void) {
  t_model *m = t_ok(MODEL("input x : f32[2, 3, 4]\n a = reshape(x, shape=(6, -1))\n b = reshape(x, shape=(-1,))\n"
                          "c = flatten(x)\n d = reshape(x, shape=(4, 3, 2))\n output a, b, c, d"));
  if (m) {
    t_type(m, "a", "f32[6, 4]"), t_type(m, "b", "f32[24]"), t_type(m, "c", "f32[2, 12]"), t_type(m, "d", "f32[4, 3, 2]");
    t_ints(&t_param_of(m, "a", reshape, k_reshape_param)->shape, "(6, 4)");
    t_ints(&t_param_of(m, "b", reshape, k_reshape_param)->shape, "(24)");
    t_node(m, "c", flatten);
    t_free(m);
  }
  t_err(MODEL("input x : f32[2, 3, 4]\n y = reshape(x, shape=(5, 5))\n output y"), "reshape: cannot reshape 24 elements into 25", "x f32[2, 3, 4]");
  t_err(MODEL("input x : f32[2, 3, 4]\n y = reshape(x, shape=(5, -1))\n output y"), "reshape: cannot reshape 24 elements");
  t_err(MODEL("input x : f32[2, 3, 4]\n y = reshape(x, shape=(-1, -1))\n output y"), "reshape: shape may contain -1 only once");
  t_err(MODEL("input x : f32[2, 3, 4]\n y = reshape(x, shape=(-2, 12))\n output y"), "reshape: shape entry -2 is negative");
  t_err(MODEL("input x : f32[2, 3, 4]\n y = reshape(x)\n output y"), "reshape needs attribute 'shape'");
  t_err(MODEL("input x : f32[5]\n y = flatten(x)\n output y"), "flatten: needs a tensor of rank 2 or more", "x f32[5]");
}

static void test_transpose_dims(void) {
  t_model *m = t_ok(MODEL("input x : f32[2, 3, 4]\n a = transpose(x)\n b = transpose(x, axes=(0, -1, 1))\n"
                          "c = expand_dims(x, axis=0)\n d = expand_dims(x, axis=-1)\n e = expand_dims(x, axis=2)\n output a, b, c, d, e"));
  if (m) {
    t_type(m, "a", "f32[4, 3, 2]"), t_type(m, "b", "f32[2, 4, 3]");
    t_type(m, "c", "f32[1, 2, 3, 4]"), t_type(m, "d", "f32[2, 3, 4, 1]"), t_type(m, "e", "f32[2, 3, 1, 4]");
    t_ints(&t_param_of(m, "a", transpose, k_transpose_param)->axes, "(2, 1, 0)");
    t_ints(&t_param_of(m, "b", transpose, k_transpose_param)->axes, "(0, 2, 1)");
    CHECK(t_param_of(m, "d", expand_dims, k_expand_dims_param)->axis == 3, "expand_dims axis -1 -> 3");
    t_free(m);
  }
  t_err(MODEL("input x : f32[2, 3, 4]\n y = transpose(x, axes=(0, 1))\n output y"), "transpose: axes has 2 entries for a tensor of rank 3");
  t_err(MODEL("input x : f32[2, 3, 4]\n y = transpose(x, axes=(0, 1, 1))\n output y"), "transpose: axes is not a permutation", "x f32[2, 3, 4]");
  t_err(MODEL("input x : f32[2, 3, 4]\n y = transpose(x, axes=(0, 1, 3))\n output y"), "transpose: axis 3 is out of range");
  t_err(MODEL("input x : f32[2, 3, 4]\n y = expand_dims(x, axis=4)\n output y"), "expand_dims: axis 4 is out of range for a tensor of rank 4");
  t_err(MODEL("input x : f32[2, 3, 4]\n y = expand_dims(x, axis=-5)\n output y"), "expand_dims: axis -5");
}

static void test_squeeze_broadcast(void) {
  t_model *m = t_ok(MODEL("input x : f32[2, 1, 3, 1]\n a = squeeze(x)\n b = squeeze(x, axis=1)\n c = squeeze(x, axis=0)\n"
                          "d = squeeze(x, axis=(-1, 1))\n e = broadcast_to(x, shape=(5, 2, 4, 3, 6))\n"
                          "f = broadcast_to(x, shape=(-1, 2, -1, 7))\n output a, b, c, d, e, f"));
  if (m) {
    t_type(m, "a", "f32[2, 3]"), t_type(m, "b", "f32[2, 3, 1]"), t_type(m, "c", "f32[2, 1, 3, 1]"), t_type(m, "d", "f32[2, 3]");
    t_type(m, "e", "f32[5, 2, 4, 3, 6]"), t_type(m, "f", "f32[2, 2, 3, 7]");
    t_ints(&t_param_of(m, "a", squeeze, k_squeeze_param)->axis, "(1, 3)");
    t_ints(&t_param_of(m, "c", squeeze, k_squeeze_param)->axis, "(0)");
    t_ints(&t_param_of(m, "d", squeeze, k_squeeze_param)->axis, "(1, 3)");
    t_ints(&t_param_of(m, "f", broadcast_to, k_broadcast_to_param)->shape, "(2, 2, 3, 7)");
    t_free(m);
  }
  t_err(MODEL("input x : f32[2, 1]\n y = squeeze(x, axis=2)\n output y"), "squeeze: axis 2 is out of range");
  t_err(MODEL("input x : f32[2, 3]\n y = broadcast_to(x, shape=(4, 3))\n output y"), "broadcast_to: axis 0 of size 2 cannot broadcast to 4", "x f32[2, 3]");
  t_err(MODEL("input x : f32[2, 3]\n y = broadcast_to(x, shape=(3,))\n output y"), "broadcast_to: shape has fewer axes (1) than the input (2)");
  t_err(MODEL("input x : f32[2, 3]\n y = broadcast_to(x, shape=(-1, 2, 3))\n output y"), "broadcast_to: shape entry 0 must be positive");
  t_err(MODEL("input x : f32[1, 3]\n y = broadcast_to(x, shape=(0, 3))\n output y"), "broadcast_to: shape entry 0 must be positive");
}

/* pad: F.pad's pairs, last axis first, normalised to every axis. */
static void test_pad(void) {
  t_model *m = t_ok(MODEL("input x : f32[2, 3, 5]\n a = pad(x, pad=(1, 2))\n b = pad(x, pad=(0, 0, -1, 2, 3, 0), value=1.5)\n"
                          "c = pad(x, pad=(4, 4, 2, 2), mode=\"reflect\")\n d = pad(x, pad=(0, 9), mode=\"replicate\")\n"
                          "output a, b, c, d"));
  if (m) {
    t_type(m, "a", "f32[2, 3, 8]"), t_type(m, "b", "f32[5, 4, 5]"), t_type(m, "c", "f32[2, 7, 13]");
    t_type(m, "d", "f32[2, 3, 14]");
    const k_pad_param *p = t_param_of(m, "a", pad, k_pad_param);
    CHECK(p->pad.n == 6 && p->pad.v[0] == 1 && p->pad.v[1] == 2 && p->pad.v[5] == 0 && p->mode == K_PAD_CONSTANT &&
          p->value == 0.0f, "pad normalised to every axis, constant 0 by default");
    CHECK(t_param_of(m, "b", pad, k_pad_param)->value == 1.5f, "pad value=1.5");
    CHECK(t_param_of(m, "c", pad, k_pad_param)->mode == K_PAD_REFLECT, "pad mode reflect");
    t_free(m);
  }
  t_err(MODEL("input x : f32[2, 3]\n y = pad(x, pad=(1, 2, 3))\n output y"), "pad: pad has 3 values", "pairs");
  t_err(MODEL("input x : f32[2, 3]\n y = pad(x, pad=(1, 1, 1, 1, 1, 1))\n output y"), "pad has 6 values", "at most the 2 axes");
  t_err(MODEL("input x : f32[2, 3]\n y = pad(x, pad=(3, 0), mode=\"reflect\")\n output y"),
        "reflect padding must be smaller than the axis: (3, 0) on axis 1 of size 3");
  t_err(MODEL("input x : f32[2, 3]\n y = pad(x, pad=(-1, 0), mode=\"replicate\")\n output y"), "replicate padding cannot be negative");
  t_err(MODEL("input x : f32[2, 3]\n y = pad(x, pad=(-2, -1))\n output y"), "leaves axis 1 of size 3 empty");
  t_err(MODEL("input x : f32[2, 3]\n y = pad(x, pad=(-5, 6))\n output y"), "pad (-5, 6) of axis 1 (size 3) is out of range");
  t_err(MODEL("input x : f32[2, 3]\n y = pad(x, pad=(1, 1), mode=\"wrap\")\n output y"), "mode", "\"wrap\"");
  t_err(MODEL("input x : f32[2, 3]\n y = pad(x)\n output y"), "pad needs attribute 'pad'");
  t_err(MODEL("input x : f32[2, 3]\n y = pad(x, pad=(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1))\n output y"),
        "attribute 'pad' has 14 items; at most 12 are allowed");
}

static void test_slice_concat(void) {
  t_model *m = t_ok(MODEL("input x : f32[3, 5]\n input z : f32[3, 2]\n a = slice(x, axis=1, begin=1, end=4)\n"
                          "b = slice(x, axis=-1, begin=-3, end=-1)\n c = slice(x, axis=0, end=2)\n"
                          "d = concat(x, z)\n e = concat(x, x, dim=0)\n f = concat(x, z, x, dim=-1)\n g = concat(x)\n"
                          "s1 = slice(x, axis=1, end=5, step=2)\n s2 = slice(x, axis=1, begin=1, end=5, step=2)\n"
                          "s3 = slice(x, axis=0, end=3, step=-1)\n s4 = slice(x, axis=1, begin=-4, end=5, step=-3)\n"
                          "s5 = slice(x, axis=1, end=5, step=-99)\n"
                          "output a, b, c, d, e, f, g, s1, s2, s3, s4, s5"));
  if (m) {
    t_type(m, "a", "f32[3, 3]"), t_type(m, "b", "f32[3, 2]"), t_type(m, "c", "f32[2, 5]");
    t_type(m, "s1", "f32[3, 3]"), t_type(m, "s2", "f32[3, 2]"), t_type(m, "s3", "f32[3, 5]");
    t_type(m, "s4", "f32[3, 2]"), t_type(m, "s5", "f32[3, 1]");
    CHECK(t_param_of(m, "s5", slice, k_slice_param)->step == -5, "a step past the axis is clamped to its size");
    CHECK(t_param_of(m, "a", slice, k_slice_param)->step == 1, "slice step defaults to 1");
    t_type(m, "d", "f32[3, 7]"), t_type(m, "e", "f32[6, 5]"), t_type(m, "f", "f32[3, 12]"), t_type(m, "g", "f32[3, 5]");
    const k_slice_param *s = t_param_of(m, "b", slice, k_slice_param);
    CHECK(s->axis == 1 && s->begin == 2 && s->end == 4, "slice negatives resolved: axis %d [%lld, %lld)", s->axis, (long long)s->begin, (long long)s->end);
    CHECK(t_param_of(m, "d", concat, k_concat_param)->dim == 1, "concat dim defaults to 1");
    CHECK(t_param_of(m, "f", concat, k_concat_param)->dim == 1, "concat dim -1 -> 1");
    CHECK(t_node(m, "f", concat)->nin == 3, "concat takes three inputs");
    t_free(m);
  }
  /* a param past concat's first piece (found by tests/fuzz/fuzz_onnx: its default initializer
   * looked for an aux role the op does not have, and crashed) */
  m = t_ok(MODEL("input x : f32[3, 5]\n param p : f32[3, 2]\n y = concat(x, p)\n output y"));
  if (m) t_param(m, "p", "f32[3, 2]", K_INIT_ZEROS, 0, 0), t_free(m);
  t_err(MODEL("input x : f32[3, 5]\n y = slice(x, axis=1, begin=2, end=6)\n output y"), "slice: begin..end [2, 6) is not within axis 1 of size 5", "x f32[3, 5]");
  t_err(MODEL("input x : f32[3, 5]\n y = slice(x, axis=1, begin=4, end=2)\n output y"), "slice: begin..end [4, 2)");
  t_err(MODEL("input x : f32[3, 5]\n y = slice(x, axis=1, begin=2, end=2)\n output y"), "slice: begin..end [2, 2) is empty");
  t_err(MODEL("input x : f32[3, 5]\n y = slice(x, axis=1, begin=-6, end=2)\n output y"), "slice: begin..end");
  t_err(MODEL("input x : f32[3, 5]\n y = slice(x, axis=2, end=1)\n output y"), "slice: axis 2 is out of range");
  t_err(MODEL("input x : f32[3, 5]\n y = slice(x, axis=0)\n output y"), "slice needs attribute 'end'");
  t_err(MODEL("input x : f32[3, 5]\n y = slice(x, axis=1, end=4, step=0)\n output y"), "slice: step must not be 0");
  t_err(MODEL("input x : f32[3, 5]\n input z : f32[4, 2]\n y = concat(x, z)\n output y"),
        "concat: input 2 does not match input 1 outside dim 1", "x f32[3, 5], z f32[4, 2]");
  t_err(MODEL("input x : f32[3, 5]\n input z : f32[3]\n y = concat(x, z, dim=0)\n output y"), "concat: input 2 does not match");
  t_err(MODEL("input x : f32[3, 5]\n y = concat(x, x, dim=2)\n output y"), "concat: dim 2 is out of range");
  t_err(MODEL("input x : f32[3, 5]\n y = concat(dim=0)\n output y"), "concat needs at least one input");
}

/* ---- GEMM family ---- */

static void test_matmul(void) {
  t_model *m = t_ok(MODEL("input a : f32[2, 1, 3, 4]\n input b : f32[5, 4, 6]\n input c : f32[6, 4]\n input d : f32[4, 3]\n"
                          "x = matmul(a, b)\n y = matmul(a, c, transpose_b=true)\n z = matmul(d, c, transpose_a=true, transpose_b=true)\n"
                          "output x, y, z"));
  if (m) {
    t_type(m, "x", "f32[2, 5, 3, 6]"), t_type(m, "y", "f32[2, 1, 3, 6]"), t_type(m, "z", "f32[3, 6]");
    t_flops(m, "x", 2 * 2 * 5 * 3 * 6 * 4), t_flops(m, "z", 2 * 3 * 6 * 4);
    t_free(m);
  }
  t_err(MODEL("input a : f32[3, 4]\n input b : f32[5, 6]\n y = matmul(a, b)\n output y"), "matmul: inner dimensions differ: 4 and 5", "a f32[3, 4], b f32[5, 6]");
  t_err(MODEL("input a : f32[2, 3, 4]\n input b : f32[3, 4, 6]\n y = matmul(a, b)\n output y"), "matmul: batch dimensions do not broadcast");
  t_err(MODEL("input a : f32[4]\n input b : f32[4, 6]\n y = matmul(a, b)\n output y"), "matmul: both inputs need rank 2 or more");
}

static void test_fully_connected(void) {
  t_model *m = t_ok(MODEL("input x : f32[8, 2, 3]\n a = fully_connected(x, num_hidden=5)\n"
                          "b = fully_connected(x, num_hidden=4, flatten=false, no_bias=true)\n"
                          "param w : f32[7, 6]\n param bias : f32[7] = constant(0.5)\n c = fully_connected(x, w, bias, num_hidden=7)\n"
                          "output a, b, c"));
  if (m) {
    t_type(m, "a", "f32[8, 5]"), t_type(m, "b", "f32[8, 2, 4]"), t_type(m, "c", "f32[8, 7]");
    t_weight(m, "a.weight", "f32[5, 6]", 6.0), t_param(m, "a.bias", "f32[5]", K_INIT_ZEROS, 0, 0);
    t_weight(m, "b.weight", "f32[4, 3]", 3.0);
    CHECK(ir_graph_find_tensor(m->g, "b.bias") < 0, "no_bias creates no b.bias");
    CHECK(t_node(m, "b", fully_connected)->nin == 2, "no_bias: two inputs");
    t_weight(m, "w", "f32[7, 6]", 6.0), t_param(m, "bias", "f32[7]", K_INIT_CONSTANT, 0.5, 0);
    t_flops(m, "a", 2 * 8 * 5 * 6), t_flops(m, "b", 2 * 8 * 2 * 4 * 3);
    const k_fc_param *p = t_param_of(m, "b", fully_connected, k_fc_param);
    CHECK(p->num_hidden == 4 && p->no_bias == 1 && p->flatten == 0, "fc param struct");
    t_free(m);
  }
  t_err(MODEL("input x : f32[8, 6]\n param w : f32[5, 7]\n y = fully_connected(x, w, num_hidden=5)\n output y"),
        "fully_connected: 'w' has shape [5, 7] but must be [5, 6]", "x f32[8, 6], w f32[5, 7]");
  t_err(MODEL("input x : f32[8, 6]\n param w : f32[5, 6]\n param b : f32[4]\n y = fully_connected(x, w, b, num_hidden=5)\n output y"),
        "fully_connected: 'b' has shape [4] but must be [5]");
  t_err(MODEL("input x : f32[8, 6]\n param w : f32[5, 6]\n param b : f32[5]\n y = fully_connected(x, w, b, num_hidden=5, no_bias=true)\n output y"),
        "fully_connected: a bias is given but no_bias is true");
  t_err(MODEL("input x : f32[8, 6]\n y = fully_connected(x, num_hidden=0)\n output y"), "fully_connected: num_hidden must be positive");
  t_err(MODEL("input x : f32[8]\n y = fully_connected(x, num_hidden=3)\n output y"), "fully_connected: data needs rank 2 or more", "x f32[8]");
  t_err(MODEL("input x : f32[8, 6]\n y = fully_connected(x)\n output y"), "fully_connected needs attribute 'num_hidden'");
  t_err(MODEL("input x : f32[8, 6]\n y = fully_connected(x, num_hiden=3)\n output y"), "did you mean 'num_hidden'");
  m = t_ok(MODEL("input x : f32[6]\n y = fully_connected(x, num_hidden=3, flatten=false)\n output y"));
  if (m) t_type(m, "y", "f32[3]"), t_weight(m, "y.weight", "f32[3, 6]", 6.0), t_free(m);
}

static void test_convolution(void) {
  t_model *m = t_ok(MODEL("input x : f32[2, 3, 9, 11]\n input s : f32[2, 4, 10]\n"
                          "a = convolution(x, num_filter=8, kernel=(3, 5), stride=(2, 3), pad=(1, 2))\n"
                          "b = convolution(s, num_filter=6, kernel=3, stride=2, pad=1, dilate=2, num_group=2, no_bias=true)\n"
                          "c = convolution(x, num_filter=4, kernel=(3, 3))\n output a, b, c"));
  if (m) {
    t_type(m, "a", "f32[2, 8, 5, 4]"), t_type(m, "b", "f32[2, 6, 4]"), t_type(m, "c", "f32[2, 4, 7, 9]");
    t_weight(m, "a.weight", "f32[8, 3, 3, 5]", 45.0), t_param(m, "a.bias", "f32[8]", K_INIT_ZEROS, 0, 0);
    t_weight(m, "b.weight", "f32[6, 2, 3]", 6.0);
    CHECK(ir_graph_find_tensor(m->g, "b.bias") < 0, "no_bias conv creates no bias");
    const k_conv_param *p = t_param_of(m, "b", convolution, k_conv_param);
    t_ints(&p->kernel, "(3)"), t_ints(&p->stride, "(2)"), t_ints(&p->pad, "(1)"), t_ints(&p->dilate, "(2)");
    CHECK(p->num_group == 2 && p->no_bias == 1, "conv groups/no_bias");
    p = t_param_of(m, "c", convolution, k_conv_param);
    t_ints(&p->stride, "(1, 1)"), t_ints(&p->pad, "(0, 0)"), t_ints(&p->dilate, "(1, 1)");
    t_flops(m, "a", 2LL * 2 * 8 * 5 * 4 * 3 * 15), t_flops(m, "b", 2LL * 2 * 6 * 4 * 2 * 3);
    t_free(m);
  }
  t_err(MODEL("input x : f32[2, 3, 9, 9]\n y = convolution(x, num_filter=4, kernel=(3, 3), num_group=2)\n output y"),
        "convolution: channels (3) and num_filter (4) must be divisible by num_group (2)", "x f32[2, 3, 9, 9]");
  t_err(MODEL("input x : f32[2, 4, 9, 9]\n y = convolution(x, num_filter=3, kernel=(3, 3), num_group=2)\n output y"),
        "must be divisible by num_group");
  t_err(MODEL("input x : f32[2, 3, 4, 4]\n y = convolution(x, num_filter=4, kernel=(5, 5))\n output y"),
        "convolution: the kernel (extent 5) is larger than the padded input (4)");
  t_err(MODEL("input x : f32[2, 3, 6, 6]\n y = convolution(x, num_filter=4, kernel=(3, 3), dilate=3)\n output y"),
        "the kernel (extent 7) is larger than the padded input (6)");
  t_err(MODEL("input x : f32[2, 3, 9, 9]\n y = convolution(x, num_filter=4, kernel=3)\n output y"),
        "convolution: a 1d convolution needs data of rank 3, got rank 4");
  /* one mistake, one error: the parameters of the failed node and of later nodes stay quiet */
  t_model *m1 = t_lower_defs(MODEL("input x : f32[2, 3, 9, 9]\n y = convolution(x, num_filter=4, kernel=3)\n"
                                   "z = fully_connected(y, num_hidden=2)\n output z"), NULL, 0);
  CHECK(m1->fr.diag.errors == 1, "a failed convolution gives 1 error, not %d:\n%s", m1->fr.diag.errors, m1->msg ? m1->msg : "");
  t_free(m1);
  t_err(MODEL("input x : f32[2, 3, 9, 9]\n y = convolution(x, num_filter=4, kernel=(3, 3), stride=(1, 1, 1))\n output y"),
        "convolution: stride has 3 entries but the kernel has 2");
  t_err(MODEL("input x : f32[2, 3, 9, 9]\n y = convolution(x, num_filter=4, kernel=(3, 3), stride=0)\n output y"),
        "kernel, stride and dilate must be positive");
  t_err(MODEL("input x : f32[2, 3, 9, 9, 9]\n y = convolution(x, num_filter=4, kernel=(3, 3, 3))\n output y"),
        "convolution: kernel must have 1 or 2 entries");
  t_err(MODEL("input x : f32[2, 3, 9, 9]\n param w : f32[4, 3, 3, 2]\n y = convolution(x, w, num_filter=4, kernel=(3, 3), no_bias=true)\n output y"),
        "convolution: 'w' has shape [4, 3, 3, 2] but must be [4, 3, 3, 3]");
}

/* Beyond SPEC section 2: pad takes every axis's start then every axis's end (pooling's form),
 * the output sized by start + end, and is kept so only where a start and its end differ. */
static void test_convolution_pads(void) {
  t_model *m = t_ok(MODEL("input x : f32[2, 3, 9, 11]\n input s : f32[2, 4, 10]\n"
                          "a = convolution(x, num_filter=4, kernel=(3, 3), pad=(0, 1, 1, 2))\n"
                          "b = convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 2, 1, 2))\n"
                          "c = convolution(s, num_filter=6, kernel=3, stride=2, pad=(0, 1), no_bias=true)\n"
                          "d = convolution(x, num_filter=3, kernel=(2, 2), stride=(2, 2), dilate=(2, 1), num_group=3, pad=(2, 0, 0, 1))\n"
                          "output a, b, c, d"));
  if (m) {
    t_type(m, "a", "f32[2, 4, 8, 12]"), t_type(m, "b", "f32[2, 4, 9, 13]"), t_type(m, "c", "f32[2, 6, 5]");
    t_type(m, "d", "f32[2, 3, 5, 6]");
    t_ints(&t_param_of(m, "a", convolution, k_conv_param)->pad, "(0, 1, 1, 2)");
    t_ints(&t_param_of(m, "b", convolution, k_conv_param)->pad, "(1, 2)");
    t_ints(&t_param_of(m, "c", convolution, k_conv_param)->pad, "(0, 1)");
    t_ints(&t_param_of(m, "d", convolution, k_conv_param)->pad, "(2, 0, 0, 1)");
    t_flops(m, "a", 2LL * 2 * 4 * 8 * 12 * 3 * 9);
    t_free(m);
  }
  t_err(MODEL("input x : f32[2, 3, 9, 9]\n y = convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 0, 0))\n output y"),
        "convolution: pad (1, 0, 0) has 3 values; give 1, 2 (one per spatial axis) or 4 (every axis's start, then every axis's end)",
        "x f32[2, 3, 9, 9]");
  t_err(MODEL("input s : f32[2, 4, 10]\n y = convolution(s, num_filter=4, kernel=3, pad=(1, 0, 0))\n output y"),
        "convolution: pad (1, 0, 0) has 3 values; give 1, or 2 (the start, then the end)");
  t_err(MODEL("input x : f32[2, 3, 9, 9]\n y = convolution(x, num_filter=4, kernel=(3, 3), pad=(0, 1, -1, 0))\n output y"),
        "convolution: pad (0, 1, -1, 0): pads cannot be negative");
  t_err(MODEL("input x : f32[2, 3, 9, 9]\n y = convolution(x, num_filter=4, kernel=(3, 3), pad=-1)\n output y"),
        "convolution: pad (-1): pads cannot be negative");
  t_err(MODEL("input x : f32[2, 3, 9, 9]\n y = convolution(x, num_filter=4, kernel=(3, 3), pad=(0, 0, 0, 5000000000))\n output y"),
        "convolution: pad (0, 0, 0, 5000000000): a pad above 2^32 is out of range");
  /* the start and the end both count: 2 + 1 + 0 is less than the extent 4 */
  t_err(MODEL("input x : f32[2, 3, 1, 9]\n y = convolution(x, num_filter=4, kernel=(4, 3), pad=(2, 0, 0, 0))\n output y"),
        "convolution: the kernel (extent 4) is larger than the padded input (3) on spatial axis 0");
}

static void test_pooling(void) {
  t_model *m = t_ok(MODEL("input x : f32[2, 3, 9, 11]\n input s : f32[2, 3, 10]\n input q : f32[1, 1, 7, 7]\n"
                          "a = pooling(x, kernel=(3, 2), stride=(2, 2), pad=(1, 0), pool_type=\"avg\")\n"
                          "b = pooling(x, kernel=(2, 2))\n c = pooling(x, global_pool=true, pool_type=\"avg\")\n"
                          "d = pooling(s, kernel=3, stride=2)\n e = pooling(q, kernel=3, stride=2, pad=1)\n output a, b, c, d, e"));
  if (m) {
    t_type(m, "a", "f32[2, 3, 5, 5]"), t_type(m, "b", "f32[2, 3, 4, 5]"), t_type(m, "c", "f32[2, 3, 1, 1]");
    t_type(m, "d", "f32[2, 3, 4]"), t_type(m, "e", "f32[1, 1, 4, 4]");
    const k_pool_param *p = t_param_of(m, "b", pooling, k_pool_param);
    t_ints(&p->stride, "(2, 2)"), t_ints(&p->pad, "(0, 0)");
    CHECK(p->pool_type == K_POOL_MAX, "pool_type defaults to max");
    p = t_param_of(m, "c", pooling, k_pool_param);
    t_ints(&p->kernel, "(9, 11)"), t_ints(&p->stride, "(1, 1)"), t_ints(&p->pad, "(0, 0)");
    CHECK(p->pool_type == K_POOL_AVG && p->global_pool == 1, "global avg pool");
    p = t_param_of(m, "e", pooling, k_pool_param);
    t_ints(&p->kernel, "(3, 3)"), t_ints(&p->stride, "(2, 2)"), t_ints(&p->pad, "(1, 1)");
    t_flops(m, "a", 2 * 3 * 5 * 5 * 6), t_flops(m, "c", 2 * 3 * 99);
    t_free(m);
  }
  t_err(MODEL("input x : f32[2, 3, 9, 9]\n y = pooling(x, kernel=(3, 3), pad=2)\n output y"),
        "pooling: pad (2) must be at most half the kernel (3)", "x f32[2, 3, 9, 9]");
  t_err(MODEL("input x : f32[2, 3, 9, 9]\n y = pooling(x)\n output y"), "pooling: needs a kernel unless global_pool=true");
  t_err(MODEL("input x : f32[2, 9]\n y = pooling(x, kernel=2)\n output y"), "pooling: needs data of rank 3 or 4", "got rank 2");
  t_err(MODEL("input x : f32[2, 3, 2, 2]\n y = pooling(x, kernel=(3, 3))\n output y"), "pooling: the kernel (3) is larger than the padded input (2)");
  t_err(MODEL("input x : f32[2, 3, 9, 9]\n y = pooling(x, kernel=2, pool_type=\"mean\")\n output y"), "pool_type", "\"mean\"");
  t_err(MODEL("input x : f32[2, 3, 9, 9]\n y = pooling(x, kernel=(2, 2, 2))\n output y"), "pooling: kernel has 3 entries");
}

/* Beyond SPEC section 2: ceil_mode rounds the size up, less a last window that would start in
 * the right padding (torch's rule); count_include_pad defaults to true; pad takes every start
 * then every end, kept so where they differ. */
static void test_pooling_ceil(void) {
  t_model *m = t_ok(MODEL("input x : f32[1, 2, 6, 8]\n input v : f32[1, 2, 5]\n"
                          "a = pooling(x, kernel=3, stride=2, ceil_mode=true, pool_type=\"avg\", count_include_pad=false)\n"
                          "b = pooling(x, kernel=3, stride=2, pad=1, ceil_mode=true)\n"
                          "c = pooling(v, kernel=2, stride=2, pad=1, ceil_mode=true)\n"
                          "d = pooling(x, kernel=2, pool_type=\"avg\")\n e = pooling(x, kernel=3, pad=(0, 1, 1, 1), pool_type=\"avg\")\n"
                          "f = pooling(x, kernel=2, pad=(1, 0, 1, 0))\n output a, b, c, d, e, f"));
  if (m) {
    t_type(m, "a", "f32[1, 2, 3, 4]"), t_type(m, "b", "f32[1, 2, 4, 5]"), t_type(m, "c", "f32[1, 2, 3]");
    const k_pool_param *p = t_param_of(m, "a", pooling, k_pool_param);
    CHECK(p->ceil_mode == 1 && p->count_include_pad == 0, "pooling ceil_mode, count_include_pad read");
    p = t_param_of(m, "d", pooling, k_pool_param);
    CHECK(p->ceil_mode == 0 && p->count_include_pad == 1, "pooling ceil_mode false, count_include_pad true by default");
    t_type(m, "e", "f32[1, 2, 2, 3]"), t_type(m, "f", "f32[1, 2, 4, 4]");
    t_ints(&t_param_of(m, "e", pooling, k_pool_param)->pad, "(0, 1, 1, 1)");
    t_ints(&t_param_of(m, "f", pooling, k_pool_param)->pad, "(1, 0)");
    t_free(m);
  }
  t_err(MODEL("input x : f32[1, 2, 6, 8]\n y = pooling(x, kernel=3, pad=(2, 0, 0, 0))\n output y"),
        "pooling: pad (2) must be at most half the kernel (3)");
  t_err(MODEL("input x : f32[1, 2, 6, 8]\n y = pooling(x, kernel=3, pad=(1, 0, 0))\n output y"),
        "pooling: pad (1, 0, 0) has 3 values; give 1, 2 (one per spatial axis) or 4");
  t_err(MODEL("input x : f32[1, 2, 6, 8]\n y = pooling(x, kernel=3, pad=(1, -1))\n output y"),
        "pooling: pad (1, -1): pads cannot be negative");
}

/* ---- normalisation, dropout, softmax ---- */

static void test_norm(void) {
  t_model *m = t_ok(MODEL("input x : f32[4, 3, 5, 5]\n input z : f32[4, 6, 7]\n bn = batch_norm(x)\n"
                          "b2 = batch_norm(z, axis=-1, eps=0.001, momentum=0.5)\n ln = layer_norm(z)\n ln2 = layer_norm(z, axis=2)\n"
                          "output bn, b2, ln, ln2"));
  if (m) {
    t_type(m, "bn", "f32[4, 3, 5, 5]"), t_type(m, "bn.saved_mean", "f32[3]"), t_type(m, "bn.saved_invstd", "f32[3]");
    t_param(m, "bn.gamma", "f32[3]", K_INIT_ONES, 0, 0), t_param(m, "bn.beta", "f32[3]", K_INIT_ZEROS, 0, 0);
    t_aux(m, "bn.moving_mean", "f32[3]", K_INIT_ZEROS), t_aux(m, "bn.moving_var", "f32[3]", K_INIT_ONES);
    const ir_node *n = t_node(m, "bn", batch_norm);
    CHECK(n && n->nin == 5 && n->nout == 3, "batch_norm reads data, gamma, beta, two aux; writes three outputs");
    const k_batch_norm_param *p = t_param_of(m, "bn", batch_norm, k_batch_norm_param);
    CHECK(p->axis == 1 && p->eps == 1e-5f && p->momentum == 0.9f, "batch_norm defaults");
    p = t_param_of(m, "b2", batch_norm, k_batch_norm_param);
    CHECK(p->axis == 2 && p->eps == 0.001f && p->momentum == 0.5f, "batch_norm axis -1 -> 2");
    t_aux(m, "b2.moving_var", "f32[7]", K_INIT_ONES);
    t_type(m, "ln", "f32[4, 6, 7]"), t_type(m, "ln.saved_mean", "f32[4, 6]");
    t_param(m, "ln.gamma", "f32[7]", K_INIT_ONES, 0, 0), t_param(m, "ln.beta", "f32[7]", K_INIT_ZEROS, 0, 0);
    CHECK(t_param_of(m, "ln", layer_norm, k_layer_norm_param)->axis == 2, "layer_norm axis -1 -> 2");
    CHECK(t_param_of(m, "ln", layer_norm, k_layer_norm_param)->eps == 1e-5f, "layer_norm eps default");
    t_flops(m, "bn", 4 * 300);
    t_free(m);
  }
  t_err(MODEL("input x : f32[4, 6, 7]\n y = layer_norm(x, axis=1)\n output y"), "layer_norm: normalises over the last axis only", "x f32[4, 6, 7]");
  t_err(MODEL("input x : f32[4, 6, 7]\n y = batch_norm(x, axis=3)\n output y"), "batch_norm: axis 3 is out of range for a tensor of rank 3");
  t_err(MODEL("input x : f32[4]\n y = batch_norm(x)\n output y"), "batch_norm: needs data of rank 2 or more");
  t_err(MODEL("input x : f32[4, 3]\n y = batch_norm(x, eps=0)\n output y"), "batch_norm: eps must be positive");
  t_err(MODEL("input x : f32[4, 3]\n y = batch_norm(x, momentum=1.5)\n output y"), "batch_norm: momentum must be within [0, 1]");
  t_err(MODEL("input x : f32[4, 3]\n param g : f32[4]\n y = batch_norm(x, g)\n output y"), "batch_norm: 'g' has shape [4] but must be [3]");
  t_err(MODEL("input x : f32[4, 3]\n y = batch_norm(x, moving_mean=1)\n output y"), "'moving_mean' is an input of batch_norm; pass it positionally");
  t_err(MODEL("input x : f32[4, 3]\n input z : f32[3]\n y = batch_norm(x, z, z, z)\n output y"),
        "batch_norm's aux state 'moving_mean' must be a param, but 'z' is not one");
  m = t_ok(MODEL("input x : f32[4, 3]\n param g : f32[3]\n param mm = constant(0.5)\n param mv\n y = batch_norm(x, g, g, mm, mv)\n output y"));
  if (m) {
    t_param(m, "g", "f32[3]", K_INIT_ONES, 0, 0);
    t_param_line(m, "mm", "f32[3]", IR_T_AUX, K_INIT_CONSTANT, 0.5, 0, __LINE__);   /* declared aux keeps its init */
    t_aux(m, "mv", "f32[3]", K_INIT_ONES);
    t_free(m);
  }
}

static void test_dropout_softmax(void) {
  t_model *m = t_ok(MODEL("input x : f32[4, 3, 5]\n d = dropout(x)\n e = dropout(x, p=0.1)\n s = softmax(x)\n"
                          "l = log_softmax(x, axis=1)\n t = softmax(x, axis=-3)\n output d, e, s, l, t"));
  if (m) {
    t_type(m, "d", "f32[4, 3, 5]"), t_type(m, "d.mask", "f32[4, 3, 5]");
    CHECK(t_param_of(m, "d", dropout, k_dropout_param)->p == 0.5f, "dropout p defaults to 0.5");
    CHECK(t_param_of(m, "e", dropout, k_dropout_param)->p == 0.1f, "dropout p=0.1");
    t_type(m, "s", "f32[4, 3, 5]"), t_type(m, "l", "f32[4, 3, 5]");
    CHECK(t_param_of(m, "s", softmax, k_softmax_param)->axis == 2, "softmax axis -1 -> 2");
    CHECK(t_param_of(m, "l", log_softmax, k_softmax_param)->axis == 1, "log_softmax axis 1");
    CHECK(t_param_of(m, "t", softmax, k_softmax_param)->axis == 0, "softmax axis -3 -> 0");
    t_flops(m, "s", 3 * 60);
    t_free(m);
  }
  t_err(MODEL("input x : f32[4, 3]\n y = dropout(x, p=1.5)\n output y"), "dropout: p must be within [0, 1]", "x f32[4, 3]");
  t_err(MODEL("input x : f32[4, 3]\n y = softmax(x, axis=2)\n output y"), "softmax: axis 2 is out of range for a tensor of rank 2", "x f32[4, 3]");
  t_err(MODEL("input x : f32[4, 3]\n y = log_softmax(x, axis=-3)\n output y"), "log_softmax: axis -3 is out of range");
  t_err(MODEL("input x : f32[]\n y = softmax(x)\n output y"), "softmax: needs a tensor of rank 1 or more");
}

static void test_embedding_loss(void) {
  t_model *m = t_ok(MODEL("input i : i32[2, 3]\n input y : i32[2]\n e = embedding(i, input_dim=10, output_dim=4)\n"
                          "f = flatten(e)\n logits = fully_connected(f, num_hidden=5)\n loss = softmax_cross_entropy(logits, y)\n"
                          "output e\n train loss with sgd(lr=0.1)"));
  if (m) {
    t_type(m, "e", "f32[2, 3, 4]"), t_type(m, "loss", "f32[]");
    t_param(m, "e.weight", "f32[10, 4]", K_INIT_NORMAL, 0, 1);
    t_weight(m, "logits.weight", "f32[5, 12]", 12.0);
    t_flops(m, "loss", 4 * 10);
    t_free(m);
  }
  t_err(MODEL("input i : f32[2, 3]\n e = embedding(i, input_dim=10, output_dim=4)\n output e"),
        "embedding: argument 'indices' must be i32, but 'i' is f32[2, 3]");
  t_err(MODEL("input i : i32[2]\n e = embedding(i, input_dim=0, output_dim=4)\n output e"), "embedding: input_dim and output_dim must be positive");
  t_err(MODEL("input i : i32[2]\n param w : f32[10, 5]\n e = embedding(i, w, input_dim=10, output_dim=4)\n output e"),
        "embedding: 'w' has shape [10, 5] but must be [10, 4]");
  t_err(MODEL("input x : f32[2, 5]\n input y : f32[2]\n l = softmax_cross_entropy(x, y)\n output l"),
        "softmax_cross_entropy: argument 'label' must be i32, but 'y' is f32[2]");
  t_err(MODEL("input x : f32[2, 5]\n input y : i32[3]\n l = softmax_cross_entropy(x, y)\n output l"),
        "softmax_cross_entropy: label must be [2] to match the logits' batch", "x f32[2, 5], y i32[3]");
  t_err(MODEL("input x : f32[2, 5, 3]\n input y : i32[2]\n l = softmax_cross_entropy(x, y)\n output l"),
        "softmax_cross_entropy: logits must be [batch, classes], got rank 3");
  t_err(MODEL("input x : f32[2, 5]\n l = relu(x)\n train l with sgd(lr=0.1)"), "train target 'l' must be a scalar f32[], but it is f32[2, 5]");
}

/* ---- initializers, optimizers ---- */

static void test_init_optim(void) {
  t_model *m = t_ok(MODEL("input x : f32[2, 3]\n param w : f32[4, 3] = normal(std=0.01)\n param b = constant(0.5)\n"
                          "param w2 = uniform(-0.2, 0.3)\n param b2 = zeros()\n param w3 = xavier()\n param g = ones()\n"
                          "param w4 = normal(1, 2)\n"
                          "h = fully_connected(x, w, b, num_hidden=4)\n k = fully_connected(h, w2, b2, num_hidden=2)\n"
                          "j = fully_connected(h, w3, num_hidden=2, no_bias=true)\n n = layer_norm(h, g)\n"
                          "o = fully_connected(h, w4, num_hidden=1, no_bias=true)\n"
                          "loss = mean(k)\n output j, n, o\n train loss with adam()"));
  if (m) {
    t_param(m, "w", "f32[4, 3]", K_INIT_NORMAL, 0, 0.01), t_param(m, "b", "f32[4]", K_INIT_CONSTANT, 0.5, 0);
    t_param(m, "w2", "f32[2, 4]", K_INIT_UNIFORM, -0.2, 0.3), t_param(m, "b2", "f32[2]", K_INIT_ZEROS, 0, 0);
    t_param(m, "w3", "f32[2, 4]", K_INIT_XAVIER, 0, 0), t_param(m, "g", "f32[4]", K_INIT_ONES, 0, 0);
    t_param(m, "w4", "f32[1, 4]", K_INIT_NORMAL, 1, 2), t_param(m, "n.beta", "f32[4]", K_INIT_ZEROS, 0, 0);
    const ir_optimizer *o = &m->g->optim;
    CHECK(m->g->has_train && o->kind == K_OPT_ADAM && o->lr == 0.001f && o->adam.beta1 == 0.9f && o->adam.beta2 == 0.999f &&
          o->adam.eps == 1e-8f && o->adam.wd == 0, "adam defaults");
    CHECK(m->g->loss == ir_graph_find_tensor(m->g, "loss"), "train target");
    t_free(m);
  }
  m = t_ok(MODEL("input x : f32[2]\n loss = sum(x * x)\n train loss with sgd(lr=0.05, momentum=0.9)"));
  if (m) {
    const ir_optimizer *o = &m->g->optim;
    CHECK(o->kind == K_OPT_SGD && o->lr == 0.05f && o->sgd.momentum == 0.9f && o->sgd.wd == 0, "sgd attributes");
    t_free(m);
  }
  m = t_ok(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with adam(lr=0.01, beta2=0.99, wd=0.1)"));
  if (m) CHECK(m->g->optim.lr == 0.01f && m->g->optim.adam.beta2 == 0.99f && m->g->optim.adam.beta1 == 0.9f && m->g->optim.adam.wd == 0.1f, "adam overrides"), t_free(m);
  t_err(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with sgd()"), "sgd needs a learning rate");
  t_err(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with adamx()"), "unknown optimizer 'adamx'", "did you mean 'adam'");
  m = t_ok(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with adamw(lr=0.01) schedule cosine(total=100, warmup=10)"));
  if (m) {
    const ir_optimizer *o = &m->g->optim;
    CHECK(o->kind == K_OPT_ADAMW && o->adam.wd == 0.01f && o->sched.kind == K_SCHED_COSINE && o->sched.total == 100 &&
          o->sched.warmup == 10 && o->sched.min_lr == 0, "adamw with a cosine schedule");
    t_free(m);
  }
  m = t_ok(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with sgd(lr=0.1, momentum=0.9, nesterov=true) "
                 "schedule multistep(milestones=(10, 20), gamma=0.5)"));
  if (m) {
    const k_schedule *k = &m->g->optim.sched;
    CHECK(m->g->optim.sgd.nesterov == 1 && k->kind == K_SCHED_MULTISTEP && k->milestones.n == 2 && k->milestones.v[1] == 20 &&
          k->gamma == 0.5f, "nesterov sgd with a multistep schedule");
    t_free(m);
  }
  m = t_ok(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with adam() schedule onecycle(total=50)"));
  if (m) CHECK(m->g->optim.sched.pct_start == 0.3f && m->g->optim.sched.div_factor == 25 && m->g->optim.sched.final_div_factor == 1e4f,
               "onecycle's torch defaults"), t_free(m);
  t_err(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with adam() schedule cosin(total=9)"), "unknown schedule 'cosin'",
        "did you mean 'cosine'");
  t_err(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with adam() schedule cosine(warmup=9)"), "cosine needs 'total'");
  t_err(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with adam() schedule cosine(total=9, warmup=9)"),
        "schedule cosine: total must exceed warmup");
  t_err(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with adam() schedule multistep(milestones=(5, 5))"),
        "milestones must be positive and increasing");
  t_err(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with adam() schedule step(step_size=0)"), "step_size must be at least 1");
  t_err(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with sgd(lr=0.1, nesterov=true)"), "nesterov needs momentum");
  m = t_ok(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with adam() schedule exponential(0.9) clip_norm=2 * 0.5"));
  if (m) CHECK(m->g->optim.clip_norm == 1.0f && m->g->optim.sched.gamma == 0.9f, "clip_norm"), t_free(m);
  t_err(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with adam() clip_norm=-1"), "clip_norm must be a positive number");
  m = t_ok(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with adamw() clip_norm=1 wd_exclude=norm, bias"));
  if (m) CHECK(m->g->optim.wd_exclude == (IR_WDX_BIAS | IR_WDX_NORM) && m->g->optim.clip_norm == 1.0f, "wd_exclude=norm, bias"), t_free(m);
  m = t_ok(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with adamw() wd_exclude=bias"));
  if (m) CHECK(m->g->optim.wd_exclude == IR_WDX_BIAS, "wd_exclude=bias"), t_free(m);
  t_err(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with adamw() wd_exclude=biass"), "wd_exclude: unknown kind 'biass'",
        "did you mean 'bias'");
  t_err(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with adamw() wd_exclude=bias,bias"), "wd_exclude names 'bias' twice");
  t_err(MODEL("input x : f32[2]\n loss = sum(x)\n train loss with adam(lr=-1)"), "the learning rate must be positive");
  t_err(MODEL("input x : f32[2, 3]\n param w = normall()\n y = fully_connected(x, w, num_hidden=2, no_bias=true)\n output y"),
        "unknown initializer 'normall'", "did you mean 'normal'");
  t_err(MODEL("input x : f32[2, 3]\n param w = constant()\n y = fully_connected(x, w, num_hidden=2, no_bias=true)\n output y"),
        "constant needs 'value'");
  t_err(MODEL("input x : f32[2, 3]\n param w : f32[2, 3]\n y = relu(x)\n output y\n param v\n"), "parameter 'v' has no declared shape and no op infers one");
}

/* ---- size limits ---- */

/* Defs d_i calling d_{i-1} twice: 2^depth relu nodes. 16 levels lower (65536 nodes); 40
 * levels are refused at FE_MAX_NODES with the chain of calls, instead of running forever. */
static void test_def_growth(void) {
  char *src = NULL;
  size_t len = 0;
  for (int depth = 16; depth <= 40; depth += 24) {
    FILE *o = open_memstream(&src, &len);
    fprintf(o, "def d0(x) {\n return relu(x)\n}\n");
    for (int i = 1; i <= depth; i++) fprintf(o, "def d%d(x) {\n a = d%d(x)\n return d%d(a)\n}\n", i, i - 1, i - 1);
    fprintf(o, "model m {\n input x : f32[4]\n y = d%d(x)\n output y\n}\n", depth);
    fclose(o);
    if (depth == 16) {
      t_model *m = t_ok(src);
      if (m) CHECK(ir_nnodes(m->g) == 1 << 16, "16 levels of doubling defs: %d nodes", ir_nnodes(m->g));
      if (m) t_free(m);
    } else {
      t_err(src, "the model grows past 300000 nodes while inlining defs", "d40);");
    }
    free(src);
  }
}

/* ---- naming rules of SPEC section 1 ---- */

static void test_naming(void) {
  t_model *m = t_ok("dim batch = 4\n"
                    "def blk(x, n: int, k: int = 2) {\n c = fully_connected(x, num_hidden=n * k)\n return relu(fully_connected(c, num_hidden=n))\n}\n"
                    "def two(x) {\n a = relu(x)\n return a, sigmoid(x)\n}\n"
                    MODEL("input x : f32[batch, 6]\n h = relu(fully_connected(x, num_hidden=8))\n b1 = blk(h, n=3)\n"
                          "p, q = two(b1)\n output p, q"));
  if (m) {
    t_type(m, "h", "f32[4, 8]"), t_weight(m, "h.weight", "f32[8, 6]", 6.0), t_param(m, "h.bias", "f32[8]", K_INIT_ZEROS, 0, 0);
    t_weight(m, "b1.c.weight", "f32[6, 8]", 8.0), t_weight(m, "b1.weight", "f32[3, 6]", 6.0), t_type(m, "b1", "f32[4, 3]");
    t_node(m, "b1", relu), t_node(m, "b1.c", fully_connected);
    /* every returned value takes its target's name: p is the def's own `a` (its node renamed
       from p.a), q a value computed in the return expression */
    const ir_tensor *p = t_tensor(m, "p", __LINE__), *q = t_tensor(m, "q", __LINE__);
    CHECK(p && q && p->producer >= 0 && q->producer >= 0 && ir_node_at(m->g, p->producer)->op == IR_OP_relu &&
          ir_node_at(m->g, q->producer)->op == IR_OP_sigmoid, "multi-target assignment binds p to relu, q to sigmoid");
    CHECK(p && !strcmp(ir_node_at(m->g, p->producer)->name, "p") && ir_graph_find_tensor(m->g, "p.a") < 0, "p's node is named p");
    CHECK(m->g->outputs.len == 2 && IR_VEC_AT(m->g->outputs, int, 1) == ir_graph_find_tensor(m->g, "q"), "output q");
    t_type(m, "p", "f32[4, 3]"), t_type(m, "q", "f32[4, 3]");
    t_free(m);
  }
  /* however the values are written: both statements, or an expression and a statement; the
     parameters of a returned statement keep that statement's names */
  m = t_ok("def two(x) {\n a = x + 1.0\n d = x * 2.0\n return a, d\n}\n"
           "def rev(x) {\n d = x * 2.0\n return x + 1.0, d\n}\n"
           "def fc(x) {\n a = fully_connected(x, num_hidden=3)\n return a, relu(a)\n}\n"
           MODEL("input x : f32[2, 4]\n p, q = two(x)\n r, s = rev(x)\n u, v = fc(x)\n output p, q, r, s, u, v"));
  if (m) {
    t_node(m, "p", add), t_node(m, "q", mul), t_node(m, "r", add), t_node(m, "s", mul), t_node(m, "u", fully_connected), t_node(m, "v", relu);
    t_weight(m, "u.a.weight", "f32[3, 4]", 4.0);
    const char *want[] = {"p", "q", "r", "s", "u", "v"};
    CHECK(m->g->outputs.len == 6, "six outputs");
    for (int i = 0; i < 6 && m->g->outputs.len == 6; i++)
      CHECK(!strcmp(ir_tensor_at(m->g, IR_VEC_AT(m->g->outputs, int, i))->name, want[i]), "output %d is %s", i, want[i]);
    t_free(m);
  }
  /* a loss no parameter reaches still compiles, with a warning; one that a parameter reaches
     gets none */
  m = t_ok(MODEL("input x : f32[2, 4]\n input l : i32[2]\n y = x * 2.0\n loss = softmax_cross_entropy(y, l)\n"
                 " train loss with sgd(lr=0.1)"));
  if (m) CHECK(m->msg && strstr(m->msg, "warning: no parameter reaches the loss 'loss'"), "warning for an unreachable loss: %s", m->msg);
  if (m) t_free(m);
  m = t_ok(MODEL("input x : f32[2, 4]\n input l : i32[2]\n y = fully_connected(x, num_hidden=3)\n"
                 " loss = softmax_cross_entropy(y, l)\n train loss with sgd(lr=0.1)"));
  if (m) CHECK(!m->msg || !strstr(m->msg, "warning"), "no warning when a parameter reaches the loss: %s", m->msg);
  if (m) t_free(m);
  test_def_growth();
  /* an enum value far longer than the message buffer (fuzz_frontend's first finding) */
  t_err(MODEL("input x : f32[2, 4]\n y = activation(x, act_type=\"softrelu_softrelu_softrelu_softrelu_softrelu_softrelu"
              "_softrelu_softrelu_softrelu_softrelu_softrelu_softrelu_softrelu_softrelu_softrelu_softrelu_softrelu"
              "_softrelu_softrelu_softrelu_softrelu_softrelu_softrelu_softrelu_softrelu_softrelu_softrelu_softrelu"
              "_softrelu_softrelu_softrelu_softrelu_softrelu_softrelu_softrelu_softrelu\")\n output y"),
        "attribute 'act_type' cannot be \"softrelu_softrelu", "...\"");
  const char *src = "dim batch = 4\n" MODEL("input x : f32[batch, 6]\n y = fully_connected(x, num_hidden=2)\n output y");
  fe_define one = {"batch", 1, 0};
  t_model *d = t_lower_defs(src, &one, 1);
  if (CHECK(d->g != NULL, "-D batch=1 lowers: %s", d->msg ? d->msg : "")) t_type(d, "y", "f32[1, 2]"), t_type(d, "x", "f32[1, 6]");
  t_free(d);
  fe_define bad = {"bach", 2, 0};
  d = t_lower_defs(src, &bad, 1);
  CHECK(d->g == NULL && d->msg && strstr(d->msg, "no dim named 'bach'") && strstr(d->msg, "did you mean 'batch'"), "-D of an unknown dim: %s", d->msg ? d->msg : "");
  t_free(d);
  t_err(MODEL("input x : f32[2, 6]\n y = fully_connected(x, num_hidden=2) + fully_connected(x, num_hidden=2)\n output y"),
        "would create parameters named 'y.*'", "give one of them its own statement");
  t_err(MODEL("input x : f32[2, 6]\n y = relu(x)\n y = sigmoid(x)\n output y"), "'y' is already defined");
  t_err("def two(x) {\n return relu(x), relu(x)\n}\n" MODEL("input x : f32[2]\n a, b, c = two(x)\n output a"),
        "3 names are assigned but def 'two' returns 2 values");
}

/* Every op of the registry lowered cleanly in at least one model above. */
static void test_coverage(void) {
  for (int op = 0; op < IR_OP_COUNT; op++) CHECK(covered[op], "op %s is not covered", ir_ops[op].name);
}

/* The kernels' op list names each op's param struct too (k_ops.def's K_OP_PARAM rows, by which
 * the runtime checks a descriptor's param sizes): it must be the op row's. */
static void test_param_sizes(void) {
  for (int op = 0; op < IR_OP_COUNT; op++)
    CHECK(ir_ops[op].param_size == k_op_param_bytes(op), "op %s: its row's param struct has %zu bytes, its K_OP_PARAM row %zu",
          ir_ops[op].name, ir_ops[op].param_size, k_op_param_bytes(op));
}

/* An error inside a def is printed and counted once however many models call it (the same
 * error at the same place); the second model's lowering must still fail rather than return a
 * graph with the failed statements missing (fuzz_frontend's finding after 7.7 M executions:
 * the second model came back with its train target unset, and printing it read outside the
 * tensor table). */
static void test_def_error_repeat(void) {
  const char *src = "def f(x) {\n  return relu(nosuch)\n}\n"
                    "model a {\n  input x : f32[2]\n  y = f(x)\n  output y\n}\n"
                    "model b {\n  input x : f32[2]\n  input l : i32[2]\n  y = f(x)\n"
                    "  loss = softmax_cross_entropy(y, l)\n  train loss with sgd(lr=0.1)\n}\n";
  FILE *sink = tmpfile();
  ir_diag d;
  ir_diag_init(&d, sink);
  fe_file *f = fe_parse_text("repeat.kiln", src, strlen(src), &d);
  int lowered = 0, models = 0;
  if (CHECK(f && !d.errors && !fe_check_file(f, NULL, 0, &d), "the file parses and checks"))
    for (fe_model *m = f->models; m; m = m->next, models++) {
      ir_graph *g = fe_lower_model(f, m, NULL, 0, &d);
      lowered += g != NULL;
      ir_graph_free(g);
    }
  CHECK(models == 2 && lowered == 0, "neither model lowers (%d of %d did)", lowered, models);
  CHECK(d.errors == 1, "the repeated error is counted once (%d)", d.errors);
  fe_file_free(f);
  ir_diag_free(&d);
  if (sink) fclose(sink);
}

/* The size limits (ir.h): 2^40 per dimension and per tensor, declared or inferred, so that
 * element counts cannot overflow; FLOPs, products of several sizes, saturate. */
static void test_size_limits(void) {
  t_model *m = t_ok(MODEL("  input x : f32[1048576, 1048576]\n  input w : f32[1048576, 1048576]\n"
                          "  y = matmul(x, w)\n  z = relu(y)\n  output z"));
  if (m) t_type(m, "z", "f32[1048576, 1048576]"), t_flops(m, "y", INT64_C(1) << 61), t_flops(m, "z", INT64_C(1) << 40), t_free(m);
  m = t_ok(MODEL("  input x : f32[1, 1, 1048576, 1048576]\n"
                 "  c = convolution(x, kernel=(524288, 524288), num_filter=1, no_bias=true)\n  output c"));
  if (m) {
    t_type(m, "c", "f32[1, 1, 524289, 524289]");
    t_flops(m, "c", INT64_MAX);                     /* 2^77: saturated */
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    ir_print_summary(m->g, out);
    fclose(out);
    t_check(strstr(text, "at least 9223372036854775807 FLOPs") != NULL, __LINE__, "summary:\n%s", text);
    free(text);
    t_free(m);
  }
  t_err(MODEL("  input x : f32[64, 100000]\n  y = fully_connected(x, num_hidden=999999999999999)\n  output y"),
        "fully_connected: num_hidden 999999999999999 is larger than a dimension can be (2^40)");
  t_err(MODEL("  input x : f32[1099511627777]\n  output x"), "dimension 1099511627777 is too large (2^40 at most)");
  t_err(MODEL("  input x : f32[1048576, 1048577]\n  output x"), "f32[1048576, 1048577] is too large: 1.1e+12 elements, more than 2^40");
  t_err(MODEL("  input a : f32[1048576, 1, 2, 2]\n  input b : f32[1, 1048576, 2, 2]\n  c = matmul(a, b)\n  output c"),
        "matmul: output 'c' would be f32[1048576, 1048576, 2, 2]: 4.4e+12 elements, more than 2^40");
  t_err(MODEL("  input x : f32[1, 1, 64, 64]\n  c = convolution(x, kernel=(3, 3), num_filter=1, dilate=999999999999999)\n  output c"),
        "convolution: dilate (999999999999999, 999999999999999): 999999999999999 is larger than a dimension can be (2^40)");
  t_err(MODEL("  input x : f32[1, 1, 64, 64]\n  c = convolution(x, kernel=(1099511627776, 1), num_filter=1)\n  output c"),
        "the kernel (extent 1099511627776) is larger than the padded input (64)");
  t_err(MODEL("  input x : f32[1, 1, 64, 64]\n  c = pooling(x, kernel=(2, 2), stride=1099511627777)\n  output c"),
        "pooling: stride (1099511627777, 1099511627777): 1099511627777 is larger than a dimension can be (2^40)");
  t_err(MODEL("  input i : i32[4]\n  e = embedding(i, input_dim=1048577, output_dim=1048576)\n  output e"),
        "embedding: parameter 'e.weight' would be f32[1048577, 1048576]: 1.1e+12 elements, more than 2^40");
  t_err(MODEL("  input x : f32[4]\n  r = reshape(x, shape=(4, 1099511627777))\n  output r"),
        "reshape: shape entry 1099511627777 is larger than a dimension can be (2^40)");
  t_err(MODEL("  input x : f32[4]\n  input y : f32[1]\n  c = concat(x, broadcast_to(y, shape=1099511627776), dim=0)\n  output c"),
        "concat: output 'c' would be f32[1099511627780]: dimension 1099511627780 is larger than 2^40");
  /* A front end that declares an input beyond the limits (the ONNX importer allows 2^32 per
   * dimension): refused by the first node that reads it, before any count is computed. */
  ir_graph *g = ir_graph_new("m");
  int x = ir_graph_add_tensor(g, "x", IR_T_INPUT, (ir_loc){0});
  ir_tensor_at(g, x)->shape = (k_shape){.rank = 2, .d = {INT64_C(1) << 32, INT64_C(1) << 32}};
  ir_tensor_at(g, x)->shape_known = ir_tensor_at(g, x)->declared = true;
  ir_graph_add_node(g, IR_OP_relu, "y", 1, &x, (ir_loc){0});
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  ir_diag d;
  ir_diag_init(&d, out);
  int errors = ir_infer_shapes(g, &d);
  fclose(out);
  t_check(errors == 1 && strstr(text, "relu: input 'x' is f32[4294967296, 4294967296]: 1.84e+19 elements, more than 2^40"),
          __LINE__, "%d errors:\n%s", errors, text);
  free(text);
  ir_diag_free(&d);
  ir_graph_free(g);
}

int main(void) {
  test_binary();
  test_unary();
  test_reduce();
  test_reduce_beyond();
  test_reshape_flatten();
  test_transpose_dims();
  test_squeeze_broadcast();
  test_slice_concat();
  test_pad();
  test_matmul();
  test_fully_connected();
  test_convolution();
  test_convolution_pads();
  test_pooling();
  test_pooling_ceil();
  test_norm();
  test_dropout_softmax();
  test_embedding_loss();
  test_init_optim();
  test_naming();
  test_def_error_repeat();
  test_size_limits();
  test_coverage();
  test_param_sizes();
  return ts_summary("infer");
}
