/* test_bounded.c — bounded dims (kernels/k_dims.h) end to end through the JIT: each example
 * model and each of the pass tests' models, lowered with its batch bounded to 1..8
 * (-D batch=1..8) — and the transformer also with its sequence bounded (seq=1..8) — is
 * compiled once, then run at extents 1, 3 (a prime) and 8 against a model compiled for that
 * fixed size, from the same seed and on the same inputs: predict's outputs, then three train
 * steps' losses and every weight after them. The kernels read the shapes they are given and
 * the fused loops cut no reduction, so the results must be the same bits. As the differential
 * test does for fixed sizes, each optional pass is then switched off in turn (both models),
 * at extent 3.
 * Extents of 0, -1 and above the bound are refused with a message and change nothing, and
 * so is, at create, each bounded descriptor with one patch or param size spoilt (tb_spoilt).
 * Prints "bounded: N passed, N failed". */
#include <stdlib.h>
#include <string.h>

#include "cg.h"
#include "kiln_test.h"
#include "runtime.h"

#define TB_BOUND 8

typedef struct {
  cg_build b;
  rt_model *m;
  ir_graph *lowered;
} tb_model;

static const char *tb_dim = "batch";   /* the dim bounded in this run */
static uint32_t tb_disabled;           /* the optional passes switched off (1u << PASS_x) */

/* The file's small dims with tb_dim at `batch` (lo > 0: bounded to lo..batch). */
static int tb_defines(const fe_file *f, int64_t batch, int64_t lo, fe_define *defs) {
  int n = ts_small_defines(f, defs, 15);
  for (int i = 0; i < n; i++)
    if (strcmp(defs[i].name, tb_dim) == 0) defs[i].value = batch, defs[i].lo = lo;
  return n;
}

static bool tb_build(const char *path, const char *model, int64_t batch, int64_t lo, tb_model *t, ts_front *fr) {
  memset(t, 0, sizeof *t);
  fe_define defs[16];
  fr->ndefs = tb_defines(fr->file, batch, lo, defs);
  memcpy(fr->defs, defs, sizeof defs);
  fe_model *m = fr->file->models;
  while (m && strcmp(m->name, model) != 0) m = m->next;
  t->lowered = m ? ts_lower(fr, m) : NULL;
  if (!CHECK(t->lowered != NULL, "%s/%s: lowers at batch %lld (lo %lld)", path, model, (long long)batch, (long long)lo)) return false;
  char err[2048] = "";
  ir_diag d;
  ir_diag_init(&d, stderr);
  cg_options o = {.opt_level = 2};
  bool ok = !cg_build_graphs(t->lowered, tb_disabled, &d, &t->b) && !cg_build_module(&t->b, &o, err, sizeof err) &&
            !cg_build_jit(&t->b, err, sizeof err);
  ir_diag_free(&d);
  if (!CHECK(ok, "%s/%s: compiles at batch %lld (lo %lld): %s", path, model, (long long)batch, (long long)lo, err)) return false;
  t->m = rt_model_create(t->b.desc, 7);
  return CHECK(t->m != NULL, "%s/%s: creates", path, model);
}

static void tb_free(tb_model *t) {
  rt_model_destroy(t->m);
  cg_build_free(&t->b);
  ir_graph_free(t->lowered);
  memset(t, 0, sizeof *t);
}

/* The program's inputs from a batch drawn on the fixed graph (ts_batch: one per graph tensor;
 * a descriptor entry keeps its graph index in ctr). */
static void tb_inputs(const rt_model_desc *d, const rt_program *p, void **batch, const void **in) {
  for (int k = 0; k < p->ninputs; k++) in[k] = batch[d->tensors[p->inputs[k]].ctr];
}

static bool tb_same(const float *a, const float *b, int64_t n) { return memcmp(a, b, (size_t)n * 4) == 0; }

