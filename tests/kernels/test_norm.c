/* test_norm.c — batch_norm and layer_norm: forward values, saved statistics and the moving
 * update against hand computation in double written here; predict mode with pruned hidden
 * outputs; gradient checks (train formula) for several channel axes. */
#include "kt_harness.h"

#include <math.h>
#include <stdlib.h>

/* ---- batch_norm ------------------------------------------------------------------------ */

static kt_case bn_case(const char *name, k_shape ds, int axis, const k_batch_norm_param *p) {
  kt_case c = {0};
  int C = (int)ds.d[axis];
  c.name = name; c.fwd = k_batch_norm_forward; c.bwd = k_batch_norm_backward;
  c.nargs = 3; c.naux = 2; c.nout = 3; c.nvisible = 1;
  c.in[0] = kt_tensor_f32(ds, -2, 3, 31);
  c.in[1] = kt_tensor_f32(kt_shape(1, C), 0.5f, 1.5f, 32);
  c.in[2] = kt_tensor_f32(kt_shape(1, C), -1, 1, 33);
  c.in[3] = kt_tensor_f32(kt_shape(1, C), -0.5f, 0.5f, 34);
  c.in[4] = kt_tensor_f32(kt_shape(1, C), 0.5f, 2, 35);
  c.out_shape[0] = ds;
  c.out_shape[1] = c.out_shape[2] = kt_shape(1, C);
  c.param = p;
  c.is_train = 1;
  c.deps_og = 1; c.deps_in = 3; c.deps_out = 6;
  return c;
}

static void bn_free(kt_case *c) {
  for (int j = 0; j < 5; j++) kt_tensor_free(&c->in[j]);
}

/* Channel ch's elements of x (shape s, channel axis a) gathered in order. */
static int64_t gather_channel(const k_shape *s, int a, const float *x, int64_t ch, double *dst) {
  int64_t inner = 1, outer = 1, C = s->d[a], n = 0;
  for (int i = 0; i < a; i++) outer *= s->d[i];
  for (int i = a + 1; i < s->rank; i++) inner *= s->d[i];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) dst[n++] = x[(o * C + ch) * inner + i];
  return n;
}

/* Train-mode forward: output, saved statistics and moving update, all from first principles. */
static void bn_check_train_forward(const char *name, k_shape ds, int axis) {
  k_batch_norm_param p = {1e-5f, 0.9f, axis, 0};
  kt_case c = bn_case(name, ds, axis, &p);
  int64_t C = ds.d[axis], n = k_shape_numel(&ds);
  float *mm0 = malloc((size_t)C * 4), *mv0 = malloc((size_t)C * 4);
  for (int64_t ch = 0; ch < C; ch++) { mm0[ch] = ((float *)c.in[3].data)[ch]; mv0[ch] = ((float *)c.in[4].data)[ch]; }
  k_tensor out[KT_MAX_IO];
  KT_CHECK(kt_forward(&c, out) == 0, "%s rc", name);
  double *vals = malloc((size_t)n * sizeof(double)), *ovals = malloc((size_t)n * sizeof(double));
  int bad = 0;
  for (int64_t ch = 0; ch < C; ch++) {
    int64_t m = gather_channel(&ds, axis, c.in[0].data, ch, vals);
    gather_channel(&ds, axis, out[0].data, ch, ovals);
    double mean = 0, var = 0;
    for (int64_t i = 0; i < m; i++) mean += vals[i] / m;
    for (int64_t i = 0; i < m; i++) var += (vals[i] - mean) * (vals[i] - mean) / m;
    double inv = 1 / sqrt(var + 1e-5), g = ((float *)c.in[1].data)[ch], b = ((float *)c.in[2].data)[ch];
    for (int64_t i = 0; i < m; i++) bad += fabs(ovals[i] - ((vals[i] - mean) * inv * g + b)) > 1e-5;
    bad += fabs(((float *)out[1].data)[ch] - mean) > 1e-6 || fabs(((float *)out[2].data)[ch] - inv) > 1e-5 * inv;
    double want_mm = 0.9 * mm0[ch] + 0.1 * mean, want_mv = 0.9 * mv0[ch] + 0.1 * var * m / (m - 1);
    bad += fabs(((float *)c.in[3].data)[ch] - want_mm) > 1e-6 || fabs(((float *)c.in[4].data)[ch] - want_mv) > 1e-6;
  }
  KT_CHECK(bad == 0, "%s: %d mismatches in output / saved stats / moving update", name, bad);
  free(vals); free(ovals); free(mm0); free(mv0);
  for (int k = 0; k < 3; k++) kt_tensor_free(&out[k]);
  bn_free(&c);
}

