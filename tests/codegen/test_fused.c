/* test_fused.c — the CPU code generator's fused loops against the reference kernels: every
 * fused node of the examples, tests/passes/models and small models here (every elementwise
 * op, activation types, broadcasts, kAddTo, backward members), JIT'd at O2 (and O0..O3 for
 * one model), run on random data and compared with the members' kernels run one by one as
 * exec/ex_node.c runs them. Also: vector IR for a long contiguous group, a .o, cg_jit. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cg_cpu.h"
#include "k_epilogue.h"
#include "k_parallel.h"
#include "kiln_test.h"
#include "ops.h"

static int passed, failed;
static long long t_elems, t_inexact;    /* compared elements; those not bit-identical */
static long long t_folded;              /* of those, in epilogues that fold a batch_norm (within rounding) */
static double t_maxrel;
static char t_where[256];
static bool t_seen[2][IR_OP_COUNT];     /* [backward][op]: a member checked */

static bool t_check(bool ok, const char *fmt, ...) {
  if (ok) return passed++, true;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "test_fused: FAIL: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  failed++;
  return false;
}

static uint64_t t_rng = 88172645463325252ull;
static float t_rand(void) {
  t_rng ^= t_rng << 13, t_rng ^= t_rng >> 7, t_rng ^= t_rng << 17;
  return (float)((t_rng >> 11) % 4000001) / 1000000.0f - 2.0f;   /* [-2, 2] */
}

/* ---- one fused node: members' kernels vs the JIT'd loop ---- */

typedef struct {
  const ir_graph *g;
  const ir_node *fn;
  float **ref, **jit;           /* per tensor */
} t_case;

typedef struct {
  int groups, inplace_groups, epilogues;
} t_stats;
static t_stats t_st;

static int64_t t_numel(const ir_graph *g, int t) { return ir_tensor_numel(ir_tensor_at(g, t)); }

static bool t_is(const int *v, int n, int t) {
  for (int i = 0; i < n; i++)
    if (v[i] == t) return true;
  return false;
}

/* Buffers for every tensor the group touches: externals random (a kAddTo output's old value
 * too) but a constant, which holds its value as the runtime fills it (the fused code folds
 * it); internals zero; the JIT gets copies of the externals. */
static void t_alloc(t_case *c, int t) {
  if (t < 0 || c->ref[t]) return;
  int64_t n = t_numel(c->g, t);
  bool ext = t_is(c->fn->in, c->fn->nin, t) || t_is(c->fn->out, c->fn->nout, t);
  const ir_tensor *x = ir_tensor_at(c->g, t);
  c->ref[t] = calloc((size_t)n + 1, sizeof(float));
  for (int64_t i = 0; ext && i < n; i++) c->ref[t][i] = x->kind == IR_T_CONST ? x->value : t_rand();
  if (!ext) return;
  c->jit[t] = malloc(sizeof(float) * ((size_t)n + 1));
  memcpy(c->jit[t], c->ref[t], sizeof(float) * (size_t)n);
}

static k_tensor t_kt(const t_case *c, int t, const k_shape *gshape) {
  if (t < 0) return (k_tensor){NULL, *gshape, K_F32};
  return (k_tensor){c->ref[t], ir_tensor_at(c->g, t)->shape, K_F32};
}

static bool t_run_member(const t_case *c, const ir_node *m, const k_shape *gshape, void *temp, size_t tb) {
  k_tensor in[8], out[4];
  k_req req[4];
  char msg[256] = "";
  for (int k = 0; k < m->nin; k++) in[k] = t_kt(c, m->in[k], gshape);
  for (int j = 0; j < m->nout; j++) out[j] = t_kt(c, m->out[j], gshape), req[j] = m->out[j] >= 0 ? ir_node_req(m, j) : kNullOp;
  k_call call = {in, m->nin, out, m->nout, req, m->param, temp, tb, 0, 0, c->g->mode == IR_MODE_TRAIN, msg, sizeof msg, NULL, NULL, NULL};
  k_fn f = m->kind == IR_N_OP ? ir_ops[m->op].forward : ir_ops[m->op].backward;
  return t_check(f && f(&call) == 0, "%s: kernel failed: %s", m->name, msg);
}

