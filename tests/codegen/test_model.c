/* test_model.c — the descriptor (cg_desc.c) run by the runtime (rt_model*.c) against the
 * reference executor: for every example and tests/passes/models, compiled with fusion off (fused
 * steps would need the JIT), the same initial weights, predict outputs, losses, weights and
 * optimizer state after 3 steps, bit for bit, with the naive and the threaded engine; weights
 * files round-trip; every entry point survives bad input and leaves the weights as they were;
 * instances used from several threads agree with sequential runs; the kernels' thread pool at 1
 * and at 2 threads gives the same bits (every example at the small dims, LeNet at full size).
 * Prints "model: N passed, N failed". */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cg.h"
#include "exec.h"
#include "kiln_test.h"
#include "runtime.h"
#include "k_epilogue.h"

#define TM_STEPS 3
#define TM_SEED 20261122u
#define TM_MAX_IN 16
#define TM_MAX_OUT 16

static int tm_passed, tm_failed;
static int tm_stats_checked;   /* models whose train program gathers batch_norm statistics */
static int tm_samples_checked; /* models whose predict program runs a step per sample */
static const char *tm_engine = "naive";

static void tm_check(bool ok, const char *what, const char *model) {
  if (ok) tm_passed++;
  else tm_failed++, printf("FAIL %s: %s (engine %s)\n", model, what, tm_engine);
}

/* ---- models and data (tests/support: small dims, random batches) ---- */

static char tm_tmp[512];

static uint64_t tm_rng = TS_RNG_SEED;

/* Fusion off: fused steps would need the JIT. */
static ir_graph *tm_compile(const ir_graph *lowered, ir_mode mode) { return ts_compile(lowered, mode, 1u << PASS_fusion); }

/* ---- one model under test ---- */

typedef struct {
  const char *name;
  const ir_graph *lowered;
  ir_graph *pg, *tg;
  rt_model_desc *d;
  void **pbatch, **tbatch[TM_STEPS];
} tm_model;

static bool tm_model_init(tm_model *tm, const char *name, const ir_graph *g) {
  char err[512] = "";
  memset(tm, 0, sizeof *tm);
  tm->name = name, tm->lowered = g;
  tm->pg = tm_compile(g, IR_MODE_PREDICT);
  tm->tg = g->has_train ? tm_compile(g, IR_MODE_TRAIN) : NULL;
  if (tm->pg && (tm->tg || !g->has_train)) tm->d = cg_desc_build(tm->pg, tm->tg, err, sizeof err);
  tm_check(tm->d != NULL, "the descriptor builds", name);
  if (!tm->d) printf("  %s\n", err);
  tm->pbatch = ts_batch(g, &tm_rng);
  for (int s = 0; s < TM_STEPS; s++) tm->tbatch[s] = ts_batch(g, &tm_rng);
  return tm->d != NULL;
}

static void tm_model_free(tm_model *tm) {
  cg_desc_free(tm->d);
  ts_graph_free(tm->pg), ts_graph_free(tm->tg);
  ts_batch_free(tm->lowered, tm->pbatch);
  for (int s = 0; s < TM_STEPS; s++) ts_batch_free(tm->lowered, tm->tbatch[s]);
}

/* The buffers of a program's inputs, picked from a batch (indexed as the graph's tensors:
 * the descriptor's entry keeps that index in ctr). */
static void tm_args(const rt_model_desc *d, const rt_program *p, void **batch, const void **args) {
  for (int k = 0; k < p->ninputs && k < TM_MAX_IN; k++) args[k] = batch[d->tensors[p->inputs[k]].ctr];
}

static int64_t tm_out_numel(const rt_model_desc *d) {
  int64_t n = 0;
  for (int k = 0; k < d->predict.noutputs; k++) n += k_shape_numel(&d->tensors[d->predict.outputs[k]].shape);
  return n;
}

/* Every output in turn into one buffer; n = its size. */
static void tm_out_ptrs(const rt_model_desc *d, float *buf, void **outs) {
  for (int k = 0; k < d->predict.noutputs && k < TM_MAX_OUT; k++) {
    outs[k] = buf;
    buf += k_shape_numel(&d->tensors[d->predict.outputs[k]].shape);
  }
}

/* ---- results: what a run produced, by either implementation ---- */

typedef struct {
  float *w0, *pred, *w, *pred2;   /* weights before, predict, weights and state after, predict after */
  float loss[TM_STEPS];
  int64_t nw0, npred, nw;
  bool ok;
} tm_result;

static void tm_result_free(tm_result *r) { free(r->w0), free(r->pred), free(r->w), free(r->pred2); }

/* Every PARAM and AUX (and, with states, STATE) tensor of the descriptor, in order. */
static float *tm_collect(const tm_model *tm, bool states, int (*get)(const void *, const char *, const float **, int64_t *),
                         const void *m, int64_t *total) {
  const rt_model_desc *d = tm->d;
  float *w = NULL;
  *total = 0;
  for (int i = 0; i < d->ntensors; i++) {
    int r = d->tensors[i].role;
    if (r != RT_ROLE_PARAM && r != RT_ROLE_AUX && !(states && r == RT_ROLE_STATE)) continue;
    const float *x;
    int64_t n;
    if (get(m, d->tensors[i].name, &x, &n)) return free(w), NULL;
    w = realloc(w, (size_t)(*total + n) * 4 + 4);
    memcpy(w + *total, x, (size_t)n * 4), *total += n;
  }
  return w ? w : calloc(1, 4);
}

static int tm_get_ex(const void *m, const char *name, const float **x, int64_t *n) { return ex_model_get(m, name, x, n); }
static int tm_get_rt(const void *m, const char *name, const float **x, int64_t *n) { return rt_model_get(m, name, x, n); }

static float *tm_ex_predict(const tm_model *tm, ex_model *m, char *err) {
  const void *args[TM_MAX_IN];
  void *outs[TM_MAX_OUT];
  int idx[TM_MAX_IN], ni = ir_graph_inputs(tm->pg, idx, TM_MAX_IN);
  for (int k = 0; k < ni; k++) args[k] = tm->pbatch[idx[k]];
  float *buf = malloc((size_t)tm_out_numel(tm->d) * 4 + 4);
  tm_out_ptrs(tm->d, buf, outs);
  if (ex_predict(m, tm->pg, args, outs, err, EX_ERR_LEN)) return free(buf), NULL;
  return buf;
}

