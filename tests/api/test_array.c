/* test_array.c — imperative arrays with deferred compute (include/kiln.h): op calls return
 * lazy arrays with their shapes; reading computes them, equal to plain C and to the .so
 * compiled from examples/mlp.kiln with the same weights; several arrays in one compile; the
 * cache hits from the second iteration of a loop on; unread arrays are never computed;
 * random arrays draw what a model's initializer draws; bad calls are refused with a message;
 * freeing releases at once. `api_test_array loop N` runs N create/compute/free iterations,
 * each one's arrays released when freed (the ASan build checks that nothing leaks). */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"   /* the session's list of live arrays, to see what freeing releases */
#include "kiln.h"
#include "kiln_test.h"
#include "rt_model.h"
#include "runtime.h"

static bool has(const char *msg, const char *want) { return strstr(msg, want) != NULL; }

static kiln_array *op(kiln_session *s, const char *name, int n, kiln_array *const *in, const kiln_attrs *a) {
  kiln_array *r = NULL;
  CHECK(!kiln_array_op(s, name, n, in, a, &r), "%s: %s", name, kiln_last_error());
  return r;
}

static kiln_array *from(kiln_session *s, int rank, const int64_t *dims, const float *data) {
  kiln_array *r = NULL;
  CHECK(!kiln_array_from_data(s, KILN_F32, rank, dims, data, &r), "from_data: %s", kiln_last_error());
  return r;
}

/* relu(x * w + b) on arrays, against the same loop in C. */
static void test_elementwise(void) {
  kiln_session *s = NULL;
  CHECK(!kiln_session_new(&s), "session");
  float x[12], w[4] = {0.5f, -1, 2, 0.25f}, b = -0.5f, out[12];
  for (int i = 0; i < 12; i++) x[i] = (float)i / 3 - 2;
  kiln_array *ax = from(s, 2, (int64_t[]){3, 4}, x), *aw = from(s, 1, (int64_t[]){4}, w), *ab = from(s, 0, NULL, &b);
  kiln_array *m = op(s, "mul", 2, (kiln_array *[]){ax, aw}, NULL), *p = op(s, "add", 2, (kiln_array *[]){m, ab}, NULL);
  kiln_array *r = op(s, "relu", 1, &p, NULL);
  int lazy = 0, rank = 0;
  int64_t d[KILN_MAX_RANK];
  CHECK(r && !kiln_array_is_lazy(r, &lazy) && lazy, "an op's result is lazy");
  CHECK(r && !kiln_array_shape(r, NULL, &rank, d) && rank == 2 && d[0] == 3 && d[1] == 4, "its shape is known: [3, 4]");
  int64_t hits, misses;
  CHECK(!kiln_session_cache_stats(s, &hits, &misses) && misses == 0, "nothing compiled before a read");
  CHECK(r && !kiln_array_read(r, out, sizeof out), "read: %s", kiln_last_error());
  bool same = true;
  for (int i = 0; i < 12; i++) {
    float want = x[i] * w[i % 4] + b;
    same &= out[i] == (want > 0 ? want : 0);
  }
  CHECK(same, "relu(x * w + b) as in C");
  CHECK(!kiln_array_is_lazy(r, &lazy) && !lazy, "computed once read");
  CHECK(!kiln_array_is_lazy(m, &lazy) && lazy, "an intermediate nothing read stays lazy");
  CHECK(kiln_array_read(r, out, sizeof out - 4) && has(kiln_last_error(), "48 bytes"), "wrong size refused");
  kiln_array_free(m), kiln_array_free(p), kiln_array_free(r), kiln_array_free(ax), kiln_array_free(aw), kiln_array_free(ab);
  kiln_session_free(s);
}

/* The same expression built each iteration on new data compiles once. */
static void test_cache(void) {
  kiln_session *s = NULL;
  CHECK(!kiln_session_new(&s), "session");
  for (int it = 0; it < 3; it++) {
    float x[6] = {1, -2, 3, -4, 5, (float)it}, out[6];
    kiln_array *ax = from(s, 1, (int64_t[]){6}, x), *e = op(s, "exp", 1, &ax, NULL), *n = op(s, "neg", 1, &e, NULL);
    CHECK(n && !kiln_array_read(n, out, sizeof out), "read: %s", kiln_last_error());
    CHECK(fabsf(out[5] + expf((float)it)) < 1e-5f * expf((float)it), "-exp(x)");
    int64_t hits, misses;
    kiln_session_cache_stats(s, &hits, &misses);
    CHECK(misses == 1 && hits == it, "iteration %d: %lld hits, %lld misses", it, (long long)hits, (long long)misses);
    kiln_array_free(ax), kiln_array_free(e), kiln_array_free(n);
  }
  /* a different attribute is a different subgraph */
  float x[6] = {0}, out[2];
  kiln_array *ax = from(s, 2, (int64_t[]){2, 3}, x), *sm;
  kiln_attrs *a = NULL;
  kiln_attrs_new(&a), kiln_attrs_ints(a, "axis", 1, (int64_t[]){1});
  sm = op(s, "sum", 1, &ax, a);
  CHECK(sm && !kiln_array_read(sm, out, sizeof out) && out[0] == 0, "sum: %s", kiln_last_error());
  int64_t hits, misses;
  kiln_session_cache_stats(s, &hits, &misses);
  CHECK(misses == 2, "a new structure compiles");
  kiln_attrs_free(a);
  kiln_session_free(s);   /* frees ax and sm too */
}

