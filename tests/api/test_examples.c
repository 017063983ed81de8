/* test_examples.c — deferred compute against the AOT path on every .kiln file in examples/:
 * the file loaded through the API with the small dims the tests use (kiln_graph_load_dims: batch=4,
 * a smaller transformer), compiled to a .so (kiln_graph_compile), whose model created with a
 * seed saves its weights; the same weights and inputs as arrays, predict recorded on them
 * (kiln_graph_predict_arrays) and evaluated by the JIT in one compile, and every output must
 * equal the .so's predict bit for bit: both paths run the same passes, kernels and LLVM
 * pipeline on the same graph, so any difference is a bug, not rounding. Also: kiln_grad on
 * examples/mlp.kiln's loss equals the step its train_step takes. */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln.h"
#include "kiln_test.h"
#include "rt_model.h"
#include "runtime.h"

enum { MAX_IO = 8 };

typedef struct {
  const char *dir;
  int models;
} ex_ctx;

/* The weights the .so's model created with `seed` draws, saved to `path`. */
static bool so_weights(const rt_model_api *api, uint64_t seed, const char *path) {
  rt_model *m = api->create(api->desc, seed);
  bool ok = m && !api->save(m, path);
  if (m) api->destroy(m);
  return ok;
}

/* Every tensor of the weights file as an array of the session. */
static int weight_arrays(kiln_session *s, const rt_st_file *f, const char **names, kiln_array **arrays) {
  for (int i = 0; i < f->n; i++) {
    const rt_st_entry *e = &f->entries[i];
    int64_t d[KILN_MAX_RANK];
    for (int k = 0; k < e->shape.rank; k++) d[k] = e->shape.d[k];
    names[i] = e->name;
    CHECK(!kiln_array_from_data(s, (kiln_dtype)e->dtype, e->shape.rank, d, e->data, &arrays[i]), "weight %s: %s", e->name,
          kiln_last_error());
  }
  return f->n;
}

/* Predict's input k as an array: f32 uniform in [-1, 1), i32 ids 0..9 (below every
 * example's vocabulary and class count); host[k] gets its values for the .so. */
static kiln_array *input_array(kiln_session *s, const rt_tensor_info *t, int k, void **host) {
  int64_t d[KILN_MAX_RANK], n = 1;
  for (int i = 0; i < t->shape.rank; i++) d[i] = t->shape.d[i], n *= d[i];
  kiln_array *a = NULL;
  if (t->dtype == K_F32) {
    CHECK(!kiln_array_uniform(s, t->shape.rank, d, -1, 1, 40 + (uint64_t)k, &a), "input %s: %s", t->name, kiln_last_error());
  } else {
    int32_t *ids = malloc(sizeof *ids * (size_t)n);
    for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 7 + k) % 10);
    CHECK(!kiln_array_from_data(s, KILN_I32, t->shape.rank, d, ids, &a), "input %s: %s", t->name, kiln_last_error());
    free(ids);
  }
  *host = malloc(4 * (size_t)n);
  CHECK(a && !kiln_array_read(a, *host, 4 * (size_t)n), "read input %s: %s", t->name, kiln_last_error());
  return a;
}

static int64_t numel(const rt_tensor_info *t) {
  int64_t n = 1;
  for (int i = 0; i < t->shape.rank; i++) n *= t->shape.d[i];
  return n;
}