static void tm_run_ex(const tm_model *tm, tm_result *r) {
  char err[EX_ERR_LEN] = "";
  memset(r, 0, sizeof *r);
  ex_model *m = ex_model_new(tm->lowered, TM_SEED, err, sizeof err);
  if (!m) return (void)printf("  %s: %s\n", tm->name, err);
  r->w0 = tm_collect(tm, false, tm_get_ex, m, &r->nw0);
  r->pred = tm_ex_predict(tm, m, err);
  r->ok = r->pred != NULL;
  for (int s = 0; r->ok && tm->tg && s < TM_STEPS; s++) {
    const void *args[TM_MAX_IN];
    int idx[TM_MAX_IN], ni = ir_graph_inputs(tm->tg, idx, TM_MAX_IN);
    for (int k = 0; k < ni; k++) args[k] = tm->tbatch[s][idx[k]];
    r->ok = !ex_train_step(m, tm->tg, args, &r->loss[s], err, sizeof err);
  }
  if (r->ok) r->pred2 = tm_ex_predict(tm, m, err), r->w = tm_collect(tm, true, tm_get_ex, m, &r->nw);
  if (!r->ok || !r->pred2) printf("  %s (exec): %s\n", tm->name, err);
  ex_model_free(m);
}

static float *tm_rt_predict(const tm_model *tm, rt_model *m) {
  const void *args[TM_MAX_IN];
  void *outs[TM_MAX_OUT];
  tm_args(tm->d, &tm->d->predict, tm->pbatch, args);
  float *buf = malloc((size_t)tm_out_numel(tm->d) * 4 + 4);
  tm_out_ptrs(tm->d, buf, outs);
  if (rt_model_predict(m, args, outs)) return printf("  %s predict: %s\n", tm->name, rt_model_error(m)), free(buf), NULL;
  return buf;
}

static bool tm_rt_train(const tm_model *tm, rt_model *m, void **batch, float *loss) {
  const void *args[TM_MAX_IN];
  tm_args(tm->d, &tm->d->train, batch, args);
  if (!rt_model_train_step(m, args, loss)) return true;
  printf("  %s train_step: %s\n", tm->name, rt_model_error(m));
  return false;
}

static void tm_run_rt(const tm_model *tm, tm_result *r) {
  memset(r, 0, sizeof *r);
  rt_model *m = rt_model_create(tm->d, TM_SEED);
  if (!m) return (void)printf("  %s: rt_model_create failed\n", tm->name);
  r->w0 = tm_collect(tm, false, tm_get_rt, m, &r->nw0);
  r->pred = tm_rt_predict(tm, m);
  r->ok = r->pred != NULL;
  for (int s = 0; r->ok && tm->tg && s < TM_STEPS; s++) r->ok = tm_rt_train(tm, m, tm->tbatch[s], &r->loss[s]);
  if (r->ok) r->pred2 = tm_rt_predict(tm, m), r->w = tm_collect(tm, true, tm_get_rt, m, &r->nw);
  rt_model_destroy(m);
}

/* ---- comparison: bit for bit, and how far off when not ---- */

static void tm_same(const float *a, const float *b, int64_t na, int64_t nb, const char *what, const char *model) {
  bool ok = a && b && na == nb && memcmp(a, b, (size_t)na * 4) == 0;
  tm_check(ok, what, model);
  if (ok || !a || !b || na != nb) return;
  double worst = 0;
  for (int64_t i = 0; i < na; i++) worst = fmax(worst, fabs((double)a[i] - b[i]) / fmax(fabs(a[i]), 1e-6));
  printf("  %s %s: not bit-identical, worst relative difference %.3g\n", model, what, worst);
}

static void tm_compare(const tm_model *tm, const tm_result *ex, const tm_result *rt) {
  tm_check(ex->ok && rt->ok, "both run", tm->name);
  tm_same(ex->w0, rt->w0, ex->nw0, rt->nw0, "initial weights", tm->name);
  tm_same(ex->pred, rt->pred, tm_out_numel(tm->d), tm_out_numel(tm->d), "predict outputs", tm->name);
  if (!tm->tg) return;
  tm_same(ex->loss, rt->loss, TM_STEPS, TM_STEPS, "losses of 3 train steps", tm->name);
  tm_same(ex->w, rt->w, ex->nw, rt->nw, "weights and optimizer state after training", tm->name);
  tm_same(ex->pred2, rt->pred2, tm_out_numel(tm->d), tm_out_numel(tm->d), "predict after training", tm->name);
}

/* The descriptor's programs take what the executor takes. */
static void tm_check_inputs(const tm_model *tm) {
  int idx[TM_MAX_IN], n = ir_graph_inputs(tm->pg, idx, TM_MAX_IN);
  bool ok = n == tm->d->predict.ninputs && memcmp(idx, tm->d->predict.inputs, (size_t)n * sizeof *idx) == 0;
  if (tm->tg) {
    n = ir_graph_inputs(tm->tg, idx, TM_MAX_IN);
    ok = ok && n == tm->d->train.ninputs && memcmp(idx, tm->d->train.inputs, (size_t)n * sizeof *idx) == 0;
  }
  tm_check(ok, "program inputs are ir_graph_inputs", tm->name);
}

/* ---- weights files ---- */

static float *tm_weights(const tm_model *tm, const rt_model *m, int64_t *n) { return tm_collect(tm, false, tm_get_rt, m, n); }

static bool tm_weights_are(const tm_model *tm, const rt_model *m, const float *w, int64_t nw) {
  int64_t n;
  float *x = tm_weights(tm, m, &n);
  bool same = x && n == nw && memcmp(x, w, (size_t)n * 4) == 0;
  free(x);
  return same;
}

/* save, train (the weights move), load: the saved weights are back; a fresh instance of
 * another seed loads them too. */
static void tm_roundtrip(const tm_model *tm) {
  char path[600];
  snprintf(path, sizeof path, "%s/roundtrip.safetensors", tm_tmp);
  rt_model *m = rt_model_create(tm->d, TM_SEED), *m2 = rt_model_create(tm->d, TM_SEED + 1);
  int64_t nw;
  float *w = tm_weights(tm, m, &nw), loss;
  bool saved = !rt_model_save(m, path);
  tm_check(saved && rt_model_error(m)[0] == 0, "save", tm->name);
  if (tm->tg) tm_check(tm_rt_train(tm, m, tm->tbatch[0], &loss) && !tm_weights_are(tm, m, w, nw), "training moves the weights", tm->name);
  tm_check(!rt_model_load(m, path) && tm_weights_are(tm, m, w, nw), "load restores the saved weights", tm->name);
  tm_check(!rt_model_load(m2, path) && tm_weights_are(tm, m2, w, nw), "another instance loads them", tm->name);
  free(w);
  rt_model_destroy(m), rt_model_destroy(m2);
  unlink(path);
}

/* Kernels keep data derived from the weights between predict calls (the convolution's
 * repacked weights); a load must make predict see the new weights: predict (which fills the
 * caches), load the weights of an instance of another seed, predict again — bit for bit that
 * instance's predict. tm_run_rt checks the same across train steps against the executor. */
