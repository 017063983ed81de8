/* test_conv_dw.c — the direct depthwise (and few-channels-per-group grouped) convolution of
 * k_conv_dw.c: forward values against a naive definition in double written here, and forward, data, weight and bias gradients
 * against the im2col path (KILN_CONV=grouped-im2col; test_conv.c checks that one), with
 * kWriteTo and kAddTo, with and without a data gradient, on shapes that hit the edges of the
 * phase-plane scheme — stride 1, 2 and 3, padding wider than the kernel reach, pads that differ
 * at start and end, dilation,
 * odd sizes, planes smaller and larger than a vector tile, channel multiplier 1, 2 and 3, 1-D,
 * batch 1 and batches split in parts, groups of 2 to 8 channels — for every instruction set
 * (KILN_CONV picks them; groups wider than the dispatch rule takes run under grouped-direct). The
 * workspace is filled with NaN first, so a read of a byte the kernel did not write shows.
 * Then finite-difference gradient checks of the path itself, 1- vs 2-thread bit identity,
 * the epilogue applied once to every output element, and the dispatch contract; and the
 * forward on channel-blocked tensors, which must give the NCHW path's bits. */
#include "kt_harness.h"
#include "k_conv_dw.h"
#include "k_epilogue.h"
#include "k_parallel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *name;
  int two_d;
  int N, C, M, H, W;
  int kh, kw, sh, sw, ph, pw, dh, dw;
  int no_bias;
  int cg;          /* input channels per group: 1 depthwise; groups = C / cg, M filters each */
  int asym, phe, pwe;   /* asym: the pads at the end are phe, pwe (else ph, pw, as at the start) */
} dw_spec;

static const dw_spec specs[] = {
  /* name                      2d N  C  M  H   W  kh kw sh sw ph pw dh dw nb cg */
  {"3x3 s1 pad 1",              1, 2, 5, 1, 7,  9, 3, 3, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0},
  {"3x3 s2 pad 1",              1, 2, 6, 1, 11, 8, 3, 3, 2, 2, 1, 1, 1, 1, 0, 1, 0, 0, 0},
  {"3x3 s2 even input",         1, 1, 4, 1, 14, 14, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0},
  {"multiplier 2",              1, 2, 3, 2, 9,  10, 3, 3, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0},
  {"multiplier 3 stride 2",     1, 3, 2, 3, 8,  7, 3, 3, 2, 2, 1, 1, 1, 1, 0, 1, 0, 0, 0},
  {"dilation 2",                1, 2, 4, 1, 12, 11, 3, 3, 1, 1, 2, 2, 2, 2, 0, 1, 0, 0, 0},
  {"stride 2 pad 2, wide rows",  1, 1, 2, 1, 9,  70, 5, 5, 2, 2, 2, 2, 1, 1, 0, 1, 0, 0, 0},
  {"stride 2 pad 0, odd width",  1, 2, 2, 1, 10, 37, 3, 3, 2, 2, 0, 0, 1, 1, 0, 1, 0, 0, 0},
  {"dilation + stride 2",       1, 2, 3, 2, 13, 15, 3, 3, 2, 2, 1, 3, 2, 3, 0, 1, 0, 0, 0},
  {"stride 3, uneven kernel",   1, 2, 3, 1, 10, 13, 3, 2, 3, 3, 2, 1, 1, 1, 1, 1, 0, 0, 0},
  {"pad wider than reach",      1, 1, 2, 1, 5,  6, 2, 2, 1, 2, 3, 2, 1, 1, 0, 1, 0, 0, 0},
  {"no padding 5x5",            1, 2, 3, 1, 12, 12, 5, 5, 1, 1, 0, 0, 1, 1, 0, 1, 0, 0, 0},
  {"1x1 stride 2",              1, 2, 3, 2, 9,  9, 1, 1, 2, 2, 0, 0, 1, 1, 1, 1, 0, 0, 0},
  {"wide plane, many tiles",    1, 1, 3, 1, 20, 61, 3, 3, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0},
  {"tall kernel, 1 wide out",   1, 2, 2, 1, 9,  3, 4, 3, 1, 1, 0, 0, 1, 1, 0, 1, 0, 0, 0},
  {"7x7 plane (mobilenet end)", 1, 1, 24, 1, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0},
  {"5x5 on 7x7 (mnasnet end)",  1, 2, 20, 1, 7, 7, 5, 5, 1, 1, 2, 2, 1, 1, 0, 1, 0, 0, 0},
  {"7x7 s1 pad 3 (convnext)",   1, 2, 3, 1, 19, 35, 7, 7, 1, 1, 3, 3, 1, 1, 0, 1, 0, 0, 0},
  {"7x7 on 7x7, multiplier 2",  1, 1, 4, 2, 7, 7, 7, 7, 1, 1, 3, 3, 1, 1, 1, 1, 0, 0, 0},
  {"5x7 kernel, no padding",    1, 2, 2, 1, 12, 40, 5, 7, 1, 1, 0, 0, 1, 1, 0, 1, 0, 0, 0},
  {"batch 1",                   1, 1, 8, 1, 8,  8, 3, 3, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0},
  {"batch 6 in 4 parts",        1, 6, 3, 2, 6,  5, 3, 3, 2, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0},
  {"1-D",                       0, 3, 4, 1, 1,  29, 1, 3, 1, 1, 0, 1, 1, 1, 0, 1, 0, 0, 0},
  {"1-D stride pad dilate",     0, 2, 3, 2, 1,  40, 1, 5, 1, 2, 0, 3, 1, 2, 0, 1, 0, 0, 0},
  {"1-D stride 3",              0, 2, 2, 1, 1,  17, 1, 4, 1, 3, 0, 2, 1, 1, 1, 1, 0, 0, 0},
  {"groups of 2",               1, 2, 8, 2, 7,  9, 3, 3, 1, 1, 1, 1, 1, 1, 0, 2, 0, 0, 0},
  {"groups of 3, stride 2",     1, 3, 6, 1, 9,  8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 3, 0, 0, 0},
  {"groups of 4, M 3, dilation", 1, 2, 8, 3, 10, 11, 3, 3, 1, 2, 2, 1, 2, 1, 0, 4, 0, 0, 0},
  {"groups of 8",               1, 2, 16, 4, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 0, 8, 0, 0, 0},
  {"groups of 20 (forced)",     1, 2, 40, 1, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 0, 20, 0, 0, 0},
  {"1-D groups of 2",           0, 2, 6, 2, 1,  20, 1, 3, 1, 2, 0, 1, 1, 1, 0, 2, 0, 0, 0},
  /* pads that differ at start and end (phe, pwe after the asym flag): the start or the end
     alone, odd and even totals at stride 2 (which decide how the phase planes split), stride
     3, groups, 1-D */
  /* name                      2d N  C  M  H   W  kh kw sh sw ph pw dh dw nb cg as phe pwe */
  {"asym s1",                   1, 2, 5, 1, 7,  9, 3, 3, 1, 1, 0, 2, 1, 1, 0, 1, 1, 2, 0},
  {"asym s2, odd totals",       1, 2, 6, 1, 11, 8, 3, 3, 2, 2, 1, 0, 1, 1, 0, 1, 1, 0, 1},
  {"asym s2 dilation, M 2",     1, 2, 3, 2, 13, 15, 3, 3, 2, 2, 0, 3, 2, 2, 1, 1, 1, 2, 0},
  {"asym stride 3",             1, 2, 3, 1, 10, 13, 3, 2, 3, 3, 2, 0, 1, 1, 0, 1, 1, 0, 2},
  {"asym groups of 4",          1, 2, 8, 3, 10, 11, 3, 3, 1, 2, 1, 0, 2, 1, 0, 4, 1, 0, 2},
  {"1-D asym",                  0, 2, 3, 2, 1,  40, 1, 5, 1, 2, 0, 0, 1, 2, 0, 1, 1, 0, 3},
};

