/* k_scalar.h — the one definition of every elementwise function, forward and gradient.
 * Three consumers share this text: the reference kernels (k_elemwise.c) call it, the CPU
 * code generator compiles it to LLVM bitcode and inlines it into fused loops, and the GPU
 * generator pastes it into NVRTC source as device functions. So it must stay portable C:
 * only `K_SF_INLINE` (static inline) functions (of floats, and one int selector, for the ops; the k_vm_
 * math below also reads float bits through unions), from <math.h> only fabsf and sqrtf
 * (libm's calls would stop vectorisation), no static data, no variadics, no
 * asserts, no other libc.
 *
 * Naming: unary k_sf_<op>(x[, p1, p2]) and k_sf_<op>_grad(og, x, y[, p1, p2]) where x is the
 * input and y the output (a caller passes 0 for whichever the op's backward does not
 * declare); binary k_sf_<op>(a, b), k_sf_<op>_grad_a(og, a, b, y), k_sf_<op>_grad_b(...).
 * Gradients follow PyTorch's autograd conventions at kinks and ties. */
#ifndef KILN_K_SCALAR_H
#define KILN_K_SCALAR_H

#ifndef __CUDACC_RTC__
#include <math.h>   /* NVRTC has fabsf and sqrtf built in */
#endif

/* Every function here is forced inline under gcc (the kernels' compiler): its inliner weighs
 * each call site on its own and left k_vm_erf and k_vm_exp out of line in the gelu gradient
 * (two of them in one expression), which kept that whole loop scalar, a call per element.
 * Only straight-line code gets inlined into vector loops, so the calls must all go. clang
 * (the bitcode, where cg_scalar_bc.c defines static and inline away) and other compilers see
 * plain `static inline`. */
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define K_SF_INLINE static __device__ __forceinline__   /* the GPU back end's device code */
#elif defined(__GNUC__) && !defined(__clang__)
#define K_SF_INLINE static inline __attribute__((always_inline))
#else
#define K_SF_INLINE static inline
#endif

/* ---- vector math (k_vm_): branch-free float approximations of libm ----
 * Why: a call to libm's expf or tanhf stops both gcc and LLVM from vectorising the loop
 * around it. These are straight-line arithmetic: every path is computed and the special
 * cases (NaN, ±inf, ±0, denormals, overflow and underflow) are picked by selects at the
 * end, so a loop over them becomes vector code. Ranges are reduced by reading and writing
 * the float's bits through a union; the polynomials are Taylor series or least-squares fits
 * made for these ranges (docs/kernels.md has the measured error of each in ulp). pow, sin
 * and cos work in double and round once, where float would lose bits in the reduction.
 * Bit-identical everywhere: only +, -, *, / and conversions, each rounded once, in an
 * order fixed by the parentheses. The build compiles this text without FMA contraction
 * (gcc for the kernels, clang for the bitcode), so no result depends on the compiler or
 * on the target's instructions. Conversions to int only ever see clamped, finite values. */
typedef union { float f; unsigned int u; } k_vm_bits32;
typedef union { double d; unsigned long long u; } k_vm_bits64;

K_SF_INLINE unsigned int k_vm_asuint(float x) {
  k_vm_bits32 b;
  b.f = x;
  return b.u;
}
K_SF_INLINE float k_vm_asfloat(unsigned int u) {
  k_vm_bits32 b;
  b.u = u;
  return b.f;
}

/* inf and a quiet NaN from their bits (the <math.h> macros need not exist in NVRTC). */
K_SF_INLINE float k_vm_inf(void) { return k_vm_asfloat(0x7f800000u); }
K_SF_INLINE float k_vm_nan(void) { return k_vm_asfloat(0x7fc00000u); }

/* 2^n for -126 <= n <= 127, built from its exponent bits. */
K_SF_INLINE float k_vm_pow2i(int n) { return k_vm_asfloat((unsigned int)(n + 127) << 23); }

/* x rounded to the nearest integer (ties to even) for |x| < 2^22: adding 1.5 * 2^23 leaves
 * no fraction bits, and subtracting it back is exact. */
K_SF_INLINE float k_vm_round(float x) { return (x + 12582912.0f) - 12582912.0f; }

