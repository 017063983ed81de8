/* test_vmath.c — accuracy of k_scalar.h's vector math (k_vm_*) against libm in double: the
 * largest error in ulp of each function over special values and a strided sweep of all 2^32
 * float bit patterns, failing when one exceeds the bound docs/kernels.md states for it.
 * `kernels_test_vmath --stride 1 [--only NAME]` runs the exhaustive sweep and prints the table. */
#include "kt_harness.h"

#include "k_scalar.h"
#include "k_vm512.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Error of got against the exact want, in units of the float spacing at want (denormal
 * spacing below FLT_MIN). NaN must meet NaN, inf must meet want's rounding to inf, and an
 * exact zero must keep its sign. */
static double vm_ulps(float got, double want) {
  if (isnan(want) || isnan(got)) return isnan(want) && isnan(got) ? 0 : INFINITY;
  float wf = (float)want;
  if (isinf(got) || isinf(wf)) return got == wf ? 0 : INFINITY;
  if (want == 0 && got == 0) return !signbit(want) == !signbit(got) ? 0 : INFINITY;
  int e;
  frexp(want, &e);
  double ulp = ldexp(1.0, (e - 1 < -126 ? -126 : e - 1) - 23);
  return fabs((double)got - want) / ulp;
}

static float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* ---- the functions and their references (static inline functions have addresses: the
 * tables take k_vm_* and k_sf_* directly) ---- */
static double r_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double r_softplus(double x) { return x > 20.0 ? x : log1p(exp(x)); }

/* gelu's error is measured relative to |x| (in ulp of x/2) rather than to the result, tiny
 * for x << 0: torch's 1 + erf(x/sqrt2) cancels there, and ours (x times the normal tail)
 * loses relative accuracy as e^(-x^2/2) feels the rounding of x^2. The reference is
 * x Phi(x) through erfc, exact in double everywhere. */
static double r_gelu(double x) { return 0.5 * x * erfc(-x * 0.70710678118654752); }

typedef struct {
  const char *name;
  float (*f)(float);
  double (*ref)(double);
  double bound;   /* max ulp allowed; must match docs/kernels.md */
  float limit;    /* accurate for |x| < limit; beyond only |f| <= 1 is checked */
  int rel_x;      /* error in ulp of x/2 instead of ulp of the result */
} vm_fn;

static const vm_fn VM_FNS[] = {
    {"exp", k_vm_exp, exp, 1.05, INFINITY, 0},
    {"expm1", k_vm_expm1, expm1, 2, INFINITY, 0},
    {"log", k_vm_log, log, 1, INFINITY, 0},
    {"tanh", k_vm_tanh, tanh, 2, INFINITY, 0},
    {"sigmoid", k_vm_sigmoid, r_sigmoid, 3, INFINITY, 0},
    {"softplus", k_sf_softplus, r_softplus, 3, INFINITY, 0},
    {"erf", k_vm_erf, erf, 2, INFINITY, 0},
    {"gelu", k_sf_gelu, r_gelu, 3.5, INFINITY, 1},
    {"sin", k_vm_sin, sin, 1, K_VM_TRIG_MAX, 0},
    {"cos", k_vm_cos, cos, 1, K_VM_TRIG_MAX, 0},
};

typedef struct {
  double worst;
  float at;
} vm_result;

static void vm_one(const vm_fn *fn, float x, vm_result *res) {
  float y = fn->f(x);
  double e;
  if (!(fabsf(x) < fn->limit) && !isnan(x) && !isinf(x)) {
    e = fabsf(y) <= 1.0f ? 0 : INFINITY;
  } else if (fn->rel_x && isfinite(x) && x != 0) {
    double want = fn->ref(x);
    int ex;
    frexp(0.5 * x, &ex);
    e = isnan(y) ? INFINITY : fabs(y - want) / ldexp(1.0, (ex - 1 < -126 ? -126 : ex - 1) - 23);
  } else {
    e = vm_ulps(y, fn->ref(x));
  }
  if (e > res->worst || (isnan(e) && !isnan(res->worst))) res->worst = e, res->at = x;
}

/* Inputs every function must get right: zeros, infinities, NaN, denormals, the edges of
 * overflow and underflow, the points where the approximations switch formulas. */
static const float VM_SPECIAL[] = {
    0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, -1e-45f, 1e-40f, -1e-40f,
    FLT_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX, 1.0f, -1.0f, 0.5f, 2.0f, 88.72283f, 88.72284f,
    88.8f, 89.0f, -87.33655f, -103.0f, -103.97208f, -104.0f, -150.0f, 0.55f, -0.55f,
    0.549999f, 0.9f, -0.9f, 0.89999f, 3.92f, 3.93f, 9.0f, 20.0f, 20.0001f, 0.34657359f,
    -0.34657359f, 1.41421356f, 0.70710678f, 1e-10f, 3.14159265f, 1.57079633f, 8191.9f,
    1e30f, -1e30f};