/* Two arrays evaluated together: one compile; an unread one never computed. */
static void test_together(void) {
  kiln_session *s = NULL;
  CHECK(!kiln_session_new(&s), "session");
  float x[4] = {1, 2, 3, 4}, o1[4], o2[4];
  kiln_array *ax = from(s, 1, (int64_t[]){4}, x);
  kiln_array *sq = op(s, "square", 1, &ax, NULL), *sr = op(s, "sqrt", 1, &ax, NULL), *unread = op(s, "log", 1, &ax, NULL);
  CHECK(!kiln_array_eval(s, 2, (kiln_array *[]){sq, sr}), "eval: %s", kiln_last_error());
  int64_t hits, misses;
  kiln_session_cache_stats(s, &hits, &misses);
  CHECK(misses == 1 && hits == 0, "one compile for both");
  CHECK(!kiln_array_read(sq, o1, sizeof o1) && !kiln_array_read(sr, o2, sizeof o2), "read");
  kiln_session_cache_stats(s, &hits, &misses);
  CHECK(misses == 1 && hits == 0, "reading computed arrays compiles nothing");
  CHECK(o1[3] == 16 && o2[3] == 2, "values");
  int lazy = 0;
  CHECK(!kiln_array_is_lazy(unread, &lazy) && lazy, "the unread array was never computed");
  kiln_array_free(unread);
  kiln_session_free(s);
}

/* uniform/normal with a seed: what a model with that seed gives its tensor 0. */
static void test_random(void) {
  kiln_graph *g = NULL;
  kiln_attrs *a = NULL;
  kiln_model *m = NULL;
  kiln_session *s = NULL;
  int64_t dims[] = {3, 5};
  float want[15], got[15];
  bool ok = !kiln_graph_new("r", &g) && !kiln_attrs_new(&a) && !kiln_attrs_float(a, "mean", 0.5) && !kiln_attrs_float(a, "std", 2) &&
            !kiln_graph_param(g, "w", KILN_F32, 2, dims, "normal", a) &&
            !kiln_graph_op(g, "y", "mul", 2, (const char *[]){"w", "1"}, NULL) && !kiln_graph_output(g, "y") &&
            !kiln_graph_jit(g, 1234, &m) && !kiln_model_predict(m, NULL, (void *[]){want});
  CHECK(ok, "the model: %s", kiln_last_error());
  kiln_array *r = NULL;
  CHECK(!kiln_session_new(&s) && !kiln_array_normal(s, 2, dims, 0.5f, 2.0f, 1234, &r) && !kiln_array_read(r, got, sizeof got),
        "normal: %s", kiln_last_error());
  CHECK(memcmp(want, got, sizeof got) == 0, "the array draws what the model's initializer draws");
  CHECK(kiln_array_normal(s, 2, dims, 0, -1, 1, &r) && has(kiln_last_error(), "negative"), "negative std");
  kiln_attrs_free(a), kiln_model_free(m), kiln_graph_free(g), kiln_session_free(s);
}

static void test_refusals(void) {
  kiln_session *s = NULL, *s2 = NULL;
  kiln_array *x = NULL, *r = NULL;
  float v[6] = {0};
  CHECK(kiln_session_new(NULL) && has(kiln_last_error(), "NULL"), "NULL out");
  CHECK(!kiln_session_new(&s) && !kiln_session_new(&s2), "sessions");
  CHECK(kiln_array_from_data(NULL, KILN_F32, 1, (int64_t[]){6}, v, &x) && has(kiln_last_error(), "session is NULL"), "NULL session");
  CHECK(kiln_array_from_data(s, KILN_F32, 1, (int64_t[]){6}, NULL, &x) && has(kiln_last_error(), "data is NULL"), "NULL data");
  CHECK(kiln_array_from_data(s, KILN_F32, 1, (int64_t[]){-6}, v, &x) && has(kiln_last_error(), "-6"), "negative dim");
  CHECK(kiln_array_from_data(s, KILN_F32, 7, (int64_t[]){1, 1, 1, 1, 1, 1, 6}, v, &x) && has(kiln_last_error(), "rank 7"), "rank 7");
  CHECK(kiln_array_from_data(s, (kiln_dtype)5, 1, (int64_t[]){6}, v, &x) && has(kiln_last_error(), "dtype 5"), "bad dtype");
  x = from(s, 2, (int64_t[]){2, 3}, v);
  kiln_array *y = from(s, 2, (int64_t[]){3, 2}, v), *other = from(s2, 2, (int64_t[]){2, 3}, v);
  CHECK(kiln_array_op(s, "add", 2, (kiln_array *[]){x, y}, NULL, &r) && has(kiln_last_error(), "add") && r == NULL,
        "shapes that do not broadcast: %s", kiln_last_error());
  CHECK(kiln_array_op(s, "add", 2, (kiln_array *[]){x, NULL}, NULL, &r) && has(kiln_last_error(), "input 1 is NULL"), "NULL input");
  CHECK(kiln_array_op(s, "add", 2, (kiln_array *[]){x, other}, NULL, &r) && has(kiln_last_error(), "another session"), "sessions mixed");
  CHECK(kiln_array_op(s, "rleu", 1, &x, NULL, &r) && has(kiln_last_error(), "'rleu' is not an op; did you mean 'relu'?"),
        "unknown op");
  CHECK(kiln_array_op(s, "relu", 1, &x, NULL, NULL) && has(kiln_last_error(), "out is NULL"), "NULL out");
  kiln_attrs *a = NULL;
  kiln_attrs_new(&a), kiln_attrs_int(a, "num_hidden", 4);
  CHECK(kiln_array_op(s, "fully_connected", 1, &x, a, &r) && has(kiln_last_error(), "'weight' must be given"),
        "an omitted weight: %s", kiln_last_error());
  kiln_attrs_free(a);
  CHECK(kiln_array_read(NULL, v, 4) && has(kiln_last_error(), "NULL"), "NULL read");
  CHECK(kiln_array_eval(s, 1, (kiln_array *[]){NULL}) && has(kiln_last_error(), "NULL"), "NULL eval");
  CHECK(kiln_array_load_npy(s, "/nonexistent.npy", &r) && has(kiln_last_error(), "nonexistent"), "missing .npy");
  kiln_array_free(NULL);
  kiln_session_free(s), kiln_session_free(s2), kiln_session_free(NULL);
}