static void tm_reload_predict(const tm_model *tm) {
  char path[600];
  snprintf(path, sizeof path, "%s/reload.safetensors", tm_tmp);
  rt_model *m = rt_model_create(tm->d, TM_SEED), *o = rt_model_create(tm->d, TM_SEED + 7);
  float *before = tm_rt_predict(tm, m), *want = tm_rt_predict(tm, o);
  bool loaded = !rt_model_save(o, path) && !rt_model_load(m, path);
  float *got = loaded ? tm_rt_predict(tm, m) : NULL;
  int64_t n = tm_out_numel(tm->d);
  tm_check(before && want && got && memcmp(got, want, (size_t)n * 4) == 0, "predict after load uses the loaded weights", tm->name);
  free(before), free(want), free(got);
  rt_model_destroy(m), rt_model_destroy(o);
  unlink(path);
}

/* Steps that do not depend on the step before them (deps are transitively reduced, so
 * such a step may run while the one before it does). */
static int tm_overlapping(const rt_program *p) {
  int n = 0;
  for (int j = 1; j < p->nsteps; j++) {
    bool after = false;
    for (int k = 0; k < p->steps[j].ndeps; k++) after |= p->steps[j].deps[k] == j - 1;
    n += !after;
  }
  return n;
}

/* A backward step with fewer inputs than outputs (found by tests/fuzz/fuzz_model_desc: the
 * shape of its absent outputs was read at in_shape[-1]) is refused. */
static void tm_malformed_backward(const tm_model *tm) {
  const rt_program *p = &tm->d->train;
  int b = -1;
  for (int i = 0; tm->d->has_train && i < p->nsteps && b < 0; i++)
    if (p->steps[i].kind == RT_STEP_BACKWARD && p->steps[i].nout >= 2) b = i;
  if (b < 0) return;
  rt_step *steps = malloc((size_t)p->nsteps * sizeof *steps);
  memcpy(steps, p->steps, (size_t)p->nsteps * sizeof *steps);
  steps[b].nin = steps[b].nout - 1;
  rt_model_desc d = *tm->d;
  d.train.steps = steps;
  rt_model *m = rt_model_create(&d, 1);
  tm_check(!m, "a backward step with fewer inputs than outputs is refused", tm->name);
  rt_model_destroy(m);
  free(steps);
}

/* An epilogue naming an input slot past the step's inputs, or a channel run of 0 elements,
 * is refused before anything runs (rt_model_run.c checks it with k_epi_valid). */
static void tm_malformed_epilogue(const tm_model *tm) {
  const rt_program *p = &tm->d->predict;
  int e = -1;
  for (int i = 0; i < p->nsteps && e < 0; i++)
    if (p->steps[i].epi) e = i;
  if (e < 0) return;
  rt_step *steps = malloc((size_t)p->nsteps * sizeof *steps);
  memcpy(steps, p->steps, (size_t)p->nsteps * sizeof *steps);
  k_epilogue bad = *p->steps[e].epi;
  bad.step[0].kind = K_EPI_BINARY, bad.step[0].fn = 0, bad.step[0].slot = steps[e].nin;
  steps[e].epi = &bad;
  rt_model_desc d = *tm->d;
  d.predict.steps = steps;
  rt_model *m = rt_model_create(&d, 1);
  bad.step[0] = (k_epi_step){.kind = K_EPI_AFFINE, .slot = 0, .channels = 1, .inner = 0};
  rt_model *m2 = rt_model_create(&d, 1), *good = rt_model_create(tm->d, 1);
  tm_check(good && !m && !m2, "an epilogue with a slot out of range or an empty channel run is refused", tm->name);
  /* a binary step whose operand (the weights, slot 1) is smaller than it reads: taken as
   * the output's shape, or as a period past its end (k_epi_operand_fit) */
  const k_shape *w = &d.tensors[steps[e].in[1]].shape, *y = &d.tensors[steps[e].out[0]].shape;
  rt_model *m3 = NULL, *m4 = NULL;
  if (k_shape_numel(w) < k_shape_numel(y)) {
    bad.step[0] = (k_epi_step){.kind = K_EPI_BINARY, .fn = 0, .slot = 1};
    m3 = rt_model_create(&d, 1);
    bad.step[0].period = k_shape_numel(w) + 1;
    m4 = rt_model_create(&d, 1);
    tm_check(!m3 && !m4, "an epilogue whose binary operand is smaller than it reads is refused", tm->name);
  }
  rt_model_destroy(m), rt_model_destroy(m2), rt_model_destroy(m3), rt_model_destroy(m4), rt_model_destroy(good);
  free(steps);
}

/* A train step whose epilogue gathers batch_norm statistics into a tensor that does not hold
 * one entry per plane (here: planes of twice the size) is refused before anything runs, so
 * no call writes past it. */
static void tm_malformed_stats(const tm_model *tm) {
  const rt_program *p = &tm->d->train;
  int e = -1;
  for (int i = 0; i < p->nsteps && e < 0; i++)
    if (k_epi_has_stats(p->steps[i].epi)) e = i;
  if (e < 0) return;
  rt_step *steps = malloc((size_t)p->nsteps * sizeof *steps);
  memcpy(steps, p->steps, (size_t)p->nsteps * sizeof *steps);
  k_epilogue bad = *p->steps[e].epi;
  bad.step[bad.nsteps - 1].inner *= 2;
  steps[e].epi = &bad;
  rt_model_desc d = *tm->d;
  d.train.steps = steps;
  rt_model *m = rt_model_create(&d, 1), *good = rt_model_create(tm->d, 1);
  tm_check(good && !m, "an epilogue whose statistics do not fit their tensor is refused", tm->name);
  rt_model_destroy(m), rt_model_destroy(good);
  free(steps);
  tm_stats_checked++;
}

/* A step run per sample whose last sample of a slot would end past the arena, or that says
 * it runs per sample but has no strides, is refused before anything runs. */
static void tm_malformed_samples(const tm_model *tm) {
  const rt_program *p = &tm->d->predict;
  int e = -1, j = -1;
  for (int i = 0; i < p->nsteps && e < 0; i++)
    for (int k = 0; p->steps[i].samples > 1 && k < p->steps[i].nin + p->steps[i].nout && j < 0; k++)
      if (p->steps[i].sample_stride[k]) e = i, j = k;
  if (e < 0) return;
  rt_step *steps = malloc((size_t)p->nsteps * sizeof *steps);
  memcpy(steps, p->steps, (size_t)p->nsteps * sizeof *steps);
  int ns = steps[e].nin + steps[e].nout;
  int64_t *st = malloc(sizeof *st * (size_t)ns);
  memcpy(st, steps[e].sample_stride, sizeof *st * (size_t)ns);
  st[j] = p->arena_bytes;
  steps[e].sample_stride = st;
  rt_model_desc d = *tm->d;
  d.predict.steps = steps;
  rt_model *m = rt_model_create(&d, 1);
  steps[e].sample_stride = NULL;
  rt_model *m2 = rt_model_create(&d, 1), *good = rt_model_create(tm->d, 1);
  tm_check(good && !m && !m2, "a per-sample step past the arena or without strides is refused", tm->name);
  rt_model_destroy(m), rt_model_destroy(m2), rt_model_destroy(good);
  free(st), free(steps);
  tm_samples_checked++;
}

