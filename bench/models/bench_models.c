/* bench_models.c — end-to-end throughput of one generated model .so: train_step and predict
 * samples per second. It loads the .so through its name-free `kiln_model` descriptor, so one
 * binary times every model; torch_models.py is its PyTorch twin and run.sh runs both.
 *
 * Usage: kiln_bench_models LIB.so [seconds [train|predict|both [EXTENT,...]]]
 *   seconds  minimum length of one timed run (default 0.5); 0: one call a run after a single
 *            warm-up call, for steps that take seconds (batch 64 of a large model)
 *   train|predict  time only that entry point (for profiling under perf); default both, or
 *                  predict alone for a model without train_step (one compiled from ONNX)
 *   EXTENT,...  a model with bounded dims runs at these extents, one per dim in declaration
 *               order (default: the bounds); the batch column is then the first input's first axis there
 * Prints TSV: model, mode, batch, samples/s, iterations per run, then the CPU milliseconds per
 * call of the whole process and of the calling thread (least over the runs: on a loaded machine
 * they still say what the work costs and how much of it stayed on the calling thread), then a
 * comment line with the peak RSS and, when the first call is a predict, one with the
 * milliseconds from dlopen to the end of that first call (# create_ms). Threads come from
 * the environment (KILN_NUM_THREADS, OPENBLAS_NUM_THREADS); KILN_BENCH_RUNS the number of timed
 * runs whose best is kept (default 5).
 * A CUDA .so is timed the same way (bench/gpu/run.sh): its calls copy host buffers in and out
 * and return with the results on the host. When its create fails (no driver or no GPU) this
 * prints "SKIP: <why>" and exits 77.
 *
 * Inputs: f32 inputs are uniform in [-1, 1). An i32 input is an index in its valid range
 * (rt_index_range, runtime/rt_model.h). */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime and its clocks under -std=c11 */
#include "rt_model.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define BM_RUNS 5   /* timed runs, the best kept; KILN_BENCH_RUNS overrides */
#define BM_MAX_IO 64

