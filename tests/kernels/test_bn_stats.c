/* test_bn_stats.c — a training batch_norm's statistics gathered by the convolution that feeds
 * it (k_epilogue.h's K_EPI_STATS, passes/pass_epilogue.c): on every forward path a
 * convolution can take (the direct loop, Winograd, the NCHW stem loop, im2col, the grouped
 * direct path, 1-D), with the epilogue alone and after an elementwise step,
 *   - the convolution's output is bit-identical to the same call without the statistics;
 *   - the gathered [N, C, 4] floats are, bit for bit, k_bn_row_sums of each plane of it;
 *   - batch_norm given them (input slot K_BN_STATS_SLOT) writes the same bits as batch_norm
 *     summing its data itself: output, saved mean and invstd, moving statistics;
 * and batch_norm refuses gathered statistics of the wrong size with a message. */
#include "kt_harness.h"
#include "k_conv_direct.h"
#include "k_conv_dw.h"
#include "k_epilogue.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *name, *conv_env;   /* KILN_CONV for the case, or NULL: the dispatch's own choice */
  int two_d, N, C, F, H, W, k, stride, pad, groups;
  int relu;                      /* a relu step before the statistics */
  char path;                     /* n: the NCHW stem loop, d: direct (or Winograd), i: im2col, g: grouped */
} bs_spec;

static const bs_spec specs[] = {
  /* name                          env       2d N  C   F   H   W  k s p g relu path */
  {"stem: NCHW rows, 3 -> 16",      NULL,     1, 3, 3,  16, 16, 32, 3, 1, 1, 1, 0, 'n'},
  {"Winograd 3x3 16 -> 16",         NULL,     1, 2, 16, 16, 8,  8,  3, 1, 1, 1, 0, 'd'},
  {"direct 3x3 stride 2, 16 -> 24", NULL,     1, 3, 16, 24, 9,  11, 3, 2, 1, 1, 0, 'd'},
  {"direct 1x1 stride 2, relu",     NULL,     1, 2, 8,  20, 7,  7,  1, 2, 0, 1, 1, 'd'},
  {"im2col 3x3 (forced)",           "im2col", 1, 3, 5,  7,  6,  9,  3, 1, 1, 1, 0, 'i'},
  {"im2col batch 1, relu",          "im2col", 1, 1, 4,  6,  5,  5,  3, 1, 1, 1, 1, 'i'},
  {"depthwise 3x3",                 NULL,     1, 2, 8,  8,  9,  10, 3, 1, 1, 8, 0, 'g'},
  {"1-D, 12 -> 10",                 NULL,     0, 3, 12, 10, 1,  29, 3, 1, 1, 1, 0, 'd'},
};

static k_conv_param bs_conv_param(const bs_spec *s) {
  k_conv_param p = {0};
  int n = s->two_d ? 2 : 1;
  p.kernel.n = p.stride.n = p.pad.n = p.dilate.n = n;
  for (int i = 0; i < n; i++) {
    p.kernel.v[i] = s->two_d || i == n - 1 ? s->k : 1;
    p.stride.v[i] = s->stride, p.pad.v[i] = s->pad, p.dilate.v[i] = 1;
  }
  p.num_filter = s->F, p.num_group = s->groups, p.no_bias = 1;
  return p;
}

/* The convolution of case s, with epilogue e (NULL: none) and its statistics into st. */
static int bs_conv(const bs_spec *s, const k_tensor *x, const k_tensor *w, const k_epilogue *e, k_tensor *y,
                   k_tensor *st) {
  k_conv_param p = bs_conv_param(s);
  size_t tb = k_conv_temp_bytes(&x->shape, &w->shape, &p);
  void *temp = tb ? aligned_alloc(64, (tb + 63) / 64 * 64) : NULL;
  k_tensor in[3] = {*x, *w, {NULL, {0, {0}}, K_F32}}, out[2] = {*y, st ? *st : *y};
  k_req req[2] = {kWriteTo, kWriteTo};
  char msg[256] = "";
  k_call c = {in, 3, out, st ? 2 : 1, req, &p, temp, tb, 0, 0, 1, msg, sizeof msg, NULL, e, NULL};
  int rc = k_convolution_forward(&c);
  KT_CHECK(rc == 0, "%s: convolution failed: %s", s->name, msg);
  free(temp);
  return rc;
}