static vm_result vm_sweep(const vm_fn *fn, uint64_t stride) {
  vm_result res = {0, 0};
  for (size_t i = 0; i < sizeof VM_SPECIAL / sizeof *VM_SPECIAL; i++) vm_one(fn, VM_SPECIAL[i], &res);
  for (uint64_t u = 0; u < (1ull << 32); u += stride) vm_one(fn, bits_float((uint32_t)u), &res);
  return res;
}

/* ---- pow: two arguments, so families instead of all pairs ---- */
static const float POW_Y[] = {0.5f, 2.0f, 3.0f, -1.0f, -2.0f, -2.5f, 0.33333334f, 10.0f, -7.0f,
                              1e-3f, 40.0f, 127.5f, -149.0f, 1e6f, 16777217.0f, 8388609.0f};
static const float POW_X[] = {2.0f, 0.5f, -2.0f, 10.0f, 2.7182817f, 1.0001f, 0.9999f, -1.0f, -0.75f, 1e-30f};

static vm_result pow_sweep(uint64_t stride) {
  vm_result res = {0, 0};
  for (uint64_t u = 0; u < (1ull << 32); u += stride * 16) {
    float v = bits_float((uint32_t)u);
    for (size_t j = 0; j < sizeof POW_Y / sizeof *POW_Y; j++) {
      double e = vm_ulps(k_vm_pow(v, POW_Y[j]), pow(v, POW_Y[j]));
      if (e > res.worst) res.worst = e, res.at = v;
    }
    for (size_t j = 0; j < sizeof POW_X / sizeof *POW_X; j++) {
      double e = vm_ulps(k_vm_pow(POW_X[j], v), pow(POW_X[j], v));
      if (e > res.worst) res.worst = e, res.at = v;
    }
  }
  for (size_t i = 0; i < sizeof VM_SPECIAL / sizeof *VM_SPECIAL; i++)
    for (size_t j = 0; j < sizeof VM_SPECIAL / sizeof *VM_SPECIAL; j++) {
      float a = VM_SPECIAL[i], b = VM_SPECIAL[j];
      double e = vm_ulps(k_vm_pow(a, b), pow(a, b));
      if (e > res.worst) res.worst = e, res.at = a;
      KT_CHECK(e <= 1, "pow(%a, %a) = %a, libm %a", a, b, k_vm_pow(a, b), (float)pow(a, b));
    }
  return res;
}

/* A few results spelled out, so a reader sees what "special values right" means. */
static void test_specials(void) {
  KT_CHECK(k_vm_exp(88.8f) == INFINITY && k_vm_exp(-104.0f) == 0.0f, "exp overflow/underflow edges");
  KT_CHECK(k_vm_exp(-INFINITY) == 0.0f && k_vm_exp(INFINITY) == INFINITY, "exp(±inf)");
  KT_CHECK(k_vm_exp(-100.0f) > 0.0f && k_vm_exp(-100.0f) < FLT_MIN, "exp(-100) is a denormal");
  KT_CHECK(k_vm_log(0.0f) == -INFINITY && k_vm_log(-0.0f) == -INFINITY, "log(±0) = -inf");
  KT_CHECK(isnan(k_vm_log(-1.0f)) && isnan(k_vm_log(-INFINITY)), "log of a negative is NaN");
  KT_CHECK(k_vm_log(1e-45f) < -103.0f && k_vm_log(1e-45f) > -104.0f, "log of the smallest denormal");
  KT_CHECK(k_vm_tanh(INFINITY) == 1.0f && k_vm_tanh(-INFINITY) == -1.0f, "tanh(±inf) = ±1");
  KT_CHECK(signbit(k_vm_tanh(-0.0f)) && signbit(k_vm_sin(-0.0f)) && signbit(k_vm_erf(-0.0f)), "odd functions keep -0");
  KT_CHECK(k_vm_tanh(1e-40f) == 1e-40f && k_vm_erf(-INFINITY) == -1.0f, "tanh of a denormal; erf(-inf)");
  KT_CHECK(k_vm_sigmoid(-INFINITY) == 0.0f && k_vm_sigmoid(INFINITY) == 1.0f, "sigmoid(±inf)");
  KT_CHECK(isnan(k_vm_sin(INFINITY)) && isnan(k_vm_cos(-INFINITY)), "sin/cos of inf are NaN");
  KT_CHECK(k_vm_pow(-2.0f, 3.0f) == -8.0f && isnan(k_vm_pow(-2.0f, 0.5f)), "pow of a negative base");
  KT_CHECK(k_vm_pow(NAN, 0.0f) == 1.0f && k_vm_pow(1.0f, NAN) == 1.0f, "pow's NaN exceptions");
  KT_CHECK(k_vm_pow(-0.0f, -3.0f) == -INFINITY && k_vm_pow(-1.0f, INFINITY) == 1.0f, "pow(-0, -3), pow(-1, inf)");
  float fns[] = {k_vm_exp(NAN), k_vm_log(NAN), k_vm_tanh(NAN), k_vm_sigmoid(NAN), k_sf_softplus(NAN),
                 k_vm_erf(NAN), k_sf_gelu(NAN), k_vm_sin(NAN), k_vm_cos(NAN), k_vm_expm1(NAN)};
  int nan_kept = 0;
  for (size_t i = 0; i < sizeof fns / sizeof *fns; i++) nan_kept += isnan(fns[i]) != 0;
  KT_CHECK(nan_kept == (int)(sizeof fns / sizeof *fns), "NaN stays NaN (%d of %zu)", nan_kept, sizeof fns / sizeof *fns);
}

