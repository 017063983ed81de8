/* test_pool.c — max and average pooling, 1-D and 2-D: forward values against naive loops
 * written here (padding, stride, global, count_include_pad = 0, ceil_mode), gradient checks on
 * inputs without near-ties, and torch's tie rule (the gradient goes to the first maximum in
 * scan order). Then the channel-blocked forward (k_pool_param.in_block / out_block, the layout
 * pass's): the NCHW kernel's bits, NaN, -0 and channels that do not fill a vector included,
 * at widths 8 and 16, and its refusals. */
#include "kt_harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *name;
  int two_d, N, C, H, W, kh, kw, sh, sw, ph, pw, type, global;
  int no_pad_count, ceil;       /* count_include_pad = 0; ceil_mode = 1 */
  int asym, phe, pwe;           /* asym: the end pads are phe, pwe (else ph, pw) */
} pool_spec;

static int end_h(const pool_spec *s) { return s->asym ? s->phe : s->ph; }
static int end_w(const pool_spec *s) { return s->asym ? s->pwe : s->pw; }

/* torch's output length: ceil_mode rounds up, less a last window starting in the right pad. */
static int out_len(int in, int k, int s, int p, int pe, int ceil) {
  int o = (in + p + pe - k + (ceil ? s - 1 : 0)) / s + 1;
  return ceil && (o - 1) * s >= in + p ? o - 1 : o;
}

/* Max over in-range taps (padding is -inf); average sums in-range taps over the taps inside
 * the padded input (count_include_pad) or inside the input. */
static void ref_pool(const pool_spec *s, const float *x, float *y) {
  int OH = out_len(s->H, s->kh, s->sh, s->ph, end_h(s), s->ceil), OW = out_len(s->W, s->kw, s->sw, s->pw, end_w(s), s->ceil);
  for (int pl = 0; pl < s->N * s->C; pl++)
    for (int oh = 0; oh < OH; oh++)
      for (int ow = 0; ow < OW; ow++) {
        double m = -INFINITY, sum = 0, count = 0;
        for (int i = 0; i < s->kh; i++)
          for (int j = 0; j < s->kw; j++) {
            int h = oh * s->sh - s->ph + i, w = ow * s->sw - s->pw + j;
            if (!s->no_pad_count && h >= -s->ph && h < s->H + end_h(s) && w >= -s->pw && w < s->W + end_w(s)) count++;
            if (h < 0 || h >= s->H || w < 0 || w >= s->W) continue;
            if (s->no_pad_count) count++;
            double v = x[(pl * s->H + h) * s->W + w];
            sum += v;
            if (v > m) m = v;
          }
        y[(pl * OH + oh) * OW + ow] = (float)(s->type == K_POOL_MAX ? m : sum / count);
      }
}

static k_pool_param make_param(const pool_spec *s) {
  k_pool_param p = {0};
  p.count_include_pad = 1;
  int n = s->two_d ? 2 : 1;
  p.kernel.n = p.stride.n = p.pad.n = n;
  if (s->two_d) { p.kernel.v[0] = s->kh; p.stride.v[0] = s->sh; p.pad.v[0] = s->ph; }
  p.kernel.v[n - 1] = s->kw; p.stride.v[n - 1] = s->sw; p.pad.v[n - 1] = s->pw;
  if (s->asym) {                /* every start, then every end */
    p.pad.n = 2 * n;
    if (s->two_d) p.pad.v[n] = s->phe;
    p.pad.v[2 * n - 1] = s->pwe;
  }
  p.pool_type = s->type;
  p.global_pool = s->global;
  p.count_include_pad = !s->no_pad_count;
  p.ceil_mode = s->ceil;
  return p;
}

/* Distinct values 0.05 apart in a shuffled order, so no finite-difference step crosses a tie. */
static void fill_distinct(float *x, int64_t n, uint64_t seed) {
  int32_t *r = malloc((size_t)n * sizeof(int32_t));
  for (int64_t i = 0; i < n; i++) x[i] = (float)(i - n / 2) * 0.05f;
  kt_fill_int(r, n, 0, 1 << 30, seed);
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = r[i] % (i + 1);
    float t = x[i]; x[i] = x[j]; x[j] = t;
  }
  free(r);
}

