/* test_differential.c — every optional pass against the reference executor: for each example
 * and tests/passes/models/ (every .kiln), predict outputs and the weights after a few train steps from
 * the same initial weights, with all optional passes off (the reference), all on, and each
 * one off in turn, must agree (all on and all but layout: bit-identical); every plan must validate. Also: the MLP's loss goes down, and a
 * kernel error fails a step cleanly. Prints "differential: N passed, N failed". */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "kiln_test.h"

#define DT_STEPS 3
#define DT_SEED 20261122u
#define DT_RTOL 1e-5
#define DT_MAX_IN 16

static int dt_passed, dt_failed, dt_inexact;

static void dt_check(bool ok, const char *what, const char *model, const char *cfg) {
  if (ok) dt_passed++;
  else dt_failed++, printf("FAIL %s: %s (%s)\n", model, what, cfg);
}

/* ---- random inputs ---- */

static uint64_t dt_rng = TS_RNG_SEED;

/* The buffers an entry point takes: the graph's inputs, picked out of a batch. */
static int dt_args(const ir_graph *g, void **batch, const void **args) {
  int idx[DT_MAX_IN], n = ir_graph_inputs(g, idx, DT_MAX_IN);
  for (int k = 0; k < n && k < DT_MAX_IN; k++) args[k] = batch[idx[k]];
  return n;
}

/* ---- one configuration's results ---- */

typedef struct {
  float *pred, *pred2;        /* predict outputs before and after training */
  int64_t npred;
  float loss[DT_STEPS];
  float *w;                   /* every weight after training, in model order */
  int64_t nw;
  bool ran;
} dt_result;

static void dt_result_free(dt_result *r) { free(r->pred), free(r->pred2), free(r->w); }

typedef struct {
  const char *name;           /* "file.kiln:model" */
  const ir_graph *lowered;
  void **pbatch;              /* predict data */
  void **tbatch[DT_STEPS];    /* a batch per train step */
} dt_model;

static int64_t dt_outputs_numel(const ir_graph *g) {
  int64_t n = 0;
  for (int i = 0; i < g->outputs.len; i++) n += ir_tensor_numel(ir_tensor_at(g, IR_VEC_AT(g->outputs, int, i)));
  return n;
}

/* Predict into one buffer holding every output in turn. */
static float *dt_predict(ex_model *m, const ir_graph *g, void **batch, char *err) {
  const void *args[DT_MAX_IN];
  void *outs[64];
  float *buf = malloc((size_t)dt_outputs_numel(g) * 4 + 4), *p = buf;
  dt_args(g, batch, args);
  for (int i = 0; i < g->outputs.len && i < 64; i++) {
    outs[i] = p;
    p += ir_tensor_numel(ir_tensor_at(g, IR_VEC_AT(g->outputs, int, i)));
  }
  if (ex_predict(m, g, args, outs, err, EX_ERR_LEN)) return free(buf), NULL;
  return buf;
}

static float *dt_weights(const ex_model *m, int64_t *total) {
  const char *name;
  const float *x;
  int64_t n, off = 0;
  *total = 0;
  for (int i = 0; !ex_model_weight(m, i, &name, &x, &n); i++) *total += n;
  float *w = malloc((size_t)*total * 4 + 4);
  for (int i = 0; !ex_model_weight(m, i, &name, &x, &n); i++) memcpy(w + off, x, (size_t)n * 4), off += n;
  return w;
}

static bool dt_plan_ok(const ir_graph *g, const dt_model *dm, const char *cfg) {
  bool ok = g && g->plan && pass_plan_validate(g, g->plan, stdout) == 0;
  dt_check(ok, g ? "the plan validates" : "compiles", dm->name, cfg);
  return ok;
}

static bool dt_train(const dt_model *dm, ex_model *m, const ir_graph *tg, dt_result *r, const char *cfg) {
  char err[EX_ERR_LEN] = "";
  const void *args[DT_MAX_IN];
  for (int s = 0; s < DT_STEPS; s++) {
    dt_args(tg, dm->tbatch[s], args);
    if (ex_train_step(m, tg, args, &r->loss[s], err, sizeof err)) {
      printf("  %s train_step %d: %s\n", dm->name, s + 1, err);
      return false;
    }
  }
  return true;
}