/* ---- the kernels give the scalar definition's bits ----
 * k_elemwise.c runs these functions in vector loops (gcc, SSE2 or an AVX2/AVX-512 clone);
 * this file calls them one at a time. Any difference in rounding (an FMA, a reordering)
 * between the two shows up as a bit difference. */
typedef int (*vm_kernel)(const k_call *);
typedef struct {
  const char *name;
  vm_kernel fwd, bwd;
  float (*f)(float);
  float (*grad)(float, float, float);
} vm_op;


static const vm_op VM_OPS[] = {
    {"exp", k_exp_forward, k_exp_backward, k_sf_exp, k_sf_exp_grad},
    {"log", k_log_forward, k_log_backward, k_sf_log, k_sf_log_grad},
    {"tanh", k_tanh_forward, k_tanh_backward, k_sf_tanh, k_sf_tanh_grad},
    {"sigmoid", k_sigmoid_forward, k_sigmoid_backward, k_sf_sigmoid, k_sf_sigmoid_grad},
    {"softplus", k_softplus_forward, k_softplus_backward, k_sf_softplus, k_sf_softplus_grad},
    {"gelu", k_gelu_forward, k_gelu_backward, k_sf_gelu, k_sf_gelu_grad},
    {"sin", k_sin_forward, k_sin_backward, k_sf_sin, k_sf_sin_grad},
    {"cos", k_cos_forward, k_cos_backward, k_sf_cos, k_sf_cos_grad},
    {"erf", k_erf_forward, k_erf_backward, k_sf_erf, k_sf_erf_grad},
    {"silu", k_silu_forward, k_silu_backward, k_sf_silu, k_sf_silu_grad},
    {"hard_swish", k_hard_swish_forward, k_hard_swish_backward, k_sf_hard_swish, k_sf_hard_swish_grad},
};

static int same_bits(float a, float b) { return (a != a && b != b) || memcmp(&a, &b, sizeof a) == 0; }

static int vm_run(vm_kernel k, k_tensor *in, int nin, float *out, int64_t n) {
  k_tensor o = {.data = out, .shape = {.rank = 1, .d = {n}}};
  k_req req = kWriteTo;
  k_call c = {.in = in, .nin = nin, .out = &o, .nout = 1, .req = &req};
  return k(&c);
}

static void test_kernels_match(void) {
  enum { N = 1 << 20 };
  float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *og = malloc(N * sizeof *og),
        *g = malloc(N * sizeof *g);
  for (int64_t i = 0; i < N; i++) x[i] = bits_float((uint32_t)(i * 4099u)), og[i] = 1.0f - (float)(i % 7) * 0.25f;
  k_shape s = {.rank = 1, .d = {N}};
  for (size_t j = 0; j < sizeof VM_OPS / sizeof *VM_OPS; j++) {
    const vm_op *op = &VM_OPS[j];
    k_tensor fin[1] = {{.data = x, .shape = s}};
    int rc = vm_run(op->fwd, fin, 1, y, N);
    k_tensor bin[3] = {{.data = og, .shape = s}, {.data = x, .shape = s}, {.data = y, .shape = s}};
    rc |= vm_run(op->bwd, bin, 3, g, N);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < N; i++) {
      int ok = same_bits(y[i], op->f(x[i])) && same_bits(g[i], op->grad(og[i], x[i], y[i]));
      if (!ok && first < 0) first = i;
      bad += !ok;
    }
    KT_CHECK(rc == 0 && bad == 0, "%s kernels: %lld of %d differ from k_sf_ (first at x = %a)", op->name,
             (long long)bad, N, first < 0 ? 0.0f : x[first]);
  }
  free(x), free(y), free(og), free(g);
}