static kt_case make_case(const pool_spec *s, const k_pool_param *p) {
  kt_case c = {0};
  int OH = out_len(s->H, s->kh, s->sh, s->ph, end_h(s), s->ceil), OW = out_len(s->W, s->kw, s->sw, s->pw, end_w(s), s->ceil);
  c.name = s->name; c.fwd = k_pooling_forward; c.bwd = k_pooling_backward;
  c.nargs = 1; c.nout = 1; c.nvisible = 1;
  c.in[0] = kt_tensor_f32(s->two_d ? kt_shape(4, s->N, s->C, s->H, s->W) : kt_shape(3, s->N, s->C, s->W), -1, 1, 21);
  fill_distinct(c.in[0].data, k_shape_numel(&c.in[0].shape), 22);
  c.out_shape[0] = s->two_d ? kt_shape(4, s->N, s->C, OH, OW) : kt_shape(3, s->N, s->C, OW);
  c.param = p;
  c.deps_og = 1; c.deps_in = 1; c.deps_out = 1;
  c.max_points = 200;
  return c;
}

static void check_pool(const pool_spec *s) {
  k_pool_param p = make_param(s);
  kt_case c = make_case(s, &p);
  k_tensor out[KT_MAX_IO];
  int64_t n = k_shape_numel(&c.out_shape[0]);
  KT_CHECK(kt_forward(&c, out) == 0, "%s forward rc", s->name);
  float *want = malloc((size_t)n * sizeof(float));
  ref_pool(s, c.in[0].data, want);
  KT_CHECK(kt_expect_close(s->name, out[0].data, want, n, 1e-5f, 1e-6f) == 0, "%s forward values", s->name);
  free(want);
  kt_tensor_free(&out[0]);
  kt_gradcheck(&c);
  kt_tensor_free(&c.in[0]);
}