/* e^x = 2^n e^r with n = round(x / ln2) and |r| <= ln2/2. ln2 is split so that n * hi is
 * exact and x - n * hi cancels exactly. The scale 2^n is applied as two halves, each a
 * normal float, so that the one rounding into a denormal or to inf happens on the last
 * multiply. x is clamped first to where the result is already inf (89) or 0 (-104); the
 * clamp also turns NaN into a number before the int conversion. */
K_SF_INLINE float k_vm_exp(float x) {
  float xc = x > -104.0f ? x : -104.0f;
  xc = xc < 89.0f ? xc : 89.0f;
  float kf = k_vm_round(xc * 1.44269504f);
  float r = (xc - kf * 0.693359375f) - kf * -2.12194442e-4f;
  float p = 1.0f / 720.0f + r * (1.0f / 5040.0f);
  p = 1.0f / 24.0f + r * (1.0f / 120.0f + r * p);
  p = 1.0f + (r + r * r * (0.5f + r * (1.0f / 6.0f + r * p)));
  int n = (int)kf, half = n / 2;
  float y = p * k_vm_pow2i(half) * k_vm_pow2i(n - half);
  return x != x ? x + x : y;
}

/* e^x - 1 without the cancellation of exp(x) - 1 near 0: a Taylor series for
 * |x| < ln2, exp(x) - 1 beyond (where e^x >= 2 or <= 1/2, so it loses at most a bit). */
K_SF_INLINE float k_vm_expm1(float x) {
  float p = 1.0f / 40320.0f + x * (1.0f / 362880.0f + x * (1.0f / 3628800.0f));
  p = 1.0f / 120.0f + x * (1.0f / 720.0f + x * (1.0f / 5040.0f + x * p));
  float small = x + x * x * (0.5f + x * (1.0f / 6.0f + x * (1.0f / 24.0f + x * p)));
  float y = fabsf(x) < 0.693147181f ? small : k_vm_exp(x) - 1.0f;
  return x == 0.0f ? x : y;
}

/* x = m 2^e with m in [sqrt(1/2), sqrt(2)), for finite x > 0 (denormals scaled by 2^24 first):
 * the split k_vm_log and k_vm_log2d share. m and e are exact. e is a float made of float
 * corrections: with both tests' corrections added as ints, gcc 12 could not vectorise a loop
 * of k_vm_log (it found no one vector type for the mixed masks), so every log, softplus and
 * pow loop of the kernels was scalar. */
K_SF_INLINE float k_vm_split(float x, float *e) {
  int tiny = x < 1.17549435e-38f;
  unsigned int u = k_vm_asuint(tiny ? x * 16777216.0f : x);
  float m = k_vm_asfloat((u & 0x7fffffu) | 0x3f800000u);
  int big = m > 1.41421356f;
  *e = (float)((int)((u >> 23) & 0xffu) - 127) + (big ? 1.0f : 0.0f) - (tiny ? 24.0f : 0.0f);
  return big ? m * 0.5f : m;
}

/* ln x = e ln2 + ln m with m in [sqrt(1/2), sqrt(2)); ln m = 2 atanh(s), s = f / (2 + f),
 * f = m - 1, written as f - f^2/2 + s (f^2/2 + R(s^2)) so the large terms are exact.
 * Denormals are scaled first, by k_vm_split. */
K_SF_INLINE float k_vm_log(float x) {
  float e, m = k_vm_split(x, &e);
  float f = m - 1.0f, s = f / (2.0f + f), z = s * s, hfsq = 0.5f * f * f;
  float R = z * (2.0f / 3.0f + z * (2.0f / 5.0f + z * (2.0f / 7.0f + z * (2.0f / 9.0f))));
  float y = e * 0.693359375f + (f - (hfsq - (s * (hfsq + R) + e * -2.12194442e-4f)));
  y = x == k_vm_inf() ? x : y;
  y = x == 0.0f ? -k_vm_inf() : y;
  y = x < 0.0f ? k_vm_nan() : y;
  return x != x ? x + x : y;
}

/* ln(1 + t) for t in [0, 1] (softplus): Kahan's ln(u) * t / (u - 1), u = 1 + t, cancels the
 * rounding of 1 + t. */
K_SF_INLINE float k_vm_log1p01(float t) {
  float u = 1.0f + t;
  float y = k_vm_log(u) * (t / (u - 1.0f));
  return u == 1.0f ? t : y;
}

/* tanh: an odd fit x + x^3 P(x^2) below 0.55, 1 - 2 / (e^2|x| + 1) above (no cancellation
 * there; e^2|x| = inf gives exactly 1). The zero test keeps tanh(-0) = -0. */
