/* test_conv_direct.c — the direct (channel-blocked) convolution of k_conv_direct.c against the
 * im2col path of k_conv.c, which test_conv.c checks against a naive definition: forward,
 * data, weight and bias gradients (kWriteTo and kAddTo, with and without a data gradient), on
 * shapes chosen to hit every edge of the blocked loops — channel counts that do not fill a
 * vector, rows wider than one register tile, strides 1, 2 and 3 (the generic-stride loop),
 * padding (alike on both sides, or not), dilation, 1-D, batch 1, a batch split in chunks — for every instruction set the CPU has (KILN_CONV picks
 * them). The workspace is filled with NaN first, so a read of a byte the kernel did not write
 * shows. Then finite-difference gradient checks of the direct path itself, and the dispatch
 * contract: KILN_CONV=im2col keeps the old path, and too little temp space falls back to it.
 * Last, the compiled blocked layouts: blocked input, output or both at V = 8 and 16 under every
 * KILN_CONV, against im2col and bit for bit against the NCHW direct path, and their refusals.
 * And batch_norm folded into the packed weights: within rounding of the affine applied after,
 * the same bits with and without a cache, refolded when the cache is cleared, and packed per
 * call when the statistics are not stable. Winograd F(2x2, 3x3), which the 3x3 stride-1 shapes
 * with even outputs and 16 to 128 input channels take, goes through all of the above, and
 * cd_winograd checks when it runs and its error against the direct loop. */
#include "kt_harness.h"
#include "k_conv_direct.h"
#include "k_epilogue.h"
#include "k_parallel.h"
#include "k_scalar.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *name;
  int two_d;
  int N, C, H, W, F;
  int kh, kw, sh, sw, ph, pw, dh, dw;
  int no_bias;
  int asym, phe, pwe;   /* asym: the pads at the end are phe, pwe (else ph, pw, as at the start) */
  int G;                /* groups (0: 1) */
} cd_spec;

static const cd_spec specs[] = {
  /* name                      2d N  C   H   W   F  kh kw sh sw ph pw dh dw nb */
  {"3x3 pad 1, one block",      1, 2, 16, 8,  8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0},
  {"3x3 odd channels",          1, 2, 5,  7,  9, 7,  3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0},
  {"channels past one block",   1, 1, 17, 6, 37, 33, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0},
  {"stride 2 pad 1",            1, 2, 20, 9, 11, 40, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0, 0},
  {"stride 3, uneven",          1, 2, 9,  10, 13, 18, 3, 2, 3, 3, 2, 1, 1, 1, 1, 0, 0, 0, 0},
  {"dilation",                  1, 2, 8,  11, 12, 9, 3, 3, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0, 0},
  {"dilation + stride 2",       1, 1, 6,  12, 15, 17, 3, 3, 2, 2, 1, 3, 2, 3, 0, 0, 0, 0, 0},
  {"1x1",                       1, 2, 32, 5,  5, 24, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0},
  {"1x1 stride 2",              1, 3, 16, 9,  9, 32, 1, 1, 2, 2, 0, 0, 1, 1, 1, 0, 0, 0, 0},
  {"5x5 no padding (LeNet 2)",  1, 2, 20, 12, 12, 50, 5, 5, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0},
  {"one input channel",         1, 2, 1,  9,  9, 20, 5, 5, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0},
  {"one output channel",        1, 2, 12, 6,  6, 1, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0},
  {"wide row, many tiles",      1, 1, 8,  3, 61, 35, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0},
  {"tall kernel, 1 wide out",   1, 2, 4,  9,  3, 5, 4, 3, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0},
  {"1-D",                       0, 3, 10, 1, 29, 12, 1, 3, 1, 1, 0, 1, 1, 1, 0, 0, 0, 0, 0},
  {"1-D stride pad dilate",     0, 2, 7,  1, 40, 19, 1, 5, 1, 2, 0, 3, 1, 2, 0, 0, 0, 0, 0},
  {"batch 1",                   1, 1, 24, 8,  8, 48, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0},
  {"chunks of 2 + 1 samples",   1, 3, 16, 60, 60, 20, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0},
  /* Winograd F(2x2, 3x3) shapes (3x3 stride 1, even output, 16 to 128 input channels; the
     3x3 ones above with 16 and 24 channels and 8x8 or 60x60 outputs take it too) */
  {"Winograd, blocks part-filled",  1, 2, 40, 10, 8, 36, 3, 3, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0},
  {"Winograd, 128 ch, batch 1",     1, 1, 128, 4, 6, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},
  {"Winograd, one tile, odd F",     1, 3, 17, 4, 4, 3, 3, 3, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0},
  /* pads that differ at start and end (phe, pwe after the asym flag): Winograd with a start or
     an end of 0 and 2 (the data gradient's flipped pads 2 and 0), in place on a blocked input
     too; strides and dilation; a 1x1 stride-2 kernel whose end pad stops it from packing
     every other row alone (k_cd_skip_rows); 1-D */
  /* name                      2d N  C   H   W   F  kh kw sh sw ph pw dh dw nb as phe pwe */
  {"Winograd, asym pads",       1, 2, 16, 8,  8, 16, 3, 3, 1, 1, 0, 1, 1, 1, 0, 1, 2, 1, 0},
  {"Winograd, asym start 2",    1, 1, 24, 6, 10, 20, 3, 3, 1, 1, 2, 0, 1, 1, 1, 1, 0, 2, 0},
  {"asym stride 2 dilation",    1, 2, 9, 11, 12, 17, 3, 3, 2, 2, 0, 2, 1, 2, 0, 1, 3, 1, 0},
  {"asym stride 3, end only",   1, 2, 5,  8, 10, 7, 2, 3, 3, 3, 0, 0, 1, 1, 0, 1, 1, 2, 0},
  {"1x1 stride 2, end pads",    1, 2, 16, 10, 10, 32, 1, 1, 2, 2, 0, 0, 1, 1, 1, 1, 1, 1, 0},
  {"1-D asym pads",             0, 3, 10, 1, 29, 12, 1, 3, 1, 2, 0, 0, 1, 1, 0, 1, 0, 3, 0},
  /* Winograd's forward and weight gradient, but a start pad of 3: the data gradient's flipped
     pad 2 - 3 would be negative, so it declines to the direct loop (cd_winograd_declines) */
  {"3x3 start pad 3",           1, 2, 16, 6,  6, 16, 3, 3, 1, 1, 3, 1, 1, 1, 0, 1, 1, 1, 0},
  /* the NCHW path for few input channels (fwd_nchw_rows: stride 1 along the row, rows and
     channels in whole vectors of 8 and 16): an RGB stem; 2 channels with stride (2, 1),
     dilation 2 and no bias, two output blocks; 1-D */
  /* name                      2d N  C   H   W   F  kh kw sh sw ph pw dh dw nb */
  {"NCHW path, RGB stem",       1, 2, 3, 10, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0},
  {"NCHW path, (2,1), dilated", 1, 2, 2,  9, 32, 32, 3, 3, 2, 1, 1, 2, 2, 2, 1, 0, 0, 0, 0},
  {"NCHW path, 1-D",            0, 2, 4,  1, 48, 16, 1, 5, 1, 1, 0, 2, 1, 1, 0, 0, 0, 0, 0},
  /* batch 1 with one or two output blocks: with 2 threads or more each task's rows are cut
     into parts (k_cd_row_parts), which must change no bit (cd_row_parts) */
  /* name                      2d N  C   H   W   F  kh kw sh sw ph pw dh dw nb */
  {"batch 1, rows cut, 1x1",    1, 1, 64, 28, 28, 24, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0},
  {"batch 1, rows cut, 5x5 s2", 1, 1, 24, 29, 29, 20, 5, 5, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 0},
  /* (appended: cases above are referred to by index) 1x1 on small planes, whose tiles run across
     rows (fwd_rows): batch 1 without bias cut into row parts, a 3x14 with bias; filter blocks 2 then 1 */
  {"batch 1, rows cut, 1x1 7x7", 1, 1, 40, 7,  7, 40, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0},
  {"1x1 3x14, bias",            1, 2, 20, 3, 14, 36, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0},
  /* (appended) Winograd at batch 1 with one pair of output blocks: its rows cut in pairs */
  {"batch 1, rows cut, 3x3 Winograd", 1, 1, 32, 30, 28, 32, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0},
  /* (appended) few input channels read as padded planes, not packed into blocks (k_cd_planar):
     a 3x3/2 RGB stem with two output blocks; a ResNet-like 7x7/2 stem, one block, no bias; 1-D */
  /* name                      2d N  C   H   W   F  kh kw sh sw ph pw dh dw nb */
  {"planar, RGB 3x3/2",         1, 2, 3, 17, 19, 32, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0, 0},
  {"planar, 7x7/2, one block",  1, 1, 3, 23, 22, 16, 7, 7, 2, 2, 3, 3, 1, 1, 1, 0, 0, 0, 0},
  {"planar, 1-D stride 2",      0, 2, 2,  1, 40, 20, 1, 5, 1, 2, 0, 2, 1, 1, 0, 0, 0, 0, 0},
};