/* ---- examples/mlp.kiln: the .so against the same network on arrays ---- */

typedef struct { const char *name; int rank; int64_t d[2]; kiln_array *a; float *host; } mlp_weight;

static int write_weights(mlp_weight *w, int n, const char *path) {
  rt_st_tensor ts[4];
  char err[512];
  for (int i = 0; i < n; i++) {
    ts[i] = (rt_st_tensor){.name = w[i].name, .dtype = K_F32, .shape = {.rank = w[i].rank}, .data = w[i].host};
    for (int k = 0; k < w[i].rank; k++) ts[i].shape.d[k] = w[i].d[k];
  }
  return rt_st_write(path, ts, n, NULL, 0, err, sizeof err);
}

/* predict of a compiled .so (one input, one output) with weights loaded; true on success. */
static bool so_predict(const char *so, const char *weights, const float *in, float *out) {
  void *lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  const rt_model_api *api = lib ? dlsym(lib, "kiln_model") : NULL;
  rt_model *m = api ? api->create(api->desc, 0) : NULL;
  bool ok = m && !api->load(m, weights) && !api->predict(m, (const void *[]){in}, (void *[]){out});
  if (m && !ok) fprintf(stderr, "%s: %s\n", so, api->error(m));
  if (m) api->destroy(m);
  if (lib) dlclose(lib);
  return ok;
}

static double worst_rel(const float *a, const float *b, int n) {
  double worst = 0;
  for (int i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]) / fmax(1e-6, fabs(b[i])));
  return worst;
}

static void test_mlp_vs_so(void) {
  char path[4096], dir[] = "/tmp/kiln-api-XXXXXX", so[4200], st[4200];
  snprintf(path, sizeof path, "%sexamples/mlp.kiln", ts_root());
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(so, sizeof so, "%s/libmlp.so", dir), snprintf(st, sizeof st, "%s/w.safetensors", dir);
  kiln_graph *g = NULL;
  CHECK(!kiln_graph_load(path, NULL, &g) && !kiln_graph_compile(g, so, 2), "compile mlp: %s", kiln_last_error());
  kiln_session *s = NULL;
  kiln_session_new(&s);
  mlp_weight w[4] = {{"hidden.weight", 2, {128, 784}, NULL, NULL}, {"hidden.bias", 1, {128, 0}, NULL, NULL},
                      {"logits.weight", 2, {10, 128}, NULL, NULL}, {"logits.bias", 1, {10, 0}, NULL, NULL}};
  for (int i = 0; i < 4; i++) {
    int64_t n = w[i].d[0] * (w[i].rank == 2 ? w[i].d[1] : 1);
    w[i].host = malloc(sizeof(float) * (size_t)n);
    CHECK(!kiln_array_uniform(s, w[i].rank, w[i].d, -0.1f, 0.1f, 7 + (uint64_t)i, &w[i].a) &&
          !kiln_array_read(w[i].a, w[i].host, sizeof(float) * (size_t)n), "weights");
  }
  CHECK(!write_weights(w, 4, st), "safetensors");
  kiln_array *img = NULL;
  CHECK(!kiln_array_uniform(s, 2, (int64_t[]){64, 784}, -1, 1, 99, &img), "image");
  kiln_attrs *h128 = NULL, *h10 = NULL;
  kiln_attrs_new(&h128), kiln_attrs_int(h128, "num_hidden", 128), kiln_attrs_new(&h10), kiln_attrs_int(h10, "num_hidden", 10);
  kiln_array *f1 = op(s, "fully_connected", 3, (kiln_array *[]){img, w[0].a, w[1].a}, h128), *h = op(s, "relu", 1, &f1, NULL);
  kiln_array *lg = op(s, "fully_connected", 3, (kiln_array *[]){h, w[2].a, w[3].a}, h10), *prob = op(s, "softmax", 1, &lg, NULL);
  static float mine[640], theirs[640], image[64 * 784];
  CHECK(prob && !kiln_array_read(prob, mine, sizeof mine) && !kiln_array_read(img, image, sizeof image), "deferred: %s", kiln_last_error());
  CHECK(so_predict(so, st, image, theirs), "the .so runs");
  CHECK(worst_rel(mine, theirs, 640) <= 1e-5, "deferred prob equals the .so's (worst relative difference %g)", worst_rel(mine, theirs, 640));
  /* the recorded graph exported, compiled as kiln compile does, run with the exported weights */
  char kx[4200], wx[4200], sx[4200];
  snprintf(kx, sizeof kx, "%s/exported.kiln", dir), snprintf(wx, sizeof wx, "%s/exported.safetensors", dir);
  snprintf(sx, sizeof sx, "%s/libexported.so", dir);
  kiln_graph *eg = NULL;
  memset(theirs, 0, sizeof theirs);
  CHECK(!kiln_export(s, kx, wx, "exported", 1, &prob, (const char *[]){"prob"}, 1, &img, (const char *[]){"image"}),
        "export: %s", kiln_last_error());
  CHECK(!kiln_graph_load(kx, NULL, &eg) && !kiln_graph_compile(eg, sx, 2), "compile the export: %s", kiln_last_error());
  CHECK(so_predict(sx, wx, image, theirs) && worst_rel(mine, theirs, 640) == 0, "the exported model computes the same prob");
  CHECK(kiln_export(s, kx, wx, "exported", 1, &img, (const char *[]){"prob"}, 0, NULL, NULL) && has(kiln_last_error(), "not computed by an op"),
        "exporting an array made from data");
  kiln_graph_free(eg);
  char hx[4200];
  snprintf(hx, sizeof hx, "%s/exported.h", dir);
  unlink(kx), unlink(wx), unlink(sx), unlink(hx);
  for (int i = 0; i < 4; i++) free(w[i].host);
  kiln_attrs_free(h128), kiln_attrs_free(h10), kiln_graph_free(g), kiln_session_free(s);
  char hdr[4200];
  snprintf(hdr, sizeof hdr, "%s/mlp.h", dir);
  unlink(so), unlink(st), unlink(hdr), rmdir(dir);
}