K_SF_INLINE float k_vm_tanh(float x) {
  float a = fabsf(x), z = x * x;
  float p = -0.0539647453f + z * (0.0218188744f + z * (-0.00852793548f + z * 0.00252850307f));
  float small = x + x * (z * (-0.333333343f + z * (0.133333251f + z * p)));
  float big = 1.0f - 2.0f / (k_vm_exp(2.0f * a) + 1.0f);
  float y = a < 0.55f ? small : (x < 0.0f ? -big : big);
  return x == 0.0f ? x : y;
}

/* 1 / (1 + e^-x), with e^-|x| so that nothing overflows: e / (1 + e) for x < 0, computed as
 * e * (1 / (1 + e)): one division for both sides, where a vector loop computed both quotients
 * and SiLU spent most of its time in the divider (1 ulp more rounding, inside the 3 ulp bound). */
K_SF_INLINE float k_vm_sigmoid(float x) {
  float e = k_vm_exp(-fabsf(x)), r = 1.0f / (1.0f + e);
  return x >= 0.0f ? r : e * r;
}

/* erf: x + x Q(x^2) below 0.9; 1 - erfc(|x|) above, erfc = exp(P(|x| - 0.9)) (ln erfc is
 * smooth; the fit is weighted to be accurate where erfc is large). erf = ±1 in float above
 * 3.92; the clamp keeps P inside its fitted range, and NaN passes it. */
K_SF_INLINE float k_vm_erf(float x) {
  float a = fabsf(x), z = x * x;
  float q = 0.00520375278f + z * (-0.000817448366f + z * 8.50839497e-05f);
  q = 0.128379166f + z * (-0.376126349f + z * (0.112837143f + z * (-0.0268604625f + z * q)));
  float small = x + x * q;
  float t = (a > 3.92f ? 3.92f : a) - 0.9f;
  float p = 0.0110898959f + t * (-0.00218396285f + t * (0.000301835971f + t * -2.11800889e-05f));
  p = -1.59409726f + t * (-2.47163415f + t * (-0.830015719f + t * (-0.0457853861f + t * p)));
  float big = 1.0f - k_vm_exp(p);
  return a < 0.9f ? small : (x < 0.0f ? -big : big);
}

/* sin and cos of r, |r| <= pi/4, in double: Taylor series whose first omitted term is
 * below 2^-36 of the result, so the one rounding to float is all but correct. */
K_SF_INLINE double k_vm_sin_r(double r) {
  double z = r * r;
  double p = -1.0 / 5040 + z * (1.0 / 362880 + z * (-1.0 / 39916800));
  return r + r * (z * (-1.0 / 6 + z * (1.0 / 120 + z * p)));
}
K_SF_INLINE double k_vm_cos_r(double r) {
  double z = r * r;
  double q = 1.0 / 24 + z * (-1.0 / 720 + z * (1.0 / 40320 + z * (-1.0 / 3628800 + z * (1.0 / 479001600))));
  return 1.0 - (0.5 * z - z * z * q);
}

/* Accurate range of the reduction below: |x| < K_VM_TRIG_MAX (2^26). */
#define K_VM_TRIG_MAX 67108864.0f

/* sin (quarter 0) or cos (quarter 1) of x: x = n pi/2 + r in double, with pi/2 in three
 * parts, the first two of 27 bits so that n * part is exact for n < 2^26 (Cody and Waite;
 * 107 bits of pi/2 in all). The result is sin or cos of r by quadrant (n + quarter) mod 4.
 * Beyond K_VM_TRIG_MAX it would take the bits of 2/pi from a table (Payne and Hanek), which
 * this header may not hold: there x is treated as 0, so the result is in [-1, 1] but not
 * sin x. inf and NaN give NaN. */
K_SF_INLINE float k_vm_sincos(float x, int quarter) {
  float a = fabsf(x);
  double xd = (double)(a < K_VM_TRIG_MAX ? x : 0.0f);
  double nd = (xd * 0.63661977236758138 + 6755399441055744.0) - 6755399441055744.0;
  double r = ((xd - nd * 0x1.921fb54p0) - nd * 0x1.10b461p-30) - nd * 0x1.a62633145c06ep-58;
  unsigned int q = (unsigned int)((int)nd + quarter);
  double v = (q & 1u) ? k_vm_cos_r(r) : k_vm_sin_r(r);
  float y = (float)((q & 2u) ? -v : v);
  return a <= 3.40282347e+38f ? y : x - x;
}
K_SF_INLINE float k_vm_sin(float x) {
  float y = k_vm_sincos(x, 0);
  return x == 0.0f ? x : y;
}
K_SF_INLINE float k_vm_cos(float x) { return k_vm_sincos(x, 1); }

