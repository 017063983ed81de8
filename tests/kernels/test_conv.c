/* test_conv.c — convolution 1-D and 2-D on the im2col path: forward values against a naive direct convolution in
 * double written here (stride, padding alike on both sides or not, dilation, groups, no_bias), gradient checks through the
 * shared harness, and the temp-space contract (too little temp space is an error). */
#include "kt_harness.h"

#include <stdlib.h>

typedef struct {
  const char *name;
  int two_d;
  int N, C, H, W, F, G;
  int kh, kw, sh, sw, ph, pw, dh, dw;
  int no_bias;
  int asym, phe, pwe;   /* asym: the pads at the end are phe, pwe (else ph, pw, as at the start) */
} conv_spec;

static int end_h(const conv_spec *s) { return s->asym ? s->phe : s->ph; }
static int end_w(const conv_spec *s) { return s->asym ? s->pwe : s->pw; }

static int out_len(int in, int k, int s, int b, int e, int d) { return (in + b + e - d * (k - 1) - 1) / s + 1; }
static int out_h(const conv_spec *s) { return out_len(s->H, s->kh, s->sh, s->ph, end_h(s), s->dh); }
static int out_w(const conv_spec *s) { return out_len(s->W, s->kw, s->sw, s->pw, end_w(s), s->dw); }

/* Direct definition: y[n,f,oh,ow] = b[f] + sum_{c in group, i, j} w[f,c,i,j] x[n, g*Cg + c, ...]. */
static void ref_conv(const conv_spec *s, const float *x, const float *w, const float *b, float *y) {
  int OH = out_h(s), OW = out_w(s);
  int Cg = s->C / s->G, Fg = s->F / s->G;
  for (int n = 0; n < s->N; n++)
    for (int f = 0; f < s->F; f++)
      for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
          double acc = b ? b[f] : 0.0;
          int g = f / Fg;
          for (int c = 0; c < Cg; c++)
            for (int i = 0; i < s->kh; i++)
              for (int j = 0; j < s->kw; j++) {
                int ih = oh * s->sh - s->ph + i * s->dh, iw = ow * s->sw - s->pw + j * s->dw;
                if (ih < 0 || ih >= s->H || iw < 0 || iw >= s->W) continue;
                acc += (double)w[((f * Cg + c) * s->kh + i) * s->kw + j] *
                       x[((n * s->C + g * Cg + c) * s->H + ih) * s->W + iw];
              }
          y[((n * s->F + f) * OH + oh) * OW + ow] = (float)acc;
        }
}

static k_conv_param make_param(const conv_spec *s) {
  k_conv_param p = {0};
  p.num_filter = s->F;
  p.num_group = s->G;
  p.no_bias = s->no_bias;
  int n = s->two_d ? 2 : 1;
  p.kernel.n = p.stride.n = p.pad.n = p.dilate.n = n;
  if (s->two_d) {
    p.kernel.v[0] = s->kh; p.stride.v[0] = s->sh; p.pad.v[0] = s->ph; p.dilate.v[0] = s->dh;
  }
  p.kernel.v[n - 1] = s->kw; p.stride.v[n - 1] = s->sw; p.pad.v[n - 1] = s->pw; p.dilate.v[n - 1] = s->dw;
  if (s->asym) {   /* every start, then every end */
    p.pad.n = 2 * n;
    if (s->two_d) p.pad.v[n] = s->phe;
    p.pad.v[2 * n - 1] = s->pwe;
  }
  return p;
}

static kt_case make_case(const conv_spec *s, const k_conv_param *p) {
  kt_case c = {0};
  int OH = out_h(s), OW = out_w(s);
  c.name = s->name; c.fwd = k_convolution_forward; c.bwd = k_convolution_backward;
  c.nargs = s->no_bias ? 2 : 3; c.nout = 1; c.nvisible = 1;
  c.in[0] = kt_tensor_f32(s->two_d ? kt_shape(4, s->N, s->C, s->H, s->W) : kt_shape(3, s->N, s->C, s->W), -1, 1, 11);
  c.in[1] = kt_tensor_f32(s->two_d ? kt_shape(4, s->F, s->C / s->G, s->kh, s->kw)
                                   : kt_shape(3, s->F, s->C / s->G, s->kw), -1, 1, 12);
  if (!s->no_bias) c.in[2] = kt_tensor_f32(kt_shape(1, s->F), -1, 1, 13);
  c.out_shape[0] = s->two_d ? kt_shape(4, s->N, s->F, OH, OW) : kt_shape(3, s->N, s->F, OW);
  c.param = p;
  c.temp_bytes = k_conv_temp_bytes(&c.in[0].shape, &c.in[1].shape, p);
  c.deps_og = 1; c.deps_in = 3;
  return c;
}

static void check_conv(const conv_spec *s) {
  k_conv_param p = make_param(s);
  kt_case c = make_case(s, &p);
  k_tensor out[KT_MAX_IO];
  int64_t n = k_shape_numel(&c.out_shape[0]);
  KT_CHECK(kt_forward(&c, out) == 0, "%s forward rc", s->name);
  float *want = malloc((size_t)n * sizeof(float));
  ref_conv(s, c.in[0].data, c.in[1].data, s->no_bias ? NULL : c.in[2].data, want);
  KT_CHECK(kt_expect_close(s->name, out[0].data, want, n, 1e-5f, 1e-5f) == 0, "%s forward values", s->name);
  free(want);
  kt_tensor_free(&out[0]);
  kt_gradcheck(&c);
  for (int j = 0; j < c.nargs; j++) kt_tensor_free(&c.in[j]);
}

