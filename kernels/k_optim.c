/* k_optim.c — in-place parameter updates that follow torch.optim.SGD, Adam and AdamW
 * (PyTorch 1.13 single-tensor path) operation by operation, so a Kiln model and its PyTorch
 * twin stay within float rounding of each other over many steps. Elementwise, so large
 * tensors are split over threads (k_parallel_for) with the same bits. Also the learning-rate
 * schedules of torch.optim.lr_scheduler (k_sched_lr). */
#include "kernels.h"
#include "k_vec.h"

#include <math.h>

/* Elements per chunk: below this a second thread is not worth waking. */
#define K_OPTIM_GRAIN 32768

typedef struct {
  float *w, *mom, *m, *v;
  const float *g;
  float lr, step_size, bc2_sqrt, a1, a2, decay;   /* decay: AdamW's 1 - lr * wd, else 1 */
  const k_sgd_param *sgd;
  const k_adam_param *adam;
} k_optim_job;

/* SGD: d = g + wd*w; with momentum, buf = momentum*buf + d (torch clones d into the buffer on
 * the first step, which is the same as starting the buffer at zero since dampening is 0) and
 * d = buf, or with Nesterov d = d + momentum*buf; w -= lr * d. mom may be NULL when momentum
 * is 0. */
static inline void k_sgd_loop(const k_optim_job *j, int64_t lo, int64_t hi, int has_wd, int has_mom, int nesterov) {
  float *restrict w = j->w, *restrict mom = j->mom;
  const float *restrict g = j->g;
  float lr = j->lr, wd = j->sgd->wd, momentum = j->sgd->momentum;
  for (int64_t i = lo; i < hi; i++) {
    float d = has_wd ? g[i] + wd * w[i] : g[i];
    if (has_mom) {
      mom[i] = momentum * mom[i] + d;
      d = nesterov ? d + momentum * mom[i] : mom[i];
    }
    w[i] -= lr * d;
  }
}

/* As Adam's: distinct buffers, parameters read once and the branches taken outside the loop,
 * so each of the four loops vectorises (it was scalar, with both tests per element: 35% of
 * the MLP's train step once the GEMMs got fast). Same operations in the same order. */
K_VEC_TARGETS static void k_sgd_range(void *ctx, int64_t lo, int64_t hi) {
  const k_optim_job *j = ctx;
  int has_wd = j->sgd->wd != 0.0f, has_mom = j->sgd->momentum != 0.0f;
  if (has_mom && j->sgd->nesterov) has_wd ? k_sgd_loop(j, lo, hi, 1, 1, 1) : k_sgd_loop(j, lo, hi, 0, 1, 1);
  else if (has_wd && has_mom) k_sgd_loop(j, lo, hi, 1, 1, 0);
  else if (has_wd) k_sgd_loop(j, lo, hi, 1, 0, 0);
  else if (has_mom) k_sgd_loop(j, lo, hi, 0, 1, 0);
  else k_sgd_loop(j, lo, hi, 0, 0, 0);
}

void k_sgd_update(float *w, const float *g, float *mom, int64_t n, float lr, const k_sgd_param *p) {
  k_optim_job j = {.w = w, .mom = mom, .g = g, .lr = lr, .sgd = p};
  k_parallel_for(n, K_OPTIM_GRAIN, k_sgd_range, &j);
}

/* Adam: d = g + wd*w; m = b1*m + (1-b1)*d; v = b2*v + (1-b2)*d*d;
 * w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps). AdamW: w *= 1 - lr*wd first, and d = g.
 * The bias corrections (and AdamW's factor) are computed in double, as torch computes them in
 * Python floats, then rounded once. */
static inline void k_adam_loop(const k_optim_job *j, int64_t lo, int64_t hi, int has_wd, int decoupled) {
  const k_adam_param *p = j->adam;
  float *restrict w = j->w, *restrict m = j->m, *restrict v = j->v;
  const float *restrict g = j->g;
  float step_size = j->step_size, bc2_sqrt = j->bc2_sqrt, a1 = j->a1, a2 = j->a2, decay = j->decay;
  float wd = p->wd, beta1 = p->beta1, beta2 = p->beta2, eps = p->eps;
  for (int64_t i = lo; i < hi; i++) {
    if (decoupled) w[i] *= decay;
    float d = has_wd ? g[i] + wd * w[i] : g[i];
    m[i] = m[i] * beta1 + a1 * d;
    v[i] = v[i] * beta2 + a2 * d * d;
    float denom = sqrtf(v[i]) / bc2_sqrt + eps;
    w[i] -= step_size * (m[i] / denom);
  }
}

/* The weight, its gradient and the two moments are four distinct buffers (restrict), and the
 * parameters are read once, so the loop vectorises (AVX-512 through K_VEC_TARGETS: a sqrt and
 * two divisions an element, each correctly rounded, so every width gives the same bits). */