static double bm_clock(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double bm_now(void) { return bm_clock(CLOCK_MONOTONIC); }

/* CPU seconds per call: all threads of the process, and the calling thread alone. */
typedef struct { double proc, self; } bm_cpu;

static long bm_max_rss_kib(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

static uint64_t bm_rng = 0x9e3779b97f4a7c15u;
static uint32_t bm_rand(void) {   /* xorshift64*: deterministic, good enough for data */
  bm_rng ^= bm_rng >> 12, bm_rng ^= bm_rng << 25, bm_rng ^= bm_rng >> 27;
  return (uint32_t)((bm_rng * 0x2545f4914f6cdd1dull) >> 32);
}

static void *bm_fill(const rt_model_desc *d, int32_t t) {
  const rt_tensor_info *ti = &d->tensors[t];
  int64_t n = k_shape_numel(&ti->shape);
  void *buf = malloc((size_t)(n > 0 ? n : 1) * 4);
  if (!buf) exit(1);
  if (ti->dtype == K_F32) {
    for (int64_t i = 0; i < n; i++) ((float *)buf)[i] = (float)bm_rand() * (2.0f / 4294967296.0f) - 1.0f;
  } else {
    int64_t r = rt_index_range(d, t);
    fprintf(stderr, "# %s: %s in [0, %lld)\n", d->name, ti->name, (long long)r);
    for (int64_t i = 0; i < n; i++) ((int32_t *)buf)[i] = (int32_t)(bm_rand() % (uint32_t)r);
  }
  return buf;
}

typedef struct {
  const rt_model_api *api;
  rt_model *m;
  const void *in[BM_MAX_IO];
  void *out[BM_MAX_IO];
  int train;
  const int64_t *ext;           /* bounded dims: the extents (the buffers are sized at the bounds) */
} bm_ctx;

static void bm_call(bm_ctx *c, int iters) {
  for (int i = 0; i < iters; i++) {
    float loss;
    int rc = c->ext ? (c->train ? c->api->train_step_at(c->m, c->ext, c->in, &loss) : c->api->predict_at(c->m, c->ext, c->in, c->out))
             : c->train ? c->api->train_step(c->m, c->in, &loss) : c->api->predict(c->m, c->in, c->out);
    if (rc) fprintf(stderr, "kiln_bench_models: %s\n", c->api->error(c->m)), exit(1);
  }
}

static int bm_runs(void) {
  const char *e = getenv("KILN_BENCH_RUNS");
  int n = e ? atoi(e) : BM_RUNS;
  return n >= 1 ? n : BM_RUNS;
}

/* Warm-up (at least 3 calls and 0.2 s; one call when secs is 0), calibrate iterations to
 * `secs` (at least 2; 1 when secs is 0), best of bm_runs(). */
static double bm_time(bm_ctx *c, double secs, int *iters_out, bm_cpu *cpu) {
  double t0 = bm_now();
  int n = 0;
  do bm_call(c, 1), n++;
  while (secs > 0 && (n < 3 || bm_now() - t0 < 0.2));
  double per = (bm_now() - t0) / n;
  int iters = secs > 0 ? (int)ceil(secs / per) : 1;
  if (secs > 0 && iters < 2) iters = 2;
  double best = INFINITY;
  *cpu = (bm_cpu){INFINITY, INFINITY};
  for (int r = 0, runs = bm_runs(); r < runs; r++) {
    double a = bm_now(), pa = bm_clock(CLOCK_PROCESS_CPUTIME_ID), sa = bm_clock(CLOCK_THREAD_CPUTIME_ID);
    bm_call(c, iters);
    double t = bm_now() - a;
    double pt = (bm_clock(CLOCK_PROCESS_CPUTIME_ID) - pa) / iters, st = (bm_clock(CLOCK_THREAD_CPUTIME_ID) - sa) / iters;
    if (t < best) best = t;
    if (pt < cpu->proc) cpu->proc = pt;
    if (st < cpu->self) cpu->self = st;
  }
  *iters_out = iters;
  return best / iters;
}

/* t0: before the .so was opened. The first call's end is printed as a "# create_ms" line
 * (milliseconds from dlopen through create to the end of the first call): what a user waits
 * for before the first result, beside ONNX Runtime's session creation and first run. */
static int bm_run(const rt_model_api *api, double secs, const char *only, const int64_t *ext, double t0) {
  const rt_model_desc *d = api->desc;
  if ((d->has_train && d->train.ninputs > BM_MAX_IO) || d->predict.ninputs > BM_MAX_IO || d->predict.noutputs > BM_MAX_IO)
    return fprintf(stderr, "kiln_bench_models: '%s' has too many inputs or outputs\n", d->name), 1;
  long base = bm_max_rss_kib();
  bm_ctx c = {.api = api, .m = api->create(d, 42)};
  if (!c.m && d->target != RT_TARGET_CPU) {
    const char *e = api->error(NULL);
    printf("SKIP: %s\n", e && e[0] ? e : "create returned NULL");
    return 77;
  }
  if (!c.m) return fprintf(stderr, "kiln_bench_models: out of memory\n"), 1;
  int64_t batch = d->tensors[d->predict.inputs[0]].shape.d[0];
  if (d->ndims && !api->predict_at) return fprintf(stderr, "kiln_bench_models: '%s' has bounded dims its target does not run\n", d->name), 1;
  if (d->ndims) c.ext = ext, batch = rt_tensor_shape_at(d, d->predict.inputs[0], ext).d[0];
  for (int pass = d->has_train ? 0 : 1; pass < 2; pass++) {   /* no train_step (ONNX): predict only */
    const rt_program *p = pass == 0 ? &d->train : &d->predict;
    c.train = pass == 0;
    if (only && strcmp(only, "both") != 0 && strcmp(only, c.train ? "train" : "predict") != 0) continue;
    for (int i = 0; i < p->ninputs; i++) c.in[i] = bm_fill(d, p->inputs[i]);
    for (int i = 0; !c.train && i < p->noutputs; i++) c.out[i] = bm_fill(d, p->outputs[i]);
    if (t0 > 0) {
      bm_call(&c, 1);
      printf("# create_ms\t%s\t%lld\t%.1f\n", d->name, (long long)batch, 1e3 * (bm_now() - t0));
      t0 = 0;
    }
    int iters;
    bm_cpu cpu;
    double per = bm_time(&c, secs, &iters, &cpu);
    printf("%s\t%s\t%lld\t%.1f\t%d\t%.2f\t%.2f\n", d->name, c.train ? "train" : "predict", (long long)batch,
           (double)batch / per, iters, 1e3 * cpu.proc, 1e3 * cpu.self);
    for (int i = 0; i < p->ninputs; i++) free((void *)c.in[i]);
    for (int i = 0; !c.train && i < p->noutputs; i++) free(c.out[i]);
  }
  api->destroy(c.m);
  printf("# rss_kib\t%s\t%ld\t%ld\n", d->name, base, bm_max_rss_kib());
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return fprintf(stderr, "usage: %s LIB.so [seconds [train|predict|both [EXTENT,...]]]\n", argv[0]), 2;
  double secs = argc > 2 ? atof(argv[2]) : 0.5;
  double t0 = bm_now();
  char path[4096];   /* dlopen searches the library path for a bare name */
  snprintf(path, sizeof path, "%s%s", strchr(argv[1], '/') ? "" : "./", argv[1]);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return fprintf(stderr, "kiln_bench_models: %s\n", dlerror()), 1;
  const rt_model_api *api = dlsym(h, "kiln_model");
  if (!api || !api->abi || strcmp(api->abi, RT_MODEL_ABI) != 0)
    return fprintf(stderr, "kiln_bench_models: %s: no kiln_model of ABI %s\n", argv[1], RT_MODEL_ABI), 1;
  int64_t ext[K_MAX_BDIMS];
  const rt_model_desc *d = api->desc;
  const char *e = argc > 4 ? argv[4] : "";
  for (int k = 0; k < d->ndims && k < K_MAX_BDIMS; k++) {
    char *end = NULL;
    ext[k] = *e ? strtoll(e, &end, 10) : d->dims[k].hi;
    if (*e) e = *end == ',' ? end + 1 : end;
  }
  int rc = bm_run(api, secs > 0 ? secs : 0.0, argc > 3 ? argv[3] : NULL, ext, t0);
  dlclose(h);
  return rc;
}