static void tb_predict(const char *label, tb_model *bnd, tb_model *fix, void **batch, int64_t e) {
  const rt_model_desc *df = fix->b.desc, *db = bnd->b.desc;
  const void *in[64];
  void *of[64], *ob[64];
  tb_inputs(df, &df->predict, batch, in);
  for (int k = 0; k < df->predict.noutputs; k++) {
    int64_t n = k_shape_numel(&df->tensors[df->predict.outputs[k]].shape);
    of[k] = calloc((size_t)n + 1, 4), ob[k] = calloc((size_t)n + 1, 4);
  }
  bool ok = CHECK(!rt_model_predict(fix->m, in, of), "%s: fixed predict: %s", label, rt_model_error(fix->m)) &&
            CHECK(!rt_model_predict_at(bnd->m, &e, in, ob), "%s: bounded predict: %s", label, rt_model_error(bnd->m));
  for (int k = 0; ok && k < df->predict.noutputs; k++) {
    int64_t ext[K_MAX_BDIMS] = {e};   /* one per bounded dim the model may have */
    k_shape sh = rt_tensor_shape_at(db, db->predict.outputs[k], ext);
    CHECK(ir_shape_eq(&sh, &df->tensors[df->predict.outputs[k]].shape), "%s: output %d's shape at the extent", label, k);
    CHECK(tb_same(of[k], ob[k], k_shape_numel(&sh)), "%s: output %s has the fixed model's bits", label,
          df->tensors[df->predict.outputs[k]].name);
  }
  for (int k = 0; k < df->predict.noutputs; k++) free(of[k]), free(ob[k]);
}

static void tb_train(const char *label, tb_model *bnd, tb_model *fix, void **batch, int64_t e) {
  const rt_model_desc *df = fix->b.desc;
  if (!df->has_train) return;
  rt_model *fresh = rt_model_create(bnd->b.desc, 7);
  const void *in[64];
  tb_inputs(df, &df->train, batch, in);
  for (int s = 0; s < 3; s++) {
    float lf = 0, lb = 0;
    if (!CHECK(!rt_model_train_step(fix->m, in, &lf), "%s: fixed train_step: %s", label, rt_model_error(fix->m)) ||
        !CHECK(!rt_model_train_step_at(bnd->m, &e, in, &lb), "%s: bounded train_step: %s", label, rt_model_error(bnd->m)))
      return rt_model_destroy(fresh);
    CHECK(memcmp(&lf, &lb, 4) == 0, "%s: step %d's loss %.9g is the fixed model's %.9g", label, s + 1, (double)lb, (double)lf);
  }
  for (int t = 0; t < df->ntensors; t++) {
    const rt_tensor_info *x = &df->tensors[t];
    if (x->role != RT_ROLE_PARAM && x->role != RT_ROLE_AUX) continue;
    const float *wf, *wb;
    int64_t nf, nb;
    /* a weight that follows the dim (the transformer's position table) is stored at the
     * bound: its first rows are the fixed model's */
    if (CHECK(!rt_model_get(fix->m, x->name, &wf, &nf) && !rt_model_get(bnd->m, x->name, &wb, &nb) && nf <= nb,
              "%s: weight %s in both", label, x->name))
      CHECK(tb_same(wf, wb, nf), "%s: weight %s after 3 steps has the fixed model's bits", label, x->name);
    const float *w0;
    int64_t n0;
    if (nf < nb && fresh && !rt_model_get(fresh, x->name, &w0, &n0))   /* the rows not in use: as created */
      CHECK(n0 == nb && tb_same(w0 + nf, wb + nf, nb - nf), "%s: the rows of weight %s past the extent are untouched", label, x->name);
  }
  rt_model_destroy(fresh);
}