/* log2 of a finite a >= 0 in double (relative error near 2^-50), as k_vm_log does it. */
K_SF_INLINE double k_vm_log2d(float a) {
  float e, m = k_vm_split(a, &e);   /* e an exact integer, so in double as it is */
  double f = (double)m - 1.0, s = f / (2.0 + f), z = s * s;
  double R = 2.0 / 9.0 + z * (2.0 / 11.0 + z * (2.0 / 13.0 + z * (2.0 / 15.0)));
  R = z * (2.0 / 3.0 + z * (2.0 / 5.0 + z * (2.0 / 7.0 + z * R)));
  return e + (f - s * (f - R)) * 1.4426950408889634;
}

/* 2^t rounded once to float: t = n + r, |r| <= 1/2, 2^r by its Taylor series in r ln2, 2^n
 * from exponent bits (a normal double for the clamped n), then the one conversion. */
K_SF_INLINE float k_vm_exp2d(double t) {
  double tc = t > -200.0 ? t : -200.0;
  tc = tc < 200.0 ? tc : 200.0;
  double nd = (tc + 6755399441055744.0) - 6755399441055744.0;
  double v = (tc - nd) * 0.69314718055994531;
  double p = 1.0 / 5040 + v * (1.0 / 40320 + v * (1.0 / 362880 + v * (1.0 / 3628800 + v * (1.0 / 39916800))));
  p = 1.0 + v * (1.0 + v * (0.5 + v * (1.0 / 6 + v * (1.0 / 24 + v * (1.0 / 120 + v * (1.0 / 720 + v * p))))));
  k_vm_bits64 b;
  b.u = (unsigned long long)((int)nd + 1023) << 52;
  return (float)(p * b.d);
}

/* x^y = 2^(y log2|x|) in double, so the product's error stays far below a float ulp; then
 * C99's special cases: the sign for negative x and odd integer y, NaN for negative finite x
 * and non-integer y, and 1 for y = ±0, x = 1, and x = -1 with y = ±inf. */
K_SF_INLINE float k_vm_pow(float x, float y) {
  float ax = fabsf(x), ay = fabsf(y);
  double l = k_vm_log2d(ax);
  l = ax == 0.0f ? -(double)k_vm_inf() : (ax == k_vm_inf() ? (double)k_vm_inf() : l);
  float r = k_vm_exp2d((double)y * l);
  int is_int = ay >= 8388608.0f || k_vm_round(ay) == ay;
  int odd = is_int && ((int)(ay < 16777216.0f ? ay : 0.0f) & 1);
  r = (odd && (k_vm_asuint(x) >> 31)) ? -r : r;
  r = (x < 0.0f && x > -k_vm_inf() && !is_int) ? k_vm_nan() : r;
  r = (x != x || y != y) ? x + y : r;
  r = (ax == 1.0f && ay == k_vm_inf()) ? 1.0f : r;
  return (y == 0.0f || x == 1.0f) ? 1.0f : r;
}


/* ---- unary ---- */
K_SF_INLINE float k_sf_neg(float x) { return -x; }
K_SF_INLINE float k_sf_neg_grad(float og, float x, float y) { return -og; }

/* torch: d|x| = sign(x), 0 at 0. */
K_SF_INLINE float k_sf_sign(float x) { return (float)((x > 0.0f) - (x < 0.0f)); }
K_SF_INLINE float k_sf_sign_grad(float og, float x, float y) { return 0.0f; }
K_SF_INLINE float k_sf_abs(float x) { return fabsf(x); }
K_SF_INLINE float k_sf_abs_grad(float og, float x, float y) { return og * k_sf_sign(x); }