/* A descriptor of another ABI, or with a dependency on a later step, is refused. */
static void tm_malformed(const tm_model *tm) {
  rt_model_desc d = *tm->d;
  d.abi = "kiln-model-0";
  rt_model *m = rt_model_create(&d, 1);
  int n = tm->d->predict.nsteps;
  rt_step *steps = malloc((size_t)n * sizeof *steps);
  memcpy(steps, tm->d->predict.steps, (size_t)n * sizeof *steps);
  int32_t later = n - 1;
  steps[0].deps = &later, steps[0].ndeps = 1;
  d = *tm->d, d.predict.steps = steps;
  rt_model *m2 = n > 1 ? rt_model_create(&d, 1) : NULL;
  tm_check(!m && !m2, "malformed descriptors are refused", tm->name);
  rt_model_destroy(m), rt_model_destroy(m2);
  free(steps);
  tm_malformed_backward(tm);
  tm_malformed_epilogue(tm);
  tm_malformed_stats(tm);
  tm_malformed_samples(tm);
}

/* Consts are never written: after the train steps each holds the values it was created
 * with (tm_collect's order: the descriptor's), and the optimizer gave it no state. */
static float *tm_consts(const tm_model *tm, const rt_model *m, int64_t *total) {
  float *w = calloc(1, 4);
  *total = 0;
  for (int i = 0; w && i < tm->d->ntensors; i++) {
    const float *x;
    int64_t n;
    int t = tm->d->tensors[i].ctr;   /* the graph index: weights are the lowered graph's own */
    if (t >= ir_ntensors(tm->lowered) || !ir_tensor_at(tm->lowered, t)->fixed || rt_model_get(m, tm->d->tensors[i].name, &x, &n))
      continue;
    w = realloc(w, (size_t)(*total + n) * 4 + 4);
    memcpy(w + *total, x, (size_t)n * 4), *total += n;
  }
  return w;
}

static void tm_consts_fixed(const tm_model *tm) {
  rt_model *m = tm->tg ? rt_model_create(tm->d, TM_SEED) : NULL;
  int64_t n0 = 0, n1 = 0;
  float *before = m ? tm_consts(tm, m, &n0) : NULL, loss;
  bool ok = before != NULL, any_state = false;
  for (int s = 0; s < TM_STEPS && ok; s++) ok = tm_rt_train(tm, m, tm->tbatch[s], &loss);
  float *after = ok ? tm_consts(tm, m, &n1) : NULL;
  for (int i = 0; m && i < tm->d->ntensors; i++) {
    const char *at = strchr(tm->d->tensors[i].name, '@');
    char owner[256];
    if (tm->d->tensors[i].role != RT_ROLE_STATE || !at) continue;
    snprintf(owner, sizeof owner, "%.*s", (int)(at - tm->d->tensors[i].name), tm->d->tensors[i].name);
    int t = ir_graph_find_tensor(tm->lowered, owner);
    any_state |= t >= 0 && ir_tensor_at(tm->lowered, t)->fixed;
  }
  if (m && n0) tm_check(after && n1 == n0 && memcmp(before, after, (size_t)n0 * 4) == 0 && !any_state,
                        "train_step leaves every const as it was, with no optimizer state", tm->name);
  free(before), free(after);
  if (m) rt_model_destroy(m);
}

/* ---- one model: every check that runs per engine ---- */

/* ---- the descriptor holds what the runtime binds, and nothing else (cg_desc.c) ---- */

static void tm_mark(bool *named, const int32_t *t, int n) {
  for (int i = 0; i < n; i++)
    if (t[i] >= 0) named[t[i]] = true;
}

static void tm_mark_program(const rt_program *p, bool *named) {
  for (int i = 0; i < p->nsteps; i++) tm_mark(named, p->steps[i].in, p->steps[i].nin), tm_mark(named, p->steps[i].out, p->steps[i].nout);
  tm_mark(named, p->inputs, p->ninputs), tm_mark(named, p->outputs, p->noutputs);
}

/* Fused groups read their float constants as immediates: no slot, and no shape table. */
static bool tm_fused_lean(const tm_model *tm, const rt_program *p) {
  for (int i = 0; i < p->nsteps; i++) {
    const rt_step *s = &p->steps[i];
    if (s->kind != RT_STEP_FUSED) continue;
    if (s->in_shape) return false;
    for (int j = 0; j < s->nin; j++)
      if (s->in[j] >= 0 && tm->d->tensors[s->in[j]].role == RT_ROLE_CONST && tm->d->tensors[s->in[j]].dtype == K_F32) return false;
  }
  return true;
}

static void tm_desc_lean(const tm_model *tm) {
  const rt_model_desc *d = tm->d;
  bool *named = calloc((size_t)d->ntensors + 1, sizeof *named);
  if (!named) return tm_check(false, "out of memory", tm->name);
  tm_mark_program(&d->predict, named);
  if (d->has_train) tm_mark_program(&d->train, named);
  int unbound = 0;
  for (int t = 0; t < d->ntensors; t++)
    unbound += !named[t] && (d->tensors[t].role == RT_ROLE_VALUE || d->tensors[t].role == RT_ROLE_CONST);
  free(named);
  tm_check(unbound == 0, "every value and constant in the descriptor is a step's, an input or an output", tm->name);
  tm_check(tm_fused_lean(tm, &d->predict) && (!d->has_train || tm_fused_lean(tm, &d->train)),
           "fused steps have neither float-constant slots nor shape tables", tm->name);
  int weights = 0, kept = 0;
  const ir_graph *g = tm->tg ? tm->tg : tm->pg;
  for (int t = 0; t < ir_ntensors(g); t++) weights += ir_tensor_at(g, t)->kind == IR_T_PARAM || ir_tensor_at(g, t)->kind == IR_T_AUX;
  for (int t = 0; t < d->ntensors; t++) kept += d->tensors[t].role == RT_ROLE_PARAM || d->tensors[t].role == RT_ROLE_AUX;
  tm_check(weights == kept, "every parameter and aux state is in the descriptor", tm->name);
}

