/* kt_harness.c — the shared gradient checker and test helpers (see kt_harness.h). */
#include "kt_harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int kt_passed, kt_failed;

static uint64_t kt_next(uint64_t *s) {
  *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
  return *s;
}

void kt_fill_uniform(float *x, int64_t n, float lo, float hi, uint64_t seed) {
  uint64_t s = seed * 2654435761u + 88172645463325252ull;
  for (int64_t i = 0; i < n; i++)
    x[i] = lo + (hi - lo) * (float)((kt_next(&s) >> 40) * (1.0 / 16777216.0));
}

void kt_fill_int(int32_t *x, int64_t n, int32_t lo, int32_t hi_exclusive, uint64_t seed) {
  uint64_t s = seed * 2654435761u + 88172645463325252ull;
  for (int64_t i = 0; i < n; i++)
    x[i] = lo + (int32_t)(kt_next(&s) % (uint64_t)(hi_exclusive - lo));
}

k_shape kt_shape(int rank, ...) {
  k_shape s = {0};
  va_list ap;
  va_start(ap, rank);
  s.rank = rank;
  for (int i = 0; i < rank; i++) s.d[i] = va_arg(ap, int);
  va_end(ap);
  return s;
}

k_tensor kt_tensor_f32(k_shape s, float lo, float hi, uint64_t seed) {
  k_tensor t = {calloc((size_t)k_shape_numel(&s) + 1, sizeof(float)), s, K_F32};
  kt_fill_uniform(t.data, k_shape_numel(&s), lo, hi, seed);
  return t;
}

k_tensor kt_tensor_i32(k_shape s, int32_t lo, int32_t hi_exclusive, uint64_t seed) {
  k_tensor t = {calloc((size_t)k_shape_numel(&s) + 1, sizeof(int32_t)), s, K_I32};
  kt_fill_int(t.data, k_shape_numel(&s), lo, hi_exclusive, seed);
  return t;
}

void kt_tensor_free(k_tensor *t) {
  free(t->data);
  t->data = NULL;
}

float *kt_data_copy(const k_tensor *t) {
  size_t n = (size_t)k_shape_numel(&t->shape);
  float *p = malloc((n + 1) * sizeof(float));
  if (p) memcpy(p, t->data, n * sizeof(float));
  return p;
}

static k_tensor kt_alloc_like(k_shape s, k_dtype dt) {
  k_tensor t = {calloc((size_t)k_shape_numel(&s) + 1, 4), s, dt};
  return t;
}

static int kt_run(k_fn fn, const k_tensor *in, int nin, k_tensor *out, int nout,
                  const k_req *req, const kt_case *c, void *temp) {
  char err[256] = "";
  k_call call = {in, nin, out, nout, req, c->param, temp, c->temp_bytes,
                 1234, 0, c->is_train, err, sizeof err, NULL, NULL, NULL};
  int rc = fn(&call);
  if (rc) fprintf(stderr, "  %s: kernel returned %d: %s\n", c->name, rc, err);
  return rc;
}

int kt_forward(const kt_case *c, k_tensor *out) {
  k_req req[KT_MAX_IO];
  for (int i = 0; i < c->nout; i++) {
    out[i] = kt_alloc_like(c->out_shape[i], c->out_dtype[i]);
    req[i] = kWriteTo;
  }
  void *temp = c->temp_bytes ? calloc(1, c->temp_bytes) : NULL;
  int rc = kt_run(c->fwd, c->in, c->nargs + c->naux, out, c->nout, req, c, temp);
  free(temp);
  return rc;
}

static void kt_free_all(k_tensor *t, int n) {
  for (int i = 0; i < n; i++) kt_tensor_free(&t[i]);
}

/* L = sum over visible outputs of <r_k, out_k>, accumulated in double. */
static double kt_objective(const kt_case *c, k_tensor *r) {
  k_tensor out[KT_MAX_IO];
  double L = 0;
  if (kt_forward(c, out) == 0)
    for (int k = 0; k < c->nvisible; k++) {
      const float *o = out[k].data, *w = r[k].data;
      for (int64_t i = 0; i < k_shape_numel(&out[k].shape); i++) L += (double)o[i] * w[i];
    }
  else
    L = NAN;
  kt_free_all(out, c->nout);
  return L;
}

/* Backward with the declared dependencies only; grads[j] receives in_grad j. */
static int kt_backward(const kt_case *c, k_tensor *r, k_tensor *fwd_out, k_tensor *grads,
                       k_req mode) {
  k_tensor in[3 * KT_MAX_IO];
  k_req req[KT_MAX_IO];
  int n = 0;
  for (int k = 0; k < c->nout; k++, n++) {
    in[n] = fwd_out[k];
    in[n].data = (k < c->nvisible && (c->deps_og >> k & 1)) ? r[k].data : NULL;
  }
  for (int j = 0; j < c->nargs; j++, n++) {
    in[n] = c->in[j];
    if (!(c->deps_in >> j & 1)) in[n].data = NULL;
  }
  for (int k = 0; k < c->nout; k++, n++) {
    in[n] = fwd_out[k];
    if (!(c->deps_out >> k & 1)) in[n].data = NULL;
  }
  for (int j = 0; j < c->nargs; j++) req[j] = (c->no_grad >> j & 1) ? kNullOp : mode;
  void *temp = c->temp_bytes ? calloc(1, c->temp_bytes) : NULL;
  int rc = kt_run(c->bwd, in, n, grads, c->nargs, req, c, temp);
  free(temp);
  return rc;
}

