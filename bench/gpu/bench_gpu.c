/* bench_gpu.c — samples/s of one generated model .so (a CUDA one, or any other: it only sees
 * the name-free `kiln_model` descriptor) for train_step and predict at the .kiln's own batch,
 * through the host-buffer ABI, so each call includes the copies in and out. torch_gpu.py is
 * its PyTorch twin; run.sh runs both and prints the ratios.
 *
 * usage: bench_gpu LIB.so [seconds [train|predict]]
 *   seconds  minimum length of one timed run (default 0.5); warm-up first (at least 3 calls
 *            and 0.2 s: the first calls pick cuDNN algorithms and fill caches), then the best
 *            of 3 runs
 * Prints one JSON line per entry point: {"side": "kiln", "model", "mode", "batch",
 * "samples_per_s", "ms_per_call", "iters", "target"}. Exits 77 with "SKIP: <reason>" when
 * create returns NULL (no CUDA driver or GPU: the .so's error(NULL) says which).
 * Inputs follow bench/models/bench_models.c: f32 uniform in [-1, 1), an i32 input an index
 * below the dim it indexes (embedding's rows, softmax_cross_entropy's classes). The calls
 * are synchronous (the outputs are on the host when they return), so a wall clock times them. */
#define _POSIX_C_SOURCE 200809L
#include "rt_model.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BG_RUNS 3
#define BG_MAX_IO 64

static double bg_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t bg_rng = 0x9e3779b97f4a7c15u;
static uint32_t bg_rand(void) {   /* xorshift64*: deterministic data */
  bg_rng ^= bg_rng >> 12, bg_rng ^= bg_rng << 25, bg_rng ^= bg_rng >> 27;
  return (uint32_t)((bg_rng * 0x2545f4914f6cdd1dull) >> 32);
}

/* The exclusive upper bound of index input t (bench_models.c's rule): the first forward step
 * reading it; its other input's first dim when that is a parameter, else its last dim. */
static int64_t bg_index_range(const rt_model_desc *d, int32_t t) {
  const rt_program *p = d->has_train ? &d->train : &d->predict;
  for (int s = 0; s < p->nsteps; s++) {
    const rt_step *st = &p->steps[s];
    if (st->kind != RT_STEP_FORWARD) continue;
    for (int i = 0; i < st->nin; i++) {
      if (st->in[i] != t) continue;
      for (int j = 0; j < st->nin; j++) {
        if (j == i || st->in[j] < 0) continue;
        const rt_tensor_info *o = &d->tensors[st->in[j]];
        int64_t r = o->role == RT_ROLE_PARAM ? o->shape.d[0] : o->shape.d[o->shape.rank - 1];
        return r > 0 ? r : 1;
      }
    }
  }
  return 2;
}

static void *bg_fill(const rt_model_desc *d, int32_t t) {
  const rt_tensor_info *ti = &d->tensors[t];
  int64_t n = k_shape_numel(&ti->shape);
  void *buf = malloc((size_t)(n > 0 ? n : 1) * 4);
  if (!buf) fprintf(stderr, "bench_gpu: out of memory\n"), exit(1);
  if (ti->dtype == K_F32) {
    for (int64_t i = 0; i < n; i++) ((float *)buf)[i] = (float)bg_rand() * (2.0f / 4294967296.0f) - 1.0f;
  } else {
    int64_t r = bg_index_range(d, t);
    for (int64_t i = 0; i < n; i++) ((int32_t *)buf)[i] = (int32_t)(bg_rand() % (uint32_t)r);
  }
  return buf;
}

typedef struct {
  const rt_model_api *api;
  rt_model *m;
  const void *in[BG_MAX_IO];
  void *out[BG_MAX_IO];
  int train;
} bg_ctx;