static void tm_model_run(const tm_model *tm) {
  tm_result ex, rt;
  tm_check_inputs(tm);
  tm_desc_lean(tm);
  tm_run_ex(tm, &ex);
  tm_run_rt(tm, &rt);
  tm_compare(tm, &ex, &rt);
  if (ex.ok && rt.ok && tm->tg)
    printf("ok %s (%s): predict %d steps (%d may overlap the one before), train %d (%d), losses %.5g %.5g %.5g\n",
           tm->name, tm_engine, tm->d->predict.nsteps, tm_overlapping(&tm->d->predict), tm->d->train.nsteps,
           tm_overlapping(&tm->d->train), rt.loss[0], rt.loss[1], rt.loss[2]);
  tm_result_free(&ex), tm_result_free(&rt);
  tm_roundtrip(tm);
  tm_consts_fixed(tm);
  tm_reload_predict(tm);
  tm_malformed(tm);
}

/* ---- bad input: nonzero, a message, the weights (and optimizer state) as they were ---- */

static float *tm_state(const tm_model *tm, const rt_model *m, int64_t *n) { return tm_collect(tm, true, tm_get_rt, m, n); }

typedef struct { const tm_model *tm; rt_model *m; float *w; int64_t nw; } tm_guard;

static tm_guard tm_guard_new(const tm_model *tm, rt_model *m) {
  tm_guard g = {tm, m, NULL, 0};
  g.w = tm_state(tm, m, &g.nw);
  return g;
}

/* rc must be nonzero with a message, and nothing the model holds may have changed. */
static void tm_refused(const tm_guard *g, int rc, const char *what, bool show) {
  int64_t n;
  float *x = tm_state(g->tm, g->m, &n);
  bool same = x && n == g->nw && memcmp(x, g->w, (size_t)n * 4) == 0;
  const char *msg = rt_model_error(g->m);
  char label[256];
  snprintf(label, sizeof label, "%s: nonzero, a message, weights unchanged", what);
  tm_check(rc != 0 && msg[0] && same, label, g->tm->name);
  if (show) printf("  %s -> \"%s\"\n", what, msg);
  free(x);
}

static void tm_null_model(void) {
  const void *in[1] = {NULL};
  void *out[1] = {NULL};
  float loss;
  const float *x;
  int64_t n;
  bool ok = !rt_model_create(NULL, 1) && rt_model_load(NULL, "x") && rt_model_save(NULL, "x") &&
            rt_model_predict(NULL, in, out) && rt_model_train_step(NULL, in, &loss) && rt_model_set_lr(NULL, 0.1f) &&
            rt_model_error(NULL)[0] && rt_model_get(NULL, "x", &x, &n) && !rt_model_descriptor(NULL);
  rt_model_destroy(NULL);
  tm_check(ok, "every entry point refuses a NULL model", "null");
}

static void tm_null_args(const tm_model *tm, rt_model *m) {
  const rt_program *pp = &tm->d->predict, *tp = &tm->d->train;
  const void *args[TM_MAX_IN];
  void *outs[TM_MAX_OUT];
  float *buf = malloc((size_t)tm_out_numel(tm->d) * 4 + 4), loss;
  tm_out_ptrs(tm->d, buf, outs);
  tm_guard g = tm_guard_new(tm, m);
  tm_refused(&g, rt_model_predict(m, NULL, outs), "predict(inputs NULL)", true);
  tm_refused(&g, rt_model_predict(m, (tm_args(tm->d, pp, tm->pbatch, args), args), NULL), "predict(outputs NULL)", true);
  for (int k = 0; k < pp->ninputs; k++) {
    tm_args(tm->d, pp, tm->pbatch, args), args[k] = NULL;
    tm_refused(&g, rt_model_predict(m, args, outs), "predict(one input NULL)", k == 0);
  }
  for (int k = 0; k < pp->noutputs; k++) {
    void *o2[TM_MAX_OUT];
    tm_out_ptrs(tm->d, buf, o2), o2[k] = NULL;
    tm_refused(&g, rt_model_predict(m, (tm_args(tm->d, pp, tm->pbatch, args), args), o2), "predict(one output NULL)", k == 0);
  }
  tm_refused(&g, rt_model_train_step(m, NULL, &loss), "train_step(inputs NULL)", true);
  for (int k = 0; k < tp->ninputs; k++) {
    tm_args(tm->d, tp, tm->tbatch[0], args), args[k] = NULL;
    tm_refused(&g, rt_model_train_step(m, args, &loss), "train_step(one input NULL)", k == 0);
  }
  tm_refused(&g, rt_model_train_step(m, (tm_args(tm->d, tp, tm->tbatch[0], args), args), NULL), "train_step(loss NULL)", true);
  tm_refused(&g, rt_model_load(m, NULL), "load(path NULL)", true);
  tm_refused(&g, rt_model_save(m, NULL), "save(path NULL)", true);
  free(g.w), free(buf);
}

