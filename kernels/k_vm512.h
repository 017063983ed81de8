/* k_vm512.h — k_scalar.h's sigmoid, SiLU and GELU written with AVX-512 intrinsics, bit for bit
 * the same: gcc's vectorisation of k_vm_exp spends 10 of its ~45 instructions a vector on the
 * scale 2^n (n / 2 and two exponent builds, so that a denormal result rounds once) and 2 on
 * the rounding of x / ln2, where AVX-512 has one instruction each: vscalefps (p 2^floor(k),
 * one rounding, so round(p 2^n) as p 2^(n/2) 2^(n - n/2) gives it: the first product is exact
 * for p in [0.7, 1.42] and n >= -150) and vrndscaleps (ties to even, as the 1.5 * 2^23 trick;
 * a -0 where the trick gives +0 changes nothing after it). SiLU was a quarter of
 * EfficientNet-B1's time; GELU's loop spilled its constants and ran ConvNeXt-T's at 0.53 ns an
 * element. Every other operation is k_scalar.h's, in its order, unfused
 * (kernels build with -ffp-contract=off), NaN lanes included: test_vmath compares the two on
 * a sweep of the float bit patterns.
 *
 * k_vm512_exp_nonpos is only for arguments <= 0 (or NaN; the clamp at 89 never acts): sigmoid's
 * -|x| and softmax's x - max. Used by k_elemwise.c's forward loops of the K_UNARY_WIDE ops and
 * k_softmax.c's exponentials when the CPU has AVX-512F. A file that includes this header
 * must build with -ffp-contract=off: gcc otherwise fuses the intrinsics' multiplies and adds
 * into FMAs (the avx512f target has them), and 2,738 of 5.5 million sampled t <= 0 changed. */
#ifndef KILN_K_VM512_H
#define KILN_K_VM512_H

#if defined(__GNUC__) && defined(__x86_64__)
#define K_VM512 1
#include <immintrin.h>
#include <stdint.h>

#define K_VM512_FN static inline __attribute__((always_inline, target("avx512f")))

K_VM512_FN __m512 k_vm512_c(float v) { return _mm512_set1_ps(v); }

/* k_vm_exp(t) for t <= 0 or NaN. */
K_VM512_FN __m512 k_vm512_exp_nonpos(__m512 t) {
  __m512 xc = _mm512_max_ps(t, k_vm512_c(-104.0f));   /* t > -104 ? t : -104, NaN -> -104 */
  __m512 kf = _mm512_roundscale_ps(_mm512_mul_ps(xc, k_vm512_c(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_sub_ps(_mm512_sub_ps(xc, _mm512_mul_ps(kf, k_vm512_c(0.693359375f))),
                           _mm512_mul_ps(kf, k_vm512_c(-2.12194442e-4f)));
  __m512 p = _mm512_add_ps(k_vm512_c(1.0f / 720.0f), _mm512_mul_ps(r, k_vm512_c(1.0f / 5040.0f)));
  p = _mm512_add_ps(k_vm512_c(1.0f / 24.0f),
                    _mm512_mul_ps(r, _mm512_add_ps(k_vm512_c(1.0f / 120.0f), _mm512_mul_ps(r, p))));
  __m512 q = _mm512_add_ps(k_vm512_c(1.0f / 6.0f), _mm512_mul_ps(r, p));
  q = _mm512_add_ps(k_vm512_c(0.5f), _mm512_mul_ps(r, q));
  p = _mm512_add_ps(k_vm512_c(1.0f), _mm512_add_ps(r, _mm512_mul_ps(_mm512_mul_ps(r, r), q)));
  __m512 y = _mm512_scalef_ps(p, kf);
  return _mm512_mask_add_ps(y, _mm512_cmp_ps_mask(t, t, _CMP_UNORD_Q), t, t);   /* NaN: t + t */
}

/* k_vm_sigmoid(x). -|x| is x with the sign bit set, as fabsf then negation leave it. */
K_VM512_FN __m512 k_vm512_sigmoid(__m512 x) {
  __m512 t = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)));
  __m512 e = k_vm512_exp_nonpos(t), one = k_vm512_c(1.0f);
  __m512 r = _mm512_div_ps(one, _mm512_add_ps(one, e));
  return _mm512_mask_mov_ps(_mm512_mul_ps(e, r), _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ), r);
}