static int end_h(const cd_spec *s) { return s->asym ? s->phe : s->ph; }
static int end_w(const cd_spec *s) { return s->asym ? s->pwe : s->pw; }

static int out_len(int in, int k, int s, int b, int e, int d) { return (in + b + e - d * (k - 1) - 1) / s + 1; }
static int out_h(const cd_spec *s) { return out_len(s->H, s->kh, s->sh, s->ph, end_h(s), s->dh); }
static int out_w(const cd_spec *s) { return out_len(s->W, s->kw, s->sw, s->pw, end_w(s), s->dw); }

static k_conv_param cd_param(const cd_spec *s) {
  k_conv_param p = {0};
  int n = s->two_d ? 2 : 1;
  p.num_filter = s->F;
  p.num_group = s->G > 1 ? s->G : 1;
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

/* The tensors of one case: x, w, b, y (for the output shape), dy. */
typedef struct {
  k_tensor x, w, b, y, dy;
} cd_data;

static cd_data cd_make(const cd_spec *s) {
  int OH = out_h(s), OW = out_w(s);
  cd_data d;
  d.x = kt_tensor_f32(s->two_d ? kt_shape(4, s->N, s->C, s->H, s->W) : kt_shape(3, s->N, s->C, s->W), -1, 1, 21);
  int cg = s->G > 1 ? s->C / s->G : s->C;
  d.w = kt_tensor_f32(s->two_d ? kt_shape(4, s->F, cg, s->kh, s->kw) : kt_shape(3, s->F, cg, s->kw), -1, 1, 22);
  d.b = kt_tensor_f32(kt_shape(1, s->F), -1, 1, 23);
  k_shape ys = s->two_d ? kt_shape(4, s->N, s->F, OH, OW) : kt_shape(3, s->N, s->F, OW);
  d.y = kt_tensor_f32(ys, -1, 1, 24);
  d.dy = kt_tensor_f32(ys, -1, 1, 25);
  return d;
}

static void cd_free(cd_data *d) {
  kt_tensor_free(&d->x); kt_tensor_free(&d->w); kt_tensor_free(&d->b);
  kt_tensor_free(&d->y); kt_tensor_free(&d->dy);
}

/* Temp space full of NaN, so a kernel that reads what it never wrote poisons its result. */
static void *cd_temp(size_t bytes) {
  float *t = malloc(bytes + sizeof(float));
  for (size_t i = 0; i < bytes / sizeof(float) + 1; i++) t[i] = NAN;
  return t;
}

/* One forward through k_convolution_forward under KILN_CONV=mode; out starts as `init`
 * (kAddTo adds to it). */
static int cd_forward(const cd_spec *s, const k_conv_param *p, cd_data *d, const char *mode,
                      k_req req, const float *init, float *out) {
  setenv("KILN_CONV", mode, 1);
  k_tensor in[3] = {d->x, d->w, d->b};
  k_tensor o = d->y;
  o.data = out;
  memcpy(out, init, (size_t)k_shape_numel(&o.shape) * sizeof(float));
  size_t tb = k_conv_temp_bytes(&d->x.shape, &d->w.shape, p);
  void *temp = cd_temp(tb);
  char err[128] = "";
  k_call c = {in, s->no_bias ? 2 : 3, &o, 1, &req, p, temp, tb, 0, 0, 1, err, sizeof err, NULL, NULL, NULL};
  int direct = k_conv_direct_runs(&c, &d->x.shape, &d->w.shape, 0);
  int rc = k_convolution_forward(&c);
  free(temp);
  KT_CHECK(rc == 0, "%s %s forward: %s", s->name, mode, err);
  return direct;
}

/* One backward: grads [dx, dw, db] start as the `init` copies. */
static int cd_backward(const cd_spec *s, const k_conv_param *p, cd_data *d, const char *mode,
                       const k_req req[3], float *const init[3], float *grads[3]) {
  setenv("KILN_CONV", mode, 1);
  k_tensor in[5] = {d->dy, d->x, d->w, d->b, d->y};
  in[4].data = NULL;
  if (s->no_bias) in[3].data = NULL;
  k_tensor out[3] = {d->x, d->w, d->b};
  for (int i = 0; i < 3; i++) {
    out[i].data = grads[i];
    memcpy(grads[i], init[i], (size_t)k_shape_numel(&out[i].shape) * sizeof(float));
  }
  size_t tb = k_conv_temp_bytes(&d->x.shape, &d->w.shape, p);
  void *temp = cd_temp(tb);
  char err[128] = "";
  k_call c = {in, 5, out, s->no_bias ? 2 : 3, req, p, temp, tb, 0, 0, 1, err, sizeof err, NULL, NULL, NULL};
  int direct = k_conv_direct_runs(&c, &d->x.shape, &d->w.shape, 1);
  int rc = k_convolution_backward(&c);
  free(temp);
  KT_CHECK(rc == 0, "%s %s backward: %s", s->name, mode, err);
  return direct;
}

/* Outputs of two summation orders agree to rtol of themselves plus atol of the tensor's
 * largest magnitude (at least 1): a sum of many terms differs by ulps of its largest terms,
 * not of a result that cancels, and Winograd (whose transforms sum 4 to 16 inputs before the
 * product) more than the direct loop. The conformance suite's rule. */
static int cd_close(const char *what, const float *got, const float *want, int64_t n, float rtol, float atol) {
  float scale = 1;
  for (int64_t i = 0; i < n; i++) scale = fmaxf(scale, fabsf(want[i]));
  return kt_expect_close(what, got, want, n, rtol, atol * scale);
}

/* The ISA variants to try; on a CPU without one, the direct path picks a narrower one. */
static const char *const modes[] = {"direct", "direct-avx2", "direct-generic"};

static void cd_compare(const cd_spec *s, const char *mode, k_req req) {
  k_conv_param p = cd_param(s);
  cd_data d = cd_make(s);
  char what[160];
  int64_t ny = k_shape_numel(&d.y.shape);
  float *init = kt_data_copy(&d.y), *want = malloc((size_t)ny * sizeof(float)), *got = malloc((size_t)ny * sizeof(float));
  cd_forward(s, &p, &d, "im2col", req, init, want);
  KT_CHECK(cd_forward(s, &p, &d, mode, req, init, got), "%s: %s did not take the direct path", s->name, mode);
  snprintf(what, sizeof what, "%s %s forward req %d", s->name, mode, (int)req);
  KT_CHECK(cd_close(what, got, want, ny, 1e-5f, 1e-5f) == 0, "%s", what);

  /* Backward: every gradient, then without the data gradient (a first layer). */
  const k_tensor *shp[3] = {&d.x, &d.w, &d.b};
  float *ginit[3], *gwant[3], *ggot[3];
  for (int i = 0; i < 3; i++) {
    ginit[i] = kt_data_copy(shp[i]);
    gwant[i] = kt_data_copy(shp[i]);
    ggot[i] = kt_data_copy(shp[i]);
  }
  for (int no_dx = 0; no_dx < 2; no_dx++) {
    k_req r[3] = {no_dx ? kNullOp : req, req, s->no_bias ? kNullOp : req};
    cd_backward(s, &p, &d, "im2col", r, ginit, gwant);
    KT_CHECK(cd_backward(s, &p, &d, mode, r, ginit, ggot), "%s: %s backward not direct", s->name, mode);
    static const char *const names[3] = {"dx", "dw", "db"};
    for (int i = 0; i < (s->no_bias ? 2 : 3); i++) {
      snprintf(what, sizeof what, "%s %s %s req %d%s", s->name, mode, names[i], (int)r[i], no_dx ? " (no dx)" : "");
      KT_CHECK(cd_close(what, ggot[i], gwant[i], k_shape_numel(&shp[i]->shape), 1e-4f, 2e-5f) == 0, "%s", what);
    }
  }
  for (int i = 0; i < 3; i++) { free(ginit[i]); free(gwant[i]); free(ggot[i]); }
  free(init); free(want); free(got);
  cd_free(&d);
}

/* Finite differences on the direct path itself (the harness's temp is zeroed, the NaN temp
 * above covers uninitialised reads). */
static void cd_gradcheck(const cd_spec *s, const char *mode) {
  setenv("KILN_CONV", mode, 1);
  k_conv_param p = cd_param(s);
  cd_data d = cd_make(s);
  kt_case c = {0};
  c.name = s->name; c.fwd = k_convolution_forward; c.bwd = k_convolution_backward;
  c.nargs = s->no_bias ? 2 : 3; c.nout = 1; c.nvisible = 1;
  c.in[0] = d.x; c.in[1] = d.w; c.in[2] = d.b;
  c.out_shape[0] = d.y.shape;
  c.param = &p;
  c.temp_bytes = k_conv_temp_bytes(&d.x.shape, &d.w.shape, &p);
  c.deps_og = 1; c.deps_in = 3;
  KT_CHECK(k_conv_direct_temp_bytes(&d.x.shape, &d.w.shape, &p) > 0, "%s: direct path not wanted", s->name);
  kt_gradcheck(&c);
  cd_free(&d);
}

/* KILN_CONV=im2col turns the direct path off, and a call whose temp space was planned for the
 * im2col path (smaller) falls back to it rather than failing. */
static void cd_dispatch_contract(void) {
  /* At batch 1 the blocked copies of a 1x1 convolution on a 32x32 map outgrow im2col's column
     buffer (at larger batches im2col's K_CONV_PARTS buffers are the larger). */
  static const cd_spec big = {"contract", 1, 1, 16, 32, 32, 16, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0};
  const cd_spec *s = &big;
  k_conv_param p = cd_param(s);
  cd_data d = cd_make(s);
  setenv("KILN_CONV", "im2col", 1);
  KT_CHECK(k_conv_direct_temp_bytes(&d.x.shape, &d.w.shape, &p) == 0, "im2col forced: direct wanted");
  size_t small = k_conv_temp_bytes(&d.x.shape, &d.w.shape, &p);
  setenv("KILN_CONV", "direct", 1);
  KT_CHECK(k_conv_temp_bytes(&d.x.shape, &d.w.shape, &p) > small, "direct temp not counted");
  k_tensor in[3] = {d.x, d.w, d.b};
  k_req req = kWriteTo;
  char err[64];
  void *temp = calloc(1, small);
  k_call c = {in, 3, &d.y, 1, &req, &p, temp, small, 0, 0, 1, err, sizeof err, NULL, NULL, NULL};
  KT_CHECK(!k_conv_direct_runs(&c, &d.x.shape, &d.w.shape, 0), "direct path run with too little temp");
  KT_CHECK(k_convolution_forward(&c) == 0, "fallback to im2col failed: %s", err);
  k_conv_param grouped = p;
  grouped.num_group = 2;
  k_shape gw = kt_shape(4, s->F, s->C / 2, s->kh, s->kw);
  KT_CHECK(k_conv_direct_temp_bytes(&d.x.shape, &gw, &grouped) == 0,
           "a grouped conv whose groups are not whole 16-channel blocks taken by the direct path");
  free(temp);
  cd_free(&d);
}

/* ---- compiled blocked layouts (k_conv_param.in_block / out_block, passes/pass_layout.c) ---- */

/* One forward with blocked input and/or output of width V under KILN_CONV=mode, the result
 * returned NCHW; rc of the kernel. With epi, res (NCHW, the output's shape, blocked here like
 * the output) is the call's last input, which epi's steps may name. */
static int cd_forward_blocked_epi(const cd_spec *s, cd_data *d, int64_t V, int in_b, int out_b, const char *mode,
                                  size_t temp_bytes, float *out, char *err, size_t errn, const k_epilogue *epi,
                                  const float *res) {
  setenv("KILN_CONV", mode, 1);
  k_conv_param p = cd_param(s);
  p.in_block = in_b ? (int32_t)V : 0;
  p.out_block = p.epi_block = out_b ? (int32_t)V : 0;
  int64_t P = (int64_t)s->H * s->W, OP = d->y.shape.d[2] * d->y.shape.d[3], Fb = (s->F + V - 1) / V;
  float *xb = in_b ? kt_to_blocked(d->x.data, s->N, s->C, P, V) : NULL;
  float *yb = out_b ? malloc((size_t)(s->N * Fb * OP * V) * sizeof(float)) : NULL;
  int nin = s->no_bias ? 2 : 3;
  k_tensor in[4] = {d->x, d->w, d->b}, o = d->y;
  if (xb) in[0].data = xb;
  float *rb = epi && res ? kt_to_blocked(res, s->N, s->F, OP, V) : NULL;
  if (rb) in[nin++] = (k_tensor){rb, d->y.shape, K_F32};
  o.data = yb ? yb : out;
  k_req req = kWriteTo;
  size_t tb = temp_bytes ? temp_bytes : k_conv_temp_bytes(&d->x.shape, &d->w.shape, &p);
  void *temp = cd_temp(tb);
  k_call c = {in, nin, &o, 1, &req, &p, temp, tb, 0, 0, 0, err, errn, NULL, epi, NULL};
  int rc = k_convolution_forward(&c);
  if (!rc && yb) kt_from_blocked(yb, s->N, s->F, OP, V, out);
  free(temp), free(xb), free(yb), free(rb);
  return rc;
}

static int cd_forward_blocked(const cd_spec *s, cd_data *d, int64_t V, int in_b, int out_b, const char *mode,
                              size_t temp_bytes, float *out, char *err, size_t errn) {
  return cd_forward_blocked_epi(s, d, V, in_b, out_b, mode, temp_bytes, out, err, errn, NULL, NULL);
}

/* A blocked forward computes what the NCHW one does: the same bits on the same instruction
 * set (V = 16 under "direct" on AVX-512, V = 8 under "direct-avx2" on AVX2), close to im2col
 * on any (a V the CPU lacks runs the portable loop of that width), and KILN_CONV=im2col cannot
 * move it off the direct path. */
static void cd_blocked(const cd_spec *s) {
  static const char *const bmodes[] = {"direct", "direct-avx2", "direct-generic", "im2col"};
  cd_data d = cd_make(s);
  int64_t ny = k_shape_numel(&d.y.shape);
  float *zero = calloc((size_t)ny, sizeof(float)), *want = malloc((size_t)ny * sizeof(float));
  float *same = malloc((size_t)ny * sizeof(float)), *got = malloc((size_t)ny * sizeof(float));
  k_conv_param p = cd_param(s);
  cd_forward(s, &p, &d, "im2col", kWriteTo, zero, want);
  char err[160], what[200];
  for (int64_t V = 8; V <= 16; V += 8)
    for (size_t m = 0; m < sizeof bmodes / sizeof *bmodes; m++)
      for (int io = 1; io < 4; io++) {
        int in_b = io & 1, out_b = io >> 1;
        snprintf(what, sizeof what, "%s blocked V=%d in %d out %d %s", s->name, (int)V, in_b, out_b, bmodes[m]);
        err[0] = 0;
        KT_CHECK(cd_forward_blocked(s, &d, V, in_b, out_b, bmodes[m], 0, got, err, sizeof err) == 0, "%s: %s", what, err);
        KT_CHECK(cd_close(what, got, want, ny, 1e-5f, 1e-5f) == 0, "%s", what);
        const char *native = V == 16 ? "direct" : "direct-avx2";
        int has = V == 16 ? __builtin_cpu_supports("avx512f") : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        if (strcmp(bmodes[m], native) || !has) continue;
        cd_forward(s, &p, &d, native, kWriteTo, zero, same);
        KT_CHECK(memcmp(got, same, (size_t)ny * sizeof(float)) == 0, "%s: not the NCHW direct path's bits", what);
      }
  free(zero), free(want), free(same), free(got);
  cd_free(&d);
}

/* What a blocked call cannot honour is refused with a message: a width other than 8 or 16, and
 * a workspace smaller than the direct path's (a plan made for im2col). */
static void cd_blocked_refused(void) {
  const cd_spec *s = &specs[1];
  cd_data d = cd_make(s);
  float *out = malloc((size_t)k_shape_numel(&d.y.shape) * sizeof(float));
  char err[160] = "";
  KT_CHECK(cd_forward_blocked(s, &d, 12, 1, 0, "direct", 0, out, err, sizeof err) != 0 && strstr(err, "8 or 16"),
           "width 12 accepted (%s)", err);
  err[0] = 0;
  KT_CHECK(cd_forward_blocked(s, &d, 16, 1, 1, "direct", 64, out, err, sizeof err) != 0 && strstr(err, "workspace"),
           "a too small workspace accepted (%s)", err);
  free(out);
  cd_free(&d);
}

/* ---- grouped layers whose groups are whole blocks ---- */

/* RegNet's shape of layer, groups of 16 (and 32) channels: the forward takes the direct path
 * (under "direct", whose V of 16 divides the groups; the others' 8 too), agrees with im2col's
 * grouped GEMMs, gives the same bits blocked (in, out, both) as NCHW on the same instruction
 * set and with 1, 2 and 4 threads; its gradients stay off the direct path and agree with im2col's;
 * groups of 8 channels (not whole 16-lane blocks) stay off the direct path. */
static const cd_spec grouped_specs[] = {
  /* name                          2d N  C   H   W   F  kh kw sh sw ph pw dh dw nb as phe pwe G */
  {"grouped 3x3, 16 a group",       1, 2, 32, 9,  9, 32, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2},
  {"grouped 3x3 s2, 32 a group",    1, 1, 64, 14, 14, 64, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0, 2},
  {"grouped 1x1, 16 in 32 out",     1, 2, 48, 7,  7, 96, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 3},
  {"grouped 3x3 batch 1, 4 groups", 1, 1, 64, 7,  7, 64, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 4},
};

static void cd_grouped(const cd_spec *s) {
  static const int threads[] = {1, 2, 4};
  cd_data d = cd_make(s);
  k_conv_param p = cd_param(s);
  int64_t ny = k_shape_numel(&d.y.shape);
  float *zero = calloc((size_t)ny, sizeof(float)), *want = malloc((size_t)ny * sizeof(float));
  float *got = malloc((size_t)ny * sizeof(float)), *ref = malloc((size_t)ny * sizeof(float));
  char err[160], what[200];
  cd_forward(s, &p, &d, "im2col", kWriteTo, zero, want);
  for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
    snprintf(what, sizeof what, "%s %s forward", s->name, modes[m]);
    KT_CHECK(cd_forward(s, &p, &d, modes[m], kWriteTo, zero, got), "%s: not on the direct path", what);
    KT_CHECK(cd_close(what, got, want, ny, 1e-5f, 1e-5f) == 0, "%s", what);
  }
  int avx512 = __builtin_cpu_supports("avx512f");
  for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
    k_parallel_set_threads(threads[t]);
    cd_forward(s, &p, &d, "direct", kWriteTo, zero, t ? got : ref);
    if (t) KT_CHECK(memcmp(got, ref, (size_t)ny * 4) == 0, "%s: %d threads differ from 1", s->name, threads[t]);
    for (int io = 1; io < 4 && avx512; io++) {
      err[0] = 0;
      snprintf(what, sizeof what, "%s blocked in %d out %d, %d threads", s->name, io & 1, io >> 1, threads[t]);
      KT_CHECK(cd_forward_blocked(s, &d, 16, io & 1, io >> 1, "direct", 0, got, err, sizeof err) == 0, "%s: %s", what, err);
      KT_CHECK(memcmp(got, ref, (size_t)ny * 4) == 0, "%s: not the NCHW direct path's bits", what);
    }
  }
  k_parallel_set_threads(0);
  /* a compiled blocked layout runs direct whatever KILN_CONV says at run time */
  for (int m = 0; m < 2 && avx512; m++) {
    const char *mode = m ? "grouped-im2col" : "im2col";
    err[0] = 0;
    KT_CHECK(cd_forward_blocked(s, &d, 16, 1, 1, mode, 0, got, err, sizeof err) == 0, "%s blocked under %s: %s", s->name, mode, err);
    KT_CHECK(memcmp(got, ref, (size_t)ny * 4) == 0, "%s blocked under %s: not the direct path's bits", s->name, mode);
  }
  /* the gradients: the grouped loops' (k_conv_dw.c) under "direct", im2col's under "im2col" */
  const k_tensor *shp[3] = {&d.x, &d.w, &d.b};
  float *ginit[3], *gwant[3], *ggot[3];
  for (int i = 0; i < 3; i++) ginit[i] = kt_data_copy(shp[i]), gwant[i] = kt_data_copy(shp[i]), ggot[i] = kt_data_copy(shp[i]);
  k_req r[3] = {kWriteTo, kWriteTo, s->no_bias ? kNullOp : kWriteTo};
  cd_backward(s, &p, &d, "im2col", r, ginit, gwant);
  KT_CHECK(!cd_backward(s, &p, &d, "direct", r, ginit, ggot), "%s: the backward took the direct path", s->name);
  for (int i = 0; i < (s->no_bias ? 2 : 3); i++) {
    snprintf(what, sizeof what, "%s gradient %d", s->name, i);
    KT_CHECK(cd_close(what, ggot[i], gwant[i], k_shape_numel(&shp[i]->shape), 1e-4f, 2e-5f) == 0, "%s", what);
  }
  for (int i = 0; i < 3; i++) free(ginit[i]), free(gwant[i]), free(ggot[i]);
  free(zero), free(want), free(got), free(ref);
  cd_free(&d);
}