K_VEC_TARGETS static void k_adam_range(void *ctx, int64_t lo, int64_t hi) {
  const k_optim_job *j = ctx;
  if (j->decay != 1.0f) k_adam_loop(j, lo, hi, 0, 1);
  else if (j->adam->wd != 0.0f) k_adam_loop(j, lo, hi, 1, 0);
  else k_adam_loop(j, lo, hi, 0, 0);
}

void k_adam_update(float *w, const float *g, float *m, float *v, int64_t n, float lr,
                   const k_adam_param *p, int64_t step, int decoupled) {
  double t = (double)(step < 1 ? 1 : step);
  k_optim_job j = {.w = w, .m = m, .v = v, .g = g, .adam = p, .decay = 1.0f};
  k_adam_param coupled = *p;
  if (decoupled) j.decay = (float)(1.0 - (double)lr * (double)p->wd), coupled.wd = 0, j.adam = &coupled;
  j.step_size = (float)((double)lr / (1.0 - pow((double)p->beta1, t)));
  j.bc2_sqrt = (float)sqrt(1.0 - pow((double)p->beta2, t));
  j.a1 = (float)(1.0 - (double)p->beta1);
  j.a2 = (float)(1.0 - (double)p->beta2);
  k_parallel_for(n, K_OPTIM_GRAIN, k_adam_range, &j);
}

#define K_SCHED_PI 3.14159265358979323846   /* math.pi: M_PI is not ISO C */

/* OneCycleLR's _annealing_cos: from `start` at pct 0 to `end` at pct 1. */
static double k_sched_cos(double start, double end, double pct) { return end + (start - end) / 2.0 * (cos(K_SCHED_PI * pct) + 1.0); }

/* The closed forms of torch 1.13's schedulers (_get_closed_form_lr where it has one):
 * StepLR base * gamma^(t // step_size); MultiStepLR base * gamma^(milestones <= t);
 * ExponentialLR base * gamma^t; cosine: SequentialLR of LinearLR(start_factor=1/warmup,
 * total_iters=warmup-1) — base * (t+1)/warmup — then CosineAnnealingLR(T_max=total-warmup,
 * eta_min=min_lr); OneCycleLR(max_lr=base, total_steps=total, pct_start, div_factor,
 * final_div_factor, anneal_strategy='cos', cycle_momentum=False, two phases), its lr held at
 * the end once the steps run past total. */
float k_sched_lr(const k_schedule *s, float base, int64_t t) {
  double b = base, lr = b;
  if (t < 0) t = 0;   /* set_random moved the step count back past the lr's start */
  switch ((k_sched_kind)s->kind) {
  case K_SCHED_STEP: lr = b * pow((double)s->gamma, (double)(t / (s->step_size > 0 ? s->step_size : 1))); break;
  case K_SCHED_MULTISTEP: {
    int k = 0, n = s->milestones.n < K_MAX_RANK ? s->milestones.n : K_MAX_RANK;   /* a descriptor is not trusted */
    while (k < n && s->milestones.v[k] <= t) k++;
    lr = b * pow((double)s->gamma, (double)k);
    break;
  }
  case K_SCHED_EXPONENTIAL: lr = b * pow((double)s->gamma, (double)t); break;
  case K_SCHED_COSINE: {
    /* in double: a descriptor's int64 fields are not trusted not to overflow */
    double w = (double)s->warmup, span = (double)s->total - w, min = s->min_lr;
    if (t < s->warmup) lr = b * (double)(t + 1) / w;
    else lr = min + (b - min) * (1.0 + cos(K_SCHED_PI * ((double)t - w) / (span > 0 ? span : 1.0))) / 2.0;
    break;
  }
  case K_SCHED_ONECYCLE: {
    double initial = b / (double)s->div_factor, min = initial / (double)s->final_div_factor;
    double end1 = (double)s->pct_start * (double)s->total - 1.0, end2 = (double)s->total - 1.0, x = (double)t;
    if (x <= end1) lr = k_sched_cos(initial, b, end1 > 0 ? x / end1 : 1.0);
    else lr = k_sched_cos(b, min, x >= end2 ? 1.0 : (x - end1) / (end2 - end1));
    break;
  }
  default: break;
  }
  return (float)lr;
}

float k_clip_grad_norm(float *const *g, const int64_t *n, int count, float max_norm) {
  double total = 0;
  for (int k = 0; k < count; k++) {
    double sq = 0;
    for (int64_t i = 0; i < n[k]; i++) sq += (double)g[k][i] * g[k][i];
    float norm = (float)sqrt(sq);   /* torch's per-tensor norm is a float32 tensor */
    total += (double)norm * norm;
  }
  float norm = (float)sqrt(total), coef = max_norm / (norm + 1e-6f);
  if (coef < 1.0f)
    for (int k = 0; k < count; k++)
      for (int64_t i = 0; i < n[k]; i++) g[k][i] *= coef;
  return norm;
}