static int kt_compare_point(const kt_case *c, int j, int64_t i, float analytic, double numeric) {
  float rtol = c->rtol > 0 ? c->rtol : 2e-2f, atol = c->atol > 0 ? c->atol : 2e-3f;
  if (fabs(analytic - numeric) <= atol + rtol * fabs(numeric)) return 0;
  fprintf(stderr, "  %s: d/d(in %d)[%lld]: analytic %.6g, numeric %.6g\n", c->name, j,
          (long long)i, analytic, numeric);
  return 1;
}

/* Central differences on a spread of elements of float arg j. */
static int kt_check_arg(kt_case *c, int j, k_tensor *r, const float *grad) {
  float eps = c->eps > 0 ? c->eps : 1e-3f;
  int64_t n = k_shape_numel(&c->in[j].shape);
  int64_t points = c->max_points > 0 ? c->max_points : 64;
  int64_t step = n > points ? n / points : 1;
  int fails = 0;
  float *x = c->in[j].data;
  for (int64_t i = 0; i < n && fails < 5; i += step) {
    float saved = x[i];
    x[i] = saved + eps;
    double lp = kt_objective(c, r);
    x[i] = saved - eps;
    double lm = kt_objective(c, r);
    x[i] = saved;
    fails += kt_compare_point(c, j, i, grad[i], (lp - lm) / (2.0 * eps));
  }
  return fails;
}

/* kAddTo must add exactly the kWriteTo result onto what the buffer held. */
static int kt_check_addto(const kt_case *c, k_tensor *r, k_tensor *fwd_out, k_tensor *grads) {
  k_tensor acc[KT_MAX_IO];
  int fails = 0;
  for (int j = 0; j < c->nargs; j++) {
    acc[j] = kt_alloc_like(c->in[j].shape, c->in[j].dtype);
    if (c->in[j].dtype == K_F32) kt_fill_uniform(acc[j].data, k_shape_numel(&acc[j].shape), -1, 1, 99 + j);
  }
  if (kt_backward(c, r, fwd_out, acc, kAddTo)) fails++;
  for (int j = 0; j < c->nargs && !fails; j++) {
    if (c->in[j].dtype != K_F32 || (c->no_grad >> j & 1)) continue;
    int64_t n = k_shape_numel(&acc[j].shape);
    float *want = malloc((size_t)n * sizeof(float) + 4);
    kt_fill_uniform(want, n, -1, 1, 99 + j);
    for (int64_t i = 0; i < n; i++) want[i] += ((float *)grads[j].data)[i];
    char what[160];
    snprintf(what, sizeof what, "%s kAddTo in_grad %d", c->name, j);
    fails += kt_expect_close(what, acc[j].data, want, n, 1e-5f, 1e-5f) != 0;
    free(want);
  }
  kt_free_all(acc, c->nargs);
  return fails;
}

int kt_gradcheck(const kt_case *cc) {
  kt_case c = *cc;
  k_tensor r[KT_MAX_IO], fwd_out[KT_MAX_IO], grads[KT_MAX_IO];
  int fails = 0;
  for (int k = 0; k < c.nvisible; k++) r[k] = kt_tensor_f32(c.out_shape[k], -1, 1, 500 + k);
  if (kt_forward(&c, fwd_out)) fails++;
  /* kWriteTo must overwrite: gradient buffers start as NaN, so a kernel that accumulates
   * (or skips elements) fails the check instead of passing on zeroed memory. */
  for (int j = 0; j < c.nargs; j++) {
    grads[j] = kt_alloc_like(c.in[j].shape, c.in[j].dtype);
    if (c.in[j].dtype == K_F32 && !(c.no_grad >> j & 1))
      for (int64_t i = 0; i < k_shape_numel(&grads[j].shape); i++) ((float *)grads[j].data)[i] = NAN;
  }
  if (!fails && kt_backward(&c, r, fwd_out, grads, kWriteTo)) fails++;
  for (int j = 0; j < c.nargs && !fails; j++)
    if (c.in[j].dtype == K_F32 && !(c.no_grad >> j & 1)) fails += kt_check_arg(&c, j, r, grads[j].data);
  if (!fails) fails += kt_check_addto(&c, r, fwd_out, grads);
  kt_free_all(grads, c.nargs);
  kt_free_all(fwd_out, c.nout);
  kt_free_all(r, c.nvisible);
  KT_CHECK(fails == 0, "gradcheck %s", c.name);
  return fails;
}

float *kt_to_blocked(const float *x, int64_t N, int64_t C, int64_t P, int64_t V) {
  int64_t Cb = (C + V - 1) / V, n = N * Cb * P * V;
  float *b = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) b[i] = NAN;
  for (int64_t s = 0; s < N; s++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t q = 0; q < P; q++) b[((s * Cb + c / V) * P + q) * V + c % V] = x[(s * C + c) * P + q];
  return b;
}

void kt_from_blocked(const float *b, int64_t N, int64_t C, int64_t P, int64_t V, float *x) {
  int64_t Cb = (C + V - 1) / V;
  for (int64_t s = 0; s < N; s++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t q = 0; q < P; q++) x[(s * C + c) * P + q] = b[((s * Cb + c / V) * P + q) * V + c % V];
}

int kt_expect_close(const char *what, const float *got, const float *want, int64_t n,
                    float rtol, float atol) {
  int fails = 0;
  for (int64_t i = 0; i < n; i++) {
    if (fabsf(got[i] - want[i]) <= atol + rtol * fabsf(want[i])) continue;
    if (fails++ < 5)
      fprintf(stderr, "  %s[%lld]: got %.7g, want %.7g\n", what, (long long)i, got[i], want[i]);
  }
  return fails;
}

int kt_finish(const char *suite) {
  printf("%s: %d passed, %d failed\n", suite, kt_passed, kt_failed);
  return kt_failed ? 1 : 0;
}