/* Groups of 8 channels are not whole blocks of the direct path's widest vector: not wanted. */
static void cd_grouped_declines(void) {
  static const cd_spec s8 = {"grouped, 8 a group", 1, 1, 32, 6, 6, 32, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 4};
  cd_data d = cd_make(&s8);
  k_conv_param p = cd_param(&s8);
  setenv("KILN_CONV", "direct", 1);
  KT_CHECK(!k_conv_direct_wanted(&d.x.shape, &d.w.shape, &p, 0), "8 channels a group wanted by the direct path");
  KT_CHECK(k_conv_block_width(&d.x.shape, &d.w.shape, &p) == 0, "8 channels a group given a blocked layout");
  cd_free(&d);
}

/* ---- an add and a relu taken into the blocked forward's store (k_epi_store) ---- */

/* A blocked epilogue of a residual add and/or a relu or a clip runs in the forward tile's
 * store; any other order runs as a pass over the block (a unary op there on the real lanes
 * alone when the last channel block is at most half real). All give exactly the bits of
 * k_sf_add, k_sf_relu, k_sf_clip and k_sf_tanh applied to the plain convolution's output, a
 * NaN in the residual included. */
static void cd_store_tail(const cd_spec *s, int64_t V, const char *mode) {
  cd_data d = cd_make(s);
  int64_t n = k_shape_numel(&d.y.shape);
  int slot = s->no_bias ? 2 : 3;
  k_tensor r = kt_tensor_f32(d.y.shape, -1, 1, 41);
  float *res = r.data, *conv = malloc((size_t)n * 4), *want = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
  res[n / 3] = NAN;
  char err[160] = "", what[200];
  KT_CHECK(cd_forward_blocked(s, &d, V, 1, 1, mode, 0, conv, err, sizeof err) == 0, "%s: %s", s->name, err);
  k_epi_step add = {.kind = K_EPI_BINARY, .fn = K_EPI_FN_add, .slot = slot};
  k_epi_step relu = {.kind = K_EPI_UNARY, .fn = K_EPI_FN_relu};
  k_epi_step tanh_s = {.kind = K_EPI_UNARY, .fn = K_EPI_FN_tanh};
  k_epi_step swapped = add;
  swapped.swap = 1;
  /* relu6 as MobileNet has it, and a clip whose bounds the values straddle on both sides */
  k_epi_step clip6 = {.kind = K_EPI_UNARY, .fn = K_EPI_FN_clip, .has_param = 1};
  k_epi_step clipn = clip6;
  k_clip_param c6 = {0.0f, 6.0f}, cn = {-0.25f, 0.5f};
  memcpy(clip6.param, &c6, sizeof c6), memcpy(clipn.param, &cn, sizeof cn);
  const struct { const char *name; k_epilogue e; int store; } cases[] = {
      {"add relu", {2, {add, relu}}, 1},    {"swapped add relu", {2, {swapped, relu}}, 1},
      {"relu", {1, {relu}}, 1},             {"add", {1, {add}}, 1},
      {"clip 0..6", {1, {clip6}}, 1},       {"add clip -0.25..0.5", {2, {add, clipn}}, 1},
      {"relu add (a pass)", {2, {relu, add}}, 0},
      {"relu clip (a pass)", {2, {relu, clip6}}, 0},
      /* a pass; a last channel block at most half real runs the op on its real lanes alone */
      {"tanh add (a pass)", {2, {tanh_s, add}}, 0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const k_epilogue *e = &cases[k].e;
    k_epi_store st;
    snprintf(what, sizeof what, "%s V=%d %s: %s", s->name, (int)V, mode, cases[k].name);
    KT_CHECK(k_epi_store_of(e, &st) == cases[k].store, "%s: store tail recognised wrongly", what);
    for (int64_t i = 0; i < n; i++) {
      float v = conv[i];
      for (int j = 0; j < e->nsteps; j++) {
        const k_epi_step *sj = &e->step[j];
        k_clip_param cp;
        memcpy(&cp, sj->param, sizeof cp);
        v = sj->kind != K_EPI_UNARY     ? (sj->swap ? k_sf_add(res[i], v) : k_sf_add(v, res[i]))
            : sj->fn == K_EPI_FN_tanh ? k_sf_tanh(v)
            : sj->fn == K_EPI_FN_clip ? k_sf_clip(v, cp.a_min, cp.a_max)
                                      : k_sf_relu(v);
      }
      want[i] = v;
    }
    err[0] = 0;
    KT_CHECK(cd_forward_blocked_epi(s, &d, V, 1, 1, mode, 0, got, err, sizeof err, e, res) == 0, "%s: %s", what, err);
    KT_CHECK(memcmp(got, want, (size_t)n * 4) == 0, "%s: not the bits of the ops one after another", what);
  }
  free(conv), free(want), free(got);
  kt_tensor_free(&r);
  cd_free(&d);
}

/* ---- the rows of a task cut into parts at batch 1 ---- */

/* The two epilogues the row-cutting tests run over a part of the rows: add + relu (a
 * k_epi_store, run in the store) and tanh + add (a pass over the block), the add reading the
 * operand after the layer's inputs. */
typedef struct { k_epilogue store, pass; } cd_epis;
static cd_epis cd_epi_cases(const cd_spec *s) {
  k_epi_step add = {.kind = K_EPI_BINARY, .fn = K_EPI_FN_add, .slot = s->no_bias ? 2 : 3};
  k_epi_step relu = {.kind = K_EPI_UNARY, .fn = K_EPI_FN_relu}, tanh_s = {.kind = K_EPI_UNARY, .fn = K_EPI_FN_tanh};
  return (cd_epis){{2, {add, relu}}, {2, {tanh_s, add}}};
}

/* The forward of a batch-1 layer with few output blocks, whose rows k_cd_row_parts cuts into
 * parts when there are threads to share them, gives the same bits with 1, 2 and 4 threads:
 * NCHW out (written and accumulated, the epilogue-free unpack of each part's rows), blocked
 * in with NCHW out, and blocked out with an epilogue in the store and one as a pass. */
static void cd_row_parts(const cd_spec *s, const char *mode, int64_t V) {
  static const int threads[] = {1, 2, 4};
  cd_data d = cd_make(s);
  int64_t n = k_shape_numel(&d.y.shape);
  k_tensor r = kt_tensor_f32(d.y.shape, -1, 1, 43);
  cd_epis e = cd_epi_cases(s);
  k_conv_param p = cd_param(s);
  float *init = kt_data_copy(&d.y), *ref[6], *got = malloc((size_t)n * 4);
  char err[160] = "";
  for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
    k_parallel_set_threads(threads[t]);
    for (int k = 0; k < 6; k++) {
      float *out = t == 0 ? (ref[k] = malloc((size_t)n * 4)) : got;
      if (k < 2) cd_forward(s, &p, &d, mode, k ? kAddTo : kWriteTo, init, out);
      else if (k == 2) KT_CHECK(cd_forward_blocked(s, &d, V, 1, 0, mode, 0, out, err, sizeof err) == 0, "%s: %s", s->name, err);
      else if (k == 3) KT_CHECK(cd_forward_blocked(s, &d, V, 0, 1, mode, 0, out, err, sizeof err) == 0, "%s: %s", s->name, err);
      else KT_CHECK(cd_forward_blocked_epi(s, &d, V, 1, 1, mode, 0, out, err, sizeof err, k == 4 ? &e.store : &e.pass, r.data) == 0,
                    "%s: %s", s->name, err);
      if (t) KT_CHECK(memcmp(got, ref[k], (size_t)n * 4) == 0, "%s %s case %d: %d threads differ from 1", s->name, mode, k, threads[t]);
    }
  }
  k_parallel_set_threads(0);
  for (int k = 0; k < 6; k++) free(ref[k]);
  free(init), free(got);
  kt_tensor_free(&r);
  cd_free(&d);
}