static bool tm_write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return false;
  bool ok = fwrite(p, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

static void *tm_read_bytes(const char *path, size_t *n) {
  void *data = NULL;
  char err[256];
  return rt_file_read_all(path, &data, n, err, sizeof err) ? NULL : data;
}

/* Every proper prefix of a valid weights file is refused. */
static void tm_truncated(const tm_model *tm, rt_model *m) {
  char good[600], bad[600];
  snprintf(good, sizeof good, "%s/good.safetensors", tm_tmp), snprintf(bad, sizeof bad, "%s/cut.safetensors", tm_tmp);
  size_t n = 0;
  char *img = !rt_model_save(m, good) ? tm_read_bytes(good, &n) : NULL;
  tm_check(img != NULL, "save a small weights file", tm->name);
  tm_guard g = tm_guard_new(tm, m);
  int refused = 0;
  for (size_t len = 0; img && len < n; len++) {
    tm_write_bytes(bad, img, len);
    int64_t nw;
    float *x = rt_model_load(m, bad) && rt_model_error(m)[0] ? tm_state(tm, m, &nw) : NULL;
    refused += x && nw == g.nw && memcmp(x, g.w, (size_t)nw * 4) == 0;
    free(x);
  }
  printf("  %s: %d of %zu truncated lengths refused\n", tm->name, refused, n);
  tm_check(img && refused == (int)n, "every truncated file is refused, weights unchanged", tm->name);
  free(img), free(g.w);
  unlink(good), unlink(bad);
}

/* A weights file made from the model's own weights, then spoiled by `how`. */
enum { TM_WRONG_NAME, TM_WRONG_SHAPE, TM_WRONG_DTYPE, TM_EXTRA, TM_MISSING, TM_NSPOIL };
static const char *const tm_spoil_name[] = {"a wrong name", "a wrong shape", "a wrong dtype", "an extra tensor", "a missing tensor"};

static int tm_spoiled(const tm_model *tm, const rt_model *m, int how, const char *path) {
  rt_st_tensor ts[256];
  int n = 0;
  float one = 1;
  for (int i = 0; i < tm->d->ntensors && n < 255; i++) {
    const rt_tensor_info *t = &tm->d->tensors[i];
    const float *x;
    int64_t nx;
    if ((t->role == RT_ROLE_PARAM || t->role == RT_ROLE_AUX) && !rt_model_get(m, t->name, &x, &nx)) ts[n++] = (rt_st_tensor){t->name, K_F32, t->shape, x};
  }
  if (how == TM_WRONG_NAME) ts[0].name = "no.such.weight";
  if (how == TM_WRONG_SHAPE) ts[0].shape = ts[0].shape.rank > 1 ? (k_shape){1, {k_shape_numel(&ts[0].shape)}} : (k_shape){2, {1, k_shape_numel(&ts[0].shape)}};
  if (how == TM_WRONG_DTYPE) ts[0].dtype = K_I32;
  if (how == TM_EXTRA) ts[n++] = (rt_st_tensor){"extra.weight", K_F32, {1, {1}}, &one};
  if (how == TM_MISSING) n--;
  char err[256];
  return rt_st_write(path, ts, n, NULL, 0, err, sizeof err);
}

static void tm_bad_files(const tm_model *tm, rt_model *m) {
  char path[600];
  tm_guard g = tm_guard_new(tm, m);
  snprintf(path, sizeof path, "%s/missing.safetensors", tm_tmp);
  tm_refused(&g, rt_model_load(m, path), "load(a missing file)", true);
  snprintf(path, sizeof path, "%s/spoiled.safetensors", tm_tmp);
  for (int how = 0; how < TM_NSPOIL; how++) {
    char what[128];
    snprintf(what, sizeof what, "load(a file with %s)", tm_spoil_name[how]);
    tm_check(!tm_spoiled(tm, m, how, path), "write a spoiled file", tm->name);
    tm_refused(&g, rt_model_load(m, path), what, true);
  }
  unlink(path);
  free(g.w);
  tm_truncated(tm, m);
}

static int tm_count_files(const char *dir) {
  struct dirent **list = NULL;
  int n = scandir(dir, &list, NULL, alphasort);
  for (int i = 0; i < n; i++) free(list[i]);
  free(list);
  return n;
}

/* A save that fails (the file size limit stops the write) leaves the old file as it was and
 * no temporary file behind. */
static void tm_save_fails_over(const tm_model *tm, rt_model *m) {
  char path[600];
  snprintf(path, sizeof path, "%s/kept.safetensors", tm_tmp);
  const char old[] = "the old contents";
  tm_write_bytes(path, old, sizeof old);
  int files = tm_count_files(tm_tmp);
  struct rlimit lim, small;
  getrlimit(RLIMIT_FSIZE, &lim);
  small = lim, small.rlim_cur = 64;
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  setrlimit(RLIMIT_FSIZE, &small);
  int rc = rt_model_save(m, path);
  setrlimit(RLIMIT_FSIZE, &lim);
  signal(SIGXFSZ, prev);
  size_t n = 0;
  char *now = tm_read_bytes(path, &n);
  printf("  save(over a file, the write fails) -> \"%s\"\n", rt_model_error(m));
  tm_check(rc && rt_model_error(m)[0] && now && n == sizeof old && memcmp(now, old, n) == 0 && tm_count_files(tm_tmp) == files,
           "a failed save leaves the existing file intact and no temporary", tm->name);
  free(now), unlink(path);
}

static void tm_bad_saves(const tm_model *tm, rt_model *m) {
  char path[600], file[600];
  struct stat st;
  snprintf(path, sizeof path, "%s/no/such/dir/w.safetensors", tm_tmp);
  tm_guard g = tm_guard_new(tm, m);
  tm_refused(&g, rt_model_save(m, path), "save(into a missing directory)", true);
  tm_check(stat(path, &st) != 0, "no file after a failed save", tm->name);
  snprintf(file, sizeof file, "%s/plain", tm_tmp), snprintf(path, sizeof path, "%s/plain/w.safetensors", tm_tmp);
  tm_write_bytes(file, "x", 1);
  tm_refused(&g, rt_model_save(m, path), "save(under a regular file)", true);
  tm_check(stat(path, &st) != 0, "no file after a failed save", tm->name);
  unlink(file), free(g.w);
  tm_save_fails_over(tm, m);
}

static void tm_bad_lr(const tm_model *tm, rt_model *m) {
  tm_guard g = tm_guard_new(tm, m);
  const float bad[] = {NAN, 0.0f, -1.0f, INFINITY};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) tm_refused(&g, rt_model_set_lr(m, bad[i]), "set_lr(NaN, 0, -1, inf)", i == 0);
  tm_check(!rt_model_set_lr(m, 0.05f) && rt_model_error(m)[0] == 0, "set_lr(0.05) succeeds, error \"\"", tm->name);
  free(g.w);
}

/* A label out of range fails the step; the step count is kept too: the next steps match the
 * executor's, dropout masks and all. */
static void tm_bad_label(const tm_model *tm, rt_model *m) {
  int lt = ir_graph_find_tensor(tm->lowered, "label");
  void **b = ts_batch(tm->lowered, &tm_rng);
  char err[EX_ERR_LEN] = "";
  if (lt < 0) return tm_check(false, "has a label input", tm->name), ts_batch_free(tm->lowered, b);
  ((int32_t *)b[lt])[1] = 1000;
  float loss;
  tm_guard g = tm_guard_new(tm, m);
  tm_refused(&g, tm_rt_train(tm, m, b, &loss) ? 0 : 1, "train_step(label 1000)", true);
  ex_model *ex = ex_model_new(tm->lowered, TM_SEED, err, sizeof err);
  float le[TM_STEPS], lr[TM_STEPS];
  bool ok = ex != NULL;
  for (int s = 0; ok && s < TM_STEPS; s++) {
    const void *args[TM_MAX_IN];
    tm_args(tm->d, &tm->d->train, tm->tbatch[s], args);
    ok = !ex_train_step(ex, tm->tg, args, &le[s], err, sizeof err) && tm_rt_train(tm, m, tm->tbatch[s], &lr[s]);
  }
  int64_t nw = 0, ne = 0;
  float *w = tm_state(tm, m, &nw), *we = ex ? tm_collect(tm, true, tm_get_ex, ex, &ne) : NULL;
  tm_check(ok && memcmp(le, lr, sizeof le) == 0 && w && we && nw == ne && memcmp(w, we, (size_t)nw * 4) == 0,
           "after a failed step, training goes on as the executor's", tm->name);
  free(w), free(we), free(g.w);
  ex_model_free(ex);
  ts_batch_free(tm->lowered, b);
}

static void tm_bad_inputs(const tm_model *tm) {
  rt_model *m = rt_model_create(tm->d, TM_SEED);
  tm_null_model();
  tm_null_args(tm, m);
  tm_bad_files(tm, m);
  tm_bad_saves(tm, m);
  tm_bad_lr(tm, m);
  rt_model_destroy(m);
  m = rt_model_create(tm->d, TM_SEED);
  tm_bad_label(tm, m);
  rt_model_destroy(m);
}