/* Equal bit for bit (-0 and +0 differ), or both NaN: the fused loops and the kernels share
 * one definition of every function and one evaluation order. A difference is counted and
 * fails the group; its size is reported to tell a rounding slip from a wrong formula. */
static bool t_same(float a, float b) {
  t_elems++;
  if (memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b))) return true;
  t_inexact++;
  if (getenv("KILN_TEST_VERBOSE")) fprintf(stderr, "  not bit-identical: kernels %a, fused %a (%s)\n", a, b, t_where);
  double d = fabs((double)a - b) / fmax(1.0, fmax(fabs(a), fabs(b)));
  if (d > t_maxrel) t_maxrel = d;
  return false;
}

/* Within float rounding of the tensor's scale (1e-5 of its largest magnitude: folding rounds
 * W a and bias a + b before the sums, and an output near 0 is a difference of terms of that
 * scale), for what folds a batch_norm into a convolution's weights. */
static bool t_compare_near(const t_case *c, const char *label) {
  int t = c->fn->out[0];
  float scale = 0;
  for (int64_t i = 0; i < t_numel(c->g, t); i++) scale = fmaxf(scale, fabsf(c->ref[t][i]));
  for (int64_t i = 0; i < t_numel(c->g, t); i++) {
    float a = c->ref[t][i], b = c->jit[t][i];
    t_elems++;
    if (memcmp(&a, &b, sizeof a) == 0) continue;
    t_folded++;
    if (!(fabsf(a - b) <= 1e-5f * scale))
      return t_check(false, "%s %s: %s[%lld] kernels %.9g, folded %.9g", label, c->fn->name, ir_tensor_at(c->g, t)->name,
                     (long long)i, a, b);
  }
  return t_check(true, "");
}

static bool t_compare(const t_case *c, const char *label) {
  for (int j = 0; j < c->fn->nout; j++) {
    int t = c->fn->out[j];
    snprintf(t_where, sizeof t_where, "%s %s %s", label, c->fn->name, ir_tensor_at(c->g, t)->name);
    for (int64_t i = 0; i < t_numel(c->g, t); i++)
      if (!t_same(c->ref[t][i], c->jit[t][i]))
        return t_check(false, "%s %s: %s[%lld] kernels %.9g, fused %.9g", label, c->fn->name, ir_tensor_at(c->g, t)->name,
                       (long long)i, c->ref[t][i], c->jit[t][i]);
  }
  return t_check(true, "");
}

static void t_free_case(t_case *c) {
  for (int t = 0; t < ir_ntensors(c->g); t++) free(c->ref[t]), free(c->jit[t]);
  free(c->ref), free(c->jit);
}

typedef void (*t_fused_fn)(void *const *ptrs);

static bool t_aliased(const ir_node *fn, int j) {
  return fn->inplace && fn->inplace[j] >= 0 && ir_node_req(fn, j) == kWriteInplace;
}

/* inplace: each output that may share an input's buffer gets that buffer (as the plan does);
 * afterwards its value is copied out of the input's buffer for the comparison. */
static void t_check_node(const ir_graph *g, const ir_node *fn, t_fused_fn f, bool inplace, const char *label) {
  t_case c = {g, fn, calloc((size_t)ir_ntensors(g), sizeof(float *)), calloc((size_t)ir_ntensors(g), sizeof(float *))};
  for (int k = 0; k < fn->nin; k++) t_alloc(&c, fn->in[k]);
  for (int j = 0; j < fn->nout; j++) t_alloc(&c, fn->out[j]);
  for (int s = 0; s < fn->nsub; s++)
    for (int k = 0; k < fn->sub[s].nin + fn->sub[s].nout; k++)
      t_alloc(&c, k < fn->sub[s].nin ? fn->sub[s].in[k] : fn->sub[s].out[k - fn->sub[s].nin]);
  const k_shape *gshape = &ir_tensor_at(g, fn->out[0])->shape;
  bool ok = t_check(fn->nin + fn->nout <= 64, "%s: too many operands for the test", fn->name);
  for (int s = 0; ok && s < fn->nsub; s++) ok = t_run_member(&c, &fn->sub[s], gshape, NULL, 0);
  for (int s = 0; s < fn->nsub; s++) t_seen[fn->sub[s].kind == IR_N_BACKWARD][fn->sub[s].op] = true;
  void *ptrs[64];
  for (int k = 0; ok && k < fn->nin + fn->nout; k++) ptrs[k] = c.jit[k < fn->nin ? fn->in[k] : fn->out[k - fn->nin]];
  for (int j = 0; ok && inplace && j < fn->nout; j++)
    if (t_aliased(fn, j)) ptrs[fn->nin + j] = ptrs[fn->inplace[j]];
  if (ok) f(ptrs);
  for (int j = 0; ok && inplace && j < fn->nout; j++)
    if (t_aliased(fn, j)) memcpy(c.jit[fn->out[j]], ptrs[fn->nin + j], sizeof(float) * (size_t)t_numel(g, fn->out[j]));
  if (ok) t_compare(&c, label);
  t_free_case(&c);
}

