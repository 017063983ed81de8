/* k_optim.c — in-place parameter updates that follow torch.optim.SGD and torch.optim.Adam
 * (PyTorch 1.13 single-tensor path) operation by operation, so a Kiln model and its PyTorch
 * twin stay within float rounding of each other over many steps. */
#include "kernels.h"

#include <math.h>

/* SGD: d = g + wd*w; with momentum, buf = momentum*buf + d (torch clones d into the buffer on
 * the first step, which is the same as starting the buffer at zero since dampening is 0);
 * w -= lr * d. mom may be NULL when momentum is 0. */
void k_sgd_update(float *w, const float *g, float *mom, int64_t n, float lr, const k_sgd_param *p) {
  for (int64_t i = 0; i < n; i++) {
    float d = p->wd != 0.0f ? g[i] + p->wd * w[i] : g[i];
    if (p->momentum != 0.0f) {
      mom[i] = p->momentum * mom[i] + d;
      d = mom[i];
    }
    w[i] -= lr * d;
  }
}

/* Adam: d = g + wd*w; m = b1*m + (1-b1)*d; v = b2*v + (1-b2)*d*d;
 * w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps). The bias corrections are computed in
 * double, as torch computes them in Python floats, then rounded once. */
void k_adam_update(float *w, const float *g, float *m, float *v, int64_t n, float lr,
                   const k_adam_param *p, int64_t step) {
  double t = (double)(step < 1 ? 1 : step);
  float step_size = (float)((double)lr / (1.0 - pow((double)p->beta1, t)));
  float bc2_sqrt = (float)sqrt(1.0 - pow((double)p->beta2, t));
  float a1 = (float)(1.0 - (double)p->beta1), a2 = (float)(1.0 - (double)p->beta2);
  for (int64_t i = 0; i < n; i++) {
    float d = p->wd != 0.0f ? g[i] + p->wd * w[i] : g[i];
    m[i] = m[i] * p->beta1 + a1 * d;
    v[i] = v[i] * p->beta2 + a2 * d * d;
    float denom = sqrtf(v[i]) / bc2_sqrt + p->eps;
    w[i] -= step_size * (m[i] / denom);
  }
}