K_SF_INLINE float k_sf_exp(float x) { return k_vm_exp(x); }
K_SF_INLINE float k_sf_exp_grad(float og, float x, float y) { return og * y; }
K_SF_INLINE float k_sf_log(float x) { return k_vm_log(x); }
K_SF_INLINE float k_sf_log_grad(float og, float x, float y) { return og / x; }
K_SF_INLINE float k_sf_sqrt(float x) { return sqrtf(x); }
K_SF_INLINE float k_sf_sqrt_grad(float og, float x, float y) { return og / (2.0f * y); }
K_SF_INLINE float k_sf_rsqrt(float x) { return 1.0f / sqrtf(x); }
K_SF_INLINE float k_sf_rsqrt_grad(float og, float x, float y) { return -0.5f * og * y * y * y; }
K_SF_INLINE float k_sf_square(float x) { return x * x; }
K_SF_INLINE float k_sf_square_grad(float og, float x, float y) { return 2.0f * og * x; }
K_SF_INLINE float k_sf_sin(float x) { return k_vm_sin(x); }
K_SF_INLINE float k_sf_sin_grad(float og, float x, float y) { return og * k_vm_cos(x); }
K_SF_INLINE float k_sf_cos(float x) { return k_vm_cos(x); }
K_SF_INLINE float k_sf_cos_grad(float og, float x, float y) { return -og * k_vm_sin(x); }
K_SF_INLINE float k_sf_reciprocal(float x) { return 1.0f / x; }
K_SF_INLINE float k_sf_reciprocal_grad(float og, float x, float y) { return -og * y * y; }

/* relu as torch's: x < 0 gives +0, anything else keeps x, so NaN stays NaN and -0 stays -0.
 * Its gradient reads the output so that x can be freed (and relu run in place), and is
 * torch's threshold_backward: 0 where y <= 0, og elsewhere, NaN included. */
K_SF_INLINE float k_sf_relu(float x) { return x < 0.0f ? 0.0f : x; }
K_SF_INLINE float k_sf_relu_grad(float og, float x, float y) { return y <= 0.0f ? 0.0f : og; }

K_SF_INLINE float k_sf_sigmoid(float x) { return k_vm_sigmoid(x); }
K_SF_INLINE float k_sf_sigmoid_grad(float og, float x, float y) { return og * y * (1.0f - y); }
K_SF_INLINE float k_sf_tanh(float x) { return k_vm_tanh(x); }
K_SF_INLINE float k_sf_tanh_grad(float og, float x, float y) { return og * (1.0f - y * y); }

/* F.softplus (beta 1, threshold 20): linear above the threshold, as torch is; below it
 * log(1 + e^x) = max(x, 0) + log(1 + e^-|x|), which cannot overflow. */
K_SF_INLINE float k_sf_softplus(float x) {
  float y = (x > 0.0f ? x : 0.0f) + k_vm_log1p01(k_vm_exp(-fabsf(x)));
  return x > 20.0f ? x : y;
}
K_SF_INLINE float k_sf_softplus_grad(float og, float x, float y) {
  return x > 20.0f ? og : og * k_sf_sigmoid(x);
}

/* The standard normal's upper tail Q(a) = P(X > a) = erfc(a / sqrt 2) / 2 for a >= 0, as
 * e^(-a^2/2) G(s) with s = a / (a + 3): G = Q e^(a^2/2) (Mills' ratio times the density's
 * constant) is smooth on s in [0, 1), so one polynomial of degree 9 covers every a with no
 * branch — a relative least-squares fit over a in [0, 14] whose coefficients were rounded to
 * float one at a time (each refit after the one before was rounded), 1.2e-8 at most in exact
 * arithmetic;
 * Q is 0 in float past a = 14.2. s (not 1 - s) is the variable because it is exact where Q
 * is largest, near a = 0. a is clamped to 16 for s (where Q is already 0) so that inf gives
 * 0, not inf / inf; NaN reaches the result through e. *e gets e^(-a^2/2), which the normal's
 * density needs too. */
K_SF_INLINE float k_vm_normal_tail(float a, float *e) {
  float ac = a < 16.0f ? a : 16.0f, s = ac / (ac + 3.0f);
  float g = -0.159063086f + s * (0.0631119832f + s * (0.00753975566f + s * (0.085645102f + s * (
            -0.0941305682f + s * 0.0274910592f))));
  g = 0.5f + s * (-1.19682634f + s * (1.05314946f + s * (-0.286911696f + s * g)));
  *e = k_vm_exp(-(0.5f * a) * a);
  return *e * g;
}