/* An epilogue node: its members' kernels one by one (the heavy op into its own output, then
 * each tail op) against the heavy kernel running the tail on each output block, as the
 * generated code calls it, bit for bit — but within rounding where a convolution folds the
 * batch_norm that opens its epilogue into its weights (k_conv_direct.c, docs/passes.md).
 * batch_norm's moving variance is drawn positive. */
/* A training convolution's epilogue also gathers its batch_norm's row sums (out[1]): the
 * reference is k_bn_row_sums of each plane of the members' result, which is what batch_norm
 * computes without them (tests/passes/test_differential.c checks that end to end). */
static void t_stats_ref(t_case *c) {
  const k_epi_step *s = &c->fn->epi->step[c->fn->epi->nsteps - 1];
  int y = c->fn->out[0], st = c->fn->out[1];
  t_alloc(c, st);
  for (int64_t p = 0; p < t_numel(c->g, y) / s->inner; p++) k_bn_row_sums(c->ref[y] + p * s->inner, s->inner, (double *)c->ref[st] + 2 * p);
}

static void t_check_epilogue(const ir_graph *g, const ir_node *fn, const char *label) {
  t_case c = {g, fn, calloc((size_t)ir_ntensors(g), sizeof(float *)), calloc((size_t)ir_ntensors(g), sizeof(float *))};
  for (int s = 0; s < fn->nsub; s++)
    for (int k = 0; k < fn->sub[s].nin + fn->sub[s].nout; k++)
      t_alloc(&c, k < fn->sub[s].nin ? fn->sub[s].in[k] : fn->sub[s].out[k - fn->sub[s].nin]);
  for (int k = 0; k < fn->nin; k++)
    for (int64_t i = 0; ir_tensor_at(g, fn->in[k])->kind == IR_T_AUX && i < t_numel(g, fn->in[k]); i++)
      c.ref[fn->in[k]][i] = c.jit[fn->in[k]][i] = fabsf(c.ref[fn->in[k]][i]) + 0.1f;
  size_t tb = pass_node_temp_bytes(g, fn);
  void *temp = tb ? malloc(tb) : NULL;
  const k_shape *gshape = &ir_tensor_at(g, fn->out[0])->shape;
  bool ok = t_check(fn->nin <= 16 && (!tb || temp), "%s: too many operands or no memory", fn->name);
  for (int s = 0; ok && s < fn->nsub; s++) ok = t_run_member(&c, &fn->sub[s], gshape, s ? NULL : temp, s ? 0 : tb);
  if (ok && k_epi_has_stats(fn->epi)) t_stats_ref(&c);
  k_tensor in[16], out[2] = {{c.jit[fn->out[0]], *gshape, K_F32}};
  for (int k = 0; ok && k < fn->nin; k++) in[k] = (k_tensor){c.jit[fn->in[k]], ir_tensor_at(g, fn->in[k])->shape, K_F32};
  if (fn->nout > 1) out[1] = (k_tensor){c.jit[fn->out[1]], ir_tensor_at(g, fn->out[1])->shape, K_F32};
  k_req req[2] = {kWriteTo, kWriteTo};
  char msg[256] = "";
  k_call call = {in, fn->nin, out, fn->nout, req, fn->param, temp, tb, 0, 0, g->mode == IR_MODE_TRAIN, msg, sizeof msg, NULL, fn->epi, NULL};
  if (ok) ok = t_check(ir_ops[fn->op].forward(&call) == 0, "%s %s: the heavy kernel failed: %s", label, fn->name, msg);
  bool folds = fn->op == IR_OP_convolution && fn->epi->nsteps > 0 && fn->epi->step[0].kind == K_EPI_AFFINE;
  if (ok) folds ? t_compare_near(&c, label) : t_compare(&c, label);
  t_st.epilogues++;
  free(temp);
  t_free_case(&c);
}