static void bg_call(bg_ctx *c, int iters) {
  for (int i = 0; i < iters; i++) {
    float loss;
    int rc = c->train ? c->api->train_step(c->m, c->in, &loss) : c->api->predict(c->m, c->in, c->out);
    if (rc) fprintf(stderr, "bench_gpu: %s\n", c->api->error(c->m)), exit(1);
  }
}

/* Seconds per call: warm-up, iterations calibrated to `secs`, the best of BG_RUNS runs. */
static double bg_time(bg_ctx *c, double secs, int *iters_out) {
  double t0 = bg_now();
  int n = 0;
  do bg_call(c, 1), n++;
  while (n < 3 || bg_now() - t0 < 0.2);
  int iters = (int)ceil(secs / ((bg_now() - t0) / n));
  if (iters < 2) iters = 2;
  double best = INFINITY;
  for (int r = 0; r < BG_RUNS; r++) {
    double a = bg_now();
    bg_call(c, iters);
    best = fmin(best, bg_now() - a);
  }
  *iters_out = iters;
  return best / iters;
}

static int bg_run(const rt_model_api *api, double secs, const char *only) {
  const rt_model_desc *d = api->desc;
  if ((d->has_train && d->train.ninputs > BG_MAX_IO) || d->predict.ninputs > BG_MAX_IO || d->predict.noutputs > BG_MAX_IO)
    return fprintf(stderr, "bench_gpu: '%s' has too many inputs or outputs\n", d->name), 1;
  bg_ctx c = {.api = api, .m = api->create(d, 42)};
  if (!c.m) {
    const char *e = api->error(NULL);
    printf("SKIP: %s\n", e && e[0] ? e : "create returned NULL");
    return 77;
  }
  int64_t batch = d->tensors[d->predict.inputs[0]].shape.d[0];
  for (int pass = d->has_train ? 0 : 1; pass < 2; pass++) {
    const rt_program *p = pass == 0 ? &d->train : &d->predict;
    c.train = pass == 0;
    if (only && strcmp(only, c.train ? "train" : "predict") != 0) continue;
    for (int i = 0; i < p->ninputs; i++) c.in[i] = bg_fill(d, p->inputs[i]);
    for (int i = 0; !c.train && i < p->noutputs; i++) c.out[i] = bg_fill(d, p->outputs[i]);
    int iters;
    double per = bg_time(&c, secs, &iters);
    printf("{\"side\": \"kiln\", \"model\": \"%s\", \"mode\": \"%s\", \"batch\": %lld, \"samples_per_s\": %.1f, "
           "\"ms_per_call\": %.4f, \"iters\": %d, \"target\": \"%s\"}\n",
           d->name, c.train ? "train" : "predict", (long long)batch, (double)batch / per, 1e3 * per, iters,
           d->target == RT_TARGET_CUDA ? "cuda" : "cpu");
    fflush(stdout);
    for (int i = 0; i < p->ninputs; i++) free((void *)c.in[i]);
    for (int i = 0; !c.train && i < p->noutputs; i++) free(c.out[i]);
  }
  api->destroy(c.m);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return fprintf(stderr, "usage: %s LIB.so [seconds [train|predict]]\n", argv[0]), 2;
  double secs = argc > 2 ? atof(argv[2]) : 0.5;
  char path[4096];   /* dlopen searches the library path for a bare name */
  snprintf(path, sizeof path, "%s%s", strchr(argv[1], '/') ? "" : "./", argv[1]);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return fprintf(stderr, "bench_gpu: %s\n", dlerror()), 1;
  const rt_model_api *api = dlsym(h, "kiln_model");
  if (!api || !api->abi || strcmp(api->abi, RT_MODEL_ABI) != 0)
    return fprintf(stderr, "bench_gpu: %s: no kiln_model of ABI %s\n", argv[1], RT_MODEL_ABI), 1;
  int rc = bg_run(api, secs > 0 ? secs : 0.5, argc > 3 ? argv[3] : NULL);
  dlclose(h);
  return rc;
}