static const pool_spec specs[] = {
  /* name                 2d N  C  H  W  kh kw sh sw ph pw type        global no_pad_count ceil */
  {"max2d 2x2 s2",         1, 2, 2, 6, 6, 2, 2, 2, 2, 0, 0, K_POOL_MAX, 0, 0, 0, 0, 0, 0},
  {"max2d 3x3 s2 pad1",    1, 2, 3, 7, 6, 3, 3, 2, 2, 1, 1, K_POOL_MAX, 0, 0, 0, 0, 0, 0},
  {"max2d 3x2 s1 pad",     1, 1, 2, 5, 5, 3, 2, 1, 1, 1, 1, K_POOL_MAX, 0, 0, 0, 0, 0, 0},
  {"avg2d 2x2 s2",         1, 2, 2, 6, 6, 2, 2, 2, 2, 0, 0, K_POOL_AVG, 0, 0, 0, 0, 0, 0},
  {"avg2d 3x3 s2 pad1",    1, 2, 3, 7, 6, 3, 3, 2, 2, 1, 1, K_POOL_AVG, 0, 0, 0, 0, 0, 0},
  {"max1d 3 s2 pad1",      0, 2, 3, 1, 9, 1, 3, 1, 2, 0, 1, K_POOL_MAX, 0, 0, 0, 0, 0, 0},
  {"avg1d 2 s1 pad1",      0, 2, 2, 1, 7, 1, 2, 1, 1, 0, 1, K_POOL_AVG, 0, 0, 0, 0, 0, 0},
  {"max2d global",         1, 2, 3, 4, 5, 4, 5, 1, 1, 0, 0, K_POOL_MAX, 1, 0, 0, 0, 0, 0},
  {"avg2d global",         1, 2, 3, 4, 5, 4, 5, 1, 1, 0, 0, K_POOL_AVG, 1, 0, 0, 0, 0, 0},
  {"avg1d global",         0, 2, 3, 1, 6, 1, 6, 1, 1, 0, 0, K_POOL_AVG, 1, 0, 0, 0, 0, 0},
  /* the whole-plane mean's interleaved sums: three full rounds and a tail (7x7), a plane of 1 */
  {"avg2d global 7x7",     1, 1, 5, 7, 7, 7, 7, 1, 1, 0, 0, K_POOL_AVG, 1, 0, 0, 0, 0, 0},
  {"avg2d global 1x1",     1, 2, 3, 1, 1, 1, 1, 1, 1, 0, 0, K_POOL_AVG, 1, 0, 0, 0, 0, 0},
  {"avg2d 7x7 window",     1, 1, 3, 7, 7, 7, 7, 1, 1, 0, 0, K_POOL_AVG, 0, 0, 0, 0, 0, 0},
  /* rows wider than the kernel's 256-column blocks */
  {"max1d wide 3 s1 pad1", 0, 1, 2, 1, 600, 1, 3, 1, 1, 0, 1, K_POOL_MAX, 0, 0, 0, 0, 0, 0},
  {"avg1d wide 4 s3 pad2", 0, 1, 2, 1, 800, 1, 4, 1, 3, 0, 2, K_POOL_AVG, 0, 0, 0, 0, 0, 0},
  {"max2d wide 2x3 s2",    1, 1, 2, 3, 700, 2, 3, 2, 2, 0, 1, K_POOL_MAX, 0, 0, 0, 0, 0, 0},
  /* beyond SPEC section 2: count_include_pad = 0, ceil_mode (the last windows hang past the
   * end), both, on max too; 1-D, and wide rows */
  {"avg2d 3x3 s2 pad1 nocount", 1, 2, 3, 7, 6, 3, 3, 2, 2, 1, 1, K_POOL_AVG, 0, 1, 0, 0, 0, 0},
  {"avg2d 3x3 s2 ceil",         1, 2, 2, 6, 8, 3, 3, 2, 2, 0, 0, K_POOL_AVG, 0, 0, 1, 0, 0, 0},
  {"avg2d 3x2 s2 pad1 ceil",    1, 1, 2, 6, 7, 3, 2, 2, 2, 1, 1, K_POOL_AVG, 0, 0, 1, 0, 0, 0},
  {"avg2d 3x3 s2 pad1 ceil nocount", 1, 1, 2, 6, 7, 3, 3, 2, 2, 1, 1, K_POOL_AVG, 0, 1, 1, 0, 0, 0},
  {"max2d 3x3 s2 pad1 ceil",    1, 1, 2, 6, 7, 3, 3, 2, 2, 1, 1, K_POOL_MAX, 0, 0, 1, 0, 0, 0},
  {"avg1d 4 s3 pad2 ceil nocount", 0, 2, 2, 1, 11, 1, 4, 1, 3, 0, 2, K_POOL_AVG, 0, 1, 1, 0, 0, 0},
  {"avg1d wide 4 s3 pad2 ceil", 0, 1, 2, 1, 800, 1, 4, 1, 3, 0, 2, K_POOL_AVG, 0, 0, 1, 0, 0, 0},
  {"avg1d wide 3 s2 pad1 nocount", 0, 1, 2, 1, 601, 1, 3, 1, 2, 0, 1, K_POOL_AVG, 0, 1, 0, 0, 0, 0},
  /* rows with many windows wholly inside (the blocked loop's unrolled 3x3 and 2x2 runs):
   * Inception's 3x3 stride-1 average, SqueezeNet's 3x3 stride-2 ceil max, a 2x2 max */
  {"avg2d 3x3 s1 pad1 13x12",   1, 1, 3, 13, 12, 3, 3, 1, 1, 1, 1, K_POOL_AVG, 0, 0, 0, 0, 0, 0},
  {"max2d 3x3 s2 ceil 13x13",   1, 1, 2, 13, 13, 3, 3, 2, 2, 0, 0, K_POOL_MAX, 0, 0, 1, 0, 0, 0},
  {"max2d 2x2 s2 pad1 11x12",   1, 1, 2, 11, 12, 2, 2, 2, 2, 1, 1, K_POOL_MAX, 0, 0, 0, 0, 0, 0},
  /* start and end pads that differ (ONNX's auto_pad SAME), either count, with ceil_mode, max */
  {"avg2d 2x2 s1 pads 0/1 nocount", 1, 2, 2, 5, 6, 2, 2, 1, 1, 0, 0, K_POOL_AVG, 0, 1, 0, 1, 1, 1},
  {"avg2d 3x3 s2 pads 1/0 nocount", 1, 1, 2, 7, 6, 3, 3, 2, 2, 1, 1, K_POOL_AVG, 0, 1, 0, 1, 0, 0},
  {"avg2d 3x3 s2 pads 0/1 count",   1, 1, 2, 7, 6, 3, 3, 2, 2, 0, 0, K_POOL_AVG, 0, 0, 0, 1, 1, 1},
  {"avg2d 3x3 s2 pads 1/0 ceil",    1, 1, 2, 6, 8, 3, 3, 2, 2, 1, 0, K_POOL_AVG, 0, 1, 1, 1, 0, 1},
  {"max2d 3x3 s2 pads 0/1",         1, 1, 2, 7, 6, 3, 3, 2, 2, 0, 1, K_POOL_MAX, 0, 0, 0, 1, 1, 0},
  {"avg1d wide 4 s3 pads 2/1 nocount", 0, 1, 2, 1, 800, 1, 4, 1, 3, 0, 2, K_POOL_AVG, 0, 1, 0, 1, 0, 1},
  /* column stride 2 without padding: k_pool.c's strips of 16 windows (AVX-512), with a
   * partial last strip, overlapping 3-wide windows, 1-D, and one-column windows */
  {"max2d 2x2 s2 strips",  1, 2, 3, 4, 70, 2, 2, 2, 2, 0, 0, K_POOL_MAX, 0, 0, 0, 0, 0, 0},
  {"max2d 3x3 s2 strips",  1, 1, 2, 7, 39, 3, 3, 2, 2, 0, 0, K_POOL_MAX, 0, 0, 0, 0, 0, 0},
  {"max1d 2 s2 strips",    0, 2, 2, 1, 50, 1, 2, 1, 2, 0, 0, K_POOL_MAX, 0, 0, 0, 0, 0, 0},
  {"max2d 2x1 s2",         1, 1, 2, 4, 33, 2, 1, 2, 2, 0, 0, K_POOL_MAX, 0, 0, 0, 0, 0, 0},
};