/* ---- batch_norm folded into the cached weights ---- */

/* y = conv(x) * a + b per channel, a and b as the epilogue computes them: the unfolded result. */
static void cd_affine_ref(const cd_spec *s, const float *conv, const float *const bn[4], float *y) {
  int OH = out_h(s), OW = out_w(s);
  int64_t per = (int64_t)OH * OW, n = (int64_t)s->N * s->F * per;
  for (int64_t e = 0; e < n; e++) {
    int64_t f = e / per % s->F;
    float invstd, a, b;
    k_batch_norm_predict_coeffs(bn[0][f], bn[1][f], bn[2][f], bn[3][f], 1e-5f, &invstd, &a, &b);
    y[e] = conv[e] * a + b;
  }
}

/* One forward with a batch_norm epilogue over inputs [x, w, (b), gamma, beta, mean, var]. */
static void cd_forward_bn(const cd_spec *s, cd_data *d, float *const bn[4], k_cache *cache, float *out) {
  const k_conv_param p = cd_param(s);
  int nb = s->no_bias ? 2 : 3;
  k_tensor in[7] = {d->x, d->w, d->b};
  for (int i = 0; i < 4; i++) in[nb + i] = (k_tensor){bn[i], kt_shape(1, s->F), K_F32};
  k_epilogue epi = {1, {{.kind = K_EPI_AFFINE, .slot = nb, .eps = 1e-5f, .channels = s->F}}};
  epi.step[0].inner = k_shape_numel(&d->y.shape) / (s->N * s->F);
  k_tensor o = d->y;
  o.data = out;
  k_req req = kWriteTo;
  size_t tb = k_conv_temp_bytes(&d->x.shape, &d->w.shape, &p);
  void *temp = cd_temp(tb);
  char err[128] = "";
  k_call c = {in, nb + 4, &o, 1, &req, &p, temp, tb, 0, 0, 0, err, sizeof err, cache, &epi, NULL};
  KT_CHECK(k_convolution_forward(&c) == 0, "%s batch_norm epilogue: %s", s->name, err);
  free(temp);
}