/* Predict mode: moving statistics, aux untouched, hidden outputs pruned (NULL, kNullOp). */
static void bn_check_predict(void) {
  k_batch_norm_param p = {1e-3f, 0.9f, 1, 0};
  k_shape ds = kt_shape(3, 2, 3, 4);
  kt_case c = bn_case("bn predict", ds, 1, &p);
  float *y = calloc(24, sizeof(float)), mm[3], mv[3];
  k_tensor out[3] = {{y, ds, K_F32}, {NULL, kt_shape(1, 3), K_F32}, {NULL, kt_shape(1, 3), K_F32}};
  k_req req[3] = {kWriteTo, kNullOp, kNullOp};
  char err[64];
  for (int i = 0; i < 3; i++) { mm[i] = ((float *)c.in[3].data)[i]; mv[i] = ((float *)c.in[4].data)[i]; }
  k_call call = {c.in, 5, out, 3, req, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  KT_CHECK(k_batch_norm_forward(&call) == 0, "bn predict rc");
  int bad = 0;
  const float *x = c.in[0].data, *g = c.in[1].data, *b = c.in[2].data;
  for (int n = 0; n < 2; n++)
    for (int ch = 0; ch < 3; ch++)
      for (int i = 0; i < 4; i++) {
        int k = (n * 3 + ch) * 4 + i;
        double want = (x[k] - mm[ch]) / sqrt(mv[ch] + 1e-3) * g[ch] + b[ch];
        bad += fabs(y[k] - want) > 1e-5;
      }
  for (int i = 0; i < 3; i++) bad += mm[i] != ((float *)c.in[3].data)[i] || mv[i] != ((float *)c.in[4].data)[i];
  KT_CHECK(bad == 0, "bn predict: %d mismatches", bad);
  free(y);
  bn_free(&c);
}

static void bn_gradcheck(const char *name, k_shape ds, int axis) {
  k_batch_norm_param p = {1e-5f, 0.9f, axis, 0};
  kt_case c = bn_case(name, ds, axis, &p);
  kt_gradcheck(&c);
  bn_free(&c);
}

/* ---- layer_norm ------------------------------------------------------------------------ */

static kt_case ln_case(const char *name, k_shape ds, const k_layer_norm_param *p) {
  kt_case c = {0};
  int d = (int)ds.d[ds.rank - 1];
  k_shape rows = ds;
  rows.rank--;
  c.name = name; c.fwd = k_layer_norm_forward; c.bwd = k_layer_norm_backward;
  c.nargs = 3; c.nout = 3; c.nvisible = 1;
  c.in[0] = kt_tensor_f32(ds, -2, 3, 41);
  c.in[1] = kt_tensor_f32(kt_shape(1, d), 0.5f, 1.5f, 42);
  c.in[2] = kt_tensor_f32(kt_shape(1, d), -1, 1, 43);
  c.out_shape[0] = ds;
  c.out_shape[1] = c.out_shape[2] = rows;
  c.param = p;
  c.deps_og = 1; c.deps_in = 3; c.deps_out = 6;
  return c;
}

static void ln_check(const char *name, k_shape ds) {
  k_layer_norm_param p = {ds.rank - 1, 1e-5f};
  kt_case c = ln_case(name, ds, &p);
  int64_t d = ds.d[ds.rank - 1], rows = k_shape_numel(&ds) / d;
  k_tensor out[KT_MAX_IO];
  KT_CHECK(kt_forward(&c, out) == 0, "%s rc", name);
  const float *x = c.in[0].data, *g = c.in[1].data, *b = c.in[2].data, *y = out[0].data;
  int bad = 0;
  for (int64_t r = 0; r < rows; r++) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < d; j++) mean += x[r * d + j] / (double)d;
    for (int64_t j = 0; j < d; j++) var += (x[r * d + j] - mean) * (x[r * d + j] - mean) / (double)d;
    double inv = 1 / sqrt(var + 1e-5);
    for (int64_t j = 0; j < d; j++) bad += fabs(y[r * d + j] - ((x[r * d + j] - mean) * inv * g[j] + b[j])) > 1e-5;
    bad += fabs(((float *)out[1].data)[r] - mean) > 1e-6 || fabs(((float *)out[2].data)[r] - inv) > 1e-5 * inv;
  }
  KT_CHECK(bad == 0, "%s forward: %d mismatches", name, bad);
  for (int k = 0; k < 3; k++) kt_tensor_free(&out[k]);
  kt_gradcheck(&c);
  for (int j = 0; j < 3; j++) kt_tensor_free(&c.in[j]);
}