/* The arrays' predict against the .so's: every output, bit for bit. */
static void compare(const char *name, kiln_graph *g, const rt_model_api *api, const char *weights) {
  const rt_model_desc *d = api->desc;
  const rt_program *p = &d->predict;
  CHECK(p->ninputs <= MAX_IO && p->noutputs <= MAX_IO, "%s: %d inputs, %d outputs", name, p->ninputs, p->noutputs);
  kiln_session *s = NULL;
  CHECK(!kiln_session_new(&s), "session");
  rt_st_file f;
  char err[512];
  CHECK(!rt_st_open(weights, &f, err, sizeof err), "%s", err);
  const char **wn = calloc((size_t)f.n + 1, sizeof *wn);
  kiln_array **wa = calloc((size_t)f.n + 1, sizeof *wa), *in[MAX_IO], *out[MAX_IO] = {0};
  int nw = weight_arrays(s, &f, wn, wa);
  void *host_in[MAX_IO], *mine[MAX_IO], *theirs[MAX_IO];
  for (int k = 0; k < p->ninputs; k++) in[k] = input_array(s, &d->tensors[p->inputs[k]], k, &host_in[k]);
  CHECK(!kiln_graph_predict_arrays(g, s, p->ninputs, in, nw, wn, wa, p->noutputs, out), "%s: predict on arrays: %s", name,
        kiln_last_error());
  int lazy = 0;
  CHECK(out[0] && !kiln_array_is_lazy(out[0], &lazy) && lazy, "%s: predict's outputs are lazy until read", name);
  CHECK(!kiln_array_eval(s, p->noutputs, out), "%s: evaluating predict: %s", name, kiln_last_error());
  rt_model *m = api->create(d, 0);
  CHECK(m && !api->load(m, weights), "%s: the .so loads the weights: %s", name, m ? api->error(m) : "");
  if (!m) return;
  for (int k = 0; k < p->noutputs; k++) {
    size_t bytes = 4 * (size_t)numel(&d->tensors[p->outputs[k]]);
    mine[k] = malloc(bytes), theirs[k] = calloc(1, bytes);
    CHECK(!kiln_array_read(out[k], mine[k], bytes), "%s: read output %d: %s", name, k, kiln_last_error());
  }
  CHECK(!api->predict(m, (const void *const *)host_in, theirs), "%s: the .so's predict: %s", name, api->error(m));
  for (int k = 0; k < p->noutputs; k++) {
    const rt_tensor_info *t = &d->tensors[p->outputs[k]];
    int64_t n = numel(t), diff = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
      float a = ((float *)mine[k])[i], b = ((float *)theirs[k])[i];
      diff += memcmp(&a, &b, 4) != 0, worst = fmax(worst, fabs((double)a - (double)b));
    }
    CHECK(diff == 0, "%s: output %s: %lld of %lld values differ from the .so's (worst %g)", name, t->name, (long long)diff,
          (long long)n, worst);
    if (!diff) printf("%s: predict on arrays equals the .so's bit for bit (%s, %lld values)\n", name, t->name, (long long)n);
    free(mine[k]), free(theirs[k]);
  }
  for (int k = 0; k < p->ninputs; k++) free(host_in[k]);
  api->destroy(m);
  rt_st_close(&f);
  free(wn), free(wa);
  kiln_session_free(s);   /* and every array of it */
}

/* The example's small dims (those the tests use) as kiln_graph_load_dims takes them. */
static kiln_graph *load_small(const char *path) {
  ts_front fr = {.capture = true, .small = true};
  CHECK(ts_load(&fr, path, NULL, NULL, 0), "%s: %s", path, ts_diags(&fr));
  const char *names[16];
  int64_t values[16];
  for (int i = 0; i < fr.ndefs; i++) names[i] = fr.defs[i].name, values[i] = fr.defs[i].value;
  kiln_graph *g = NULL;
  CHECK(!kiln_graph_load_dims(path, NULL, fr.ndefs, names, values, &g), "%s: %s", path, kiln_last_error());
  ts_front_free(&fr);
  return g;
}

static void one_example(const char *path, void *ctx_) {
  ex_ctx *ctx = ctx_;
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  char name[256], so[4400], st[4400], hdr[4400];
  snprintf(name, sizeof name, "%.*s", (int)(strlen(base) - 5), base);
  snprintf(so, sizeof so, "%s/lib%s.so", ctx->dir, name), snprintf(st, sizeof st, "%s/%s.safetensors", ctx->dir, name);
  kiln_graph *g = load_small(path);
  CHECK(g && !kiln_graph_compile(g, so, 2), "%s: compile: %s", name, kiln_last_error());
  void *lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  const rt_model_api *api = lib ? dlsym(lib, "kiln_model") : NULL;
  CHECK(api && so_weights(api, 3, st), "%s: the .so and its weights: %s", name, lib ? "no weights" : dlerror());
  if (api) compare(name, g, api, st);
  if (lib) dlclose(lib);
  kiln_graph_free(g);
  snprintf(hdr, sizeof hdr, "%s/%s.h", ctx->dir, name);
  unlink(so), unlink(st), unlink(hdr);
  ctx->models++;
}