/* Out-of-range extents: a message, a nonzero return, and the weights as they were. */
static void tb_refusals(const char *label, tb_model *bnd, void **batch) {
  const rt_model_desc *d = bnd->b.desc;
  const void *in[64];
  void *out[64];
  tb_inputs(d, &d->predict, batch, in);
  for (int k = 0; k < d->predict.noutputs; k++) out[k] = calloc((size_t)k_shape_numel(&d->tensors[d->predict.outputs[k]].shape) + 1, 4);
  int64_t bad[] = {0, -1, TB_BOUND + 1};
  for (int i = 0; i < 3; i++) {
    int64_t e = bad[i];
    CHECK(rt_model_predict_at(bnd->m, &e, in, out) != 0 && strstr(rt_model_error(bnd->m), "outside its bounds"),
          "%s: predict at batch %lld is refused (%s)", label, (long long)e, rt_model_error(bnd->m));
    if (d->has_train) {
      float loss = 0;
      const void *tin[64];
      tb_inputs(d, &d->train, batch, tin);
      CHECK(rt_model_train_step_at(bnd->m, &e, tin, &loss) != 0, "%s: train_step at batch %lld is refused", label, (long long)e);
    }
  }
  for (int k = 0; k < d->predict.noutputs; k++) free(out[k]);
}

/* ---- a spoilt descriptor: rt_model_create must refuse it ---- */

/* A copy of d whose tensor patches, predict patches and predict steps are its own, to spoil
 * one of them without touching the compiled model's. */
typedef struct {
  rt_model_desc d;
  rt_dimpatch *tensor, *predict;
  rt_step *steps;
} tb_copy;

static void *tb_dup(const void *p, size_t n) { return n ? memcpy(malloc(n), p, n) : NULL; }

static tb_copy tb_copy_of(const rt_model_desc *d) {
  tb_copy c = {*d, tb_dup(d->tensor_patches, (size_t)d->ntensor_patches * sizeof(rt_dimpatch)),
               tb_dup(d->predict.patches, (size_t)d->predict.npatches * sizeof(rt_dimpatch)),
               tb_dup(d->predict.steps, (size_t)d->predict.nsteps * sizeof(rt_step))};
  c.d.tensor_patches = c.tensor, c.d.predict.patches = c.predict, c.d.predict.steps = c.steps;
  return c;
}

/* c made, then freed: it is refused (want_ok false) or created. */
static void tb_create(const char *label, tb_copy *c, bool want_ok, const char *what) {
  rt_model *m = rt_model_create(&c->d, 7);
  CHECK(!m == !want_ok, "%s: a descriptor with %s is %s", label, what, want_ok ? "created" : "refused");
  rt_model_destroy(m);
  free(c->tensor), free(c->predict), free(c->steps);
}

/* The first predict patch of a shape kind (param: of a PARAM_* kind), or NULL. */
static rt_dimpatch *tb_step_patch(tb_copy *c, bool param) {
  for (int k = 0; k < c->d.predict.npatches; k++)
    if ((c->predict[k].kind == RT_DV_PARAM_I64 || c->predict[k].kind == RT_DV_PARAM_I32) == param) return &c->predict[k];
  return NULL;
}

/* Spoils tensor patch 0 by `how`: its size at the bound moved (a + 1), a form that falls from
 * above the bound's size down to it (-a), one that overflows int64 at the bound. */
static void tb_spoil_tensor(const char *label, const rt_model_desc *d, int how) {
  static const char *const what[] = {"a tensor size off at the bound", "a tensor size that falls as the dim grows",
                                     "a tensor size that overflows"};
  tb_copy c = tb_copy_of(d);
  rt_dimpatch *x = &c.tensor[0];
  int64_t hi = d->dims[0].hi;   /* tb_file's models follow dim 0 alone */
  if (how == 0) x->v.a += 1;
  if (how == 1) x->v.b += 2 * x->v.a * hi, x->v.a = -x->v.a;
  if (how == 2) x->v.a = INT64_MAX / 2;
  tb_create(label, &c, false, what[how]);
}