/* What the passes did to g: fused groups, in-place outputs, arena against naive bytes. */
static void dt_describe(const ir_graph *g, const char *what) {
  int fused = 0, inplace = 0;
  for (int i = 0; g && i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    fused += n->kind == IR_N_FUSED;
    for (int j = 0; n->inplace && j < n->nout; j++) inplace += n->inplace[j] >= 0;
  }
  if (g && g->plan)
    printf("  %s: %d nodes, %d fused groups, %d in-place outputs, arena %lld of %lld naive bytes\n", what, ir_nnodes(g),
           fused, inplace, (long long)g->plan->arena_bytes, (long long)g->plan->naive_bytes);
}

/* Predict, 3 train steps, predict again, read the weights — for one set of disabled passes. */
static void dt_run(const dt_model *dm, uint32_t disabled, const char *cfg, dt_result *r) {
  char err[EX_ERR_LEN] = "";
  memset(r, 0, sizeof *r);
  ir_graph *pg = ts_compile(dm->lowered, IR_MODE_PREDICT, disabled), *tg = NULL;
  ex_model *m = ex_model_new(dm->lowered, DT_SEED, err, sizeof err);
  if (!m) printf("  %s: %s\n", dm->name, err);
  if (m && dt_plan_ok(pg, dm, cfg)) {
    r->pred = dt_predict(m, pg, dm->pbatch, err);
    r->npred = dt_outputs_numel(pg);
    dt_check(r->pred != NULL, "predict runs", dm->name, cfg);
    if (!r->pred) printf("  %s\n", err);
  }
  if (m && r->pred && dm->lowered->has_train) {
    tg = ts_compile(dm->lowered, IR_MODE_TRAIN, disabled);
    if (!disabled) dt_describe(pg, "predict"), dt_describe(tg, "train");
    bool ok = dt_plan_ok(tg, dm, cfg) && dt_train(dm, m, tg, r, cfg);
    if (ok) r->pred2 = dt_predict(m, pg, dm->pbatch, err);
    dt_check(ok && r->pred2, "train_step runs", dm->name, cfg);
  }
  if (m) r->w = dt_weights(m, &r->nw);
  r->ran = m && r->pred;
  ex_model_free(m);
  ts_graph_free(pg);
  ts_graph_free(tg);
}

/* ---- comparison ---- */

/* Within DT_RTOL relatively (an absolute floor of 1e-7 for values near 0); counts the
 * comparisons that were not bit-identical. */
static bool dt_close(const float *a, const float *b, int64_t n, double *worst) {
  *worst = 0;
  if (n == 0 || memcmp(a, b, (size_t)n * 4) == 0) return true;
  dt_inexact++;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]), s = fmax(fabs(a[i]), fabs(b[i]));
    if (isnan(a[i]) != isnan(b[i])) return *worst = INFINITY, false;
    if (d / fmax(s, 1e-2) > *worst) *worst = d / fmax(s, 1e-2);
    if (d > DT_RTOL * s + 1e-7) return false;
  }
  return true;
}

static void dt_compare_one(const float *a, const float *b, int64_t n, const char *what, const dt_model *dm, const char *cfg) {
  double worst = 0;
  bool ok = a && b && dt_close(a, b, n, &worst);
  dt_check(ok, what, dm->name, cfg);
  if (a && b && worst > 0) printf("  %s %s (%s): not bit-identical, worst relative difference %.3g\n", dm->name, what, cfg, worst);
}

static void dt_compare(const dt_model *dm, const dt_result *ref, const dt_result *r, const char *cfg) {
  if (!ref->ran || !r->ran) return;
  dt_compare_one(ref->pred, r->pred, ref->npred, "predict outputs", dm, cfg);
  if (!dm->lowered->has_train) return;
  dt_compare_one(ref->loss, r->loss, DT_STEPS, "losses", dm, cfg);
  dt_compare_one(ref->w, r->nw == ref->nw ? r->w : NULL, ref->nw, "weights after training", dm, cfg);
  dt_compare_one(ref->pred2, r->pred2, ref->npred, "predict after training", dm, cfg);
}

/* ---- the configurations ---- */

static uint32_t dt_optional_mask(void) {
  uint32_t m = 0;
  for (int i = 0; i < PASS_COUNT; i++) m |= pass_table[i].optional ? 1u << i : 0;
  return m;
}

/* The layout pass only moves where the same inner loops read and write (blocked instead of
 * converted), so with it and without it the predict outputs must be the same bits. */