/* batch_norm in training on y, with the gathered statistics st (NULL: none); every output and
 * the moving statistics into outs[0..4]. */
static void bs_bn(const k_tensor *y, const k_tensor *st, float **outs, char *msg, size_t msglen, int *rc) {
  int64_t C = y->shape.d[1];
  k_shape cs = {1, {C}};
  k_batch_norm_param p = {1e-5f, 0.9f, 1, 0};
  float *gamma = malloc(sizeof(float) * (size_t)C), *beta = malloc(sizeof(float) * (size_t)C);
  kt_fill_uniform(gamma, C, 0.5f, 1.5f, 11);
  kt_fill_uniform(beta, C, -0.5f, 0.5f, 12);
  for (int64_t ch = 0; ch < C; ch++) outs[3][ch] = 0.1f * (float)ch, outs[4][ch] = 1.0f + 0.01f * (float)ch;
  k_tensor in[6] = {*y, {gamma, cs, K_F32}, {beta, cs, K_F32}, {outs[3], cs, K_F32}, {outs[4], cs, K_F32}};
  if (st) in[5] = *st;
  k_tensor out[3] = {{outs[0], y->shape, K_F32}, {outs[1], cs, K_F32}, {outs[2], cs, K_F32}};
  k_req req[3] = {kWriteTo, kWriteTo, kWriteTo};
  k_call c = {in, st ? 6 : 5, out, 3, req, &p, NULL, 0, 0, 0, 1, msg, msglen, NULL, NULL, NULL};
  *rc = k_batch_norm_forward(&c);
  free(gamma), free(beta);
}