/* The step of patch x (or the first with a param) claiming `delta` more param bytes. */
static void tb_spoil_param_bytes(const char *label, const rt_model_desc *d, bool patched, int delta) {
  tb_copy c = tb_copy_of(d);
  rt_dimpatch *x = tb_step_patch(&c, true);
  int i = patched ? (x ? x->index : -1) : 0;
  while (!patched && i < c.d.predict.nsteps && !c.steps[i].param) i++;
  if (i < 0 || i >= c.d.predict.nsteps) return tb_create(label, &c, true, "nothing spoilt");
  c.steps[i].param_bytes += delta;
  tb_create(label, &c, false, delta > 0 ? "a param size past its op's struct" : "a param size short of its op's struct");
}

static void tb_spoilt(const char *label, const rt_model_desc *d) {
  if (!CHECK(d->ntensor_patches > 0, "%s: the bounded model has tensor patches", label)) return;
  tb_copy c = tb_copy_of(d);
  tb_create(label, &c, true, "nothing spoilt");
  for (int how = 0; how < 3; how++) tb_spoil_tensor(label, d, how);
  c = tb_copy_of(d);
  rt_dimpatch *x = tb_step_patch(&c, false);
  if (x) x->v.a += 1;
  tb_create(label, &c, !x, "a step's shape off at the bound");
  c = tb_copy_of(d);
  if ((x = tb_step_patch(&c, true))) x->v.b += 1;
  tb_create(label, &c, !x, "an attribute off at the bound");
  tb_spoil_param_bytes(label, d, true, 8);
  tb_spoil_param_bytes(label, d, false, -4);
}

static void tb_extent(const char *path, const char *model, ts_front *fr, int64_t e) {
  char label[512];
  snprintf(label, sizeof label, "%s/%s at %s %lld%s%s", path, model, tb_dim, (long long)e, tb_disabled ? " without " : "",
           tb_disabled ? pass_table[__builtin_ctz(tb_disabled)].name : "");
  tb_model fix, again;
  if (!tb_build(path, model, e, 0, &fix, fr)) return;
  /* a fresh bounded instance per extent: training changes its weights */
  if (tb_build(path, model, TB_BOUND, 1, &again, fr)) {
    uint64_t rng = TS_RNG_SEED ^ (uint64_t)e;
    void **batch = ts_batch(fix.lowered, &rng);
    tb_predict(label, &again, &fix, batch, e);
    tb_train(label, &again, &fix, batch, e);
    if (e == TB_BOUND) tb_refusals(label, &again, batch);
    ts_batch_free(fix.lowered, batch);
    tb_free(&again);
  }
  tb_free(&fix);
}

static void tb_file(const char *path, void *ctx) {
  (void)ctx;
  ts_front fr = {.small = true};
  if (!ts_load(&fr, path, NULL, NULL, 0)) return ts_front_free(&fr);
  for (fe_model *m = fr.file->models; m; m = m->next) {
    tb_model bnd;
    if (!tb_build(path, m->name, TB_BOUND, 1, &bnd, &fr)) continue;
    bool bounded = bnd.b.desc->ndims == 1;
    char label[512];
    snprintf(label, sizeof label, "%s/%s bounded by %s", path, m->name, tb_dim);
    if (bounded) tb_spoilt(label, bnd.b.desc);
    tb_free(&bnd);
    if (!bounded) continue;   /* a model without that dim */
    int64_t extents[] = {1, 3, TB_BOUND};
    for (int i = 0; i < 3; i++) tb_extent(path, m->name, &fr, extents[i]);
    for (int p = 0; p < PASS_COUNT; p++) {
      if (!pass_table[p].optional) continue;
      tb_disabled = 1u << p;
      tb_extent(path, m->name, &fr, 3);
      tb_disabled = 0;
    }
  }
  ts_front_free(&fr);
}

int main(void) {
  ts_each_model("examples", tb_file, NULL);
  ts_each_model("tests/passes/models", tb_file, NULL);
  tb_dim = "seq";
  char path[1024];
  snprintf(path, sizeof path, "%sexamples/transformer.kiln", ts_root());
  tb_file(path, NULL);
  return ts_summary("bounded");
}
