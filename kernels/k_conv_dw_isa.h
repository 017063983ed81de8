/* k_conv_dw_isa.h — the inner loops of the depthwise convolution for one vector width. Not a
 * normal header: k_conv_dw.c includes it once per instruction set, inside a target attribute
 * (K_DW_ATTR), after defining
 *   K_DW_V     floats per vector (16 for AVX-512, 8 for AVX2, 4 for the portable build: a
 *              vector wider than the target's registers is lowered through memory),
 *   K_DW_SFX   the suffix of every name defined here, K_DW_NAME the same as a string,
 *   K_DW_T     the sum's accumulators per step (K_DW_TILE must be a multiple of K_DW_T * K_DW_V),
 *   K_DW_B     the dot products' taps per pass (both sized to the target's registers), and
 *   K_DW_ROW_COPY, K_DW_ROW_SPLIT, K_DW_ROW_MERGE  the row copies to use (the ones defined
 *              here, kdw_copy_row_<sfx> ..., or the file's own masked ones),
 *   K_DW_SROWS the stride-1 plane forward (k_dw_srows_fn), or NULL,
 * and it defines k_dw_isa_<sfx> (with the blocked forward of k_conv_dw_blocked.h for block
 * widths 8 and 16), then undefines its parameters. */

#define KDW_CAT2(a, b) a##_##b
#define KDW_CAT(a, b) KDW_CAT2(a, b)
#define KDW(name) KDW_CAT(name, K_DW_SFX)

typedef float KDW(kdw_vec) __attribute__((vector_size(K_DW_V * sizeof(float))));
#define KDW_VEC KDW(kdw_vec)

K_DW_ATTR K_DW_INLINE KDW_VEC KDW(kdw_ld)(const float *p) {
  KDW_VEC v;
  memcpy(&v, p, sizeof v);
  return v;
}

K_DW_ATTR K_DW_INLINE void KDW(kdw_st)(float *p, KDW_VEC v) { memcpy(p, &v, sizeof v); }

/* out[q] = (add ? out[q] : init) + sum_t w[t] * src[t][q] for q < len rounded up to K_DW_TILE
 * (callers make that much readable and writable). */
K_DW_ATTR static void KDW(k_dw_sum)(float *out, int64_t len, const float *const *src, const float *w,
                                    int64_t n, float init, int add) {
  for (int64_t q = 0; q < len; q += K_DW_TILE)
    for (int h = 0; h < K_DW_TILE; h += K_DW_T * K_DW_V) {
      KDW_VEC acc[K_DW_T];
      for (int i = 0; i < K_DW_T; i++)
        acc[i] = add ? KDW(kdw_ld)(out + q + h + i * K_DW_V) : (KDW_VEC){0} + init;
      for (int64_t t = 0; t < n; t++) {
        const float *s = src[t] + q + h;
        float wt = w[t];
        for (int i = 0; i < K_DW_T; i++) acc[i] += wt * KDW(kdw_ld)(s + i * K_DW_V);
      }
      for (int i = 0; i < K_DW_T; i++) KDW(kdw_st)(out + q + h + i * K_DW_V, acc[i]);
    }
}

/* The lanes of v added as a tree of halves: a fixed order, so the same bits on every call (a
 * lane-by-lane sum was a chain of dependent adds per tap, most of a 7x7 plane's weight
 * gradient). */
K_DW_ATTR K_DW_INLINE float KDW(kdw_hsum)(KDW_VEC v) {
  float a[K_DW_V];
  memcpy(a, &v, sizeof a);
  for (int w = K_DW_V / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; l++) a[l] += a[l + w];
  return a[0];
}

/* out[t] = (add ? out[t] : 0) + sum_q dy[q] * src[t][q] for q < len rounded up to K_DW_TILE,
 * taps in passes of K_DW_B (one accumulator each, enough to hide the FMA latency), then the
 * rest one at a time with four accumulators. */
K_DW_ATTR static void KDW(k_dw_dots)(const float *dy, int64_t len, const float *const *src, int64_t n,
                                     float *out, int add) {
  int64_t t = 0;
  for (; t + K_DW_B <= n; t += K_DW_B) {
    KDW_VEC acc[K_DW_B];
    for (int b = 0; b < K_DW_B; b++) acc[b] = (KDW_VEC){0};
    for (int64_t q = 0; q < len; q += K_DW_V) {
      KDW_VEC d = KDW(kdw_ld)(dy + q);
      for (int b = 0; b < K_DW_B; b++) acc[b] += d * KDW(kdw_ld)(src[t + b] + q);
    }
    for (int b = 0; b < K_DW_B; b++) out[t + b] = (add ? out[t + b] : 0.0f) + KDW(kdw_hsum)(acc[b]);
  }
  for (; t < n; t++) {
    KDW_VEC acc[4] = {{0}, {0}, {0}, {0}};
    for (int64_t q = 0; q < len; q += K_DW_TILE)
      for (int h = 0; h < K_DW_TILE; h += 4 * K_DW_V)
        for (int i = 0; i < 4; i++)
          acc[i] += KDW(kdw_ld)(dy + q + h + i * K_DW_V) * KDW(kdw_ld)(src[t] + q + h + i * K_DW_V);
    out[t] = (add ? out[t] : 0.0f) + KDW(kdw_hsum)((acc[0] + acc[1]) + (acc[2] + acc[3]));
  }
}

/* Row copies between planes and phase planes, each reading and writing only its n floats:
 *   copy   d[c] (+)= s[c], c < n
 *   split  e[i] = s[2i], o[i] = s[2i + 1]: an input row into its two column phases (stride 2)
 *   merge  the inverse, d[2i] (+)= e[i], d[2i + 1] (+)= o[i]
 * Whole vectors (the even and odd lanes of two, for split and merge), then one float at a time. */