/* ---- a graph: emit, optimise, JIT, check every fused node ---- */


static int t_large = -1;   /* cg_options.large of the modules built here: never but where a case says */

static void t_check_graph_at(const ir_graph *g, bool train, int level, const char *label) {
  char err[1024] = "";
  cg_options o = {.opt_level = level, .large = t_large};
  cg_llvm *m = cg_llvm_new(label, &o, err, sizeof err);
  bool ok = t_check(m != NULL, "%s: cg_llvm_new: %s", label, err);
  ok = ok && t_check(!cg_emit_fused_all(m, train ? NULL : g, train ? g : NULL, err, sizeof err), "%s: emit: %s", label, err);
  ok = ok && t_check(!cg_optimize(m, err, sizeof err), "%s: O%d: %s", label, level, err);
  ok = ok && t_check(!cg_jit_start(m, err, sizeof err), "%s: %s", label, err);
  for (int i = 0; ok && i < ir_nnodes(g); i++) {
    const ir_node *fn = ir_node_at(g, i);
    if (fn->kind != IR_N_FUSED) continue;
    if (fn->epi) {
      t_check_epilogue(g, fn, label);
      continue;
    }
    char name[64];
    cg_fused_name(name, sizeof name, train, i);
    t_fused_fn f = (t_fused_fn)(uintptr_t)cg_jit_lookup(m, name, err, sizeof err);
    if (!t_check(f != NULL, "%s: %s", label, err)) continue;
    t_check_node(g, fn, f, false, label);
    bool alias = false;
    for (int j = 0; j < fn->nout; j++) alias |= t_aliased(fn, j);
    if (alias) t_check_node(g, fn, f, true, label), t_st.inplace_groups++;
    t_st.groups++;
  }
  cg_llvm_free(m);
}

static int t_count_fused(const ir_graph *g) {
  int c = 0;
  for (int i = 0; g && i < ir_nnodes(g); i++) c += ir_node_at(g, i)->kind == IR_N_FUSED && !ir_node_at(g, i)->epi;
  return c;
}

/* ---- models: from files (small dims) and from text ---- */

/* Both modes of every model of fr's file through the pass pipeline; fn gets each compiled graph. */
static void t_each_graph(ts_front *fr, bool loaded, const char *file, int min_groups,
                         void (*fn)(const ir_graph *g, bool train, const char *label)) {
  int groups = 0;
  if (!t_check(loaded, "%s: front end", file)) return;
  for (fe_model *mo = fr->file->models; mo; mo = mo->next) {
    ir_graph *low = ts_lower(fr, mo);
    if (!t_check(low != NULL, "%s:%s lowers", file, mo->name)) continue;
    for (int train = 0; train < 1 + low->has_train; train++) {
      pass_ctx cx;
      /* Without the layout pass: each node here runs on NCHW tensors the test makes itself
       * (tests/passes/test_differential.c checks the blocked layouts bit for bit). */
      ir_graph *g = ts_compile_cx(low, train ? IR_MODE_TRAIN : IR_MODE_PREDICT, 1u << PASS_layout, &cx, &fr->diag);
      char label[256];
      snprintf(label, sizeof label, "%s:%s:%s", file, mo->name, train ? "train" : "predict");
      if (t_check(g != NULL, "%s compiles", label)) fn(g, train, label), groups += t_count_fused(g);
      ts_graph_free(g);
      pass_ctx_free(&cx);
    }
    ir_graph_free(low);
  }
  t_check(groups >= min_groups, "%s: %d fused groups, expected at least %d", file, groups, min_groups);
  printf("fused: %s: %d groups (predict and train)\n", file, groups);
}

static void t_check_graph_o2(const ir_graph *g, bool train, const char *label) { t_check_graph_at(g, train, 2, label); }

static void t_check_graph_all_levels(const ir_graph *g, bool train, const char *label) {
  for (int level = 0; level <= 3; level++) t_check_graph_at(g, train, level, label);
}