static void dt_compare_exact(const dt_model *dm, const dt_result *on, const dt_result *off, const char *cfg) {
  if (!on->ran || !off->ran) return;
  dt_check(memcmp(on->pred, off->pred, (size_t)on->npred * 4) == 0, "predict outputs bit-identical to all passes",
           dm->name, cfg);
  if (on->pred2 && off->pred2)
    dt_check(memcmp(on->pred2, off->pred2, (size_t)on->npred * 4) == 0,
             "predict after training bit-identical to all passes", dm->name, cfg);
}

static void dt_model_run(const dt_model *dm) {
  uint32_t all = dt_optional_mask();
  dt_result ref, r, on;
  dt_run(dm, all, "reference: optional passes off", &ref);
  dt_check(ref.ran, "the reference runs", dm->name, "reference");
  dt_run(dm, 0, "all passes", &on);
  dt_compare(dm, &ref, &on, "all passes");
  for (int i = 0; i < PASS_COUNT; i++) {
    if (!(all >> i & 1)) continue;
    char cfg[64];
    snprintf(cfg, sizeof cfg, "all but %s", pass_table[i].name);
    dt_run(dm, 1u << i, cfg, &r);
    dt_compare(dm, &ref, &r, cfg);
    if (i == PASS_layout) dt_compare_exact(dm, &on, &r, cfg);
    dt_result_free(&r);
  }
  dt_result_free(&on);
  if (ref.ran) printf("ok %s: %lld output values, %lld weights, losses %.5g %.5g %.5g\n", dm->name, (long long)ref.npred,
                      (long long)ref.nw, ref.loss[0], ref.loss[1], ref.loss[2]);
  dt_result_free(&ref);
}

static void dt_model_go(const char *label, const ir_graph *g) {
  dt_model dm = {label, g, ts_batch(g, &dt_rng), {NULL}};
  for (int s = 0; s < DT_STEPS; s++) dm.tbatch[s] = ts_batch(g, &dt_rng);
  dt_model_run(&dm);
  ts_batch_free(g, dm.pbatch);
  for (int s = 0; s < DT_STEPS; s++) ts_batch_free(g, dm.tbatch[s]);
}

/* Lowers every model of a file (small dims) and hands each graph to fn. */
static void dt_each_model(const char *path, const fe_define *extra, int nextra,
                          void (*fn)(const char *label, const ir_graph *g)) {
  ts_front fr = {.small = true};
  bool ok = ts_load(&fr, path, NULL, extra, nextra);
  if (!ok) dt_check(false, "parses", path, "front end");
  for (fe_model *m = ok ? fr.file->models : NULL; m; m = m->next) {
    ir_graph *g = ts_lower(&fr, m);
    char label[256];
    snprintf(label, sizeof label, "%s:%s", strrchr(path, '/') ? strrchr(path, '/') + 1 : path, m->name);
    if (g) fn(label, g);
    else dt_check(false, "lowers", label, "front end");
    ir_graph_free(g);
  }
  ts_front_free(&fr);
}

static void dt_file_go(const char *path, void *ctx) { dt_each_model(path, NULL, 0, dt_model_go); }

static void dt_each_file(const char *dir) {
  char path[2048];
  snprintf(path, sizeof path, "%s%s", ts_root(), dir);
  if (ts_each_model(dir, dt_file_go, NULL) < 0) dt_check(false, "lists its models", path, "files");
}

/* ---- an independent oracle: the MLP's predict and first SGD step computed here in double ---- */

typedef struct { const float *w1, *b1, *w2, *b2; int64_t nb, ni, nh, no; } dt_mlp;

static bool dt_mlp_weights(const ex_model *m, dt_mlp *p) {
  int64_t n1, n2, n3, n4;
  if (ex_model_get(m, "hidden.weight", &p->w1, &n1) || ex_model_get(m, "hidden.bias", &p->b1, &n2) ||
      ex_model_get(m, "logits.weight", &p->w2, &n3) || ex_model_get(m, "logits.bias", &p->b2, &n4)) return false;
  p->nh = n2, p->no = n4, p->ni = n1 / n2;
  return n3 == n2 * n4;
}