static int cd_within(const float *a, const float *b, int64_t n) {
  float scale = 1;
  for (int64_t i = 0; i < n; i++) scale = fmaxf(scale, fabsf(b[i]));
  for (int64_t i = 0; i < n; i++)
    if (!(fabsf(a[i] - b[i]) <= 1e-5f * fabsf(b[i]) + 1e-6f * scale)) return 0;
  return 1;
}

static void cd_fold_batch_norm(const cd_spec *s) {
  setenv("KILN_CONV", "direct", 1);
  cd_data d = cd_make(s);
  int64_t n = k_shape_numel(&d.y.shape);
  float *conv = malloc((size_t)n * 4), *want = malloc((size_t)n * 4), *got = malloc((size_t)n * 4), *zero = calloc((size_t)n, 4);
  k_tensor g = kt_tensor_f32(kt_shape(1, s->F), 0.5f, 1.5f, 31), be = kt_tensor_f32(kt_shape(1, s->F), -1, 1, 32);
  k_tensor mu = kt_tensor_f32(kt_shape(1, s->F), -1, 1, 33), var = kt_tensor_f32(kt_shape(1, s->F), 0.2f, 2, 34);
  float *bn[4] = {g.data, be.data, mu.data, var.data};
  const k_conv_param p = cd_param(s);
  cd_forward(s, &p, &d, "direct", kWriteTo, zero, conv);
  cd_affine_ref(s, conv, (const float *const *)bn, want);
  k_cache cache = {NULL, 0, 0, 0xffffffffu};
  cd_forward_bn(s, &d, bn, &cache, got);
  KT_CHECK(cache.key != 0 && cd_within(got, want, n), "%s: folded batch_norm within rounding", s->name);
  /* and folded indeed: W a rounds differently from the sum times a somewhere among these
   * outputs (fixed data, so this holds or fails the same every run) */
  KT_CHECK(memcmp(got, want, (size_t)n * 4) != 0, "%s: batch_norm not folded", s->name);
  float *cached = malloc((size_t)n * 4);
  memcpy(cached, got, (size_t)n * 4);
  cd_forward_bn(s, &d, bn, NULL, got);   /* packed per call: folded the same way */
  KT_CHECK(memcmp(got, cached, (size_t)n * 4) == 0, "%s: folded alike with and without a cache", s->name);
  ((float *)mu.data)[0] += 0.75f;   /* new statistics: the runtime clears the key, the fold follows */
  cd_affine_ref(s, conv, (const float *const *)bn, want);
  cache.key = 0;
  cd_forward_bn(s, &d, bn, &cache, got);
  KT_CHECK(cd_within(got, want, n), "%s: refolded after the cache was cleared", s->name);
  memcpy(cached, got, (size_t)n * 4);
  k_cache unstable = {NULL, 0, 0, 0x7u};   /* statistics that may change between calls: not cached */
  cd_forward_bn(s, &d, bn, &unstable, got);
  KT_CHECK(unstable.key == 0 && memcmp(got, cached, (size_t)n * 4) == 0, "%s: statistics not stable, folded per call", s->name);
  free(cached);
  free(cache.data), free(unstable.data);
  free(conv), free(want), free(got), free(zero);
  kt_tensor_free(&g), kt_tensor_free(&be), kt_tensor_free(&mu), kt_tensor_free(&var);
  cd_free(&d);
}

/* The NCHW loop for few input channels runs where k_conv_direct_nchw says (the specs named
 * "NCHW path", on every instruction set with vectors of 8 or 16) and nowhere else among the
 * specs, with KILN_CONV_NCHW=0 turning it off: its results are checked by cd_compare against
 * im2col (kWriteTo and kAddTo) and by cd_blocked against the blocked path bit for bit, and a
 * batch_norm folded into it here. */