/* d/dw sum(w * w) = 2w, lazily; the second call with new data hits the cache. */
static void test_grad_simple(void) {
  kiln_session *s = NULL;
  kiln_session_new(&s);
  for (int it = 0; it < 2; it++) {
    float w[4] = {1, -2, 0.5f, (float)it}, g[4];
    kiln_array *aw = from(s, 1, (int64_t[]){4}, w), *sq = op(s, "square", 1, &aw, NULL), *loss = op(s, "sum", 1, &sq, NULL), *gw = NULL;
    CHECK(!kiln_grad(loss, 1, &aw, &gw), "kiln_grad: %s", kiln_last_error());
    int lazy = 0;
    CHECK(gw && !kiln_array_is_lazy(gw, &lazy) && lazy, "a gradient is lazy");
    CHECK(gw && !kiln_array_read(gw, g, sizeof g), "read: %s", kiln_last_error());
    CHECK(g[0] == 2 && g[1] == -4 && g[2] == 1 && g[3] == 2.0f * (float)it, "2w: %g %g %g %g", g[0], g[1], g[2], g[3]);
    int64_t hits, misses;
    kiln_session_cache_stats(s, &hits, &misses);
    CHECK(misses == 1 + it && hits == it, "iteration %d: the gradient model compiled once (the second miss: w - grad) (%lld hits, %lld misses)", it,
          (long long)hits, (long long)misses);
    /* a gradient is an array like any other: an op on it is lazy and computes it */
    kiln_array *step = op(s, "sub", 2, (kiln_array *[]){aw, gw}, NULL);
    float w2[4];
    CHECK(step && !kiln_array_read(step, w2, sizeof w2) && w2[0] == -1 && w2[1] == 2, "w - grad");
    kiln_array_free(aw), kiln_array_free(sq), kiln_array_free(loss), kiln_array_free(gw), kiln_array_free(step);
  }
  kiln_array *x = from(s, 0, NULL, (float[]){1}), *y = op(s, "exp", 1, &x, NULL), *other = from(s, 1, (int64_t[]){2}, (float[]){1, 2}), *g = NULL;
  CHECK(kiln_grad(y, 1, &other, &g) == KILN_OK && kiln_array_read(g, (float[2]){0}, 8) && has(kiln_last_error(), "does not reach"),
        "a wrt array the loss does not read: %s", kiln_last_error());
  CHECK(kiln_grad(other, 1, &x, &g) && has(kiln_last_error(), "scalar"), "a non-scalar loss");
  CHECK(kiln_grad(y, 1, &y, &g) && has(kiln_last_error(), "made from data"), "wrt an op's result");
  CHECK(kiln_grad(NULL, 1, &x, &g) && has(kiln_last_error(), "NULL"), "NULL loss");
  /* batch_norm on arrays runs as in predict; its gradient as in train_step (batch statistics):
   * sum(gamma * xhat + beta) has d/dgamma = sum of xhat over the batch = 0 */
  float d4[8] = {1, 2, 3, 4, 5, 6, 7, 8}, one[2] = {1, 1}, zero[2] = {0, 0}, bn[8];
  kiln_array *data = from(s, 2, (int64_t[]){4, 2}, d4), *gam = from(s, 1, (int64_t[]){2}, one), *bet = from(s, 1, (int64_t[]){2}, zero);
  kiln_array *mean = from(s, 1, (int64_t[]){2}, zero), *var = from(s, 1, (int64_t[]){2}, one);
  kiln_array *y2 = op(s, "batch_norm", 5, (kiln_array *[]){data, gam, bet, mean, var}, NULL), *l2 = op(s, "sum", 1, &y2, NULL), *g2 = NULL;
  CHECK(y2 && !kiln_array_read(y2, bn, sizeof bn) && fabsf(bn[7] - 8.0f / sqrtf(1.0f + 1e-5f)) < 1e-5f,
        "batch_norm with moving statistics 0 and 1: x / sqrt(1 + eps): %g", bn[7]);
  float dg[2] = {1, 1};
  CHECK(l2 && !kiln_grad(l2, 1, &gam, &g2) && !kiln_array_read(g2, dg, sizeof dg) && fabsf(dg[0]) < 1e-5f && fabsf(dg[1]) < 1e-5f,
        "a gradient through batch_norm uses the batch's statistics: %g %g (%s)", dg[0], dg[1], kiln_last_error());
  float mv[2];
  CHECK(!kiln_array_read(mean, mv, sizeof mv) && mv[0] == 0 && mv[1] == 0, "the array passed as moving mean is unchanged");
  kiln_session_free(s);
}

/* Gradients through train-mode ops (batch_norm, dropout) equal train_step's: the arrays'
 * graph exported, a train statement added (sgd, lr=1), the model JIT'd with seed 11 (whose
 * step 1 draws the dropout mask of the first kiln_grad call after kiln_session_seed(s, 11)) and its
 * weights loaded; w_before - w_after after one step is the gradient. */