static int end_h(const dw_spec *s) { return s->asym ? s->phe : s->ph; }
static int end_w(const dw_spec *s) { return s->asym ? s->pwe : s->pw; }

static int out_len(int in, int k, int s, int b, int e, int d) { return (in + b + e - d * (k - 1) - 1) / s + 1; }
static int out_h(const dw_spec *s) { return out_len(s->H, s->kh, s->sh, s->ph, end_h(s), s->dh); }
static int out_w(const dw_spec *s) { return out_len(s->W, s->kw, s->sw, s->pw, end_w(s), s->dw); }

static k_conv_param dw_param(const dw_spec *s) {
  k_conv_param p = {0};
  int n = s->two_d ? 2 : 1;
  p.num_filter = s->C / s->cg * s->M;
  p.num_group = s->C / s->cg;
  p.no_bias = s->no_bias;
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

typedef struct { k_tensor x, w, b, y, dy; } dw_data;

static const dw_spec *spec(const char *name);

static dw_data dw_make(const dw_spec *s) {
  int F = s->C / s->cg * s->M;
  int OH = out_h(s), OW = out_w(s);
  dw_data d;
  d.x = kt_tensor_f32(s->two_d ? kt_shape(4, s->N, s->C, s->H, s->W) : kt_shape(3, s->N, s->C, s->W), -1, 1, 31);
  d.w = kt_tensor_f32(s->two_d ? kt_shape(4, F, s->cg, s->kh, s->kw) : kt_shape(3, F, s->cg, s->kw), -1, 1, 32);
  d.b = kt_tensor_f32(kt_shape(1, F), -1, 1, 33);
  k_shape ys = s->two_d ? kt_shape(4, s->N, F, OH, OW) : kt_shape(3, s->N, F, OW);
  d.y = kt_tensor_f32(ys, -1, 1, 34);
  d.dy = kt_tensor_f32(ys, -1, 1, 35);
  return d;
}

static void dw_free(dw_data *d) {
  kt_tensor_free(&d->x); kt_tensor_free(&d->w); kt_tensor_free(&d->b);
  kt_tensor_free(&d->y); kt_tensor_free(&d->dy);
}

/* y[n, f, oh, ow] = b[f] + sum_{c, i, j} w[f, c, i, j] x[n, (f / M) * cg + c, oh*sh - ph + i*dh, ow*sw - pw + j*dw]. */
static void ref_dw(const dw_spec *s, const float *x, const float *w, const float *b, float *y) {
  int OH = out_h(s), OW = out_w(s);
  int F = s->C / s->cg * s->M;
  for (int n = 0; n < s->N; n++)
    for (int f = 0; f < F; f++)
      for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
          double acc = b ? b[f] : 0.0;
          for (int c = 0; c < s->cg; c++)
            for (int i = 0; i < s->kh; i++)
              for (int j = 0; j < s->kw; j++) {
                int ih = oh * s->sh - s->ph + i * s->dh, iw = ow * s->sw - s->pw + j * s->dw;
                if (ih < 0 || ih >= s->H || iw < 0 || iw >= s->W) continue;
                acc += (double)w[((f * s->cg + c) * s->kh + i) * s->kw + j] *
                       x[((n * s->C + f / s->M * s->cg + c) * s->H + ih) * s->W + iw];
              }
          y[((n * F + f) * OH + oh) * OW + ow] = (float)acc;
        }
}