static void cd_nchw_path(void) {
  static const char *const nmodes[] = {"direct", "direct-avx2", "direct-generic"};
  for (size_t m = 0; m < sizeof nmodes / sizeof *nmodes; m++)
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
      setenv("KILN_CONV", nmodes[m], 1);
      const cd_spec *s = &specs[i];
      cd_data d = cd_make(s);
      k_conv_param p = cd_param(s);
      int want = strncmp(s->name, "NCHW path", 9) == 0;
      KT_CHECK(k_conv_direct_nchw(&d.x.shape, &d.w.shape, &p) == want, "%s (%s): NCHW loop %s", s->name, nmodes[m],
               want ? "not taken" : "taken");
      setenv("KILN_CONV_NCHW", "0", 1);
      KT_CHECK(!k_conv_direct_nchw(&d.x.shape, &d.w.shape, &p), "%s: KILN_CONV_NCHW=0 ignored", s->name);
      unsetenv("KILN_CONV_NCHW");
      cd_free(&d);
    }
  cd_fold_batch_norm(&specs[28]);   /* the RGB stem with a bias */
  cd_fold_batch_norm(&specs[29]);   /* no bias, two output blocks */
}

/* The padded-plane input for few channels (k_cd_planar) runs for the specs named "planar" on
 * every instruction set, with KILN_CONV_PLANAR=0 turning it off; wherever it runs, NCHW or
 * blocked out, its bits are the packed input's (cd_compare and cd_blocked check it against
 * im2col and the NCHW path), and a batch_norm folds into it. */
static void cd_planar_path(void) {
  static const char *const pmodes[] = {"direct", "direct-avx2", "direct-generic"};
  char err[160];
  for (size_t m = 0; m < sizeof pmodes / sizeof *pmodes; m++)
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
      const cd_spec *s = &specs[i];
      cd_data d = cd_make(s);
      k_conv_param p = cd_param(s);
      int64_t ny = k_shape_numel(&d.y.shape), V = m == 1 ? 8 : 16;
      float *zero = calloc((size_t)ny, sizeof(float)), *got = malloc((size_t)ny * sizeof(float));
      float *ref = malloc((size_t)ny * sizeof(float));
      setenv("KILN_CONV", pmodes[m], 1);
      int on = k_conv_direct_planar(&d.x.shape, &d.w.shape, &p);
      if (strncmp(s->name, "planar", 6) == 0) KT_CHECK(on, "%s (%s): planar input not taken", s->name, pmodes[m]);
      setenv("KILN_CONV_PLANAR", "0", 1);
      KT_CHECK(!k_conv_direct_planar(&d.x.shape, &d.w.shape, &p), "%s: KILN_CONV_PLANAR=0 ignored", s->name);
      for (int out_b = 0; out_b < 2 && s->two_d | !out_b; out_b++) {
        for (int pl = 0; pl < 2; pl++) {
          float *o = pl ? got : ref;
          if (pl) unsetenv("KILN_CONV_PLANAR");
          else setenv("KILN_CONV_PLANAR", "0", 1);
          err[0] = 0;
          if (out_b) KT_CHECK(cd_forward_blocked(s, &d, V, 0, 1, pmodes[m], 0, o, err, sizeof err) == 0, "%s: %s", s->name, err);
          else cd_forward(s, &p, &d, pmodes[m], kWriteTo, zero, o);
        }
        KT_CHECK(memcmp(got, ref, (size_t)ny * sizeof(float)) == 0, "%s (%s, %s out): planar input changes bits", s->name,
                 pmodes[m], out_b ? "blocked" : "NCHW");
      }
      unsetenv("KILN_CONV_PLANAR");
      free(zero), free(got), free(ref);
      cd_free(&d);
    }
  cd_fold_batch_norm(&specs[36]);   /* the 3x3/2 RGB stem */
}

/* ---- Winograd F(2x2, 3x3) (k_conv_direct_isa.h) ---- */

/* Whether the forward's output differs anywhere from the direct loop's: Winograd rounds
 * otherwise, so on these fixed data it differs somewhere exactly when it ran. */
static int cd_differs(const cd_spec *s, cd_data *d, const char *mode, const float *zero, float *a, float *b) {
  k_conv_param p = cd_param(s);
  int64_t ny = k_shape_numel(&d->y.shape);
  setenv("KILN_WINOGRAD", "0", 1);
  cd_forward(s, &p, d, mode, kWriteTo, zero, a);
  unsetenv("KILN_WINOGRAD");
  cd_forward(s, &p, d, mode, kWriteTo, zero, b);
  return memcmp(a, b, (size_t)ny * sizeof(float)) != 0;
}

/* One gradient alone, which = 0 (data) or 1 (weight), KILN_WINOGRAD=0 when off, into g. */
static void cd_one_grad(const cd_spec *s, cd_data *d, const char *mode, int off, int which, float *g) {
  k_conv_param p = cd_param(s);
  int64_t nx = k_shape_numel(&d->x.shape), nw = k_shape_numel(&d->w.shape);
  float *zx = calloc((size_t)nx, 4), *zw = calloc((size_t)nw, 4), *zb = calloc((size_t)s->F, 4);
  float *jx = malloc((size_t)nx * 4), *jw = malloc((size_t)nw * 4), *jb = malloc((size_t)s->F * 4);
  float *init[3] = {zx, zw, zb}, *grads[3] = {which == 0 ? g : jx, which == 1 ? g : jw, jb};
  k_req r[3] = {which == 0 ? kWriteTo : kNullOp, which == 1 ? kWriteTo : kNullOp, kNullOp};
  if (off) setenv("KILN_WINOGRAD", "0", 1);
  cd_backward(s, &p, d, mode, r, init, grads);
  unsetenv("KILN_WINOGRAD");
  free(zx), free(zw), free(zb), free(jx), free(jw), free(jb);
}

/* The same gradient from |x|, |w|, |dy| on im2col: per element, the sum of the magnitudes of
 * its terms, the scale of its rounding error. */
static void cd_abs_grad(const cd_spec *s, const cd_data *d, int which, float *out) {
  cd_data a = cd_make(s);
  const k_tensor *src[3] = {&d->dy, &d->w, &d->x}, *dst[3] = {&a.dy, &a.w, &a.x};
  for (int k = 0; k < 3; k++)
    for (int64_t i = 0; i < k_shape_numel(&src[k]->shape); i++)
      ((float *)dst[k]->data)[i] = fabsf(((const float *)src[k]->data)[i]);
  cd_one_grad(s, &a, "im2col", 1, which, out);
  cd_free(&a);
}

/* Runs gradient `which` with Winograd off and on; returns whether they differ (Winograd ran)
 * and sets *worst to the largest distance in ulp of the terms' magnitude. */
static int cd_wino_grad(const cd_spec *s, cd_data *d, const char *mode, int which, double *worst) {
  int64_t n = k_shape_numel(which == 0 ? &d->x.shape : &d->w.shape);
  float *ga = malloc((size_t)n * 4), *gb = malloc((size_t)n * 4), *mag = malloc((size_t)n * 4);
  cd_one_grad(s, d, mode, 1, which, ga);
  cd_one_grad(s, d, mode, 0, which, gb);
  int ran = memcmp(ga, gb, (size_t)n * 4) != 0;
  cd_abs_grad(s, d, which, mag);
  *worst = 0;
  for (int64_t e = 0; e < n; e++) *worst = fmax(*worst, fabs((double)ga[e] - gb[e]) / (FLT_EPSILON * mag[e]));
  free(ga), free(gb), free(mag);
  return ran;
}

/* sum |x| |w| + |b| per output: the scale of a convolution's rounding error. */
static void cd_abs_conv(const cd_spec *s, const cd_data *d, const float *zero, float *out) {
  cd_data a = cd_make(s);
  const k_tensor *src[3] = {&d->x, &d->w, &d->b}, *dst[3] = {&a.x, &a.w, &a.b};
  for (int k = 0; k < 3; k++)
    for (int64_t i = 0; i < k_shape_numel(&src[k]->shape); i++)
      ((float *)dst[k]->data)[i] = fabsf(((const float *)src[k]->data)[i]);
  k_conv_param p = cd_param(s);
  cd_forward(s, &p, &a, "im2col", kWriteTo, zero, out);
  cd_free(&a);
}

/* Winograd runs exactly on the shapes it suits (cd_compare above holds its results to
 * im2col's on every instruction set), KILN_WINOGRAD=0 turns it off, and each output's
 * distance from the direct loop's stays within 4 ulp of its sum of |x| |w| (measured: at
 * most 1.6 on these shapes and instruction sets; the direct loop's own error is of that
 * order, since both sum up to 1152 products). The same for the data gradient, which runs
 * as a Winograd forward on dy. */