/* Forward for row r: pre-activations h (nh) and softmax probabilities pr (no). */
static void dt_mlp_row(const dt_mlp *p, const float *x, double *h, double *pr) {
  double mx = -INFINITY, z = 0;
  for (int64_t j = 0; j < p->nh; j++) {
    h[j] = p->b1[j];
    for (int64_t k = 0; k < p->ni; k++) h[j] += (double)p->w1[j * p->ni + k] * x[k];
  }
  for (int64_t c = 0; c < p->no; c++) {
    pr[c] = p->b2[c];
    for (int64_t j = 0; j < p->nh; j++) pr[c] += (double)p->w2[c * p->nh + j] * fmax(h[j], 0);
    mx = fmax(mx, pr[c]);
  }
  for (int64_t c = 0; c < p->no; c++) z += pr[c] = exp(pr[c] - mx);
  for (int64_t c = 0; c < p->no; c++) pr[c] /= z;
}

/* Gradients of the mean cross-entropy, accumulated over the rows into g (w1, b1, w2, b2). */
static void dt_mlp_grad_row(const dt_mlp *p, const float *x, int32_t y, double *g) {
  double h[256], pr[64], dh[256];
  double *g1 = g, *gb1 = g1 + p->nh * p->ni, *g2 = gb1 + p->nh, *gb2 = g2 + p->no * p->nh;
  dt_mlp_row(p, x, h, pr);
  for (int64_t j = 0; j < p->nh; j++) dh[j] = 0;
  for (int64_t c = 0; c < p->no; c++) {
    double d = (pr[c] - (c == y)) / (double)p->nb;
    gb2[c] += d;
    for (int64_t j = 0; j < p->nh; j++) g2[c * p->nh + j] += d * fmax(h[j], 0), dh[j] += d * p->w2[c * p->nh + j];
  }
  for (int64_t j = 0; j < p->nh; j++) {
    double d = h[j] > 0 ? dh[j] : 0;
    gb1[j] += d;
    for (int64_t k = 0; k < p->ni; k++) g1[j * p->ni + k] += d * x[k];
  }
}

static bool dt_near(double want, float got, double atol) { return fabs(want - got) <= 1e-5 * fabs(want) + atol; }

static bool dt_mlp_predict_ok(const dt_mlp *p, const float *x, const float *prob) {
  double h[256], pr[64];
  for (int64_t r = 0; r < p->nb; r++) {
    dt_mlp_row(p, x + r * p->ni, h, pr);
    for (int64_t c = 0; c < p->no; c++)
      if (!dt_near(pr[c], prob[r * p->no + c], 1e-7)) return false;
  }
  return true;
}

/* After one step of sgd(lr, momentum): w1 = w0 - lr * grad (the momentum buffer starts at 0). */
static bool dt_mlp_step_ok(const dt_mlp *p0, const float *w0, const ex_model *m, const float *x, const int32_t *y, float lr) {
  int64_t n = p0->nh * p0->ni + p0->nh + p0->no * p0->nh + p0->no, nw;
  double *g = calloc((size_t)n, sizeof *g);
  for (int64_t r = 0; r < p0->nb; r++) dt_mlp_grad_row(p0, x + r * p0->ni, y[r], g);
  float *w1 = dt_weights(m, &nw);
  bool ok = nw == n;
  for (int64_t i = 0; ok && i < n; i++) ok = dt_near(w0[i] - lr * g[i], w1[i], 1e-7);
  free(g), free(w1);
  return ok;
}

static void dt_mlp_oracle(const char *label, const ir_graph *g) {
  char err[EX_ERR_LEN] = "";
  ir_graph *pg = ts_compile(g, IR_MODE_PREDICT, 0), *tg = ts_compile(g, IR_MODE_TRAIN, 0);
  ex_model *m = ex_model_new(g, DT_SEED, err, sizeof err);
  void **b = ts_batch(g, &dt_rng);
  int xt = ir_graph_find_tensor(g, "image"), yt = ir_graph_find_tensor(g, "label");
  dt_mlp p = {0};
  bool ok = pg && tg && m && xt >= 0 && yt >= 0 && dt_mlp_weights(m, &p) && p.nh <= 256 && p.no <= 64;
  p.nb = ok ? ir_tensor_at(g, xt)->shape.d[0] : 0;
  float *prob = ok ? dt_predict(m, pg, b, err) : NULL;
  dt_check(prob && dt_mlp_predict_ok(&p, b[xt], prob), "predict matches a direct computation", label, "oracle");
  int64_t nw;
  float *w0 = m ? dt_weights(m, &nw) : NULL, loss;
  const void *args[DT_MAX_IN];
  ok = ok && w0 && dt_args(tg, b, args) == 2 && !ex_train_step(m, tg, args, &loss, err, sizeof err);
  dt_mlp p0 = p;                 /* the gradients use the weights before the step */
  p0.w1 = w0, p0.b1 = w0 + p.nh * p.ni, p0.w2 = p0.b1 + p.nh, p0.b2 = p0.w2 + p.no * p.nh;
  dt_check(ok && dt_mlp_step_ok(&p0, w0, m, b[xt], b[yt], ex_model_lr(m)), "one SGD step matches a direct computation", label, "oracle");
  if (!ok) printf("  %s\n", err);
  free(prob), free(w0);
  ex_model_free(m);
  ts_batch_free(g, b);
  ts_graph_free(pg), ts_graph_free(tg);
}