static const conv_spec specs[] = {
  /* name                  2d N  C  H  W  F  G  kh kw sh sw ph pw dh dw nb */
  {"conv2d basic",          1, 2, 3, 6, 5, 4, 1, 3, 3, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0},
  {"conv2d stride pad",     1, 2, 2, 7, 6, 3, 1, 3, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0},
  {"conv2d dilate",         1, 1, 2, 8, 7, 2, 1, 3, 2, 1, 2, 1, 0, 2, 3, 0, 0, 0, 0},
  {"conv2d groups",         1, 2, 4, 5, 5, 6, 2, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},
  {"conv2d depthwise",      1, 1, 3, 5, 6, 3, 3, 3, 3, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0},
  {"conv2d no_bias",        1, 2, 3, 5, 5, 2, 1, 2, 2, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0},
  {"conv2d 1x1 pointwise",  1, 2, 4, 3, 3, 5, 1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0},
  {"conv2d 1x1 stride 2",   1, 2, 3, 5, 5, 2, 1, 1, 1, 2, 2, 0, 0, 1, 1, 0, 0, 0, 0},
  {"conv2d 1x1 groups",     1, 2, 4, 3, 4, 4, 2, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0},
  {"conv1d basic",          0, 2, 3, 1, 9, 4, 1, 1, 3, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0},
  {"conv1d stride pad dil", 0, 2, 2, 1, 11, 3, 1, 1, 3, 1, 2, 0, 2, 1, 2, 0, 0, 0, 0},
  {"conv1d groups no_bias", 0, 3, 4, 1, 7, 2, 2, 1, 2, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0},
  {"conv1d taps in padding", 0, 2, 2, 1, 3, 2, 1, 1, 3, 1, 1, 0, 2, 1, 2, 0, 0, 0, 0},
  /* 14 samples in 4 parts of 3, 4, 3, 4; at most 3 per chunk (400 columns each): chunks of 3
   * and of 2 + 2, through the staging buffer, and three weight-gradient partials */
  {"conv2d parts in chunks", 1, 14, 2, 20, 20, 3, 1, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},
  {"conv2d stride 3 pad 2",  1, 2, 2, 5, 7, 3, 1, 3, 4, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0},
  /* pads that differ at start and end (phe, pwe after the asym flag): one side only, stride
   * and dilation reaching into the end pad or stopping short of it, groups, 1-D, and a 1x1
   * kernel that is not pointwise because of its end pads alone */
  /* name                  2d N  C  H  W  F  G  kh kw sh sw ph pw dh dw nb as phe pwe */
  {"conv2d asym pads",      1, 2, 3, 6, 5, 4, 1, 3, 3, 1, 1, 0, 1, 1, 1, 0, 1, 2, 0},
  {"conv2d asym stride dil", 1, 2, 4, 7, 8, 6, 2, 3, 2, 2, 3, 2, 0, 2, 1, 0, 1, 0, 3},
  {"conv2d asym depthwise", 1, 2, 3, 6, 7, 6, 3, 3, 3, 2, 2, 0, 2, 1, 1, 1, 1, 1, 0},
  {"conv1d asym pads",      0, 2, 3, 1, 9, 4, 1, 1, 3, 1, 2, 0, 0, 1, 2, 0, 1, 0, 3},
  {"conv2d 1x1 end pads",   1, 2, 4, 3, 4, 5, 1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 1, 1, 2},
};

/* Less temp space than k_conv_temp_bytes asks for must be refused, not overrun. */
static void test_temp_contract(void) {
  conv_spec s = specs[1];
  k_conv_param p = make_param(&s);
  kt_case c = make_case(&s, &p);
  size_t need = c.temp_bytes;
  /* Two parts of one sample (S = 1): per part columns [C*kh*kw, OH*OW], no staging; one
   * weight-gradient partial [F, C*kh*kw]. */
  KT_CHECK(need == (size_t)(2 * (2 * 3 * 2) * 4 * 4 + 3 * 2 * 3 * 2) * sizeof(float), "temp bytes %zu", need);
  conv_spec big = {"", 1, 5, 3, 40, 40, 4, 1, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0};   /* OH*OW >= 1024: S = 1 */
  k_conv_param bp = make_param(&big);
  k_shape bx = kt_shape(4, 5, 3, 40, 40), bw = kt_shape(4, 4, 3, 3, 3);
  KT_CHECK(k_conv_temp_bytes(&bx, &bw, &bp) == (size_t)(4 * 3 * 9 * 1600 + 3 * 4 * 3 * 9) * sizeof(float),
           "temp bytes, 4 parts, S = 1");
  c.temp_bytes = need - 4;
  k_tensor out[KT_MAX_IO];
  KT_CHECK(kt_forward(&c, out) != 0, "forward with short temp space must fail");
  kt_tensor_free(&out[0]);
  for (int j = 0; j < c.nargs; j++) kt_tensor_free(&c.in[j]);
}

/* A first layer's data takes no gradient (req kNullOp): the weight and bias gradients must
 * still be right, through both the im2col and the pointwise paths. */
static void test_no_data_grad(const conv_spec *s) {
  k_conv_param p = make_param(s);
  kt_case c = make_case(s, &p);
  c.no_grad = 1;
  kt_gradcheck(&c);
  for (int j = 0; j < c.nargs; j++) kt_tensor_free(&c.in[j]);
}

int main(void) {
  /* This file checks the im2col path (its values, gradients and temp formula); the direct
   * path the dispatch prefers for most ungrouped shapes has test_conv_direct.c. */
  setenv("KILN_CONV", "im2col", 1);
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) check_conv(&specs[i]);
  test_no_data_grad(&specs[1]);
  test_no_data_grad(&specs[6]);
  test_no_data_grad(&specs[16]);   /* asymmetric pads */
  test_temp_contract();
  return kt_finish("test_conv");
}