/* F.gelu, exact erf form: x Phi(x), Phi(x) = 1 - Q(x) for x >= 0 and Q(-x) below: one exp
 * and one division, where 0.5 x (1 + erf(x / sqrt 2)) evaluated both of erf's branches and
 * cancelled for x < 0. -inf gives NaN (-inf times 0), as torch's formula does; +inf gives
 * inf (the clamped ac times q = 0); +-0 keep their sign (x q). */
K_SF_INLINE float k_sf_gelu(float x) {
  float a = fabsf(x), e, q = k_vm_normal_tail(a, &e);
  float ac = a < 16.0f ? a : 16.0f;   /* x - x q rounds better than x (1 - q); q = 0 past 16 */
  return x > 0.0f ? x - ac * q : x * q;
}
K_SF_INLINE float k_sf_gelu_grad(float og, float x, float y) {
  float e, q = k_vm_normal_tail(fabsf(x), &e);
  float cdf = x >= 0.0f ? 1.0f - q : q, pdf = 0.39894228040143268f * e;
  return og * (cdf + x * pdf);
}

/* torch: slope applies for x <= 0 in the gradient. */
K_SF_INLINE float k_sf_leaky_relu(float x, float slope) { return x > 0.0f ? x : x * slope; }
K_SF_INLINE float k_sf_leaky_relu_grad(float og, float x, float y, float slope) {
  return x > 0.0f ? og : og * slope;
}

/* torch.clamp: min applied before max; gradient passes on the closed interval. */
K_SF_INLINE float k_sf_clip(float x, float a_min, float a_max) {
  float v = x < a_min ? a_min : x;
  return v > a_max ? a_max : v;
}
K_SF_INLINE float k_sf_clip_grad(float og, float x, float y, float a_min, float a_max) {
  return (x >= a_min && x <= a_max) ? og : 0.0f;
}

/* smooth L1 with beta = 1/sigma^2: quadratic inside |x| < beta, linear outside. */
K_SF_INLINE float k_sf_smooth_l1(float x, float sigma) {
  float beta = 1.0f / (sigma * sigma), ax = fabsf(x);
  return ax < beta ? 0.5f * x * x / beta : ax - 0.5f * beta;
}
K_SF_INLINE float k_sf_smooth_l1_grad(float og, float x, float y, float sigma) {
  float beta = 1.0f / (sigma * sigma);
  return fabsf(x) < beta ? og * x / beta : og * k_sf_sign(x);
}

/* MXNet softrelu is softplus; its gradient from the output y is 1 - exp(-y) = sigmoid(x). */
K_SF_INLINE float k_sf_softrelu(float x) { return k_sf_softplus(x); }
K_SF_INLINE float k_sf_softrelu_grad(float og, float x, float y) { return -og * k_vm_expm1(-y); }

/* ---- unary ops beyond SPEC section 2 (docs/language.md) ---- */
/* torch.erf; d/dx = 2/sqrt(pi) e^(-x^2). */
K_SF_INLINE float k_sf_erf(float x) { return k_vm_erf(x); }
K_SF_INLINE float k_sf_erf_grad(float og, float x, float y) {
  return og * (1.12837916709551257f * k_vm_exp(-x * x));
}

/* clamp(alpha x + beta, 0, 1): F.hardsigmoid is alpha = 1/6, beta = 1/2 (ONNX HardSigmoid's
 * defaults are 0.2, 0.5). NaN passes, as in torch. The gradient is alpha where the output is
 * strictly inside (0, 1) (torch's -3 < x < 3), so it reads y and x can be freed. */
K_SF_INLINE float k_sf_hard_sigmoid(float x, float alpha, float beta) {
  float v = alpha * x + beta;
  v = v < 0.0f ? 0.0f : v;
  return v > 1.0f ? 1.0f : v;
}
K_SF_INLINE float k_sf_hard_sigmoid_grad(float og, float x, float y, float alpha, float beta) {
  return (y > 0.0f && y < 1.0f) ? og * alpha : 0.0f;
}

/* F.hardswish: x * clamp(x + 3, 0, 6) / 6, in torch's order; its gradient as torch's
 * (0 below -3, x/3 + 1/2 on [-3, 3], 1 above). */
K_SF_INLINE float k_sf_hard_swish(float x) {
  float v = x + 3.0f;
  v = v < 0.0f ? 0.0f : v;
  v = v > 6.0f ? 6.0f : v;
  return x * v / 6.0f;
}
K_SF_INLINE float k_sf_hard_swish_grad(float og, float x, float y) {
  return x < -3.0f ? 0.0f : (x <= 3.0f ? og * (x / 3.0f + 0.5f) : og);
}