/* Temp space full of NaN, so a kernel that reads what it never wrote poisons its result. */
static void *dw_temp(size_t bytes) {
  float *t = malloc(bytes + sizeof(float));
  for (size_t i = 0; i < bytes / sizeof(float) + 1; i++) t[i] = NAN;
  return t;
}

/* One forward under KILN_CONV=mode (NULL: unset); out starts as `init`. Returns whether the
 * depthwise path ran. */
static int dw_forward(const dw_spec *s, const k_conv_param *p, dw_data *d, const char *mode, k_req req,
                      const float *init, float *out, const k_epilogue *epi, const k_tensor *extra, int nextra) {
  if (mode) setenv("KILN_CONV", mode, 1); else unsetenv("KILN_CONV");
  k_tensor in[8] = {d->x, d->w, d->b};
  for (int i = 0; i < nextra; i++) in[3 + i] = extra[i];
  k_tensor o = d->y;
  o.data = out;
  memcpy(out, init, (size_t)k_shape_numel(&o.shape) * sizeof(float));
  size_t tb = k_conv_temp_bytes(&d->x.shape, &d->w.shape, p);
  void *temp = dw_temp(tb);
  char err[128] = "";
  k_call c = {in, 3 + nextra, &o, 1, &req, p, temp, tb, 0, 0, 0, err, sizeof err, NULL, epi, NULL};
  int dw = k_conv_dw_runs(&c, &d->x.shape, &d->w.shape);
  int rc = k_convolution_forward(&c);
  free(temp);
  KT_CHECK(rc == 0, "%s forward: %s", s->name, err);
  return dw;
}

/* One backward: grads [dx, dw, db] start as the `init` copies. */
static int dw_backward(const dw_spec *s, const k_conv_param *p, dw_data *d, const char *mode,
                       const k_req req[3], float *const init[3], float *grads[3]) {
  if (mode) setenv("KILN_CONV", mode, 1); else unsetenv("KILN_CONV");
  k_tensor in[5] = {d->dy, d->x, d->w, d->b, d->y};
  in[4].data = NULL;
  if (s->no_bias) in[3].data = NULL;
  k_tensor out[3] = {d->x, d->w, d->b};
  for (int i = 0; i < 3; i++) {
    out[i].data = grads[i];
    memcpy(grads[i], init[i], (size_t)k_shape_numel(&out[i].shape) * sizeof(float));
  }
  size_t tb = k_conv_temp_bytes(&d->x.shape, &d->w.shape, p);
  void *temp = dw_temp(tb);
  char err[128] = "";
  k_call c = {in, 5, out, s->no_bias ? 2 : 3, req, p, temp, tb, 0, 0, 1, err, sizeof err, NULL, NULL, NULL};
  int dw = k_conv_dw_runs(&c, &d->x.shape, &d->w.shape);
  int rc = k_convolution_backward(&c);
  free(temp);
  KT_CHECK(rc == 0, "%s backward: %s", s->name, err);
  return dw;
}

/* NULL: the widest instruction set (on AVX-512 the stride-1 planes of 3, 5 or 7 taps a row
 * run k_dw_srows_kw, whose bits dw_blocked holds to the blocked forward's); the others narrow it (on a CPU without one, the path
 * picks a narrower one). */
static const char *const modes[] = {NULL, "direct-avx2", "direct-generic"};