/* examples/mlp.kiln's gradients on arrays equal what its train_step applies: the model JIT'd
 * (small batch), its learning rate set to 1 so that one step of sgd with momentum (whose
 * buffer starts at the gradient) moves each weight by its gradient; then `output loss` added
 * to the graph, predict recorded on the saved weights, and kiln_grad of the loss. */
static void test_mlp_grad_vs_train_step(const char *dir) {
  char path[4096], p0[4400], p1[4400];
  snprintf(path, sizeof path, "%sexamples/mlp.kiln", ts_root());
  snprintf(p0, sizeof p0, "%s/w0.safetensors", dir), snprintf(p1, sizeof p1, "%s/w1.safetensors", dir);
  kiln_graph *g = load_small(path);
  kiln_model *m = NULL;
  int64_t batch = 0, d[KILN_MAX_RANK];
  int rank = 0;
  CHECK(g && !kiln_graph_shape(g, "image", NULL, &rank, d) && rank == 2, "image's shape: %s", kiln_last_error());
  batch = d[0];
  float *image = malloc(sizeof(float) * (size_t)(batch * 784)), loss = 0, mine = 0;
  int32_t *label = malloc(sizeof(int32_t) * (size_t)batch);
  for (int64_t i = 0; i < batch * 784; i++) image[i] = (float)((i * 37) % 101) / 50 - 1;
  for (int64_t i = 0; i < batch; i++) label[i] = (int32_t)((i * 3) % 10);
  float lr = 0;
  CHECK(!kiln_graph_jit(g, 5, &m) && !kiln_model_set_lr(m, 1) && !kiln_model_lr(m, &lr) && lr == 1 && !kiln_model_save(m, p0) &&
        !kiln_model_train_step(m, (const void *[]){image, label}, &loss) && !kiln_model_save(m, p1), "train_step: %s", kiln_last_error());
  kiln_session *s = NULL;
  kiln_session_new(&s);
  rt_st_file f0, f1;
  char err[512];
  CHECK(!rt_st_open(p0, &f0, err, sizeof err) && !rt_st_open(p1, &f1, err, sizeof err), "%s", err);
  const char **wn = calloc((size_t)f0.n + 1, sizeof *wn);
  kiln_array **wa = calloc((size_t)f0.n + 1, sizeof *wa), **gr = calloc((size_t)f0.n + 1, sizeof *gr), *in[2], *out[2] = {0};
  int nw = weight_arrays(s, &f0, wn, wa);
  kiln_array_from_data(s, KILN_F32, 2, (int64_t[]){batch, 784}, image, &in[0]);
  kiln_array_from_data(s, KILN_I32, 1, &batch, label, &in[1]);
  CHECK(!kiln_graph_output(g, "loss") && !kiln_graph_predict_arrays(g, s, 2, in, nw, wn, wa, 2, out) && !kiln_grad(out[1], nw, wa, gr),
        "the loss on arrays and its gradients: %s", kiln_last_error());
  CHECK(out[1] && !kiln_array_read(out[1], &mine, 4) && fabsf(mine - loss) <= 1e-6f * fabsf(loss), "the same loss: %g vs %g", mine, loss);
  double worst = 0, scale = 0;
  for (int i = 0; i < nw && gr[0]; i++) {
    const rt_st_entry *a = &f0.entries[i], *b = rt_st_find(&f1, a->name);
    size_t n = (size_t)(a->end - a->begin) / 4;
    float *gv = malloc(n * 4);
    CHECK(b && !kiln_array_read(gr[i], gv, n * 4), "%s's gradient: %s", a->name, kiln_last_error());
    for (size_t k = 0; b && k < n; k++) {
      double step = (double)((const float *)a->data)[k] - ((const float *)b->data)[k];
      worst = fmax(worst, fabs(step - gv[k])), scale = fmax(scale, fabs(step));
    }
    free(gv);
  }
  CHECK(scale > 1e-4 && worst <= 1e-6, "mlp: gradients on arrays equal train_step's steps (worst %g, largest step %g)", worst, scale);
  if (worst <= 1e-6) printf("mlp: kiln_grad equals train_step's step on %d weights (worst %g)\n", nw, worst);
  rt_st_close(&f0), rt_st_close(&f1);
  free(wn), free(wa), free(gr), free(image), free(label);
  kiln_session_free(s), kiln_model_free(m), kiln_graph_free(g);
  unlink(p0), unlink(p1);
}

