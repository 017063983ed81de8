/* k_scalar.h — the one definition of every elementwise function, forward and gradient.
 * Three consumers share this text: the reference kernels (k_elemwise.c) call it, the CPU
 * code generator compiles it to LLVM bitcode and inlines it into fused loops, and the GPU
 * generator pastes it into NVRTC source as device functions. So it must stay portable C:
 * only `static inline float` functions of floats (and one int selector), only <math.h>
 * float functions, no static data, no variadics, no asserts, no other libc.
 *
 * Naming: unary k_sf_<op>(x[, p1, p2]) and k_sf_<op>_grad(og, x, y[, p1, p2]) where x is the
 * input and y the output (a caller passes 0 for whichever the op's backward does not
 * declare); binary k_sf_<op>(a, b), k_sf_<op>_grad_a(og, a, b, y), k_sf_<op>_grad_b(...).
 * Gradients follow PyTorch's autograd conventions at kinks and ties. */
#ifndef KILN_K_SCALAR_H
#define KILN_K_SCALAR_H

#include <math.h>

/* ---- unary ---- */
static inline float k_sf_neg(float x) { return -x; }
static inline float k_sf_neg_grad(float og, float x, float y) { return -og; }

/* torch: d|x| = sign(x), 0 at 0. */
static inline float k_sf_sign(float x) { return (float)((x > 0.0f) - (x < 0.0f)); }
static inline float k_sf_sign_grad(float og, float x, float y) { return 0.0f; }
static inline float k_sf_abs(float x) { return fabsf(x); }
static inline float k_sf_abs_grad(float og, float x, float y) { return og * k_sf_sign(x); }

static inline float k_sf_exp(float x) { return expf(x); }
static inline float k_sf_exp_grad(float og, float x, float y) { return og * y; }
static inline float k_sf_log(float x) { return logf(x); }
static inline float k_sf_log_grad(float og, float x, float y) { return og / x; }
static inline float k_sf_sqrt(float x) { return sqrtf(x); }
static inline float k_sf_sqrt_grad(float og, float x, float y) { return og / (2.0f * y); }
static inline float k_sf_rsqrt(float x) { return 1.0f / sqrtf(x); }
static inline float k_sf_rsqrt_grad(float og, float x, float y) { return -0.5f * og * y * y * y; }
static inline float k_sf_square(float x) { return x * x; }
static inline float k_sf_square_grad(float og, float x, float y) { return 2.0f * og * x; }
static inline float k_sf_sin(float x) { return sinf(x); }
static inline float k_sf_sin_grad(float og, float x, float y) { return og * cosf(x); }
static inline float k_sf_cos(float x) { return cosf(x); }
static inline float k_sf_cos_grad(float og, float x, float y) { return -og * sinf(x); }
static inline float k_sf_reciprocal(float x) { return 1.0f / x; }
static inline float k_sf_reciprocal_grad(float og, float x, float y) { return -og * y * y; }

/* relu's gradient reads the output so that x can be freed (and relu run in place). */
static inline float k_sf_relu(float x) { return x > 0.0f ? x : 0.0f; }
static inline float k_sf_relu_grad(float og, float x, float y) { return y > 0.0f ? og : 0.0f; }

/* Split by sign so that exp never overflows. */
static inline float k_sf_sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  float e = expf(x);
  return e / (1.0f + e);
}
static inline float k_sf_sigmoid_grad(float og, float x, float y) { return og * y * (1.0f - y); }
static inline float k_sf_tanh(float x) { return tanhf(x); }
static inline float k_sf_tanh_grad(float og, float x, float y) { return og * (1.0f - y * y); }

/* F.softplus (beta 1, threshold 20): linear above the threshold, as torch is. */
static inline float k_sf_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
static inline float k_sf_softplus_grad(float og, float x, float y) {
  return x > 20.0f ? og : og * k_sf_sigmoid(x);
}

/* F.gelu, exact erf form: x * Phi(x). */
static inline float k_sf_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
static inline float k_sf_gelu_grad(float og, float x, float y) {
  float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
  float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
  return og * (cdf + x * pdf);
}

/* torch: slope applies for x <= 0 in the gradient. */
static inline float k_sf_leaky_relu(float x, float slope) { return x > 0.0f ? x : x * slope; }
static inline float k_sf_leaky_relu_grad(float og, float x, float y, float slope) {
  return x > 0.0f ? og : og * slope;
}