static void dw_compare(const dw_spec *s, const char *mode, k_req req) {
  k_conv_param p = dw_param(s);
  dw_data d = dw_make(s);
  char what[160];
  const char *mname = mode ? mode : "default";
  int64_t ny = k_shape_numel(&d.y.shape);
  float *init = kt_data_copy(&d.y), *want = malloc((size_t)ny * sizeof(float)), *got = malloc((size_t)ny * sizeof(float));
  ref_dw(s, d.x.data, d.w.data, s->no_bias ? NULL : d.b.data, want);
  if (req == kAddTo)
    for (int64_t i = 0; i < ny; i++) want[i] += init[i];
  KT_CHECK(dw_forward(s, &p, &d, mode, req, init, got, NULL, NULL, 0), "%s: %s did not take the depthwise path", s->name, mname);
  snprintf(what, sizeof what, "%s %s forward req %d", s->name, mname, (int)req);
  KT_CHECK(kt_expect_close(what, got, want, ny, 1e-5f, 1e-5f) == 0, "%s", what);

  /* Backward against im2col: every gradient, then without the data gradient (a first layer). */
  const k_tensor *shp[3] = {&d.x, &d.w, &d.b};
  float *ginit[3], *gwant[3], *ggot[3];
  for (int i = 0; i < 3; i++) {
    ginit[i] = kt_data_copy(shp[i]);
    gwant[i] = kt_data_copy(shp[i]);
    ggot[i] = kt_data_copy(shp[i]);
  }
  for (int no_dx = 0; no_dx < 2; no_dx++) {
    k_req r[3] = {no_dx ? kNullOp : req, req, s->no_bias ? kNullOp : req};
    KT_CHECK(!dw_backward(s, &p, &d, "grouped-im2col", r, ginit, gwant), "%s: grouped-im2col took the depthwise path", s->name);
    KT_CHECK(dw_backward(s, &p, &d, mode, r, ginit, ggot), "%s: %s backward not depthwise", s->name, mname);
    static const char *const names[3] = {"dx", "dw", "db"};
    for (int i = 0; i < (s->no_bias ? 2 : 3); i++) {
      snprintf(what, sizeof what, "%s %s %s req %d%s", s->name, mname, names[i], (int)r[i], no_dx ? " (no dx)" : "");
      KT_CHECK(kt_expect_close(what, ggot[i], gwant[i], k_shape_numel(&shp[i]->shape), 1e-4f, 1e-4f) == 0, "%s", what);
    }
  }
  for (int i = 0; i < 3; i++) { free(ginit[i]); free(gwant[i]); free(ggot[i]); }
  free(init); free(want); free(got);
  dw_free(&d);
}

/* Finite differences on the depthwise path itself (kWriteTo and kAddTo, via the harness). */
static void dw_gradcheck(const dw_spec *s, const char *mode) {
  if (mode) setenv("KILN_CONV", mode, 1); else unsetenv("KILN_CONV");
  k_conv_param p = dw_param(s);
  dw_data d = dw_make(s);
  kt_case c = {0};
  c.name = s->name; c.fwd = k_convolution_forward; c.bwd = k_convolution_backward;
  c.nargs = s->no_bias ? 2 : 3; c.nout = 1; c.nvisible = 1;
  c.in[0] = d.x; c.in[1] = d.w; c.in[2] = d.b;
  c.out_shape[0] = d.y.shape;
  c.param = &p;
  c.temp_bytes = k_conv_temp_bytes(&d.x.shape, &d.w.shape, &p);
  c.deps_og = 1; c.deps_in = 3;
  KT_CHECK(k_conv_dw_temp_bytes(&d.x.shape, &d.w.shape, &p) > 0, "%s: depthwise path not wanted", s->name);
  kt_gradcheck(&c);
  dw_free(&d);
}

/* The same forward and backward with 1 and with 2 threads: the same bits (the weight gradient
 * sums the batch's parts in a fixed order). */
static void dw_threads(const dw_spec *s) {
  k_conv_param p = dw_param(s);
  dw_data d = dw_make(s);
  int64_t ny = k_shape_numel(&d.y.shape);
  const k_tensor *shp[3] = {&d.x, &d.w, &d.b};
  float *init = kt_data_copy(&d.y), *y[2], *ginit[3], *g[2][3];
  for (int i = 0; i < 3; i++) ginit[i] = kt_data_copy(shp[i]);
  k_req r[3] = {kWriteTo, kWriteTo, kWriteTo};
  for (int t = 0; t < 2; t++) {
    k_parallel_set_threads(t + 1);
    y[t] = malloc((size_t)ny * sizeof(float));
    for (int i = 0; i < 3; i++) g[t][i] = kt_data_copy(shp[i]);
    KT_CHECK(dw_forward(s, &p, &d, NULL, kWriteTo, init, y[t], NULL, NULL, 0), "%s: threads: not depthwise", s->name);
    dw_backward(s, &p, &d, NULL, r, ginit, g[t]);
  }
  k_parallel_set_threads(0);
  KT_CHECK(!memcmp(y[0], y[1], (size_t)ny * sizeof(float)), "%s: forward differs between 1 and 2 threads", s->name);
  for (int i = 0; i < 3; i++)
    KT_CHECK(!memcmp(g[0][i], g[1][i], (size_t)k_shape_numel(&shp[i]->shape) * sizeof(float)),
             "%s: gradient %d differs between 1 and 2 threads", s->name, i);
  for (int t = 0; t < 2; t++) {
    free(y[t]);
    for (int i = 0; i < 3; i++) free(g[t][i]);
  }
  for (int i = 0; i < 3; i++) free(ginit[i]);
  free(init);
  dw_free(&d);
}

/* MobileNet's tail, batch_norm (predict) + clip to [0, 6], run by the kernel on each run of
 * planes it writes: the same bits as the plain forward followed by the epilogue over the whole
 * output in one go, which it is not if a block is missed or done twice. */