static void t_file(const char *rel, int min_groups) {
  char path[2048];
  snprintf(path, sizeof path, "%s%s", ts_root(), rel);
  ts_front fr = {.small = true};
  bool loaded = ts_load(&fr, path, NULL, NULL, 0);
  if (t_check(fr.file != NULL, "%s: cannot read", path)) t_each_graph(&fr, loaded, rel, min_groups, t_check_graph_o2);
  ts_front_free(&fr);
}

static void t_text(const char *name, const char *src, int min_groups,
                   void (*fn)(const ir_graph *g, bool train, const char *label)) {
  ts_front fr = {.small = true};
  bool loaded = ts_load(&fr, name, src, NULL, 0);
  if (t_check(fr.file != NULL, "%s: does not parse", name)) t_each_graph(&fr, loaded, name, min_groups, fn);
  ts_front_free(&fr);
}

/* Every unary and binary elementwise op, params, broadcasts (row, column, scalar), gradients
 * meeting at a value (kAddTo inside a group and into a parameter's gradient). */
static const char t_ops_src[] =
  "dim batch = 4\n"
  "model unary {\n"
  "  input x : f32[batch, 37]\n"
  "  param w : f32[37] = uniform(low=0.5, high=1.5)\n"
  "  a = x * w\n"
  "  b = neg(a) + abs(a) + exp(a * 0.1) + log(abs(a) + 1.0) + sqrt(abs(a)) + rsqrt(abs(a) + 1.0)\n"
  "  c = square(b) * 0.01 + sin(b) + cos(b) + sign(b) + reciprocal(abs(b) + 1.0) + relu(b) + sigmoid(b) + tanh(b)\n"
  "  e = softplus(c) + gelu(c) + leaky_relu(c, slope=0.2) + clip(c, a_min=-0.5, a_max=0.7) + smooth_l1(c, sigma=2.0)\n"
  "  f = (abs(e) + 0.5) ** (c * 0.1) / (abs(e) + 1.0) - maximum(e, b) + minimum(c, a)\n"
  "  loss = mean(square(f))\n"
  "  output f\n"
  "  train loss with sgd(lr=0.01)\n"
  "}\n"
  "model beyond {\n"
  "  input x : f32[batch, 37]\n"
  "  param w : f32[37] = uniform(low=-2.0, high=2.0)\n"
  "  a = x * w\n"
  "  b = erf(a) + hard_sigmoid(a) + hard_sigmoid(a, alpha=0.2, beta=0.4) + hard_swish(a) + silu(a)\n"
  "  loss = mean(square(b))\n"
  "  output b\n"
  "  train loss with sgd(lr=0.01)\n"
  "}\n"
  "model bcast {\n"
  "  input x : f32[batch, 3, 40]\n"
  "  param row : f32[40] = normal(std=1.0)\n"
  "  param col : f32[batch, 3, 1] = normal(std=1.0)\n"
  "  param s : f32[1] = normal(std=1.0)\n"
  "  y = relu(x * row + col) * 0.5 - 1.0\n"
  "  z = maximum(y, col) * s + row\n"
  "  loss = mean(z * y)\n"
  "  output y, z\n"
  "  train loss with sgd(lr=0.01)\n"
  "}\n"
  "model addto {\n"
  "  input x : f32[batch, 33]\n"
  "  param w : f32[batch, 33] = normal(std=1.0)\n"
  "  h = x * w\n"
  "  y = h * h + sigmoid(h) + tanh(h) * h\n"
  "  loss = sum(y * w)\n"
  "  output y\n"
  "  train loss with adam(lr=0.01)\n"
  "}\n";

/* activation is not fusible by the pass (no fusion class), but the emitter takes any op with
 * a k_sf_ function: a hand-made group of activation and its backward for each act_type. */
static int t_tensor(ir_graph *g, const char *name, ir_tensor_kind kind, int64_t r, int64_t c) {
  int t = ir_graph_add_tensor(g, name, kind, (ir_loc){0});
  ir_tensor *x = ir_tensor_at(g, t);
  x->dtype = K_F32, x->shape = (k_shape){2, {r, c}}, x->shape_known = true;
  return t;
}

static int *t_ints(ir_graph *g, int n, const int *v) {
  int *p = ir_alloc(&g->arena, sizeof(int) * (size_t)n);
  memcpy(p, v, sizeof(int) * (size_t)n);
  return p;
}