static void test_grad_train_ops(void) {
  char dir[] = "/tmp/kiln-gradbn-XXXXXX", kx[4200], wx[4200], w1[4200];
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(kx, sizeof kx, "%s/bn.kiln", dir), snprintf(wx, sizeof wx, "%s/bn.safetensors", dir);
  snprintf(w1, sizeof w1, "%s/after.safetensors", dir);
  kiln_session *s = NULL;
  kiln_session_new(&s);
  CHECK(!kiln_session_seed(s, 11), "seed: %s", kiln_last_error());
  float x[8 * 6];
  for (int i = 0; i < 48; i++) x[i] = (float)((i * 7) % 11) / 4.0f - 1.2f;
  kiln_array *ax = from(s, 2, (int64_t[]){8, 6}, x), *w = NULL, *gam = NULL, *bet = NULL, *mean = NULL, *var = NULL;
  CHECK(!kiln_array_normal(s, 2, (int64_t[]){5, 6}, 0, 0.5f, 3, &w) && !kiln_array_uniform(s, 1, (int64_t[]){5}, 0.5f, 1.5f, 4, &gam) &&
        !kiln_array_uniform(s, 1, (int64_t[]){5}, -0.2f, 0.2f, 5, &bet) && !kiln_array_zeros(s, KILN_F32, 1, (int64_t[]){5}, &mean) &&
        !kiln_array_ones(s, KILN_F32, 1, (int64_t[]){5}, &var), "arrays: %s", kiln_last_error());
  kiln_attrs *a5 = NULL, *half = NULL;
  kiln_attrs_new(&a5), kiln_attrs_int(a5, "num_hidden", 5), kiln_attrs_bool(a5, "no_bias", 1);
  kiln_attrs_new(&half), kiln_attrs_float(half, "p", 0.5);
  kiln_array *fc = op(s, "fully_connected", 2, (kiln_array *[]){ax, w}, a5);
  kiln_array *bn = op(s, "batch_norm", 5, (kiln_array *[]){fc, gam, bet, mean, var}, NULL);
  kiln_array *dr = op(s, "dropout", 1, &bn, half), *sq = op(s, "square", 1, &dr, NULL), *loss = op(s, "sum", 1, &sq, NULL);
  kiln_array *wrt[3] = {w, gam, bet}, *gr[3] = {0};
  CHECK(loss && !kiln_grad(loss, 3, wrt, gr), "kiln_grad: %s", kiln_last_error());
  float gw[30], gg[5], gb[5];
  CHECK(!kiln_array_read(gr[0], gw, sizeof gw) && !kiln_array_read(gr[1], gg, sizeof gg) && !kiln_array_read(gr[2], gb, sizeof gb),
        "read the gradients: %s", kiln_last_error());
  /* the same graph as a model trained one step */
  CHECK(!kiln_export(s, kx, wx, "bn", 1, &loss, (const char *[]){"loss"}, 1, &ax, (const char *[]){"x"}), "export: %s", kiln_last_error());
  kiln_graph *g = NULL;
  kiln_model *m = NULL;
  kiln_attrs *lr = NULL;
  kiln_attrs_new(&lr), kiln_attrs_float(lr, "lr", 1.0);
  float tl = 0, pl = 0, al = 0;
  CHECK(!kiln_graph_load(kx, NULL, &g) && !kiln_graph_train(g, "loss", "sgd", lr) && !kiln_graph_jit(g, 11, &m) &&
        !kiln_model_load(m, wx), "the exported graph with its weights: %s", kiln_last_error());
  /* export: params from normal, uniform, zeros and ones (the last two batch_norm's aux
   * states) carry their values, so predict computes what the arrays do */
  CHECK(!kiln_model_predict(m, (const void *[]){x}, (void *[]){&pl}) && !kiln_array_read(loss, &al, 4) &&
        fabsf(pl - al) <= 1e-5f * fabsf(al), "the exported model's predict equals the arrays' loss: %g vs %g", pl, al);
  CHECK(!kiln_model_train_step(m, (const void *[]){x}, &tl) && !kiln_model_save(m, w1), "train_step on the exported graph: %s",
        kiln_last_error());
  /* the exported params are named by the walk; find w, gamma, beta by their values */
  rt_st_file before, after;
  char err[512];
  CHECK(!rt_st_open(wx, &before, err, sizeof err) && !rt_st_open(w1, &after, err, sizeof err), "%s", err);
  const float *want[3] = {gw, gg, gb};
  int64_t sizes[3] = {30, 5, 5};
  float *host[3] = {malloc(30 * 4), malloc(20), malloc(20)};
  kiln_array_read(w, host[0], 120), kiln_array_read(gam, host[1], 20), kiln_array_read(bet, host[2], 20);
  double worst = 0, scale = 0;
  int found = 0;
  for (int k = 0; k < 3; k++)
    for (int e = 0; e < before.n; e++) {
      const rt_st_entry *b = &before.entries[e], *a = rt_st_find(&after, b->name);
      if (!a || (size_t)(b->end - b->begin) != (size_t)sizes[k] * 4 || memcmp(b->data, host[k], (size_t)sizes[k] * 4) != 0) continue;
      found++;
      for (int64_t i = 0; i < sizes[k]; i++) {
        double step = (double)((const float *)b->data)[i] - (double)((const float *)a->data)[i];
        worst = fmax(worst, fabs(step - (double)want[k][i])), scale = fmax(scale, fabs(step));
      }
      break;
    }
  CHECK(found == 3, "w, gamma and beta found among the exported weights (%d)", found);
  CHECK(scale > 1e-3 && worst <= 1e-5 * fmax(1, scale), "gradients through batch_norm and dropout equal train_step's (worst %g, scale %g)", worst, scale);
  rt_st_close(&before), rt_st_close(&after);
  for (int k = 0; k < 3; k++) free(host[k]);
  kiln_attrs_free(a5), kiln_attrs_free(half), kiln_attrs_free(lr), kiln_model_free(m), kiln_graph_free(g), kiln_session_free(s);
  unlink(kx), unlink(wx), unlink(w1), rmdir(dir);
}

/* ---- dropout's masks in gradients: the session's seed ---- */