static void dw_epilogue(const dw_spec *s) {
  k_conv_param p = dw_param(s);
  dw_data d = dw_make(s);
  int F = s->C / s->cg * s->M;
  int64_t ny = k_shape_numel(&d.y.shape);
  k_tensor bn[4];
  for (int i = 0; i < 4; i++) bn[i] = kt_tensor_f32(kt_shape(1, F), i == 3 ? 0.5f : -1.0f, 1.5f, 40 + i);
  k_epilogue e = {0};
  e.nsteps = 2;
  e.step[0].kind = K_EPI_AFFINE;
  e.step[0].slot = 3;
  e.step[0].eps = 1e-5f;
  e.step[0].channels = F;
  e.step[0].inner = ny / (s->N * F);
  e.step[1].kind = K_EPI_UNARY;
  e.step[1].fn = k_epi_fn_lookup("clip");
  k_clip_param clip = {0.0f, 6.0f};
  memcpy(e.step[1].param, &clip, sizeof clip);
  e.step[1].has_param = 1;
  KT_CHECK(e.step[1].fn >= 0 && k_epi_valid(&e, 7, 1), "%s: epilogue not valid", s->name);
  float *init = kt_data_copy(&d.y), *got = malloc((size_t)ny * sizeof(float)), *want = malloc((size_t)ny * sizeof(float));
  KT_CHECK(dw_forward(s, &p, &d, NULL, kWriteTo, init, got, &e, bn, 4), "%s: epilogue: not depthwise", s->name);
  dw_forward(s, &p, &d, NULL, kWriteTo, init, want, NULL, NULL, 0);
  k_tensor in[7] = {d.x, d.w, d.b, bn[0], bn[1], bn[2], bn[3]}, o = d.y;
  o.data = want;
  k_req req = kWriteTo;
  k_call c = {in, 7, &o, 1, &req, &p, NULL, 0, 0, 0, 0, NULL, 0, NULL, &e, NULL};
  k_epi_apply(&c, 0, ny);
  KT_CHECK(!memcmp(got, want, (size_t)ny * sizeof(float)), "%s: fused epilogue differs from the plain one", s->name);
  free(init); free(got); free(want);
  for (int i = 0; i < 4; i++) kt_tensor_free(&bn[i]);
  dw_free(&d);
}

/* ---- the forward on channel-blocked tensors (k_conv_dw_blocked.h) ---- */

/* x [N][C][S] (S positions a plane) -> [N][ceil(C / V)][S][V]; lanes past C get NaN, which
 * must not reach a real lane. */
static float *dw_to_blocked(const float *x, int64_t N, int64_t C, int64_t S, int64_t V) {
  int64_t Cb = (C + V - 1) / V;
  float *b = malloc((size_t)(N * Cb * S * V) * sizeof(float));
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < Cb * V; c++)
      for (int64_t q = 0; q < S; q++)
        b[((n * Cb + c / V) * S + q) * V + c % V] = c < C ? x[(n * C + c) * S + q] : NAN;
  return b;
}

static void dw_from_blocked(const float *b, int64_t N, int64_t C, int64_t S, int64_t V, float *x) {
  int64_t Cb = (C + V - 1) / V;
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t q = 0; q < S; q++) x[(n * C + c) * S + q] = b[((n * Cb + c / V) * S + q) * V + c % V];
}

/* The cache the blocked forwards pass their calls (NULL: none; dw_blocked_cached sets it). */
static k_cache *dw_cache;

/* One blocked forward at width V (in, out and epilogue blocked alike unless `out_v` differs),
 * its output unpacked into got; returns the kernel's return code, its message in err. */
static int dw_forward_blocked(const dw_spec *s, dw_data *d, int64_t V, int64_t out_v, const char *mode,
                              const k_epilogue *epi, const k_tensor *extra, int nextra, float *got, char *err) {
  if (mode) setenv("KILN_CONV", mode, 1); else unsetenv("KILN_CONV");
  k_conv_param p = dw_param(s);
  p.in_block = (int32_t)V, p.out_block = p.epi_block = (int32_t)out_v;
  int64_t F = s->C / s->cg * s->M, HW = (int64_t)s->H * s->W, OHW = (int64_t)out_h(s) * out_w(s);
  float *xb = dw_to_blocked(d->x.data, s->N, s->C, HW, V);
  float *yb = malloc((size_t)(s->N * ((F + V - 1) / V) * OHW * V) * sizeof(float));
  k_tensor in[8] = {d->x, d->w, d->b}, o = d->y;
  for (int i = 0; i < nextra; i++) in[3 + i] = extra[i];
  in[0].data = xb, o.data = yb;
  size_t tb = k_conv_temp_bytes(&d->x.shape, &d->w.shape, &p);
  void *temp = dw_temp(tb);
  k_req req = kWriteTo;
  k_call c = {in, 3 + nextra, &o, 1, &req, &p, temp, tb, 0, 0, 0, err, 160, dw_cache, epi, NULL};
  err[0] = 0;
  int rc = k_convolution_forward(&c);
  if (!rc) dw_from_blocked(yb, s->N, F, OHW, V, got);
  free(temp), free(xb), free(yb);
  return rc;
}

/* The blocked forward gives the NCHW path's bits, on the same instruction set, at widths 8 and
 * 16, with the planes' padding lanes NaN, with 1, 2 and 4 threads (batch-1 rows cut into
 * parts), small planes copied zero-padded first and not (KILN_DW_PAD=0), with batch_norm + clip
 * (MobileNet's tail) run blocked on each run of rows, and with a relu or a clip alone run in the
 * store. The
 * bits are the optimised build's promise (both loops' multiply-adds contracted alike); in the
 * sanitizer build (its instrumentation, or -O0) GCC contracts some of one loop's and not the
 * other's, an ulp apart at a few positions, so there the two must agree to 1e-6 of their
 * magnitude. */