/* kiln_graph_predict_arrays refuses what does not fit: the input count, a shape, a weight
 * name the model lacks, a weight left out. */
static void test_refusals(void) {
  static const char *const src = "model r {\n  input x : f32[2, 3]\n  y = fully_connected(x, num_hidden=4)\n  output y\n}\n";
  char path[] = "/tmp/kiln-predict-arrays-XXXXXX.kiln";
  int fd = mkstemps(path, 5);
  CHECK(fd >= 0 && write(fd, src, strlen(src)) == (ssize_t)strlen(src), "write %s", path);
  close(fd);
  kiln_graph *g = NULL;
  kiln_session *s = NULL;
  CHECK(!kiln_graph_load(path, NULL, &g) && !kiln_session_new(&s), "load: %s", kiln_last_error());
  float v[12] = {0};
  kiln_array *x = NULL, *bad = NULL, *w = NULL, *b = NULL, *y = NULL;
  kiln_array_from_data(s, KILN_F32, 2, (int64_t[]){2, 3}, v, &x), kiln_array_from_data(s, KILN_F32, 2, (int64_t[]){3, 2}, v, &bad);
  kiln_array_from_data(s, KILN_F32, 2, (int64_t[]){4, 3}, v, &w), kiln_array_from_data(s, KILN_F32, 1, (int64_t[]){4}, v, &b);
  const char *names[] = {"y.weight", "y.bias"}, *wrong[] = {"y.weight", "z.bias"};
  kiln_array *ws[] = {w, b};
  CHECK(kiln_graph_predict_arrays(g, s, 2, (kiln_array *[]){x, x}, 2, names, ws, 1, &y) && strstr(kiln_last_error(), "takes 1 input"),
        "two inputs for one: %s", kiln_last_error());
  CHECK(kiln_graph_predict_arrays(g, s, 1, &bad, 2, names, ws, 1, &y) && strstr(kiln_last_error(), "f32[2, 3]"),
        "a wrong shape: %s", kiln_last_error());
  CHECK(kiln_graph_predict_arrays(g, s, 1, &x, 2, wrong, ws, 1, &y) && strstr(kiln_last_error(), "no weight 'z.bias'"),
        "a weight the model lacks: %s", kiln_last_error());
  CHECK(kiln_graph_predict_arrays(g, s, 1, &x, 1, names, ws, 1, &y) && strstr(kiln_last_error(), "'y.bias' is not given"),
        "a weight left out: %s", kiln_last_error());
  CHECK(kiln_graph_predict_arrays(g, s, 1, &x, 2, names, ws, 2, &y) && strstr(kiln_last_error(), "gives 1 output"),
        "two outputs for one: %s", kiln_last_error());
  float out[8];
  CHECK(!kiln_graph_predict_arrays(g, s, 1, &x, 2, names, ws, 1, &y) && !kiln_array_read(y, out, sizeof out) && out[0] == 0,
        "zeros in, zeros out: %s", kiln_last_error());
  kiln_session_free(s), kiln_graph_free(g);
  unlink(path);
}

int main(void) {
  char dir[] = "/tmp/kiln-examples-XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  ex_ctx ctx = {dir, 0};
  int n = ts_each_model("examples", one_example, &ctx);
  CHECK(n >= 4 && ctx.models == n, "every example compared (%d of %d)", ctx.models, n);
  test_mlp_grad_vs_train_step(dir);
  rmdir(dir);
  test_refusals();
  return ts_summary("api.test_examples");
}