static void cd_winograd(void) {
  static const cd_spec no[] = {
      {"stride 2", 1, 1, 16, 8, 8, 16, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0, 0},
      {"odd output", 1, 1, 16, 7, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0},
      {"8 input channels", 1, 1, 8, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0},
      {"136 input channels", 1, 1, 136, 4, 4, 8, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0},
      {"dilation 2", 1, 1, 16, 8, 8, 16, 3, 3, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0, 0},
  };
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
      const cd_spec *s = &specs[i];
      /* the Winograd shapes, and the 60x60 one whose batch runs in chunks (the weight
         gradient's sums carried from chunk to chunk) */
      if (!strstr(s->name, "Winograd") && !strstr(s->name, "chunks")) continue;
      cd_data d = cd_make(s);
      int64_t ny = k_shape_numel(&d.y.shape);
      float *zero = calloc((size_t)ny, 4), *a = malloc((size_t)ny * 4), *b = malloc((size_t)ny * 4);
      KT_CHECK(cd_differs(s, &d, modes[m], zero, a, b), "%s %s: Winograd did not run", s->name, modes[m]);
      float *mag = malloc((size_t)ny * 4);
      cd_abs_conv(s, &d, zero, mag);
      double worst = 0;
      for (int64_t e = 0; e < ny; e++) worst = fmax(worst, fabs((double)a[e] - b[e]) / (FLT_EPSILON * mag[e]));
      KT_CHECK(worst <= 4, "%s %s: Winograd off by %.2f ulp of sum |x| |w|", s->name, modes[m], worst);
      free(zero), free(a), free(b), free(mag);
      /* the data gradient, a forward on dy with the flipped weights: on every one of these
         shapes but the 3-filter one (16 to 128 filters, even input) */
      int ran = cd_wino_grad(s, &d, modes[m], 0, &worst);
      KT_CHECK(ran == (s->F >= 16), "%s %s: Winograd data gradient %s", s->name, modes[m], ran ? "ran" : "did not run");
      KT_CHECK(worst <= 4, "%s %s: Winograd data gradient off by %.2f ulp of sum |dy| |w|", s->name, modes[m], worst);
      /* the weight gradient, F(3x3, 2x2): on all of them (any channel count); its sums run
         over transformed values up to 16 times the products' size, so the bound is wider
         (measured: at most 3.2) */
      ran = cd_wino_grad(s, &d, modes[m], 1, &worst);
      KT_CHECK(ran, "%s %s: Winograd weight gradient did not run", s->name, modes[m]);
      KT_CHECK(worst <= 8, "%s %s: Winograd weight gradient off by %.2f ulp of sum |x| |dy|", s->name, modes[m], worst);
      cd_free(&d);
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
      cd_data d = cd_make(&no[i]);
      int64_t ny = k_shape_numel(&d.y.shape);
      float *zero = calloc((size_t)ny, 4), *a = malloc((size_t)ny * 4), *b = malloc((size_t)ny * 4);
      KT_CHECK(!cd_differs(&no[i], &d, modes[m], zero, a, b), "%s %s: Winograd ran", no[i].name, modes[m]);
      free(zero), free(a), free(b);
      cd_free(&d);
    }
  }
}

/* Winograd declines only the data gradient where a pad passes 2 (its flipped pad 2 - p would
 * be negative), start or end alike; the forward and the weight gradient still take it, and
 * cd_compare holds all three to im2col. */
static void cd_winograd_declines(void) {
  static const cd_spec ends[] = {
      {"3x3 end pad 3", 1, 1, 16, 6, 6, 16, 3, 3, 1, 1, 1, 1, 1, 1, 0, 1, 3, 1, 0},
      {"3x3 right pad 4", 1, 1, 16, 6, 6, 16, 3, 3, 1, 1, 1, 0, 1, 1, 0, 1, 1, 4, 0},
  };
  const cd_spec *cases[3] = {&specs[27], &ends[0], &ends[1]};
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
    for (int i = 0; i < 3; i++) {
      const cd_spec *s = cases[i];
      cd_data d = cd_make(s);
      int64_t ny = k_shape_numel(&d.y.shape);
      float *zero = calloc((size_t)ny, 4), *a = malloc((size_t)ny * 4), *b = malloc((size_t)ny * 4);
      double worst;
      KT_CHECK(cd_differs(s, &d, modes[m], zero, a, b), "%s %s: Winograd forward did not run", s->name, modes[m]);
      KT_CHECK(!cd_wino_grad(s, &d, modes[m], 0, &worst), "%s %s: Winograd data gradient ran", s->name, modes[m]);
      KT_CHECK(cd_wino_grad(s, &d, modes[m], 1, &worst), "%s %s: Winograd weight gradient did not run", s->name, modes[m]);
      if (i > 0) cd_compare(s, modes[m], kWriteTo);
      free(zero), free(a), free(b);
      cd_free(&d);
    }
}

/* A 1x1 unpadded layer on an NCHW input runs as bands of rows (k_cd_task_band: each band
 * packs and computes a few rows at a time for every pair of output blocks). Its bits are the
 * per-pair tasks' (KILN_CONV_BANDS=0) at 1, 2 and 4 threads: NCHW out, written and
 * accumulated, and blocked out with an epilogue in the store and one as a pass. The specs: a
 * wide input whose bands hold several runs of rows (640 channels of 14x14: 7 rows a run),
 * stride 2 (every other row packed), a batch of 3 (bands per sample with 4 threads), and a
 * layer whose weights outweigh its input (5x5 into 40 channels: banded on one thread, split by
 * output blocks on more, k_cd_banded). */
static void cd_bands(void) {
  static const cd_spec bspecs[] = {
    /* name                      2d N  C    H   W   F  kh kw sh sw ph pw dh dw nb */
    {"bands, 640 channels",       1, 1, 640, 14, 14, 40, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0},
    {"bands, stride 2",           1, 1, 48,  15, 13, 24, 1, 1, 2, 2, 0, 0, 1, 1, 1, 0, 0, 0, 0},
    {"bands, batch 3",            1, 3, 20,  9,  10, 36, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0},
    {"bands, weights first",      1, 1, 24,  5,  5,  40, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0},
  };
  static const int threads[] = {1, 2, 4};
  static const char *const bmodes[] = {"direct", "direct-avx2"};
  for (size_t i = 0; i < sizeof bspecs / sizeof *bspecs; i++)
    for (size_t m = 0; m < sizeof bmodes / sizeof *bmodes; m++) {
      const cd_spec *s = &bspecs[i];
      int64_t V = m ? 8 : 16;
      cd_data d = cd_make(s);
      int64_t n = k_shape_numel(&d.y.shape);
      k_tensor r = kt_tensor_f32(d.y.shape, -1, 1, 47);
      cd_epis e = cd_epi_cases(s);
      k_conv_param p = cd_param(s);
      float *init = kt_data_copy(&d.y), *ref[4], *got = malloc((size_t)n * 4);
      char err[160] = "";
      for (int b = 0; b < 2; b++)
        for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
          int first = b == 0 && t == 0;   /* the reference: per-pair tasks on one thread */
          if (b == 0) setenv("KILN_CONV_BANDS", "0", 1);
          else unsetenv("KILN_CONV_BANDS");
          k_parallel_set_threads(threads[t]);
          for (int k = 0; k < 4; k++) {
            float *out = first ? (ref[k] = malloc((size_t)n * 4)) : got;
            if (k < 2) cd_forward(s, &p, &d, bmodes[m], k ? kAddTo : kWriteTo, init, out);
            else
              KT_CHECK(cd_forward_blocked_epi(s, &d, V, 0, 1, bmodes[m], 0, out, err, sizeof err, k == 2 ? &e.store : &e.pass,
                                              r.data) == 0, "%s: %s", s->name, err);
            if (!first)
              KT_CHECK(memcmp(got, ref[k], (size_t)n * 4) == 0, "%s %s case %d, bands %s, %d threads: not the per-pair bits",
                       s->name, bmodes[m], k, b ? "on" : "off", threads[t]);
          }
        }
      unsetenv("KILN_CONV_BANDS");
      k_parallel_set_threads(0);
      for (int k = 0; k < 4; k++) free(ref[k]);
      free(init), free(got);
      kt_tensor_free(&r);
      cd_free(&d);
    }
}

/* ---- a prologue: batch_norm (predict) then relu of the data, applied while packing ---- */