static void t_activation(int act) {
  ir_graph *g = ir_graph_new("act");
  int x = t_tensor(g, "x", IR_T_INPUT, 3, 50), og = t_tensor(g, "og", IR_T_INPUT, 3, 50);
  int y = t_tensor(g, "y", IR_T_VALUE, 3, 50), gx = t_tensor(g, "gx", IR_T_VALUE, 3, 50);
  k_activation_param *p = ir_alloc(&g->arena, sizeof *p);
  p->act_type = act;
  ir_node *sub = ir_alloc(&g->arena, 2 * sizeof *sub);
  sub[0] = (ir_node){.kind = IR_N_OP, .op = IR_OP_activation, .name = "act", .nin = 1, .nout = 1,
                     .in = t_ints(g, 1, (int[]){x}), .out = t_ints(g, 1, (int[]){y}), .param = p};
  sub[1] = (ir_node){.kind = IR_N_BACKWARD, .op = IR_OP_activation, .name = "_backward_act", .nin = 3, .nout = 1,
                     .in = t_ints(g, 3, (int[]){og, -1, y}), .out = t_ints(g, 1, (int[]){gx}), .param = p};
  ir_vec nodes = {.elem = sizeof(ir_node)};
  *(ir_node *)ir_vec_push(&nodes) = (ir_node){.kind = IR_N_FUSED, .op = -1, .name = "fused_act", .nin = 2, .nout = 2,
                                             .in = t_ints(g, 2, (int[]){x, og}), .out = t_ints(g, 2, (int[]){y, gx}),
                                             .sub = sub, .nsub = 2};
  ir_graph_set_nodes(g, &nodes);
  char label[64];
  snprintf(label, sizeof label, "activation act_type=%d", act);
  t_check_graph_at(g, true, 2, label);
  ir_graph_free(g);
}

/* ---- vector code, object output, cg_jit with a descriptor ---- */

static const char t_long_src[] =
  "model long {\n  input x : f32[64, 1000]\n  input b : f32[64, 1000]\n"
  "  y = relu(x * 2.0 + b) - abs(b) * 0.5 + minimum(x, b)\n  output y\n}\n";

static const char *t_vec_found;
static int t_vec_level;

static void t_vectorized(const ir_graph *g, bool train, const char *label) {
  char err[1024] = "";
  cg_options o = {.opt_level = t_vec_level, .large = t_large};
  cg_llvm *m = cg_llvm_new(label, &o, err, sizeof err);
  if (!t_check(m && !cg_emit_fused_all(m, g, NULL, err, sizeof err) && !cg_optimize(m, err, sizeof err), "%s: %s", label, err))
    return cg_llvm_free(m);
  char *ir = LLVMPrintModuleToString(m->mod);
  static const char *const widths[] = {"<16 x float>", "<8 x float>", "<4 x float>"};
  t_vec_found = NULL;
  for (int i = 0; i < 3 && !t_vec_found; i++)
    if (strstr(ir, widths[i])) t_vec_found = widths[i];
  t_check(t_vec_found != NULL, "%s at O%d: no vector instructions in the fused loop", label, t_vec_level);
  t_check(!strstr(ir, "define internal float @k_sf_"), "%s: scalar functions left after inlining", label);
  /* The loops are marked parallel (cg_fused.c), so no runtime alias check guards them. */
  t_check(strstr(ir, "llvm.loop.parallel_accesses") && !strstr(ir, "found.conflict"),
          "%s at O%d: the fused loop is not marked parallel, or is guarded by an alias check", label, t_vec_level);
  LLVMDisposeMessage(ir);
  char path[] = "/tmp/kiln_test_fusedXXXXXX";
  int fd = mkstemp(path);
  if (t_check(fd >= 0, "mkstemp")) {
    close(fd);
    t_check(!cg_write_object(m, path, err, sizeof err), "cg_write_object: %s", err);
    FILE *f = fopen(path, "rb");
    unsigned char mag[4] = {0};
    long size = 0;
    if (f) fread(mag, 1, 4, f), fseek(f, 0, SEEK_END), size = ftell(f), fclose(f);
    t_check(size > 64 && memcmp(mag, "\177ELF", 4) == 0, "the object is an ELF file (%ld bytes)", size);
    unlink(path);
  }
  cg_llvm_free(m);
  t_check_graph_at(g, train, t_vec_level, label);
}