/* ---- whole-path sanity: the MLP learns a fixed batch; a bad label fails a step cleanly ---- */

static void dt_learns(const char *label, const ir_graph *g) {
  char err[EX_ERR_LEN] = "";
  ir_graph *tg = ts_compile(g, IR_MODE_TRAIN, 0);
  ex_model *m = ex_model_new(g, DT_SEED, err, sizeof err);
  void **b = ts_batch(g, &dt_rng);
  const void *args[DT_MAX_IN];
  float loss[20] = {0};
  bool ran = tg && m && dt_args(tg, b, args) == 2;
  for (int s = 0; ran && s < 20; s++) ran = !ex_train_step(m, tg, args, &loss[s], err, sizeof err);
  if (!ran) printf("  %s: %s\n", label, err);
  printf("  %s: loss %.4f after 1 step, %.4f after 20\n", label, loss[0], loss[19]);
  dt_check(ran && loss[19] < 0.5f * loss[0], "loss decreases over 20 train steps", label, "all passes");
  ex_model_free(m);
  ts_batch_free(g, b);
  ts_graph_free(tg);
}

/* A label out of range is a kernel error: nonzero, a message, weights and step untouched. */
static void dt_bad_label(const char *label, const ir_graph *g) {
  char err[EX_ERR_LEN] = "";
  ir_graph *tg = ts_compile(g, IR_MODE_TRAIN, 0);
  ex_model *m = ex_model_new(g, DT_SEED, err, sizeof err);
  void **b = ts_batch(g, &dt_rng);
  int lt = ir_graph_find_tensor(g, "label");
  if (lt >= 0) ((int32_t *)b[lt])[1] = 1000;
  const void *args[DT_MAX_IN];
  int64_t nw0, nw1;
  float *w0 = m ? dt_weights(m, &nw0) : NULL, loss = -1;
  bool failed = tg && m && lt >= 0 && dt_args(tg, b, args) == 2 && ex_train_step(m, tg, args, &loss, err, sizeof err) != 0;
  float *w1 = m ? dt_weights(m, &nw1) : NULL;
  bool same = w0 && w1 && nw0 == nw1 && memcmp(w0, w1, (size_t)nw0 * 4) == 0 && ex_model_step(m) == 0;
  printf("  %s with label 1000: \"%s\"\n", label, err);
  dt_check(failed && err[0] && same, "a bad label fails the step and leaves the weights", label, "all passes");
  free(w0), free(w1);
  ex_model_free(m);
  ts_batch_free(g, b);
  ts_graph_free(tg);
}

int main(void) {
  /* every separable prefix at batch > 1 runs one sample at a time (pass_samples.c), however
   * small its values: the models here are far under the default threshold */
  setenv("KILN_SAMPLES_MIN_BYTES", "1", 1);
  dt_each_file("examples");
  dt_each_file("tests/passes/models");
  char mlp[2048];
  snprintf(mlp, sizeof mlp, "%sexamples/mlp.kiln", ts_root());
  fe_define b16 = {"batch", 16, 0};
  dt_each_model(mlp, &b16, 1, dt_learns);
  dt_each_model(mlp, NULL, 0, dt_bad_label);
  dt_each_model(mlp, NULL, 0, dt_mlp_oracle);
  printf("differential: %d passed, %d failed (%d comparisons not bit-identical)\n", dt_passed, dt_failed, dt_inexact);
  return dt_failed != 0;
}