#if defined(__OPTIMIZE__) && !defined(KILN_SANITIZE)
#define DW_SAME(got, want, n) (!memcmp((got), (want), (size_t)(n) * 4))
#else
#define DW_SAME(got, want, n) (kt_expect_close("blocked", (got), (want), (n), 1e-6f, 1e-6f) == 0)
#endif
static void dw_blocked(const dw_spec *s) {
  static const int threads[] = {1, 2, 4};
  dw_data d = dw_make(s);
  int64_t ny = k_shape_numel(&d.y.shape);
  k_conv_param p = dw_param(s);
  float *init = kt_data_copy(&d.y), *want = malloc((size_t)ny * 4), *got = malloc((size_t)ny * 4);
  char err[160];
  for (int64_t V = 8; V <= 16; V += 8)
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
      dw_forward(s, &p, &d, modes[m], kWriteTo, init, want, NULL, NULL, 0);
      for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
        k_parallel_set_threads(threads[t]);
        KT_CHECK(dw_forward_blocked(s, &d, V, V, modes[m], NULL, NULL, 0, got, err) == 0, "%s blocked: %s", s->name, err);
        KT_CHECK(DW_SAME(got, want, ny), "%s blocked V=%d %s, %d threads: not the NCHW path's bits", s->name,
                 (int)V, modes[m] ? modes[m] : "default", threads[t]);
      }
      k_parallel_set_threads(0);
      setenv("KILN_DW_PAD", "0", 1);   /* small planes unpadded too: the edge positions' own loop */
      KT_CHECK(dw_forward_blocked(s, &d, V, V, modes[m], NULL, NULL, 0, got, err) == 0, "%s blocked: %s", s->name, err);
      KT_CHECK(DW_SAME(got, want, ny), "%s blocked V=%d %s, unpadded: not the NCHW path's bits", s->name, (int)V,
               modes[m] ? modes[m] : "default");
      unsetenv("KILN_DW_PAD");
    }
  /* the epilogue: batch_norm over the channels, then clip */
  int64_t F = s->C / s->cg * s->M;
  k_tensor bn[4];
  for (int i = 0; i < 4; i++) bn[i] = kt_tensor_f32(kt_shape(1, F), i == 3 ? 0.5f : -1.0f, 1.5f, 50 + i);
  k_epilogue e = {0};
  e.nsteps = 2;
  e.step[0] = (k_epi_step){.kind = K_EPI_AFFINE, .slot = 3, .eps = 1e-5f, .channels = F, .inner = ny / (s->N * F)};
  e.step[1] = (k_epi_step){.kind = K_EPI_UNARY, .fn = k_epi_fn_lookup("clip"), .has_param = 1};
  k_clip_param clip = {0.0f, 6.0f};
  memcpy(e.step[1].param, &clip, sizeof clip);
  dw_forward(s, &p, &d, NULL, kWriteTo, init, want, &e, bn, 4);
  KT_CHECK(dw_forward_blocked(s, &d, 16, 16, NULL, &e, bn, 4, got, err) == 0, "%s blocked epilogue: %s", s->name, err);
  KT_CHECK(DW_SAME(got, want, ny), "%s blocked epilogue: not the NCHW path's bits", s->name);
  /* a relu alone and a clip alone: run in the blocked store (k_dw_brows' tail), not as a pass */
  k_clip_param narrow = {-0.25f, 0.25f};
  for (int which = 0; which < 2; which++) {
    k_epilogue t = {.nsteps = 1};
    t.step[0] = (k_epi_step){.kind = K_EPI_UNARY, .fn = k_epi_fn_lookup(which ? "clip" : "relu"), .has_param = which};
    memcpy(t.step[0].param, &narrow, sizeof narrow);
    for (int64_t V = 8; V <= 16; V += 8)
      for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        dw_forward(s, &p, &d, modes[m], kWriteTo, init, want, &t, NULL, 0);
        KT_CHECK(dw_forward_blocked(s, &d, V, V, modes[m], &t, NULL, 0, got, err) == 0, "%s blocked tail: %s", s->name, err);
        KT_CHECK(DW_SAME(got, want, ny), "%s blocked V=%d %s with a %s in the store: not the NCHW path's bits", s->name,
                 (int)V, modes[m] ? modes[m] : "default", which ? "clip" : "relu");
      }
  }
  for (int i = 0; i < 4; i++) kt_tensor_free(&bn[i]);
  free(init), free(want), free(got);
  dw_free(&d);
}

/* A predict program's cache (weights and bias stable) holds the packed weights from the first
 * call on: the same bits as packing per call, reused while the key stands, packed again from
 * the new weights once the key is cleared; unstable inputs leave the cache alone. */