/* ---- heavy calls out of line (codegen/cpu/cg_outline.c) ---- */

static const char t_heavy_src[] =
  "model heavy {\n  input x : f32[64, 1000]\n  input b : f32[64, 1000]\n"
  "  y = tanh(x) * exp(b * 0.1) + sigmoid(x - b) + gelu(x) * 2.0\n  output y\n}\n";

/* In the large-graph mode, a vectorised group calls the vector variants (and no scalar copy of a
 * heavy function is left inlined in it), then every group is compared bit for bit. */
static void t_outlined(const ir_graph *g, bool train, const char *label) {
  char err[1024] = "";
  cg_options o = {.opt_level = 2, .large = 1};
  cg_llvm *m = cg_llvm_new(label, &o, err, sizeof err);
  if (!t_check(m && !cg_emit_fused_all(m, g, NULL, err, sizeof err) && !cg_optimize(m, err, sizeof err), "%s: %s", label, err))
    return cg_llvm_free(m);
  char *ir = LLVMPrintModuleToString(m->mod);
  bool vec = strstr(ir, "call <16 x float> @kiln_ol16_") || strstr(ir, "call <8 x float> @kiln_ol8_") ||
             strstr(ir, "call <4 x float> @kiln_ol4_");
  t_check(vec, "%s: the outlined group does not call a vector variant", label);
  t_check(!strstr(ir, "define internal float @k_sf_"), "%s: scalar functions left after inlining", label);
  LLVMDisposeMessage(ir);
  cg_llvm_free(m);
  t_check_graph_at(g, train, 2, label);
}

/* ---- groups split over the thread pool ---- */

/* Groups of several K_GRAIN chunks: one contiguous run with a ragged end (rank 1), rows
 * broadcast against a column (rank 2, chunks of whole rows), two long rows (a chunk each), a
 * light group in K_GRAIN_LIGHT chunks, and in train their backward groups with kAddTo. */
static const char t_split_src[] =
  "model split {\n"
  "  input x : f32[7, 7031]\n  input b : f32[7, 7031]\n"
  "  input u : f32[70, 3, 333]\n  param row : f32[333] = normal(std=1.0)\n"
  "  input v : f32[2, 50001]\n  param col : f32[2, 1] = normal(std=1.0)\n"
  "  y = tanh(x * 2.0 + b) - abs(b) * 0.5 + minimum(x, b)\n"
  "  z = sigmoid(u * row + 1.0) * u\n"
  "  w = relu(v - col) * gelu(v)\n"
  "  input p : f32[3, 100003]\n"
  "  q = relu(p) * 2.0 - abs(p)\n"
  "  loss = mean(y * y) + mean(z) + mean(w * w) + mean(q)\n"
  "  output y, z, w, q\n"
  "  train loss with sgd(lr=0.01)\n"
  "}\n";

/* The module calls k_parallel_for for at least `want` groups (each a _range function). */
static void t_split_emitted(const ir_graph *g, bool train, const char *label) {
  char err[1024] = "";
  cg_options o = {.opt_level = 2};
  cg_llvm *m = cg_llvm_new(label, &o, err, sizeof err);
  if (!t_check(m && !cg_emit_fused_all(m, train ? NULL : g, train ? g : NULL, err, sizeof err), "%s: %s", label, err))
    return cg_llvm_free(m);
  char *ir = LLVMPrintModuleToString(m->mod);
  int ranges = 0;
  for (const char *p = ir; (p = strstr(p, "_range(i8*")) != NULL; p++) ranges++;   /* definitions */
  int want = train ? 5 : 4;   /* train: at least one backward group besides the forward ones */
  t_check(strstr(ir, "call void @k_parallel_for") != NULL && ranges >= want,
          "%s: %d split groups, want at least %d", label, ranges, want);
  LLVMDisposeMessage(ir);
  cg_llvm_free(m);
}

/* Each graph's groups split, and bit-identical to the kernels with 1 and with 2 threads. */
static void t_split(const ir_graph *g, bool train, const char *label) {
  t_split_emitted(g, train, label);
  for (int threads = 1; threads <= 2; threads++) {
    k_parallel_set_threads(threads);
    t_check_graph_at(g, train, 2, label);
  }
  k_parallel_set_threads(0);
}

