/* test_optim.c — SGD (with and without momentum and weight decay) and Adam (with and without
 * weight decay) over several steps, with a changing learning rate and fresh gradients each step,
 * against straightforward double-precision loops written from the torch.optim definitions. */
#include "kt_harness.h"

#include <math.h>
#include <stdlib.h>

#define N 257
#define STEPS 6

/* torch.optim.SGD: d = g + wd*w; buf = d on the first step, else momentum*buf + d; w -= lr*d. */
static void ref_sgd(double *w, const float *g, double *buf, int step, double lr, double mom, double wd) {
  for (int i = 0; i < N; i++) {
    double d = g[i] + wd * w[i];
    if (mom != 0) {
      buf[i] = step == 1 ? d : mom * buf[i] + d;
      d = buf[i];
    }
    w[i] -= lr * d;
  }
}

/* torch.optim.Adam (amsgrad off). */
static void ref_adam(double *w, const float *g, double *m, double *v, int t, double lr,
                     double b1, double b2, double eps, double wd) {
  for (int i = 0; i < N; i++) {
    double d = g[i] + wd * w[i];
    m[i] = b1 * m[i] + (1 - b1) * d;
    v[i] = b2 * v[i] + (1 - b2) * d * d;
    double denom = sqrt(v[i]) / sqrt(1 - pow(b2, t)) + eps;
    w[i] -= lr / (1 - pow(b1, t)) * m[i] / denom;
  }
}

static int compare(const float *got, const double *want, double rtol, double atol) {
  int bad = 0;
  for (int i = 0; i < N; i++) bad += fabs(got[i] - want[i]) > atol + rtol * fabs(want[i]);
  return bad;
}

static void check_sgd(float momentum, float wd) {
  float w[N], g[N], mom[N] = {0};
  double rw[N], rbuf[N] = {0};
  kt_fill_uniform(w, N, -1, 1, 61);
  for (int i = 0; i < N; i++) rw[i] = w[i];
  k_sgd_param p = {momentum, wd};
  int bad = 0;
  for (int t = 1; t <= STEPS; t++) {
    float lr = 0.1f / (float)t;    /* set_lr between steps */
    kt_fill_uniform(g, N, -1, 1, 70 + t);
    k_sgd_update(w, g, momentum != 0 ? mom : NULL, N, lr, &p);
    ref_sgd(rw, g, rbuf, t, lr, momentum, wd);
    bad += compare(w, rw, 1e-5, 1e-6);
  }
  KT_CHECK(bad == 0, "sgd momentum %g wd %g: %d mismatches", momentum, wd, bad);
  KT_CHECK(fabs(w[0] - rw[0]) < 1e-5 && w[0] != 0, "sgd moved the weights");
}

static void check_adam(float wd) {
  float w[N], g[N], m[N] = {0}, v[N] = {0}, w0 = 0;
  double rw[N], rm[N] = {0}, rv[N] = {0};
  kt_fill_uniform(w, N, -1, 1, 62);
  for (int i = 0; i < N; i++) rw[i] = w[i];
  w0 = w[5];
  k_adam_param p = {0.9f, 0.999f, 1e-8f, wd};
  int bad = 0;
  for (int t = 1; t <= STEPS; t++) {
    float lr = t < 4 ? 1e-2f : 3e-3f;
    kt_fill_uniform(g, N, -1, 1, 80 + t);
    k_adam_update(w, g, m, v, N, lr, &p, t);
    ref_adam(rw, g, rm, rv, t, lr, p.beta1, p.beta2, p.eps, wd);
    bad += compare(w, rw, 1e-5, 1e-6);
  }
  KT_CHECK(bad == 0, "adam wd %g: %d mismatches", wd, bad);
  KT_CHECK(fabs(w[5] - w0) > 1e-3, "adam moved the weights");
}

/* A hand-computed first Adam step: the update is lr * sign(g) whatever |g| (bias-corrected). */
static void check_adam_first_step(void) {
  float w[2] = {1, 1}, g[2] = {0.5f, -2}, m[2] = {0}, v[2] = {0};
  k_adam_param p = {0.9f, 0.999f, 1e-8f, 0};
  k_adam_update(w, g, m, v, 2, 0.01f, &p, 1);
  KT_CHECK(fabsf(w[0] - 0.99f) < 1e-6f && fabsf(w[1] - 1.01f) < 1e-6f, "adam step 1: %g %g", w[0], w[1]);
}

int main(void) {
  check_sgd(0, 0);
  check_sgd(0.9f, 0);
  check_sgd(0.9f, 1e-2f);
  check_sgd(0, 0.1f);
  check_adam(0);
  check_adam(1e-2f);
  check_adam_first_step();
  return kt_finish("test_optim");
}