static void dw_blocked_cached(const dw_spec *s) {
  dw_data d = dw_make(s);
  int64_t ny = k_shape_numel(&d.y.shape), nw = k_shape_numel(&d.w.shape);
  float *want = malloc((size_t)ny * 4), *got = malloc((size_t)ny * 4);
  char err[160];
  k_cache cache = {NULL, 0, 0, 0x6u};
  for (int round = 0; round < 2; round++) {   /* the weights as made, then doubled */
    dw_cache = NULL;
    KT_CHECK(dw_forward_blocked(s, &d, 16, 16, NULL, NULL, NULL, 0, want, err) == 0, "%s: %s", s->name, err);
    dw_cache = &cache;
    for (int call = 0; call < 2; call++) {
      KT_CHECK(dw_forward_blocked(s, &d, 16, 16, NULL, NULL, NULL, 0, got, err) == 0, "%s cached: %s", s->name, err);
      KT_CHECK(cache.key != 0 && !memcmp(got, want, (size_t)ny * 4), "%s: cached call %d (weights %d) differs or not kept",
               s->name, call, round);
    }
    for (int64_t i = 0; i < nw; i++) ((float *)d.w.data)[i] *= 2.0f;
    cache.key = 0;   /* what the runtime does when weights change */
  }
  k_cache unstable = {NULL, 0, 0, 0x1u};
  dw_cache = &unstable;
  KT_CHECK(dw_forward_blocked(s, &d, 16, 16, NULL, NULL, NULL, 0, got, err) == 0 && unstable.key == 0 && !unstable.data,
           "%s: unstable weights cached", s->name);
  dw_cache = NULL;
  free(cache.data), free(want), free(got);
  dw_free(&d);
}

/* What the blocked forward cannot honour it refuses with a message: an NCHW output beside a
 * blocked input, and a group of more than one channel. What it can, it runs whatever
 * KILN_CONV says at run time. */
static void dw_blocked_refused(void) {
  char err[160];
  for (int m = 0; m < 2; m++) {
    dw_data e = dw_make(spec("3x3 s2 pad 1"));
    float *out = malloc((size_t)k_shape_numel(&e.y.shape) * 4);
    KT_CHECK(dw_forward_blocked(spec("3x3 s2 pad 1"), &e, 16, 16, m ? "grouped-im2col" : "im2col", NULL, NULL, 0, out, err) == 0,
             "a blocked layer under KILN_CONV=%s: %s", m ? "grouped-im2col" : "im2col", err);
    free(out);
    dw_free(&e);
  }
  dw_data d = dw_make(spec("3x3 s1 pad 1"));
  float *got = malloc((size_t)k_shape_numel(&d.y.shape) * 4);
  KT_CHECK(dw_forward_blocked(spec("3x3 s1 pad 1"), &d, 16, 0, NULL, NULL, NULL, 0, got, err) != 0 && strstr(err, "alike"),
           "a blocked input with an NCHW output accepted (%s)", err);
  free(got);
  dw_free(&d);
  d = dw_make(spec("groups of 2"));
  got = malloc((size_t)k_shape_numel(&d.y.shape) * 4);
  KT_CHECK(dw_forward_blocked(spec("groups of 2"), &d, 16, 16, NULL, NULL, NULL, 0, got, err) != 0 && strstr(err, "depthwise"),
           "a grouped layer of 2 channels a group accepted blocked (%s)", err);
  free(got);
  dw_free(&d);
}

/* KILN_CONV=im2col and grouped-im2col turn the path off; too little temp space falls back to
 * im2col; wide groups take it only under grouped-direct, and never past K_DW_MAX_TAPS terms. */