#if K_DW_V == 16
#define KDW_EVEN 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30
#define KDW_ODD 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31
#define KDW_LO 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23
#define KDW_HI 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31
#elif K_DW_V == 8
#define KDW_EVEN 0, 2, 4, 6, 8, 10, 12, 14
#define KDW_ODD 1, 3, 5, 7, 9, 11, 13, 15
#define KDW_LO 0, 8, 1, 9, 2, 10, 3, 11
#define KDW_HI 4, 12, 5, 13, 6, 14, 7, 15
#else
#define KDW_EVEN 0, 2, 4, 6
#define KDW_ODD 1, 3, 5, 7
#define KDW_LO 0, 4, 1, 5
#define KDW_HI 2, 6, 3, 7
#endif
#if defined(__clang__)
#define KDW_SHUF(a, b, idx) __builtin_shufflevector(a, b, idx)
#else
typedef int KDW(kdw_ivec) __attribute__((vector_size(K_DW_V * sizeof(int))));
#define KDW_SHUF(a, b, idx) __builtin_shuffle(a, b, (KDW(kdw_ivec)){idx})
#endif

K_DW_ATTR K_DW_INLINE void KDW(kdw_copy_row)(const float *s, int64_t n, float *d, int add) {
  int64_t c = 0;
  for (; c + K_DW_V <= n; c += K_DW_V)
    KDW(kdw_st)(d + c, add ? KDW(kdw_ld)(d + c) + KDW(kdw_ld)(s + c) : KDW(kdw_ld)(s + c));
  for (; c < n; c++) d[c] = add ? d[c] + s[c] : s[c];
}

K_DW_ATTR K_DW_INLINE void KDW(kdw_split_row)(const float *s, int64_t n, float *e, float *o) {
  int64_t i = 0;
  for (; 2 * i + 2 * K_DW_V <= n; i += K_DW_V) {
    KDW_VEC a = KDW(kdw_ld)(s + 2 * i), b = KDW(kdw_ld)(s + 2 * i + K_DW_V);
    KDW(kdw_st)(e + i, KDW_SHUF(a, b, KDW_EVEN));
    KDW(kdw_st)(o + i, KDW_SHUF(a, b, KDW_ODD));
  }
  for (; 2 * i < n; i++) {
    e[i] = s[2 * i];
    if (2 * i + 1 < n) o[i] = s[2 * i + 1];
  }
}

K_DW_ATTR K_DW_INLINE void KDW(kdw_merge_row)(const float *e, const float *o, int64_t n, float *d, int add) {
  int64_t i = 0;
  for (; 2 * i + 2 * K_DW_V <= n; i += K_DW_V) {
    KDW_VEC a = KDW(kdw_ld)(e + i), b = KDW(kdw_ld)(o + i);
    KDW_VEC lo = KDW_SHUF(a, b, KDW_LO), hi = KDW_SHUF(a, b, KDW_HI);
    if (add) lo += KDW(kdw_ld)(d + 2 * i), hi += KDW(kdw_ld)(d + 2 * i + K_DW_V);
    KDW(kdw_st)(d + 2 * i, lo);
    KDW(kdw_st)(d + 2 * i + K_DW_V, hi);
  }
  for (; 2 * i < n; i++) {
    d[2 * i] = add ? d[2 * i] + e[i] : e[i];
    if (2 * i + 1 < n) d[2 * i + 1] = add ? d[2 * i + 1] + o[i] : o[i];
  }
}

/* The plane copies: nr rows of nc floats, rows ss (source) and ds (destination) floats apart. */
K_DW_ATTR static void KDW(k_dw_rows)(const float *s, int64_t ss, float *d, int64_t ds, int64_t nr,
                                     int64_t nc, int add) {
  for (int64_t r = 0; r < nr; r++) K_DW_ROW_COPY(s + r * ss, nc, d + r * ds, add);
}

K_DW_ATTR static void KDW(k_dw_split)(const float *s, int64_t ss, float *e, float *o, int64_t ds,
                                      int64_t nr, int64_t nc) {
  for (int64_t r = 0; r < nr; r++) K_DW_ROW_SPLIT(s + r * ss, nc, e + r * ds, o + r * ds);
}

K_DW_ATTR static void KDW(k_dw_merge)(const float *e, const float *o, int64_t ss, float *d, int64_t ds,
                                      int64_t nr, int64_t nc, int add) {
  for (int64_t r = 0; r < nr; r++) K_DW_ROW_MERGE(e + r * ss, o + r * ss, nc, d + r * ds, add);
}

#define KDWB_V 8
#include "k_conv_dw_blocked.h"
#define KDWB_V 16
#include "k_conv_dw_blocked.h"

static const k_dw_isa KDW(k_dw_isa) = {K_DW_NAME, KDW(k_dw_sum), KDW(k_dw_dots), KDW(k_dw_rows),
                                       KDW(k_dw_split), KDW(k_dw_merge),
                                       {KDW_CAT(k_dw_brows_8, K_DW_SFX), KDW_CAT(k_dw_brows_16, K_DW_SFX)},
                                       K_DW_SROWS};

#undef KDW_VEC
#undef KDW_EVEN
#undef KDW_ODD
#undef KDW_LO
#undef KDW_HI
#undef KDW_SHUF
#undef K_DW_V
#undef K_DW_SFX
#undef K_DW_NAME
#undef K_DW_T
#undef K_DW_B
#undef K_DW_ATTR
#undef K_DW_ROW_COPY
#undef K_DW_ROW_SPLIT
#undef K_DW_ROW_MERGE
#undef K_DW_SROWS