/* The reference: batch_norm's and relu's own kernels on x, then the convolution on that. */
static void cd_pro_reference(const cd_spec *s, cd_data *d, const k_tensor bn[4], int relu, float *out) {
  int64_t nx = k_shape_numel(&d->x.shape);
  float *t = malloc((size_t)nx * 4), *u = malloc((size_t)nx * 4);
  k_batch_norm_param bp = {1e-3f, 0.9f, 1, 0};
  k_tensor bin[5] = {d->x, bn[0], bn[1], bn[2], bn[3]}, bo[3] = {d->x, {NULL, {1, {s->C}}, K_F32}, {NULL, {1, {s->C}}, K_F32}};
  k_req req[3] = {kWriteTo, kNullOp, kNullOp};
  char err[128] = "";
  bo[0].data = t;
  k_call bc = {bin, 5, bo, 3, req, &bp, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  KT_CHECK(k_batch_norm_forward(&bc) == 0, "%s: batch_norm: %s", s->name, err);
  k_tensor rin = d->x, rout = d->x;
  rin.data = t, rout.data = u;
  k_call rc = {&rin, 1, &rout, 1, req, NULL, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  if (relu) KT_CHECK(k_relu_forward(&rc) == 0, "%s: relu: %s", s->name, err);
  cd_data r = *d;
  r.x.data = relu ? u : t;
  k_conv_param p = cd_param(s);
  float *zero = calloc((size_t)k_shape_numel(&d->y.shape), sizeof(float));
  cd_forward(s, &p, &r, "direct", kWriteTo, zero, out);
  free(t), free(u), free(zero);
}

/* One forward with the prologue (its four tensors after the bias), out NCHW, or blocked at V
 * with a relu epilogue in the store when V; with cache, twice through it (filled, then read). */
static int cd_pro_forward(const cd_spec *s, cd_data *d, const k_tensor bn[4], int relu, int64_t V, k_cache *cache,
                          float *out, char *err, size_t errn) {
  k_conv_param p = cd_param(s);
  int nb = s->no_bias ? 2 : 3;
  p.pro_slot = nb, p.pro_relu = relu, p.pro_eps = 1e-3f;
  p.out_block = p.epi_block = (int32_t)V;
  k_tensor in[7] = {d->x, d->w, d->b};
  for (int k = 0; k < 4; k++) in[nb + k] = bn[k];
  int64_t OP = d->y.shape.d[2] * d->y.shape.d[3], Fb = V ? (s->F + V - 1) / V : 0;
  float *yb = V ? malloc((size_t)(s->N * Fb * OP * V) * sizeof(float)) : NULL;
  k_tensor o = d->y;
  o.data = yb ? yb : out;
  k_req req = kWriteTo;
  k_epi_step relu_s = {.kind = K_EPI_UNARY, .fn = K_EPI_FN_relu};
  k_epilogue epi = {1, {relu_s}};
  size_t tb = k_conv_temp_bytes(&d->x.shape, &d->w.shape, &p);
  void *temp = cd_temp(tb);
  k_call c = {in, nb + 4, &o, 1, &req, &p, temp, tb, 0, 0, 0, err, errn, cache, V ? &epi : NULL, NULL};
  int rc = k_convolution_forward(&c);
  if (!rc && cache) rc = k_convolution_forward(&c);
  if (!rc && yb) kt_from_blocked(yb, s->N, s->F, OP, V, out);
  free(temp), free(yb);
  return rc;
}

static void cd_prologue(void) {
  static const cd_spec pro_specs[] = {
    {"prologue, 1x1 14x14", 1, 1, 40, 14, 14, 24, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0},
    {"prologue, 1x1/2 batch 2", 1, 2, 64, 7, 9, 20, 1, 1, 2, 2, 0, 0, 1, 1, 1, 0, 0, 0, 0},
  };
  static const int threads[] = {1, 2, 4};
  static const char *bands[] = {"1", "0"};
  int avx512 = __builtin_cpu_supports("avx512f") != 0;
  for (size_t i = 0; i < sizeof pro_specs / sizeof *pro_specs; i++) {
    const cd_spec *s = &pro_specs[i];
    cd_data d = cd_make(s);
    k_tensor bn[4] = {kt_tensor_f32(kt_shape(1, s->C), 0.5, 1.5, 31), kt_tensor_f32(kt_shape(1, s->C), -1, 1, 32),
                      kt_tensor_f32(kt_shape(1, s->C), -0.5, 0.5, 33), kt_tensor_f32(kt_shape(1, s->C), 0.1, 2, 34)};
    int64_t n = k_shape_numel(&d.y.shape);
    float *want = malloc((size_t)n * 4), *want_relu = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    char err[200] = "";
    for (int relu = 0; relu < 2; relu++) {
      cd_pro_reference(s, &d, bn, relu, want);
      for (int64_t e = 0; e < n; e++) want_relu[e] = want[e] < 0 ? 0.0f : want[e];   /* the blocked case's epilogue */
      for (size_t t = 0; t < sizeof threads / sizeof *threads; t++)
        for (size_t b = 0; b < 2; b++)
          for (int blocked = 0; blocked < 1 + avx512; blocked++) {
            k_parallel_set_threads(threads[t]);
            setenv("KILN_CONV_BANDS", bands[b], 1);
            k_cache cache = {NULL, 0, 0, ~0u};
            err[0] = 0;
            int rc = cd_pro_forward(s, &d, bn, relu, blocked ? 16 : 0, b ? NULL : &cache, got, err, sizeof err);
            free(cache.data);
            KT_CHECK(rc == 0, "%s: %s", s->name, err);
            KT_CHECK(rc == 0 && memcmp(got, blocked ? want_relu : want, (size_t)n * 4) == 0, "%s, relu %d, %d threads, bands %s, out %s: not "
                     "batch_norm, relu and the convolution run apart, bit for bit", s->name, relu, threads[t], bands[b],
                     blocked ? "blocked" : "NCHW");
          }
    }
    k_parallel_set_threads(0);
    unsetenv("KILN_CONV_BANDS");
    for (int k = 0; k < 4; k++) kt_tensor_free(&bn[k]);
    free(want), free(want_relu), free(got);
    cd_free(&d);
  }
  /* refused with a message, never skipped: a 3x3 layer; the parameters not in the call */
  cd_spec s3 = {"prologue refused, 3x3", 1, 1, 16, 6, 6, 8, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0};
  cd_data d = cd_make(&s3);
  k_tensor bn[4] = {kt_tensor_f32(kt_shape(1, 16), 0.5, 1.5, 31), kt_tensor_f32(kt_shape(1, 16), -1, 1, 32),
                    kt_tensor_f32(kt_shape(1, 16), -0.5, 0.5, 33), kt_tensor_f32(kt_shape(1, 16), 0.1, 2, 34)};
  float *out = malloc((size_t)k_shape_numel(&d.y.shape) * 4);
  char err[200] = "";
  KT_CHECK(cd_pro_forward(&s3, &d, bn, 1, 0, NULL, out, err, sizeof err) != 0 && strstr(err, "only a 1x1"),
           "a 3x3 layer's prologue refused: %s", err);
  KT_CHECK(!k_conv_prologue_ok(&d.x.shape, &d.w.shape, &(k_conv_param){0}), "k_conv_prologue_ok: no for a 3x3 layer");
  free(out);
  for (int k = 0; k < 4; k++) kt_tensor_free(&bn[k]);
  cd_free(&d);
}

int main(void) {
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
      cd_compare(&specs[i], modes[m], kWriteTo);
      if (m == 0) cd_compare(&specs[i], modes[m], kAddTo);
    }
  cd_gradcheck(&specs[1], "direct");
  cd_gradcheck(&specs[4], "direct");
  cd_gradcheck(&specs[6], "direct-avx2");
  cd_gradcheck(&specs[15], "direct-generic");
  cd_gradcheck(&specs[18], "direct");           /* Winograd forward */
  cd_gradcheck(&specs[20], "direct-generic");
  cd_gradcheck(&specs[21], "direct");           /* asymmetric pads, Winograd */
  cd_gradcheck(&specs[23], "direct-avx2");      /* asymmetric pads, stride 2, dilation */
  cd_gradcheck(&specs[26], "direct-generic");   /* 1-D asymmetric pads */
  cd_winograd();
  cd_winograd_declines();
  cd_dispatch_contract();
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    if (specs[i].two_d) cd_blocked(&specs[i]);
  cd_blocked_refused();
  for (size_t i = 0; i < sizeof grouped_specs / sizeof *grouped_specs; i++) cd_grouped(&grouped_specs[i]);
  cd_grouped_declines();
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    if (specs[i].two_d) {
      cd_store_tail(&specs[i], 16, "direct");
      cd_store_tail(&specs[i], 8, "direct-avx2");
    }
  cd_fold_batch_norm(&specs[1]);    /* with a bias, channels that do not fill a vector */
  cd_fold_batch_norm(&specs[8]);    /* 1x1 stride 2, no bias */
  cd_fold_batch_norm(&specs[18]);   /* Winograd, the fold in the transformed weights */
  cd_nchw_path();
  cd_planar_path();
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    if (strncmp(specs[i].name, "batch 1, rows cut", 17) == 0) {
      cd_row_parts(&specs[i], "direct", 16);
      cd_row_parts(&specs[i], "direct-avx2", 8);
    }
  cd_bands();
  cd_prologue();
  unsetenv("KILN_CONV");
  return kt_finish("test_conv_direct");
}