/* d/dw sum(dropout(w * x)) for the session's next kiln_grad call: mask * 2 * x (p = 0.5). */
static kiln_array *drop_grad(kiln_session *s, kiln_array *w, kiln_array *x, kiln_array **loss) {
  kiln_attrs *half = NULL;
  kiln_attrs_new(&half), kiln_attrs_float(half, "p", 0.5);
  kiln_array *m = op(s, "mul", 2, (kiln_array *[]){w, x}, NULL), *d = op(s, "dropout", 1, &m, half);
  kiln_array *l = op(s, "sum", 1, &d, NULL), *g = NULL;
  CHECK(l && !kiln_grad(l, 1, &w, &g), "kiln_grad: %s", kiln_last_error());
  kiln_array_free(m), kiln_array_free(d), kiln_attrs_free(half);
  if (loss) *loss = l;
  else kiln_array_free(l);
  return g;
}

static void read64(kiln_array *a, float *out) {
  CHECK(a && !kiln_array_read(a, out, 64 * sizeof(float)), "read: %s", kiln_last_error());
  kiln_array_free(a);
}

/* One train_step of a compiled .so created with `seed` (sgd, lr = 1), from the weights in
 * `before`; the weights after it written to `after`. */
static bool so_train_step(const char *so, uint64_t seed, const char *before, const float *x, const char *after) {
  void *lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  const rt_model_api *api = lib ? dlsym(lib, "kiln_model") : NULL;
  rt_model *m = api ? api->create(api->desc, seed) : NULL;
  float loss;
  bool ok = m && !api->load(m, before) && !api->train_step(m, (const void *[]){x}, &loss) && !api->save(m, after);
  if (m && !ok) fprintf(stderr, "%s: %s\n", so, api->error(m));
  if (m) api->destroy(m);
  if (lib) dlclose(lib);
  return ok;
}

/* w's step in `after` against `before` (the exported param holding w's values), as the
 * gradient train_step applied; the worst difference from want. */
static double so_step_vs(const char *before, const char *after, const float *w, const float *want) {
  rt_st_file b, a;
  char err[512];
  double worst = 1e30;
  if (rt_st_open(before, &b, err, sizeof err)) return fprintf(stderr, "%s\n", err), worst;
  if (rt_st_open(after, &a, err, sizeof err)) return rt_st_close(&b), fprintf(stderr, "%s\n", err), worst;
  for (int e = 0; e < b.n; e++) {
    const rt_st_entry *be = &b.entries[e], *ae = rt_st_find(&a, be->name);
    if (!ae || be->end - be->begin != 64 * 4 || memcmp(be->data, w, 64 * 4) != 0) continue;
    worst = 0;
    for (int i = 0; i < 64; i++)
      worst = fmax(worst, fabs((double)((const float *)be->data)[i] - ((const float *)ae->data)[i] - want[i]));
  }
  rt_st_close(&b), rt_st_close(&a);
  return worst;
}

/* Two kiln_grad calls draw two masks; kiln_session_seed with the same seed draws the same
 * ones again, another seed others; the masks are fixed by the calls, not by the order of
 * the reads; and the first mask after kiln_session_seed(s, 5) is the one a compiled .so's
 * model created with seed 5 draws in its first train_step. */
static void test_grad_seed(void) {
  kiln_session *s = NULL;
  kiln_session_new(&s);
  float xv[64], wv[64], g1[64], g2[64], g3[64], g4[64], ga[64], gb[64], dflt[64];
  for (int i = 0; i < 64; i++) xv[i] = 1 + (float)i / 64, wv[i] = 0.5f - (float)i / 128;
  kiln_array *x = from(s, 1, (int64_t[]){64}, xv), *w = from(s, 1, (int64_t[]){64}, wv), *loss = NULL;
  read64(drop_grad(s, w, x, NULL), dflt);                    /* seed 0, the default */
  CHECK(!kiln_session_seed(s, 5), "seed: %s", kiln_last_error());
  read64(drop_grad(s, w, x, &loss), g1), read64(drop_grad(s, w, x, NULL), g2);
  CHECK(!kiln_session_seed(s, 5), "seed again");
  read64(drop_grad(s, w, x, NULL), g3);
  CHECK(!kiln_session_seed(s, 6), "another seed");
  read64(drop_grad(s, w, x, NULL), g4);
  int kept = 0, zeros = 0;
  for (int i = 0; i < 64; i++) {
    bool on = g1[i] != 0;
    kept += on, zeros += !on;
    CHECK(!on || g1[i] == 2 * xv[i], "a kept element's gradient is x / (1 - p): %g", g1[i]);
  }
  CHECK(kept > 10 && zeros > 10, "dropout(p=0.5) keeps some and drops some (%d kept)", kept);
  CHECK(memcmp(g1, g2, sizeof g1) != 0, "the next kiln_grad call draws a fresh mask");
  CHECK(memcmp(g1, g3, sizeof g1) == 0, "the same seed again gives the same mask");
  CHECK(memcmp(g1, g4, sizeof g1) != 0 && memcmp(g1, dflt, sizeof g1) != 0, "other seeds give other masks");
  /* the mask is the call's: gradients read in the other order get the same masks */
  CHECK(!kiln_session_seed(s, 5), "seed");
  kiln_array *a = drop_grad(s, w, x, NULL), *b = drop_grad(s, w, x, NULL);
  read64(b, gb), read64(a, ga);
  CHECK(memcmp(ga, g1, sizeof g1) == 0 && memcmp(gb, g2, sizeof g2) == 0, "masks fixed by the calls, not by the order of the reads");
  CHECK(kiln_session_seed(NULL, 1) && has(kiln_last_error(), "NULL"), "NULL session refused");
  /* a compiled .so created with seed 5: its first train_step draws g1's mask */
  char dir[] = "/tmp/kiln-seed-XXXXXX", kx[4200], wx[4200], so[4200], after[4200], hdr[4200];
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(kx, sizeof kx, "%s/drop.kiln", dir), snprintf(wx, sizeof wx, "%s/drop.safetensors", dir);
  snprintf(so, sizeof so, "%s/libdrop.so", dir), snprintf(after, sizeof after, "%s/after.safetensors", dir);
  snprintf(hdr, sizeof hdr, "%s/drop.h", dir);
  kiln_graph *g = NULL;
  kiln_attrs *lr = NULL;
  kiln_attrs_new(&lr), kiln_attrs_float(lr, "lr", 1.0);
  CHECK(!kiln_export(s, kx, wx, "drop", 1, &loss, (const char *[]){"loss"}, 1, &x, (const char *[]){"x"}) &&
        !kiln_graph_load(kx, NULL, &g) && !kiln_graph_train(g, "loss", "sgd", lr) && !kiln_graph_compile(g, so, 2),
        "the arrays' graph as a .so: %s", kiln_last_error());
  CHECK(so_train_step(so, 5, wx, xv, after), "train_step of the .so");
  double worst = so_step_vs(wx, after, wv, g1);
  CHECK(worst <= 1e-6, "the .so created with seed 5 steps by the gradient kiln_session_seed(s, 5) gave (worst %g)", worst);
  kiln_array_free(loss), kiln_attrs_free(lr), kiln_graph_free(g), kiln_session_free(s);
  unlink(kx), unlink(wx), unlink(so), unlink(after), unlink(hdr), rmdir(dir);
}