static int bs_same(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

static void bs_case(const bs_spec *s) {
  if (s->conv_env) setenv("KILN_CONV", s->conv_env, 1);
  else unsetenv("KILN_CONV");
  k_shape xs = s->two_d ? kt_shape(4, s->N, s->C, s->H, s->W) : kt_shape(3, s->N, s->C, s->W);
  k_shape ws = s->two_d ? kt_shape(4, s->F, s->C / s->groups, s->k, s->k) : kt_shape(3, s->F, s->C / s->groups, s->k);
  int OW = (s->W + 2 * s->pad - s->k) / s->stride + 1, OH = s->two_d ? (s->H + 2 * s->pad - s->k) / s->stride + 1 : 1;
  k_shape ys = s->two_d ? kt_shape(4, s->N, s->F, OH, OW) : kt_shape(3, s->N, s->F, OW);
  k_conv_param cp = bs_conv_param(s);
  int direct = k_conv_direct_wanted(&xs, &ws, &cp, 0), nchw = k_conv_direct_nchw(&xs, &ws, &cp);
  int grouped = k_conv_dw_wanted(&xs, &ws, &cp);
  char path = nchw ? 'n' : direct ? 'd' : grouped ? 'g' : 'i';
  KT_CHECK(path == s->path, "%s: runs on path '%c', not the '%c' it is meant to test", s->name, path, s->path);
  k_tensor x = kt_tensor_f32(xs, -1, 1, 1), w = kt_tensor_f32(ws, -0.5f, 0.5f, 2);
  int64_t ny = k_shape_numel(&ys), inner = ny / (s->N * s->F), nst = (int64_t)s->N * s->F * K_BN_STATS_FLOATS;
  k_tensor y0 = {calloc((size_t)ny, sizeof(float)), ys, K_F32}, y1 = {calloc((size_t)ny, sizeof(float)), ys, K_F32};
  k_tensor st = {aligned_alloc(64, (size_t)(nst * 4 + 63) / 64 * 64), kt_shape(3, s->N, s->F, K_BN_STATS_FLOATS), K_F32};
  k_epilogue plain = {0}, with = {0};
  if (s->relu) {
    plain.step[plain.nsteps++] = (k_epi_step){.kind = K_EPI_UNARY, .fn = k_epi_fn_lookup("relu")};
    with = plain;
  }
  with.step[with.nsteps++] = (k_epi_step){.kind = K_EPI_STATS, .slot = 1, .inner = inner};
  KT_CHECK(k_epi_valid(&with, 3, 2) && !k_epi_valid(&with, 3, 1), "%s: the STATS epilogue's validity", s->name);
  memset(st.data, 0xff, (size_t)nst * 4);   /* NaN: a plane left unwritten shows */
  if (bs_conv(s, &x, &w, plain.nsteps ? &plain : NULL, &y0, NULL) || bs_conv(s, &x, &w, &with, &y1, &st)) return;
  KT_CHECK(bs_same(y0.data, y1.data, (size_t)ny * 4), "%s: the output changed when statistics were gathered", s->name);
  double want[2];
  int bad = 0;
  for (int64_t p = 0; p < (int64_t)s->N * s->F; p++) {
    k_bn_row_sums((const float *)y0.data + p * inner, inner, want);
    bad += !bs_same(want, (const double *)st.data + 2 * p, sizeof want);
  }
  KT_CHECK(bad == 0, "%s: %d of %d planes' gathered sums differ from k_bn_row_sums", s->name, bad, s->N * s->F);
  float *a[5], *b[5];
  size_t sizes[5] = {(size_t)ny, (size_t)s->F, (size_t)s->F, (size_t)s->F, (size_t)s->F};
  for (int i = 0; i < 5; i++) a[i] = calloc(sizes[i], sizeof(float)), b[i] = calloc(sizes[i], sizeof(float));
  char msg[256] = "";
  int rca, rcb;
  bs_bn(&y0, NULL, a, msg, sizeof msg, &rca);
  bs_bn(&y0, &st, b, msg, sizeof msg, &rcb);
  KT_CHECK(rca == 0 && rcb == 0, "%s: batch_norm failed: %s", s->name, msg);
  static const char *const what[5] = {"output", "saved mean", "saved invstd", "moving mean", "moving var"};
  for (int i = 0; i < 5; i++)
    KT_CHECK(bs_same(a[i], b[i], sizes[i] * 4), "%s: batch_norm's %s differs with gathered statistics", s->name, what[i]);
  for (int i = 0; i < 5; i++) free(a[i]), free(b[i]);
  kt_tensor_free(&x), kt_tensor_free(&w), free(y0.data), free(y1.data), free(st.data);
  unsetenv("KILN_CONV");
}

/* Statistics of another size (a descriptor that lies) are refused, not read past their end. */
static void bs_wrong_size(void) {
  k_shape ys = kt_shape(4, 2, 3, 4, 4);
  k_tensor y = kt_tensor_f32(ys, -1, 1, 3);
  k_tensor st = {aligned_alloc(64, 64 * 4), kt_shape(3, 2, 2, K_BN_STATS_FLOATS), K_F32};
  float *o[5];
  for (int i = 0; i < 5; i++) o[i] = calloc(32, sizeof(float));
  char msg[256] = "";
  int rc;
  bs_bn(&y, &st, o, msg, sizeof msg, &rc);
  KT_CHECK(rc != 0 && strstr(msg, "gathered statistics"), "wrong-sized statistics: rc %d, message '%s'", rc, msg);
  for (int i = 0; i < 5; i++) free(o[i]);
  kt_tensor_free(&y), free(st.data);
}

int main(void) {
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) bs_case(&specs[i]);
  bs_wrong_size();
  return kt_finish("bn_stats");
}