/* ---- threads: instances of two models at once agree with sequential runs ---- */

typedef struct { const tm_model *tm; tm_result r; rt_model *shared; float *pred; } tm_job;

static void *tm_job_run(void *p) {
  tm_job *j = p;
  if (j->shared) j->pred = tm_rt_predict(j->tm, j->shared);
  else tm_run_rt(j->tm, &j->r);
  return NULL;
}

static bool tm_result_same(const tm_model *tm, const tm_result *a, const tm_result *b) {
  int64_t np = tm_out_numel(tm->d);
  return a->ok && b->ok && a->nw == b->nw && memcmp(a->w, b->w, (size_t)a->nw * 4) == 0 &&
         memcmp(a->pred, b->pred, (size_t)np * 4) == 0 && memcmp(a->pred2, b->pred2, (size_t)np * 4) == 0 &&
         memcmp(a->loss, b->loss, sizeof a->loss) == 0;
}

/* Two instances of each model, and one instance shared by two predicting threads. */
static void tm_threads_of(const tm_model *a, const tm_model *b) {
  tm_result seq[2];
  tm_run_rt(a, &seq[0]), tm_run_rt(b, &seq[1]);
  rt_model *shared = rt_model_create(a->d, TM_SEED);
  float *pseq = tm_rt_predict(a, shared);
  tm_job jobs[6] = {{.tm = a}, {.tm = a}, {.tm = b}, {.tm = b}, {.tm = a, .shared = shared}, {.tm = a, .shared = shared}};
  pthread_t th[6];
  for (int i = 0; i < 6; i++) pthread_create(&th[i], NULL, tm_job_run, &jobs[i]);
  for (int i = 0; i < 6; i++) pthread_join(th[i], NULL);
  bool ok = true;
  for (int i = 0; i < 4; i++) ok = ok && tm_result_same(jobs[i].tm, &seq[i / 2], &jobs[i].r);
  for (int i = 4; i < 6; i++) ok = ok && pseq && jobs[i].pred && memcmp(pseq, jobs[i].pred, (size_t)tm_out_numel(a->d) * 4) == 0;
  tm_check(ok, "concurrent instances give the sequential results", "threads");
  for (int i = 0; i < 6; i++) tm_result_free(&jobs[i].r), free(jobs[i].pred);
  tm_result_free(&seq[0]), tm_result_free(&seq[1]);
  free(pseq);
  rt_model_destroy(shared);
}

/* The first model of a file, lowered with the small dims (fr outlives the graph). */
static ir_graph *tm_lower_first(ts_front *fr, const char *rel) {
  char path[2048];
  snprintf(path, sizeof path, "%s%s", ts_root(), rel);
  *fr = (ts_front){.small = true};
  return ts_lower_file(fr, path, NULL, 0);
}

static void tm_threads(void) {
  ts_front fa, fb;
  ir_graph *ga = tm_lower_first(&fa, "tests/passes/models/normdrop.kiln"), *gb = tm_lower_first(&fb, "tests/passes/models/shared.kiln");
  tm_model a, b;
  bool ok = ga && gb && tm_model_init(&a, "normdrop", ga) && tm_model_init(&b, "shared", gb);
  for (int round = 0; ok && round < 3; round++) tm_threads_of(&a, &b);
  if (ga && gb) tm_model_free(&a), tm_model_free(&b);
  ir_graph_free(ga), ir_graph_free(gb);
  ts_front_free(&fa), ts_front_free(&fb);
}

/* ---- soak: threads that create, run, save, load and destroy two models over and over ---- */

enum { TM_SOAKERS = 4, TM_SOAK_ROUNDS = 4 };
typedef struct { const tm_model *tm[2]; const tm_result *seq[2]; int id; bool ok; } tm_soaker;

/* One round: a fresh instance predicts and trains (results as the sequential run's), saves;
 * a second instance loads the file and predicts as the first does. */
static bool tm_soak_round(const tm_model *tm, const tm_result *seq, const char *path) {
  int64_t np = tm_out_numel(tm->d);
  rt_model *m = rt_model_create(tm->d, TM_SEED), *m2 = rt_model_create(tm->d, TM_SEED + 1);
  float *pred = m ? tm_rt_predict(tm, m) : NULL, loss[TM_STEPS] = {0}, *after = NULL, *loaded = NULL;
  bool ok = pred && m2 && memcmp(pred, seq->pred, (size_t)np * 4) == 0;
  for (int s = 0; ok && tm->tg && s < TM_STEPS; s++) ok = tm_rt_train(tm, m, tm->tbatch[s], &loss[s]);
  ok = ok && (!tm->tg || memcmp(loss, seq->loss, sizeof loss) == 0) && (after = tm_rt_predict(tm, m)) &&
       memcmp(after, seq->pred2, (size_t)np * 4) == 0 && rt_model_save(m, path) == 0 && rt_model_load(m2, path) == 0 &&
       (loaded = tm_rt_predict(tm, m2)) && memcmp(loaded, after, (size_t)np * 4) == 0;
  free(pred), free(after), free(loaded);
  rt_model_destroy(m), rt_model_destroy(m2);
  unlink(path);
  return ok;
}

static void *tm_soak_run(void *p) {
  tm_soaker *s = p;
  char path[sizeof tm_tmp + 64];
  snprintf(path, sizeof path, "%s/soak%d.safetensors", tm_tmp, s->id);
  s->ok = true;
  for (int r = 0; r < TM_SOAK_ROUNDS && s->ok; r++) {
    int k = (r + s->id) & 1;
    s->ok = tm_soak_round(s->tm[k], s->seq[k], path);
  }
  return NULL;
}

/* TM_SOAKERS threads at once, two different models, a bounded number of rounds; every
 * result equal to the single-threaded run's (run under TSan and ASan: label runtime). */
static void tm_soak(void) {
  ts_front fa, fb;
  ir_graph *ga = tm_lower_first(&fa, "tests/passes/models/normdrop.kiln"), *gb = tm_lower_first(&fb, "examples/lenet.kiln");
  tm_model a, b;
  if (ga && gb && tm_model_init(&a, "normdrop", ga) && tm_model_init(&b, "lenet", gb)) {
    tm_result seq[2];
    tm_run_rt(&a, &seq[0]), tm_run_rt(&b, &seq[1]);
    tm_soaker s[TM_SOAKERS];
    pthread_t th[TM_SOAKERS];
    for (int i = 0; i < TM_SOAKERS; i++) {
      s[i] = (tm_soaker){{&a, &b}, {&seq[0], &seq[1]}, i, false};
      pthread_create(&th[i], NULL, tm_soak_run, &s[i]);
    }
    bool ok = seq[0].ok && seq[1].ok;
    for (int i = 0; i < TM_SOAKERS; i++) pthread_join(th[i], NULL), ok = ok && s[i].ok;
    tm_check(ok, "threads creating, running, saving, loading and destroying two models agree with one thread", "soak");
    tm_result_free(&seq[0]), tm_result_free(&seq[1]);
    tm_model_free(&a), tm_model_free(&b);
  } else {
    tm_check(false, "the soak models build", "soak");
  }
  ir_graph_free(ga), ir_graph_free(gb);
  ts_front_free(&fa), ts_front_free(&fb);
}