/* F.silu: x sigmoid(x); gradient s (1 + x (1 - s)) as torch writes it. */
K_SF_INLINE float k_sf_silu(float x) { return x * k_vm_sigmoid(x); }
K_SF_INLINE float k_sf_silu_grad(float og, float x, float y) {
  float s = k_vm_sigmoid(x);
  return og * (s * (1.0f + x * (1.0f - s)));
}

/* activation selects by act_type (K_ACT_RELU=0, SIGMOID, TANH, SOFTRELU); its backward
 * declares only the output, so every branch's gradient reads y. */
K_SF_INLINE float k_sf_activation(float x, int act_type) {
  switch (act_type) {
  case 0: return k_sf_relu(x);
  case 1: return k_sf_sigmoid(x);
  case 2: return k_sf_tanh(x);
  default: return k_sf_softrelu(x);
  }
}
K_SF_INLINE float k_sf_activation_grad(float og, float x, float y, int act_type) {
  switch (act_type) {
  case 0: return k_sf_relu_grad(og, x, y);
  case 1: return k_sf_sigmoid_grad(og, x, y);
  case 2: return k_sf_tanh_grad(og, x, y);
  default: return k_sf_softrelu_grad(og, x, y);
  }
}

/* ---- binary ---- */
K_SF_INLINE float k_sf_add(float a, float b) { return a + b; }
K_SF_INLINE float k_sf_add_grad_a(float og, float a, float b, float y) { return og; }
K_SF_INLINE float k_sf_add_grad_b(float og, float a, float b, float y) { return og; }
K_SF_INLINE float k_sf_sub(float a, float b) { return a - b; }
K_SF_INLINE float k_sf_sub_grad_a(float og, float a, float b, float y) { return og; }
K_SF_INLINE float k_sf_sub_grad_b(float og, float a, float b, float y) { return -og; }
K_SF_INLINE float k_sf_mul(float a, float b) { return a * b; }
K_SF_INLINE float k_sf_mul_grad_a(float og, float a, float b, float y) { return og * b; }
K_SF_INLINE float k_sf_mul_grad_b(float og, float a, float b, float y) { return og * a; }
K_SF_INLINE float k_sf_div(float a, float b) { return a / b; }
K_SF_INLINE float k_sf_div_grad_a(float og, float a, float b, float y) { return og / b; }
K_SF_INLINE float k_sf_div_grad_b(float og, float a, float b, float y) { return -og * a / (b * b); }

/* torch masks pow's gradients: d/da is 0 where b == 0, d/db is 0 where a == 0 and b >= 0. */
K_SF_INLINE float k_sf_pow(float a, float b) { return k_vm_pow(a, b); }
K_SF_INLINE float k_sf_pow_grad_a(float og, float a, float b, float y) {
  return b == 0.0f ? 0.0f : og * b * k_vm_pow(a, b - 1.0f);
}
K_SF_INLINE float k_sf_pow_grad_b(float og, float a, float b, float y) {
  return (a == 0.0f && b >= 0.0f) ? 0.0f : og * y * k_vm_log(a);
}

/* torch.maximum/minimum propagate NaN (fmaxf would not) and split the gradient at ties;
 * the masks mirror torch's derivative formulas, so a NaN operand passes og to both. */
K_SF_INLINE float k_sf_maximum(float a, float b) { return (a > b || a != a) ? a : b; }
K_SF_INLINE float k_sf_maximum_grad_a(float og, float a, float b, float y) {
  return a == b ? 0.5f * og : (a < b ? 0.0f : og);
}
K_SF_INLINE float k_sf_maximum_grad_b(float og, float a, float b, float y) {
  return a == b ? 0.5f * og : (a > b ? 0.0f : og);
}
K_SF_INLINE float k_sf_minimum(float a, float b) { return (a < b || a != a) ? a : b; }
K_SF_INLINE float k_sf_minimum_grad_a(float og, float a, float b, float y) {
  return a == b ? 0.5f * og : (a > b ? 0.0f : og);
}
K_SF_INLINE float k_sf_minimum_grad_b(float og, float a, float b, float y) {
  return a == b ? 0.5f * og : (a < b ? 0.0f : og);
}

#endif