K_VM512_FN __m512 k_vm512_silu(__m512 x) { return _mm512_mul_ps(x, k_vm512_sigmoid(x)); }

/* k_sf_gelu(x): x - ac q for x > 0, x q otherwise, q = k_vm_normal_tail(|x|) (its polynomial
 * in s = ac / (ac + 3), ac = min(|x|, 16), times e^(-(a / 2) a)). min_ps(a, 16) is
 * `a < 16 ? a : 16`, NaN included. */
K_VM512_FN __m512 k_vm512_gelu(__m512 x) {
  __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MAX)));
  __m512 ac = _mm512_min_ps(a, k_vm512_c(16.0f)), s = _mm512_div_ps(ac, _mm512_add_ps(ac, k_vm512_c(3.0f)));
  __m512 g = _mm512_add_ps(k_vm512_c(-0.0941305682f), _mm512_mul_ps(s, k_vm512_c(0.0274910592f)));
  g = _mm512_add_ps(k_vm512_c(0.085645102f), _mm512_mul_ps(s, g));
  g = _mm512_add_ps(k_vm512_c(0.00753975566f), _mm512_mul_ps(s, g));
  g = _mm512_add_ps(k_vm512_c(0.0631119832f), _mm512_mul_ps(s, g));
  g = _mm512_add_ps(k_vm512_c(-0.159063086f), _mm512_mul_ps(s, g));
  g = _mm512_add_ps(k_vm512_c(-0.286911696f), _mm512_mul_ps(s, g));
  g = _mm512_add_ps(k_vm512_c(1.05314946f), _mm512_mul_ps(s, g));
  g = _mm512_add_ps(k_vm512_c(-1.19682634f), _mm512_mul_ps(s, g));
  g = _mm512_add_ps(k_vm512_c(0.5f), _mm512_mul_ps(s, g));
  __m512 h = _mm512_mul_ps(k_vm512_c(0.5f), a);
  __m512 t = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(h), _mm512_set1_epi32(INT32_MIN))), a);
  __m512 q = _mm512_mul_ps(k_vm512_exp_nonpos(t), g);
  __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ);
  return _mm512_mask_sub_ps(_mm512_mul_ps(x, q), pos, x, _mm512_mul_ps(ac, q));
}

/* y[i] = f(x[i]) (or y[i] += f(x[i]) when add), i < n; y may be x (in place): each vector is
 * read before it is written. The last part-vector goes through masked loads and stores. */
#define K_VM512_ROWS(name, F)                                                                      \
  static __attribute__((target("avx512f"), noinline)) void name(const float *x, float *y, int64_t n, int add) { \
    int64_t i = 0;                                                                                 \
    for (; i + 16 <= n; i += 16) {                                                                 \
      __m512 v = F(_mm512_loadu_ps(x + i));                                                        \
      _mm512_storeu_ps(y + i, add ? _mm512_add_ps(_mm512_loadu_ps(y + i), v) : v);                 \
    }                                                                                              \
    if (i < n) {                                                                                   \
      __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);                                             \
      __m512 v = F(_mm512_maskz_loadu_ps(m, x + i));                                               \
      _mm512_mask_storeu_ps(y + i, m, add ? _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), v) : v); \
    }                                                                                              \
  }

/* Whether the CPU runs them (a load and a test of libgcc's CPU model). */
static inline int k_vm512_have(void) { return __builtin_cpu_supports("avx512f"); }
#else
#define K_VM512 0
#endif
#endif