/* The same run with the kernels' pool at 1 and at 2 threads: bit for bit. */
static void tm_thread_counts(const tm_model *tm) {
  tm_result r[2];
  for (int t = 0; t < 2; t++) {
    k_parallel_set_threads(t + 1);
    tm_run_rt(tm, &r[t]);
  }
  k_parallel_set_threads(0);
  tm_check(tm_result_same(tm, &r[0], &r[1]), "1 and 2 kernel threads give the same bits", tm->name);
  tm_result_free(&r[0]), tm_result_free(&r[1]);
}

/* LeNet at its own dims (batch 64): convolution parts, pooling planes and the GEMM blocks
 * all split, which the small dims barely do. */
static void tm_thread_counts_full(void) {
  ts_front fr = {.small = false};
  char path[2048];
  snprintf(path, sizeof path, "%sexamples/lenet.kiln", ts_root());
  ir_graph *g = ts_lower_file(&fr, path, NULL, 0);
  tm_model tm;
  if (g && tm_model_init(&tm, "lenet (batch 64)", g)) tm_thread_counts(&tm);
  if (g) tm_model_free(&tm);
  tm_check(g != NULL, "lowers", path);
  ir_graph_free(g);
  ts_front_free(&fr);
}

/* Graphs of two different models are refused with a message. */
static void tm_prefix_mismatch(void) {
  ts_front fa, fb;
  ir_graph *ga = tm_lower_first(&fa, "examples/mlp.kiln"), *gb = tm_lower_first(&fb, "examples/lenet.kiln");
  ir_graph *pa = ga ? tm_compile(ga, IR_MODE_PREDICT) : NULL, *tb = gb ? tm_compile(gb, IR_MODE_TRAIN) : NULL;
  char err[512] = "";
  rt_model_desc *d = pa && tb ? cg_desc_build(pa, tb, err, sizeof err) : NULL;
  printf("  predict graph of mlp, train graph of lenet -> \"%s\"\n", err);
  tm_check(pa && tb && !d && err[0], "graphs of two models are refused", "cg_desc_build");
  cg_desc_free(d);
  ts_graph_free(pa), ts_graph_free(tb);
  ir_graph_free(ga), ir_graph_free(gb);
  ts_front_free(&fa), ts_front_free(&fb);
}

/* ---- walking the models ---- */

typedef void (*tm_fn)(const tm_model *tm);

static void tm_each_model(const char *path, tm_fn fn) {
  ts_front fr = {.small = true};
  bool ok = ts_load(&fr, path, NULL, NULL, 0);
  if (!ok) tm_check(false, "parses", path);
  for (fe_model *m = ok ? fr.file->models : NULL; m; m = m->next) {
    ir_graph *g = ts_lower(&fr, m);
    char label[512];
    snprintf(label, sizeof label, "%.200s:%.200s", strrchr(path, '/') ? strrchr(path, '/') + 1 : path, m->name);
    tm_model tm;
    if (g && tm_model_init(&tm, label, g)) fn(&tm);
    if (g) tm_model_free(&tm);
    else tm_check(false, "lowers", label);
    ir_graph_free(g);
  }
  ts_front_free(&fr);
}

static void tm_file_go(const char *path, void *fn) { tm_each_model(path, *(tm_fn *)fn); }

static void tm_each_file(const char *dir, tm_fn fn) {
  char path[2048];
  snprintf(path, sizeof path, "%s%s", ts_root(), dir);
  if (ts_each_model(dir, tm_file_go, &fn) < 0) tm_check(false, "lists its models", path);
}

static void tm_one_file(const char *rel, tm_fn fn) {
  char path[2048];
  snprintf(path, sizeof path, "%s%s", ts_root(), rel);
  tm_each_model(path, fn);
}

/* Each model instance makes its own engine from KILN_ENGINE (the default engine shows which
 * kind that gives): set the variable. */
static void tm_use_engine(const char *kind) {
  rt_engine_shutdown_default();
  setenv("KILN_ENGINE", kind, 1);
  setenv("KILN_NUM_THREADS", "4", 1);
  tm_engine = kind;
  tm_rng = TS_RNG_SEED;                   /* the same data under each engine */
  tm_check(rt_engine_get_kind(rt_engine_default()) == (strcmp(kind, "naive") ? RT_ENGINE_THREADED : RT_ENGINE_NAIVE),
           "the default engine is the one asked for", kind);
}

static void tm_counters(void) {
  tm_check(EX_CTR_INIT(7) == RT_CTR_INIT(7) && EX_CTR_OP(3, "d") == RT_CTR_OP(3, rt_fnv1a32("d")),
           "exec and runtime random counters agree", "counters");
}

int main(int argc, char **argv) {
  snprintf(tm_tmp, sizeof tm_tmp, "/tmp/kiln_test_model_%d", (int)getpid());
  mkdir(tm_tmp, 0700);
  if (argc > 1 && strcmp(argv[1], "soak") == 0) {   /* codegen.soak: only the soak, both engines */
    const char *kinds[] = {"naive", "threaded"};
    for (int e = 0; e < 2; e++) tm_use_engine(kinds[e]), tm_soak();
    rmdir(tm_tmp);
    printf("soak: %d passed, %d failed\n", tm_passed, tm_failed);
    return tm_failed != 0;
  }
  tm_counters();
  const char *engines[] = {"naive", "threaded"};
  for (int e = 0; e < 2; e++) {
    tm_use_engine(engines[e]);
    tm_each_file("examples", tm_model_run);
    tm_each_file("tests/passes/models", tm_model_run);
    tm_one_file("tests/passes/models/normdrop.kiln", tm_bad_inputs);
    tm_threads();
  }
  tm_prefix_mismatch();
  tm_check(tm_stats_checked > 0, "some model (the ResNet) gathers batch_norm statistics in an epilogue", "examples");
  tm_check(tm_samples_checked > 0, "some model (layout_cat at batch 3) runs a predict step per sample", "models");
  tm_each_file("examples", tm_thread_counts);
  tm_thread_counts_full();
  rt_engine_shutdown_default();
  rmdir(tm_tmp);
  printf("model: %d passed, %d failed\n", tm_passed, tm_failed);
  return tm_failed != 0;
}