/* cg_desc_build on chains.kiln's two graphs, then cg_jit fills every fused step. */
static void t_jit_desc(void) {
  char path[2048], err[1024] = "";
  snprintf(path, sizeof path, "%stests/passes/models/chains.kiln", ts_root());
  ts_front fr = {0};
  ir_graph *low = ts_lower_file(&fr, path, NULL, 0), *g[2] = {NULL, NULL};
  pass_ctx cx[2];
  for (int t = 0; t < 2; t++) g[t] = ts_compile_cx(low, t ? IR_MODE_TRAIN : IR_MODE_PREDICT, 0, &cx[t], &fr.diag);
  rt_model_desc *d = g[0] && g[1] ? cg_desc_build(g[0], g[1], err, sizeof err) : NULL;
  cg_options o = {.opt_level = 2};
  cg_llvm *m = d ? cg_llvm_new("chains", &o, err, sizeof err) : NULL;
  bool ok = t_check(d && m, "chains: descriptor / module: %s", err);
  ok = ok && t_check(!cg_emit_fused_all(m, g[0], g[1], err, sizeof err) && !cg_optimize(m, err, sizeof err) &&
                     !cg_jit(m, d, err, sizeof err), "chains: cg_jit: %s", err);
  int filled = 0, fused = 0;
  for (int t = 0; ok && t < 2; t++) {
    const rt_program *p = t ? &d->train : &d->predict;
    for (int i = 0; i < p->nsteps; i++)
      if (p->steps[i].kind == RT_STEP_FUSED) fused++, filled += p->steps[i].fused != NULL;
  }
  if (ok) t_check(fused == t_count_fused(g[0]) + t_count_fused(g[1]) && fused > 0 && filled == fused,
                  "chains: cg_jit filled %d of %d fused steps", filled, fused);
  cg_llvm_free(m);
  if (d) cg_desc_free(d);
  for (int t = 0; t < 2; t++) ts_graph_free(g[t]), pass_ctx_free(&cx[t]);
  ir_graph_free(low);
  ts_front_free(&fr);
}

int main(void) {
  static const char *const files[] = {"examples/mlp.kiln", "examples/lenet.kiln", "examples/resnet.kiln",
                                      "examples/transformer.kiln", "tests/passes/models/chains.kiln",
                                      "tests/passes/models/normdrop.kiln", "tests/passes/models/shared.kiln",
                                      "tests/passes/models/epilogue.kiln"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) t_file(files[i], 0);
  t_text("ops.kiln", t_ops_src, 6, t_check_graph_all_levels);
  for (int act = 0; act < 4; act++) t_activation(act);
  for (t_vec_level = 2; t_vec_level <= 3; t_vec_level++) {
    t_text("long.kiln", t_long_src, 1, t_vectorized);
    printf("fused: O%d vector width in the long group: %s\n", t_vec_level, t_vec_found ? t_vec_found : "none");
  }
  t_text("split.kiln", t_split_src, 4, t_split);
  t_large = 1;   /* every op, forward and backward, out of line and through the lean pipeline: the same bits */
  t_text("ops.kiln", t_ops_src, 6, t_check_graph_all_levels);
  for (int act = 0; act < 4; act++) t_activation(act);   /* an int parameter: uniform in the variants */
  t_text("heavy.kiln", t_heavy_src, 1, t_outlined);
  t_vec_level = 2;   /* the lean pipeline still vectorizes the long group */
  t_text("long.kiln", t_long_src, 1, t_vectorized);
  printf("fused: large-graph mode, vector width in the long group: %s\n", t_vec_found ? t_vec_found : "none");
  t_large = -1;
  t_jit_desc();
  printf("fused: %d groups checked (%d also in place), %d epilogues; %lld elements, %lld not bit-identical (max rel diff %.3g), "
         "%lld within rounding where a batch_norm folds\n",
         t_st.groups, t_st.inplace_groups, t_st.epilogues, t_elems, t_inexact, t_maxrel, t_folded);
  for (int op = 0; op < IR_OP_COUNT; op++)
    for (int bw = 0; bw < 2; bw++)
      if (ir_ops[op].scalar || op == IR_OP_activation)
        t_check(t_seen[bw][op], "no fused group had %s%s as a member", bw ? "_backward_" : "", ir_ops[op].name);
  printf("fused: %d passed, %d failed\n", passed, failed);
  return failed != 0;
}