/* The MLP's gradients on arrays equal what train_step applies: with sgd(lr=1), no momentum,
 * w_before - w_after. */
static const char *const grad_net =
  "model g {\n"
  "  input x : f32[4, 6]\n  input label : i32[4]\n"
  "  param fc.weight : f32[5, 6] = uniform(low=-0.5, high=0.5)\n  param fc.bias : f32[5] = uniform(low=-0.5, high=0.5)\n"
  "  param out.weight : f32[3, 5] = uniform(low=-0.5, high=0.5)\n"
  "  fc = fully_connected(x, fc.weight, fc.bias, num_hidden=5)\n  h = tanh(fc)\n"
  "  out = fully_connected(h, out.weight, num_hidden=3, no_bias=true)\n"
  "  loss = softmax_cross_entropy(out, label)\n"
  "  output out\n  train loss with sgd(lr=1.0)\n}\n";

static void read_weights(const char *path, const char *const *names, float **out) {
  rt_st_file f;
  char err[512];
  CHECK(!rt_st_open(path, &f, err, sizeof err), "%s", err);
  for (int i = 0; i < 3; i++) {
    const rt_st_entry *e = rt_st_find(&f, names[i]);
    size_t nbytes = e ? (size_t)(e->end - e->begin) : 4;
    out[i] = calloc(1, nbytes);
    if (e) memcpy(out[i], e->data, nbytes);
    CHECK(e != NULL, "%s in the weights", names[i]);
  }
  rt_st_close(&f);
}

static void test_grad_vs_train_step(void) {
  char dir[] = "/tmp/kiln-grad-XXXXXX", p0[4200], p1[4200], src[4200];
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(p0, sizeof p0, "%s/w0.safetensors", dir), snprintf(p1, sizeof p1, "%s/w1.safetensors", dir);
  snprintf(src, sizeof src, "%s/g.kiln", dir);
  FILE *f = fopen(src, "w");
  fputs(grad_net, f), fclose(f);
  kiln_graph *g = NULL;
  kiln_model *m = NULL;
  float x[24];
  int32_t label[4] = {0, 2, 1, 2};
  for (int i = 0; i < 24; i++) x[i] = (float)((i * 5) % 7) / 3.0f - 1;
  float loss = 0;
  CHECK(!kiln_graph_load(src, NULL, &g) && !kiln_graph_jit(g, 5, &m) && !kiln_model_save(m, p0) &&
        !kiln_model_train_step(m, (const void *[]){x, label}, &loss) && !kiln_model_save(m, p1), "train_step: %s", kiln_last_error());
  const char *names[3] = {"fc.weight", "fc.bias", "out.weight"};
  float *w0[3], *w1[3];
  read_weights(p0, names, w0), read_weights(p1, names, w1);
  kiln_session *s = NULL;
  kiln_session_new(&s);
  kiln_array *ax = from(s, 2, (int64_t[]){4, 6}, x), *al = NULL, *aw[3], *gr[3];
  kiln_array_from_data(s, KILN_I32, 1, (int64_t[]){4}, label, &al);
  int64_t shapes[3][2] = {{5, 6}, {5, 0}, {3, 5}};
  for (int i = 0; i < 3; i++) aw[i] = from(s, i == 1 ? 1 : 2, shapes[i], w0[i]);
  kiln_attrs *a5 = NULL, *a3 = NULL;
  kiln_attrs_new(&a5), kiln_attrs_int(a5, "num_hidden", 5), kiln_attrs_new(&a3), kiln_attrs_int(a3, "num_hidden", 3), kiln_attrs_bool(a3, "no_bias", 1);
  kiln_array *fc = op(s, "fully_connected", 3, (kiln_array *[]){ax, aw[0], aw[1]}, a5), *h = op(s, "tanh", 1, &fc, NULL);
  kiln_array *out = op(s, "fully_connected", 2, (kiln_array *[]){h, aw[2]}, a3), *l = op(s, "softmax_cross_entropy", 2, (kiln_array *[]){out, al}, NULL);
  CHECK(l && !kiln_grad(l, 3, aw, gr), "kiln_grad: %s", kiln_last_error());
  float mine_loss = 0;
  CHECK(l && !kiln_array_read(l, &mine_loss, 4) && fabsf(mine_loss - loss) <= 1e-6f * fabsf(loss), "the same loss: %g vs %g", mine_loss, loss);
  double worst = 0;
  for (int i = 0; i < 3; i++) {
    int64_t n = shapes[i][0] * (i == 1 ? 1 : shapes[i][1]);
    float *gv = malloc(sizeof(float) * (size_t)n);
    CHECK(!kiln_array_read(gr[i], gv, sizeof(float) * (size_t)n), "read gradient %d: %s", i, kiln_last_error());
    for (int64_t k = 0; k < n; k++) worst = fmax(worst, fabs((double)gv[k] - ((double)w0[i][k] - (double)w1[i][k])));
    free(gv), free(w0[i]), free(w1[i]);
  }
  CHECK(worst <= 1e-6, "gradients equal train_step's steps (worst difference %g)", worst);
  kiln_attrs_free(a5), kiln_attrs_free(a3), kiln_session_free(s), kiln_model_free(m), kiln_graph_free(g);
  unlink(p0), unlink(p1), unlink(src), rmdir(dir);
}

