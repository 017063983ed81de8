/* test_optim.c — SGD (with and without momentum, Nesterov and weight decay), Adam (with and
 * without weight decay) and AdamW over several steps, with a changing learning rate and fresh
 * gradients each step, against straightforward double-precision loops written from the
 * torch.optim definitions; and the learning-rate schedules at hand-computed points (the
 * conformance suite checks them against torch.optim.lr_scheduler step by step). */
#include "kt_harness.h"

#include <math.h>
#include <stdlib.h>

#define N 257
#define STEPS 6

/* torch.optim.SGD: d = g + wd*w; buf = d on the first step, else momentum*buf + d; w -= lr*d. */
static void ref_sgd(double *w, const float *g, double *buf, int step, double lr, double mom, double wd, int nesterov) {
  for (int i = 0; i < N; i++) {
    double d = g[i] + wd * w[i];
    if (mom != 0) {
      buf[i] = step == 1 ? d : mom * buf[i] + d;
      d = nesterov ? d + mom * buf[i] : buf[i];
    }
    w[i] -= lr * d;
  }
}

/* torch.optim.Adam (amsgrad off); AdamW (decoupled): w *= 1 - lr*wd, then Adam without wd. */
static void ref_adam(double *w, const float *g, double *m, double *v, int t, double lr,
                     double b1, double b2, double eps, double wd, int decoupled) {
  for (int i = 0; i < N; i++) {
    if (decoupled) w[i] *= 1 - lr * wd;
    double d = decoupled ? g[i] : g[i] + wd * w[i];
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

static void check_sgd(float momentum, float wd, int nesterov) {
  float w[N], g[N], mom[N] = {0};
  double rw[N], rbuf[N] = {0};
  kt_fill_uniform(w, N, -1, 1, 61);
  for (int i = 0; i < N; i++) rw[i] = w[i];
  k_sgd_param p = {momentum, wd, nesterov};
  int bad = 0;
  for (int t = 1; t <= STEPS; t++) {
    float lr = 0.1f / (float)t;    /* set_lr between steps */
    kt_fill_uniform(g, N, -1, 1, 70 + t);
    k_sgd_update(w, g, momentum != 0 ? mom : NULL, N, lr, &p);
    ref_sgd(rw, g, rbuf, t, lr, momentum, wd, nesterov);
    bad += compare(w, rw, 1e-5, 1e-6);
  }
  KT_CHECK(bad == 0, "sgd momentum %g wd %g nesterov %d: %d mismatches", momentum, wd, nesterov, bad);
  KT_CHECK(fabs(w[0] - rw[0]) < 1e-5 && w[0] != 0, "sgd moved the weights");
}

static void check_adam(float wd, int decoupled) {
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
    k_adam_update(w, g, m, v, N, lr, &p, t, decoupled);
    ref_adam(rw, g, rm, rv, t, lr, p.beta1, p.beta2, p.eps, wd, decoupled);
    bad += compare(w, rw, 1e-5, 1e-6);
  }
  KT_CHECK(bad == 0, "adam%s wd %g: %d mismatches", decoupled ? "w" : "", wd, bad);
  KT_CHECK(fabs(w[5] - w0) > 1e-3, "adam moved the weights");
}

/* A hand-computed first Adam step: the update is lr * sign(g) whatever |g| (bias-corrected). */
static void check_adam_first_step(void) {
  float w[2] = {1, 1}, g[2] = {0.5f, -2}, m[2] = {0}, v[2] = {0};
  k_adam_param p = {0.9f, 0.999f, 1e-8f, 0};
  k_adam_update(w, g, m, v, 2, 0.01f, &p, 1, 0);
  KT_CHECK(fabsf(w[0] - 0.99f) < 1e-6f && fabsf(w[1] - 1.01f) < 1e-6f, "adam step 1: %g %g", w[0], w[1]);
}

/* AdamW with a large wd on a zero gradient: only the decay moves the weight, by lr * wd. */
static void check_adamw_decay(void) {
  float w[2] = {2, -4}, g[2] = {0, 0}, m[2] = {0}, v[2] = {0};
  k_adam_param p = {0.9f, 0.999f, 1e-8f, 0.5f};
  k_adam_update(w, g, m, v, 2, 0.1f, &p, 1, 1);
  KT_CHECK(fabsf(w[0] - 1.9f) < 1e-6f && fabsf(w[1] + 3.8f) < 1e-6f, "adamw decay: %g %g", w[0], w[1]);
}

static void check_lr(const k_schedule *s, float base, int64_t t, double want, const char *what) {
  float got = k_sched_lr(s, base, t);
  KT_CHECK(fabs(got - want) <= 1e-6 * fabs(want) + 1e-12, "%s at step %lld: lr %.9g, want %.9g", what, (long long)t, got, want);
}

/* Each schedule at points worked out by hand from torch's formulas. */
static void check_schedules(void) {
  const double pi = 3.14159265358979323846;
  k_schedule none = {.kind = K_SCHED_NONE};
  check_lr(&none, 0.1f, 1000, 0.1f, "constant");
  k_schedule step = {.kind = K_SCHED_STEP, .step_size = 3, .gamma = 0.5f};
  check_lr(&step, 0.1f, 0, 0.1, "step"), check_lr(&step, 0.1f, 2, 0.1, "step"), check_lr(&step, 0.1f, 3, 0.05, "step");
  check_lr(&step, 0.1f, 7, 0.025, "step");
  k_schedule multi = {.kind = K_SCHED_MULTISTEP, .milestones = {2, {2, 5}}, .gamma = 0.1f};
  check_lr(&multi, 1.0f, 1, 1.0, "multistep"), check_lr(&multi, 1.0f, 2, 0.1f, "multistep");
  check_lr(&multi, 1.0f, 4, 0.1f, "multistep"), check_lr(&multi, 1.0f, 5, (double)0.1f * 0.1f, "multistep");
  k_schedule ex = {.kind = K_SCHED_EXPONENTIAL, .gamma = 0.9f};
  check_lr(&ex, 0.2f, 3, 0.2 * pow(0.9f, 3), "exponential");
  k_schedule cos0 = {.kind = K_SCHED_COSINE, .total = 10};
  check_lr(&cos0, 1.0f, 0, 1.0, "cosine"), check_lr(&cos0, 1.0f, 5, 0.5, "cosine"), check_lr(&cos0, 1.0f, 10, 0.0, "cosine");
  k_schedule cosw = {.kind = K_SCHED_COSINE, .total = 14, .warmup = 4, .min_lr = 0.1f};
  check_lr(&cosw, 1.0f, 0, 0.25, "cosine warmup"), check_lr(&cosw, 1.0f, 3, 1.0, "cosine warmup");
  check_lr(&cosw, 1.0f, 4, 1.0, "cosine warmup"), check_lr(&cosw, 1.0f, 9, 0.1f + (1 - 0.1f) * 0.5, "cosine warmup");
  k_schedule one = {.kind = K_SCHED_ONECYCLE, .total = 11, .pct_start = 0.5f, .div_factor = 10, .final_div_factor = 100};
  /* phase 1 ends at step 4.5 (0.5 * 11 - 1), phase 2 at step 10: 0.1 -> 1 -> 0.001 */
  check_lr(&one, 1.0f, 0, 0.1, "onecycle");
  check_lr(&one, 1.0f, 2, 1.0 + (0.1 - 1.0) / 2 * (cos(pi * 2 / 4.5) + 1), "onecycle");
  check_lr(&one, 1.0f, 10, 0.001, "onecycle"), check_lr(&one, 1.0f, 50, 0.001, "onecycle past total");
  check_lr(&one, 1.0f, 7, 0.001 + (1.0 - 0.001) / 2 * (cos(pi * 2.5 / 5.5) + 1), "onecycle");
}

int main(void) {
  check_sgd(0, 0, 0);
  check_sgd(0.9f, 0, 0);
  check_sgd(0.9f, 1e-2f, 0);
  check_sgd(0, 0.1f, 0);
  check_sgd(0.9f, 0, 1);
  check_sgd(0.9f, 1e-2f, 1);
  check_adam(0, 0);
  check_adam(1e-2f, 0);
  check_adam(1e-2f, 1);
  check_adam(0.3f, 1);
  check_adam_first_step();
  check_adamw_decay();
  check_schedules();
  return kt_finish("test_optim");
}