static void dw_dispatch_contract(void) {
  const dw_spec *s = &specs[0];
  k_conv_param p = dw_param(s);
  dw_data d = dw_make(s);
  setenv("KILN_CONV", "im2col", 1);
  KT_CHECK(k_conv_dw_temp_bytes(&d.x.shape, &d.w.shape, &p) == 0, "im2col forced: depthwise wanted");
  setenv("KILN_CONV", "grouped-im2col", 1);
  KT_CHECK(k_conv_dw_temp_bytes(&d.x.shape, &d.w.shape, &p) == 0, "grouped-im2col forced: depthwise wanted");
  unsetenv("KILN_CONV");
  size_t need = k_conv_dw_temp_bytes(&d.x.shape, &d.w.shape, &p);
  KT_CHECK(need > 0 && k_conv_temp_bytes(&d.x.shape, &d.w.shape, &p) >= need, "depthwise temp not counted");
  k_tensor in[3] = {d.x, d.w, d.b};
  k_req req = kWriteTo;
  char err[64];
  void *temp = calloc(1, need);
  k_call c = {in, 3, &d.y, 1, &req, &p, temp, need - 4, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  KT_CHECK(!k_conv_dw_runs(&c, &d.x.shape, &d.w.shape), "depthwise path run with too little temp");
  c.temp_bytes = need;
  KT_CHECK(k_conv_dw_runs(&c, &d.x.shape, &d.w.shape), "depthwise path refused with enough temp");
  k_conv_param grouped = p;
  grouped.num_group = 1;   /* C = 5 groups of 1 is depthwise; 1 group is not */
  k_shape gw = kt_shape(4, s->C, s->C, s->kh, s->kw);
  KT_CHECK(k_conv_dw_temp_bytes(&d.x.shape, &gw, &grouped) == 0, "ungrouped conv taken by depthwise path");
  k_shape x6 = kt_shape(4, 2, 6, 7, 9), w6 = kt_shape(4, 6, 2, 3, 3);
  grouped.num_group = 3;
  KT_CHECK(k_conv_dw_temp_bytes(&x6, &w6, &grouped) > 0, "groups of 2 channels not taken by the direct path");
  k_shape x32 = kt_shape(4, 2, 48, 7, 9), w32 = kt_shape(4, 48, 24, 3, 3);
  k_shape x58 = kt_shape(4, 2, 58, 7, 9), w58 = kt_shape(4, 58, 29, 3, 3);   /* 261 terms per sum */
  grouped.num_group = 2;
  KT_CHECK(k_conv_dw_temp_bytes(&x32, &w32, &grouped) == 0, "groups of 24 channels taken by the direct path");
  setenv("KILN_CONV", "grouped-direct", 1);
  KT_CHECK(k_conv_dw_temp_bytes(&x32, &w32, &grouped) > 0, "grouped-direct: groups of 24 not taken");
  KT_CHECK(k_conv_dw_temp_bytes(&x58, &w58, &grouped) == 0, "grouped-direct: groups of 29 3x3 taken");
  grouped.num_group = 1;
  KT_CHECK(k_conv_dw_temp_bytes(&x32, &w32, &grouped) == 0, "grouped-direct: ungrouped conv taken");
  unsetenv("KILN_CONV");
  free(temp);
  dw_free(&d);
}

/* Whether the dispatch takes the direct path for this spec unforced. */
static int dw_taken(const dw_spec *s) {
  k_conv_param p = dw_param(s);
  dw_data d = dw_make(s);
  unsetenv("KILN_CONV");
  int taken = k_conv_dw_temp_bytes(&d.x.shape, &d.w.shape, &p) > 0;
  dw_free(&d);
  return taken;
}

/* The spec of that name (the checks below pick theirs by name, not by index). */
static const dw_spec *spec(const char *name) {
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    if (!strcmp(specs[i].name, name)) return &specs[i];
  fprintf(stderr, "test_conv_dw: no spec named %s\n", name);
  exit(1);
}

/* The workspace a grouped layer asks is the same blocked or not: the blocked flags once made
 * k_conv_temp_bytes size it as a dense layer too (MNASNet's 5x5 depthwise layers on 1152
 * channels asked 266 MB each). Also no bigger than the depthwise path's own. */
static void dw_temp_blocked(const dw_spec *s) {
  k_shape x = {4, {s->N, s->C, s->H, s->W}}, w = {4, {s->C / s->cg * s->M, s->cg, s->kh, s->kw}};
  k_conv_param p = dw_param(s), pb = p;
  pb.in_block = pb.out_block = 16;
  size_t plain = k_conv_temp_bytes(&x, &w, &p), blocked = k_conv_temp_bytes(&x, &w, &pb);
  KT_CHECK(blocked == plain, "%s: a blocked grouped layer asks %zu workspace bytes, unblocked %zu", s->name, blocked, plain);
}

int main(void) {
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    if (!dw_taken(&specs[i])) {   /* more channels per group than the rule takes: forced */
      dw_compare(&specs[i], "grouped-direct", kWriteTo);
      dw_compare(&specs[i], "grouped-direct", kAddTo);
      continue;
    }
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
      dw_compare(&specs[i], modes[m], kWriteTo);
      if (m == 0) dw_compare(&specs[i], modes[m], kAddTo);
    }
  }
  dw_gradcheck(spec("3x3 s2 pad 1"), NULL);
  dw_gradcheck(spec("multiplier 3 stride 2"), NULL);
  dw_gradcheck(spec("dilation + stride 2"), "direct-avx2");
  dw_gradcheck(spec("1-D stride pad dilate"), "direct-generic");
  dw_threads(spec("7x7 plane (mobilenet end)"));
  dw_threads(spec("batch 6 in 4 parts"));
  dw_threads(spec("wide plane, many tiles"));
  dw_threads(spec("groups of 3, stride 2"));
  dw_gradcheck(spec("groups of 4, M 3, dilation"), NULL);
  dw_gradcheck(spec("groups of 8"), "direct-avx2");
  dw_gradcheck(spec("groups of 20 (forced)"), "grouped-direct");
  dw_gradcheck(spec("asym s2, odd totals"), NULL);
  dw_gradcheck(spec("asym groups of 4"), "direct-avx2");
  dw_gradcheck(spec("1-D asym"), "direct-generic");
  dw_threads(spec("asym s2 dilation, M 2"));
  dw_epilogue(spec("multiplier 2"));
  dw_epilogue(spec("7x7 plane (mobilenet end)"));
  dw_dispatch_contract();
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)   /* 2-D, one filter per channel */
    if (specs[i].two_d && specs[i].cg == 1 && specs[i].M == 1) dw_blocked(&specs[i]);
  dw_blocked_refused();
  dw_blocked_cached(spec("3x3 s1 pad 1"));
  dw_blocked_cached(spec("5x5 on 7x7 (mnasnet end)"));
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    if (specs[i].two_d) dw_temp_blocked(&specs[i]);
  unsetenv("KILN_CONV");
  return kt_finish("test_conv_dw");
}
