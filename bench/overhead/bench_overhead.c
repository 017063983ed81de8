/* bench_overhead.c — the fixed costs of the runtime's call path (issue 9, point 5): one predict
 * call of a model whose program is a single tiny step, and one more step of a program.
 *
 * The models are descriptors built here in memory, as a code generator would emit them: a
 * chain of N relu steps on a [4] float tensor (k_relu_forward, the real kernel), ping-ponging
 * between two arena slots. Nothing but the runtime and the kernel library is involved, so the
 * figures are the runtime's own: binding, checks, the engine, the kernel call set-up.
 *
 * Usage: kiln_bench_overhead [N [seconds]]   (N steps for the per-step figure, default 64)
 * Prints: ns per predict call of the 1-step model, of the N-step model, and
 * (T(N) - T(1)) / (N - 1) as the cost of one step; each the best of 7 timed runs of at least
 * `seconds` (default 0.2). The engine comes from KILN_ENGINE, threads from KILN_NUM_THREADS. */
#include "kernels.h"
#include "rt_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BO_RUNS 7
#define BO_ELEMS 4

/* Everything one descriptor points to, kept together so it can be freed at once. */
typedef struct {
  rt_model_desc d;
  rt_tensor_info *tensors;
  rt_step *steps;
  int64_t *offset;
  int32_t *ins, *outs, *deps;
  k_shape *shapes;
  k_req req;
  int32_t input, output;
} bo_model;

/* Tensor 0 is the input; tensor i + 1 is step i's output, in arena slot i % 2. */
static void bo_tensors(bo_model *b, int n) {
  k_shape s = {1, {BO_ELEMS}};
  for (int t = 0; t <= n; t++) {
    b->tensors[t] = (rt_tensor_info){t ? "y" : "x", t ? RT_ROLE_VALUE : RT_ROLE_INPUT, K_F32, s, 0, 0, 0, NULL, t};
    b->offset[t] = t ? (int64_t)((t - 1) % 2) * 64 : -1;
  }
}

/* Step i: y[i+1] = relu(y[i]), after step i - 1. op is unused by the runtime for a step that
 * names its kernel, so it stays 0 rather than pulling in the IR's op table. */
static void bo_steps(bo_model *b, int n) {
  for (int i = 0; i < n; i++) {
    b->ins[i] = i, b->outs[i] = i + 1, b->deps[i] = i - 1;
    b->steps[i] = (rt_step){.kind = RT_STEP_FORWARD, .kernel = k_relu_forward, .nin = 1, .nout = 1,
                            .in = &b->ins[i], .out = &b->outs[i], .in_shape = &b->shapes[0],
                            .req = &b->req, .name = "relu", .ndeps = i > 0, .deps = &b->deps[i]};
  }
}

static bo_model *bo_new(int n) {
  bo_model *b = calloc(1, sizeof *b);
  if (!b) exit(1);
  b->tensors = calloc((size_t)n + 1, sizeof *b->tensors), b->offset = calloc((size_t)n + 1, sizeof *b->offset);
  b->steps = calloc((size_t)n, sizeof *b->steps), b->shapes = calloc(1, sizeof *b->shapes);
  b->ins = calloc((size_t)n, 4), b->outs = calloc((size_t)n, 4), b->deps = calloc((size_t)n, 4);
  if (!b->tensors || !b->offset || !b->steps || !b->shapes || !b->ins || !b->outs || !b->deps) exit(1);
  b->shapes[0] = (k_shape){1, {BO_ELEMS}};
  b->req = kWriteTo, b->input = 0, b->output = n;
  bo_tensors(b, n);
  bo_steps(b, n);
  b->d = (rt_model_desc){.abi = RT_MODEL_ABI, .name = "overhead", .ntensors = n + 1, .tensors = b->tensors};
  b->d.predict = (rt_program){.nsteps = n, .steps = b->steps, .arena_bytes = 128, .offset = b->offset,
                              .ninputs = 1, .inputs = &b->input, .noutputs = 1, .outputs = &b->output};
  return b;
}

static void bo_free(bo_model *b) {
  free(b->tensors), free(b->offset), free(b->steps), free(b->shapes);
  free(b->ins), free(b->outs), free(b->deps), free(b);
}

static double bo_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void bo_calls(rt_model *m, long iters, const float *x, float *y) {
  const void *in[1] = {x};
  void *out[1] = {y};
  for (long i = 0; i < iters; i++)
    if (rt_model_predict(m, in, out)) fprintf(stderr, "kiln_bench_overhead: %s\n", rt_model_error(m)), exit(1);
}

/* Nanoseconds per predict call of an n-step chain: calibrated, best of BO_RUNS. */
static double bo_time(int n, double secs) {
  bo_model *b = bo_new(n);
  rt_model *m = rt_model_create(&b->d, 1);
  if (!m) fprintf(stderr, "kiln_bench_overhead: cannot create the %d-step model\n", n), exit(1);
  float x[BO_ELEMS] = {-1.5f, 0.5f, -0.0f, 2.0f}, y[BO_ELEMS];
  long iters = 1;   /* doubled until one run lasts `secs` (the first runs are the warm-up) */
  for (double a = bo_now(); bo_calls(m, iters, x, y), bo_now() - a < secs; a = bo_now()) iters *= 2;
  double best = INFINITY;
  for (int r = 0; r < BO_RUNS; r++) {
    double a = bo_now();
    bo_calls(m, iters, x, y);
    double t = (bo_now() - a) / (double)iters;
    if (t < best) best = t;
  }
  if (y[0] != 0.0f || y[1] != 0.5f || y[3] != 2.0f) fprintf(stderr, "kiln_bench_overhead: wrong result\n"), exit(1);
  rt_model_destroy(m);
  bo_free(b);
  return best * 1e9;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 64;
  double secs = argc > 2 ? atof(argv[2]) : 0.2;
  if (n < 2 || n > 100000 || !(secs > 0)) return fprintf(stderr, "usage: %s [N>=2 [seconds]]\n", argv[0]), 2;
  double t1 = bo_time(1, secs), tn = bo_time(n, secs);
  printf("predict call, 1 step:\t%.1f ns\n", t1);
  printf("predict call, %d steps:\t%.1f ns\n", n, tn);
  printf("per step:\t%.1f ns\n", (tn - t1) / (n - 1));
  return 0;
}