/* A NaN or an inf anywhere in a row makes that whole row NaN (as F.layer_norm: inf - mean
 * is inf - inf or inf, the variance NaN or inf), in the full vector or the tail of a row of
 * 17, and leaves the other rows alone. */
static void ln_check_nonfinite(void) {
  enum { D = 17 };
  float specials[3] = {NAN, INFINITY, -INFINITY}, g[D], b[D], x[2 * D], y[2 * D], m[2], inv[2];
  int at[2] = {2, 16};
  char err[64];
  for (int i = 0; i < D; i++) g[i] = 1.0f, b[i] = 0.0f;
  for (int s = 0; s < 3; s++)
    for (int a = 0; a < 2; a++) {
      for (int i = 0; i < 2 * D; i++) x[i] = (float)(i % 7) - 3.0f;
      x[at[a]] = specials[s];
      k_layer_norm_param p = {1, 1e-5f};
      k_tensor in[3] = {{x, kt_shape(2, 2, D), K_F32}, {g, kt_shape(1, D), K_F32}, {b, kt_shape(1, D), K_F32}};
      k_tensor out[3] = {{y, in[0].shape, K_F32}, {m, kt_shape(1, 2), K_F32}, {inv, kt_shape(1, 2), K_F32}};
      k_req req[3] = {kWriteTo, kWriteTo, kWriteTo};
      k_call call = {in, 3, out, 3, req, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
      int ok = k_layer_norm_forward(&call) == 0;
      for (int i = 0; i < D; i++) ok &= isnan(y[i]) && isfinite(y[D + i]);
      KT_CHECK(ok, "layer_norm with %g at %d: its row NaN, the other finite", specials[s], at[a]);
    }
}

int main(void) {
  bn_check_train_forward("bn train axis 1", kt_shape(4, 4, 3, 2, 2), 1);
  bn_check_train_forward("bn train axis 2 (channels last)", kt_shape(3, 5, 2, 3), 2);
  bn_check_train_forward("bn train axis 1 of 2-D", kt_shape(2, 6, 4), 1);
  bn_check_predict();
  bn_gradcheck("bn grad axis 1", kt_shape(4, 4, 3, 2, 2), 1);
  bn_gradcheck("bn grad axis 2", kt_shape(3, 5, 2, 3), 2);
  bn_gradcheck("bn grad axis 0", kt_shape(3, 3, 4, 2), 0);
  bn_gradcheck("bn grad 2-D", kt_shape(2, 6, 4), 1);
  ln_check("layer_norm 2-D", kt_shape(2, 5, 8));
  ln_check("layer_norm 3-D", kt_shape(3, 2, 3, 6));
  ln_check("layer_norm rows over one block", kt_shape(2, 3, 300));   /* 256-float blocks */
  ln_check("layer_norm rows off the lanes", kt_shape(3, 2, 7, 19));   /* 16 lanes + a tail */
  ln_check("layer_norm rows of one", kt_shape(2, 5, 1));
  ln_check_nonfinite();
  return kt_finish("test_norm");
}