/* An interrupt request stops the next compile ("interrupted", the array still lazy, nothing
 * cached) and is taken by it; withdrawn, it stops nothing. (tests/repl/pty.sh interrupts a
 * compile of seconds while it runs.) */
static void test_interrupt(void) {
  kiln_session *s = NULL;
  kiln_session_new(&s);
  float x[3] = {1, 2, 3}, out[3];
  kiln_array *a = from(s, 1, (int64_t[]){3}, x), *e = op(s, "exp", 1, &a, NULL);
  int lazy = 0;
  int64_t hits, misses;
  kiln_session_interrupt(s, 1);
  CHECK(kiln_array_read(e, out, sizeof out) && has(kiln_last_error(), "interrupted"), "an interrupted compile fails: %s", kiln_last_error());
  CHECK(!kiln_array_is_lazy(e, &lazy) && lazy, "the array stays lazy");
  CHECK(!kiln_session_cache_stats(s, &hits, &misses) && hits == 0, "nothing cached");
  CHECK(!kiln_array_read(e, out, sizeof out) && out[2] == expf(3), "the request was taken: the next read computes: %s", kiln_last_error());
  kiln_array *t = op(s, "tanh", 1, &a, NULL);
  kiln_session_interrupt(s, 1), kiln_session_interrupt(s, 0);
  CHECK(!kiln_array_read(t, out, sizeof out), "a withdrawn request stops nothing: %s", kiln_last_error());
  kiln_session_interrupt(NULL, 1);   /* accepted, does nothing */
  kiln_session_free(s);
}

/* Arrays the session still holds (its list of live arrays). */
static int live_arrays(kiln_session *s) {
  int n = 0;
  pthread_mutex_lock(&s->mu);
  for (const kiln_array *a = s->arrays; a; a = a->next) n++;
  pthread_mutex_unlock(&s->mu);
  return n;
}

/* Freeing releases an array and its part of the pending graph, at once rather than with the
 * session: an array another one reads stays until that one goes (a computed result keeps
 * the graph it came from, which kiln_grad and kiln_export walk through). */
static void test_free_releases(void) {
  kiln_session *s = NULL;
  CHECK(!kiln_session_new(&s), "session");
  float x[4] = {1, 2, 3, 4}, out[4];
  kiln_array *a = from(s, 1, (int64_t[]){4}, x), *b = op(s, "exp", 1, &a, NULL), *c = op(s, "neg", 1, &b, NULL);
  CHECK(live_arrays(s) == 3, "three arrays");
  kiln_array_free(b);
  CHECK(live_arrays(s) == 3, "a freed lazy array that c reads stays");
  kiln_array_free(c);
  CHECK(live_arrays(s) == 1, "freeing c releases it and b, its pending graph: %d live", live_arrays(s));
  b = op(s, "exp", 1, &a, NULL), c = op(s, "neg", 1, &b, NULL);
  kiln_array_free(b), kiln_array_free(a);
  CHECK(c && !kiln_array_read(c, out, sizeof out) && fabsf(out[3] + expf(4)) < 1e-4f, "read: %s", kiln_last_error());
  kiln_array_free(c);
  CHECK(live_arrays(s) == 0, "freeing the computed c releases it, b and a: %d live", live_arrays(s));
  kiln_session_free(s);
}

/* Create, compute, free: the cache hits after the first, every iteration's arrays are
 * released when freed (not only with the session), and (under ASan) nothing leaks. */
static int loop(int n) {
  kiln_session *s = NULL;
  if (kiln_session_new(&s)) return 1;
  for (int i = 0; i < n; i++) {
    float x[8] = {(float)i}, out[8];
    kiln_array *a = NULL, *b = NULL, *c = NULL;
    if (kiln_array_from_data(s, KILN_F32, 1, (int64_t[]){8}, x, &a) || kiln_array_op(s, "tanh", 1, &a, NULL, &b) ||
        kiln_array_op(s, "add", 2, (kiln_array *[]){a, b}, NULL, &c) || kiln_array_read(c, out, sizeof out))
      return fprintf(stderr, "iteration %d: %s\n", i, kiln_last_error()), 1;
    kiln_array_free(c), kiln_array_free(b), kiln_array_free(a);
    if (live_arrays(s)) return fprintf(stderr, "iteration %d: %d arrays still live after freeing\n", i, live_arrays(s)), 1;
  }
  int64_t hits, misses;
  kiln_session_cache_stats(s, &hits, &misses);
  kiln_session_free(s);
  printf("api.loop: %d iterations, %lld cache hits, %lld misses\n", n, (long long)hits, (long long)misses);
  return misses == 1 && hits == n - 1 ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "loop") == 0) return loop(atoi(argv[2]));
  test_elementwise();
  test_cache();
  test_together();
  test_random();
  test_refusals();
  test_mlp_vs_so();
  test_grad_simple();
  test_grad_vs_train_step();
  test_grad_train_ops();
  test_grad_seed();
  test_interrupt();
  test_free_releases();
  return ts_summary("api.test_array");
}