/* A window of equal values: torch puts the whole gradient on the first one. Padding counts as
 * -inf for max (an all-negative input must not produce 0) and as 0 for the average. */
static void test_ties_and_padding(void) {
  pool_spec s = {"ties", 1, 1, 1, 2, 2, 2, 2, 2, 2, 0, 0, K_POOL_MAX, 0, 0, 0, 0, 0, 0};
  k_pool_param p = make_param(&s);
  float x[4] = {3, 3, 1, 3}, y[1], dy[1] = {2}, dx[4];
  k_tensor xin = {x, kt_shape(4, 1, 1, 2, 2), K_F32}, yt = {y, kt_shape(4, 1, 1, 1, 1), K_F32};
  k_req w = kWriteTo;
  char err[64];
  k_call f = {&xin, 1, &yt, 1, &w, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  k_pooling_forward(&f);
  k_tensor bin[3] = {{dy, yt.shape, K_F32}, xin, yt}, dxt = {dx, xin.shape, K_F32};
  k_call b = {bin, 3, &dxt, 1, &w, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  k_pooling_backward(&b);
  KT_CHECK(y[0] == 3 && dx[0] == 2 && dx[1] == 0 && dx[3] == 0, "tie: y %g dx %g %g %g %g", y[0], dx[0], dx[1], dx[2], dx[3]);
  float neg[4] = {-4, -3, -2, -5};
  pool_spec sp = {"pad", 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, K_POOL_MAX, 0, 0, 0, 0, 0, 0};   /* 3x3 output */
  k_pool_param pp = make_param(&sp);
  float out9[9];
  k_tensor nin = {neg, xin.shape, K_F32}, o9 = {out9, kt_shape(4, 1, 1, 3, 3), K_F32};
  k_call fp = {&nin, 1, &o9, 1, &w, &pp, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  k_pooling_forward(&fp);
  KT_CHECK(out9[0] == -4 && out9[4] == -2 && out9[8] == -5, "max pad is -inf: %g %g %g", out9[0], out9[4], out9[8]);
  pp.pool_type = K_POOL_AVG;
  k_pooling_forward(&fp);
  KT_CHECK(fabsf(out9[0] - (-4.0f / 4)) < 1e-6f && fabsf(out9[4] - (-14.0f / 4)) < 1e-6f,
           "avg counts padding: %g %g", out9[0], out9[4]);
}

/* torch's scan, bit for bit: a strictly greater value or a NaN replaces the running max, so of
 * equal values (+0 and -0 too) the first wins and of NaNs the last. Rows of windows long enough
 * for several strips of the stride-2 path, with ties of +0/-0 and NaNs placed in every tap. */
static void test_scan_rule_bits(void) {
  enum { H = 5, W = 42, OH = 2, OW = 20 };   /* 3x3 windows, stride 2: overlapping rows and columns */
  float x[H * W], y[OH * OW], dy[OH * OW], dx[H * W], want_dx[H * W] = {0};
  for (int i = 0; i < H * W; i++) x[i] = (i % 7 == 3) ? -0.0f : (i % 5 == 1) ? 0.0f : (float)(i % 3) - 2.0f;
  x[5] = NAN; x[W + 17] = NAN; x[2 * W + 30] = -NAN; x[2 * W + 31] = NAN;
  for (int i = 0; i < OH * OW; i++) dy[i] = (float)(i + 1);
  pool_spec s = {"scan", 1, 1, 1, H, W, 3, 3, 2, 2, 0, 0, K_POOL_MAX, 0, 0, 0, 0, 0, 0};
  k_pool_param p = make_param(&s);
  k_tensor xin = {x, kt_shape(4, 1, 1, H, W), K_F32}, yt = {y, kt_shape(4, 1, 1, OH, OW), K_F32};
  k_req w = kWriteTo;
  char err[64];
  k_call f = {&xin, 1, &yt, 1, &w, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  KT_CHECK(k_pooling_forward(&f) == 0, "scan forward rc");
  k_tensor bin[3] = {{dy, yt.shape, K_F32}, xin, yt}, dxt = {dx, xin.shape, K_F32};
  k_call b = {bin, 3, &dxt, 1, &w, &p, NULL, 0, 0, 0, 1, err, sizeof err, NULL, NULL, NULL};
  KT_CHECK(k_pooling_backward(&b) == 0, "scan backward rc");
  int bad = 0;
  for (int oh = 0; oh < OH; oh++)
    for (int ow = 0; ow < OW; ow++) {
      float m = -INFINITY;
      int at = oh * 2 * W + ow * 2;
      for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
          int k = (oh * 2 + i) * W + ow * 2 + j;
          if (x[k] > m || x[k] != x[k]) m = x[k], at = k;
        }
      want_dx[at] += dy[oh * OW + ow];
      if (memcmp(&m, &y[oh * OW + ow], sizeof m) != 0) bad++;
    }
  KT_CHECK(bad == 0, "scan rule: %d outputs differ in their bits", bad);
  KT_CHECK(memcmp(dx, want_dx, sizeof dx) == 0, "scan rule: gradients not at the first maxima");
}

/* ---- channel-blocked forward ---- */

/* One forward of s with p's layouts (in_block, out_block) on x (NCHW, blocked here as p
 * asks), the result NCHW in y; rc of the kernel, message in err. */
static int pool_blocked_forward(const pool_spec *s, const k_pool_param *p, const float *x, float *y, k_req req,
                                char *err, size_t errn) {
  int OH = out_len(s->H, s->kh, s->sh, s->ph, end_h(s), s->ceil), OW = out_len(s->W, s->kw, s->sw, s->pw, end_w(s), s->ceil);
  if (s->global) OH = OW = 1;
  int64_t V = p->in_block ? p->in_block : 16, Cb = (s->C + V - 1) / V, P = (int64_t)s->H * s->W, OP = (int64_t)OH * OW;
  float *xb = p->in_block ? kt_to_blocked(x, s->N, s->C, P, V) : NULL;
  float *yb = p->out_block ? malloc((size_t)(s->N * Cb * OP * V) * sizeof(float)) : NULL;
  k_tensor xin = {xb ? xb : (float *)x, kt_shape(4, s->N, s->C, s->H, s->W), K_F32};
  k_tensor yt = {yb ? yb : y, kt_shape(4, s->N, s->C, OH, OW), K_F32};
  k_call c = {&xin, 1, &yt, 1, &req, p, NULL, 0, 0, 0, 0, err, errn, NULL, NULL, NULL};
  int rc = k_pooling_forward(&c);
  if (!rc && yb) kt_from_blocked(yb, s->N, s->C, OP, V, y);
  free(xb), free(yb);
  return rc;
}

/* Every 2-D spec, blocked in and out and blocked in only, at V = 8 and 16, on C = 5 and 19
 * channels (part-filled vectors) with NaN, -0 and ties in the data: the NCHW kernel's bits.
 * A second filling makes every value at most 0, with zeros of both signs tying as a window's
 * maximum and an infinity of each sign: rows without a NaN or an infinity take the max
 * instruction (k_pool.c, K_POOL_MAX_TAP), the others the general tap, and both must keep the
 * scan order's first zero. */
static void test_blocked(void) {
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    if (!specs[i].two_d) continue;
    for (int C = 5, zeros = 0; C <= 19; zeros ? (C += 14, zeros = 0) : (zeros = 1)) {
      pool_spec s = specs[i];
      s.C = C;
      k_pool_param p = make_param(&s);
      int64_t nx = (int64_t)s.N * C * s.H * s.W;
      float *x = malloc((size_t)nx * sizeof(float));
      fill_distinct(x, nx, 31);
      if (!zeros) {
        x[nx / 3] = NAN, x[nx / 2] = -0.0f, x[nx / 5] = x[nx / 5 + 1];
      } else {
        for (int64_t e = 0; e < nx; e++) x[e] = e % 5 == 0 ? -0.0f : e % 3 == 0 ? 0.0f : -fabsf(x[e]);
        x[nx / 4] = INFINITY, x[nx / 3] = -INFINITY;
      }
      int OH = s.global ? 1 : out_len(s.H, s.kh, s.sh, s.ph, end_h(&s), s.ceil);
      int OW = s.global ? 1 : out_len(s.W, s.kw, s.sw, s.pw, end_w(&s), s.ceil);
      int64_t ny = (int64_t)s.N * C * OH * OW;
      float *want = malloc((size_t)ny * sizeof(float)), *got = malloc((size_t)ny * sizeof(float));
      char err[160] = "";
      KT_CHECK(pool_blocked_forward(&s, &p, x, want, kWriteTo, err, sizeof err) == 0, "%s NCHW: %s", s.name, err);
      for (int V = 8; V <= 16; V += 8)
        for (int out_b = 0; out_b < 2; out_b++) {
          k_pool_param bp = p;
          bp.in_block = V, bp.out_block = out_b ? V : 0;
          KT_CHECK(pool_blocked_forward(&s, &bp, x, got, kWriteTo, err, sizeof err) == 0, "%s blocked: %s", s.name, err);
          KT_CHECK(memcmp(got, want, (size_t)ny * sizeof(float)) == 0, "%s C=%d V=%d out %s%s: not the NCHW kernel's bits",
                   s.name, C, V, out_b ? "blocked" : "NCHW", zeros ? ", signed zeros" : "");
        }
      free(x), free(want), free(got);
    }
  }
  /* what it cannot honour it refuses: a width other than 8 or 16, a blocked output from an
     NCHW input, 1-D, an accumulated output, and the backward pass */
  const pool_spec *s = &specs[0];
  k_pool_param p = make_param(s);
  float x[2 * 2 * 6 * 6] = {0}, y[2 * 2 * 3 * 3];
  char err[160] = "";
  k_pool_param bad = p;
  bad.in_block = 12;
  KT_CHECK(pool_blocked_forward(s, &bad, x, y, kWriteTo, err, sizeof err) != 0 && strstr(err, "8 or 16"), "width 12 accepted (%s)", err);
  bad = p, bad.out_block = 16;
  KT_CHECK(pool_blocked_forward(s, &bad, x, y, kWriteTo, err, sizeof err) != 0, "a blocked output from an NCHW input accepted");
  bad = p, bad.in_block = 16;
  KT_CHECK(pool_blocked_forward(s, &bad, x, y, kAddTo, err, sizeof err) != 0 && strstr(err, "accumulated"), "kAddTo accepted (%s)", err);
  const pool_spec *one = &specs[5];
  k_pool_param p1 = make_param(one);
  p1.in_block = 16;
  float x1[2 * 3 * 9] = {0}, y1[2 * 3 * 5];
  k_tensor xin = {x1, kt_shape(3, 2, 3, 9), K_F32}, yt = {y1, kt_shape(3, 2, 3, 5), K_F32};
  k_req w = kWriteTo;
  k_call c1 = {&xin, 1, &yt, 1, &w, &p1, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  KT_CHECK(k_pooling_forward(&c1) != 0 && strstr(err, "2-D"), "1-D blocked accepted (%s)", err);
  k_tensor bin[3] = {yt, xin, yt}, dxt = xin;
  k_call b1 = {bin, 3, &dxt, 1, &w, &p1, NULL, 0, 0, 0, 1, err, sizeof err, NULL, NULL, NULL};
  KT_CHECK(k_pooling_backward(&b1) != 0 && strstr(err, "NCHW"), "blocked backward accepted (%s)", err);
}

int main(void) {
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) check_pool(&specs[i]);
  test_blocked();
  test_ties_and_padding();
  test_scan_rule_bits();
  return kt_finish("test_pool");
}