/* torch.clamp: min applied before max; gradient passes on the closed interval. */
static inline float k_sf_clip(float x, float a_min, float a_max) {
  float v = x < a_min ? a_min : x;
  return v > a_max ? a_max : v;
}
static inline float k_sf_clip_grad(float og, float x, float y, float a_min, float a_max) {
  return (x >= a_min && x <= a_max) ? og : 0.0f;
}

/* smooth L1 with beta = 1/sigma^2: quadratic inside |x| < beta, linear outside. */
static inline float k_sf_smooth_l1(float x, float sigma) {
  float beta = 1.0f / (sigma * sigma), ax = fabsf(x);
  return ax < beta ? 0.5f * x * x / beta : ax - 0.5f * beta;
}
static inline float k_sf_smooth_l1_grad(float og, float x, float y, float sigma) {
  float beta = 1.0f / (sigma * sigma);
  return fabsf(x) < beta ? og * x / beta : og * k_sf_sign(x);
}

/* MXNet softrelu is softplus; its gradient from the output y is 1 - exp(-y) = sigmoid(x). */
static inline float k_sf_softrelu(float x) { return k_sf_softplus(x); }
static inline float k_sf_softrelu_grad(float og, float x, float y) { return -og * expm1f(-y); }

/* activation selects by act_type (K_ACT_RELU=0, SIGMOID, TANH, SOFTRELU); its backward
 * declares only the output, so every branch's gradient reads y. */
static inline float k_sf_activation(float x, int act_type) {
  switch (act_type) {
  case 0: return k_sf_relu(x);
  case 1: return k_sf_sigmoid(x);
  case 2: return k_sf_tanh(x);
  default: return k_sf_softrelu(x);
  }
}
static inline float k_sf_activation_grad(float og, float x, float y, int act_type) {
  switch (act_type) {
  case 0: return k_sf_relu_grad(og, x, y);
  case 1: return k_sf_sigmoid_grad(og, x, y);
  case 2: return k_sf_tanh_grad(og, x, y);
  default: return k_sf_softrelu_grad(og, x, y);
  }
}

/* ---- binary ---- */
static inline float k_sf_add(float a, float b) { return a + b; }
static inline float k_sf_add_grad_a(float og, float a, float b, float y) { return og; }
static inline float k_sf_add_grad_b(float og, float a, float b, float y) { return og; }
static inline float k_sf_sub(float a, float b) { return a - b; }
static inline float k_sf_sub_grad_a(float og, float a, float b, float y) { return og; }
static inline float k_sf_sub_grad_b(float og, float a, float b, float y) { return -og; }
static inline float k_sf_mul(float a, float b) { return a * b; }
static inline float k_sf_mul_grad_a(float og, float a, float b, float y) { return og * b; }
static inline float k_sf_mul_grad_b(float og, float a, float b, float y) { return og * a; }
static inline float k_sf_div(float a, float b) { return a / b; }
static inline float k_sf_div_grad_a(float og, float a, float b, float y) { return og / b; }
static inline float k_sf_div_grad_b(float og, float a, float b, float y) { return -og * a / (b * b); }

/* torch masks pow's gradients: d/da is 0 where b == 0, d/db is 0 where a == 0 and b >= 0. */
static inline float k_sf_pow(float a, float b) { return powf(a, b); }
static inline float k_sf_pow_grad_a(float og, float a, float b, float y) {
  return b == 0.0f ? 0.0f : og * b * powf(a, b - 1.0f);
}
static inline float k_sf_pow_grad_b(float og, float a, float b, float y) {
  return (a == 0.0f && b >= 0.0f) ? 0.0f : og * y * logf(a);
}

/* torch.maximum/minimum propagate NaN (fmaxf would not) and split the gradient at ties;
 * the masks mirror torch's derivative formulas, so a NaN operand passes og to both. */
static inline float k_sf_maximum(float a, float b) { return (a > b || a != a) ? a : b; }
static inline float k_sf_maximum_grad_a(float og, float a, float b, float y) {
  return a == b ? 0.5f * og : (a < b ? 0.0f : og);
}
static inline float k_sf_maximum_grad_b(float og, float a, float b, float y) {
  return a == b ? 0.5f * og : (a > b ? 0.0f : og);
}
static inline float k_sf_minimum(float a, float b) { return (a < b || a != a) ? a : b; }
static inline float k_sf_minimum_grad_a(float og, float a, float b, float y) {
  return a == b ? 0.5f * og : (a > b ? 0.0f : og);
}
static inline float k_sf_minimum_grad_b(float og, float a, float b, float y) {
  return a == b ? 0.5f * og : (a < b ? 0.0f : og);
}

#endif