/* The unary kernels on short runs (each length up to 40: the vector loops' tails, masked in
 * k_vm512.h's) written and added (kAddTo: y + f(x), in that order), against k_sf_. */
static void test_kernels_tails(void) {
  float x[40], y[40], base[40];
  for (int i = 0; i < 40; i++) x[i] = (float)(i - 20) * 0.37f, base[i] = 0.25f * (float)i;
  for (size_t j = 0; j < sizeof VM_OPS / sizeof *VM_OPS; j++)
    for (int n = 1; n <= 40; n++)
      for (int add = 0; add < 2; add++) {
        const vm_op *op = &VM_OPS[j];
        memcpy(y, base, sizeof y);
        k_tensor in[1] = {{.data = x, .shape = {.rank = 1, .d = {n}}}}, o = {.data = y, .shape = {.rank = 1, .d = {n}}};
        k_req req = add ? kAddTo : kWriteTo;
        k_call c = {.in = in, .nin = 1, .out = &o, .nout = 1, .req = &req};
        int rc = op->fwd(&c), bad = 0;
        for (int i = 0; i < 40; i++) bad += !same_bits(y[i], i >= n ? base[i] : add ? base[i] + op->f(x[i]) : op->f(x[i]));
        KT_CHECK(rc == 0 && bad == 0, "%s forward, %d elements, %s: %d differ", op->name, n, add ? "added" : "written", bad);
      }
}

#if K_VM512
/* k_vm512_exp_nonpos on 16 copies of t, lane 0 out. */
static __attribute__((target("avx512f"), noinline)) float vm512_exp(float t) {
  float o[16];
  _mm512_storeu_ps(o, k_vm512_exp_nonpos(_mm512_set1_ps(t)));
  return o[0];
}
#endif

/* k_vm512.h's exponential (softmax's, on x - max) against k_vm_exp, bit for bit, on every
 * stride-th non-positive bit pattern (-0 to -inf and the negative NaNs), +0 and a NaN. This
 * file is compiled without FMA, so k_vm_exp here rounds every step as the kernels do. */
static void test_exp512(uint64_t stride) {
#if K_VM512
  if (!k_vm512_have()) {
    printf("exp512: skipped, the CPU has no AVX-512F\n");
    return;
  }
  int64_t bad = 0, n = 0;
  float first = 0;
  for (uint64_t u = 0x80000000u; u < (1ull << 32) + 2; u += u < (1ull << 32) ? stride : 1, n++) {
    float t = u < (1ull << 32) ? bits_float((uint32_t)u) : u == (1ull << 32) ? 0.0f : NAN;
    float want = k_vm_exp(t), got = vm512_exp(t);
    if (memcmp(&want, &got, sizeof want) != 0 && bad++ == 0) first = t;
  }
  KT_CHECK(bad == 0, "k_vm512_exp_nonpos: %lld of %lld differ from k_vm_exp (first at t = %a)", (long long)bad,
           (long long)n, first);
#else
  (void)stride;
  printf("exp512: skipped, not an x86-64 gcc build\n");
#endif
}

int main(int argc, char **argv) {
#ifdef KILN_SANITIZE
  uint64_t stride = 3889;     /* the sanitizer build is unoptimised: 1.1M inputs per function */
#else
  uint64_t stride = 389;      /* every 389th bit pattern: 11M inputs per function */
#endif
  const char *only = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--stride") == 0) stride = strtoull(argv[i + 1], NULL, 10);
    if (strcmp(argv[i], "--only") == 0) only = argv[i + 1];
  }
  if (stride == 0) stride = 1;
  test_specials();
  test_kernels_match();
  test_kernels_tails();
  test_exp512(stride);
  printf("%-9s %10s %6s  %s\n", "function", "max ulp", "bound", "at x");
  for (size_t i = 0; i < sizeof VM_FNS / sizeof *VM_FNS; i++) {
    const vm_fn *fn = &VM_FNS[i];
    if (only && strcmp(only, fn->name) != 0) continue;
    vm_result r = vm_sweep(fn, stride);
    printf("%-9s %10.3f %6.2f  %a\n", fn->name, r.worst, fn->bound, r.at);
    KT_CHECK(r.worst <= fn->bound, "%s: %.3f ulp at %a (bound %.1f)", fn->name, r.worst, r.at, fn->bound);
  }
  if (!only || strcmp(only, "pow") == 0) {
    vm_result r = pow_sweep(stride);
    printf("%-9s %10.3f %6.2f  %a\n", "pow", r.worst, 1.0, r.at);
    KT_CHECK(r.worst <= 1, "pow: %.3f ulp at %a", r.worst, r.at);
  }
  return kt_finish("vmath");
}
