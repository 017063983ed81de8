/* test_reduce.c — sum, mean and max over single, multiple and all axes, with and without
 * keepdims: gradients by finite differences, values against double loops written here,
 * torch.amax's even split among ties, and kWriteTo overwriting whatever the buffer held. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kt_harness.h"

typedef enum { SUM, MEAN, MAX } kind;
static const char *names[] = {"sum", "mean", "max"};
static const k_fn fwds[] = {k_sum_forward, k_mean_forward, k_max_forward};
static const k_fn bwds[] = {k_sum_backward, k_mean_backward, k_max_backward};

static k_reduce_param make_param(int n, const int *axes, int keepdims) {
  k_reduce_param p = {{n, {0}}, keepdims};
  for (int i = 0; i < n; i++) p.axis.v[i] = axes[i];
  return p;
}

static int reduced(const k_reduce_param *p, int axis) {
  for (int i = 0; i < p->axis.n; i++)
    if (p->axis.v[i] == axis) return 1;
  return 0;
}

static k_shape out_shape(k_shape x, const k_reduce_param *p) {
  k_shape o = {0, {0}};
  for (int i = 0; i < x.rank; i++)
    if (!reduced(p, i)) o.d[o.rank++] = x.d[i];
    else if (p->keepdims) o.d[o.rank++] = 1;
  return o;
}

/* Output flat index of input flat index i: drop the reduced coordinates. */
static int64_t out_index(int64_t i, k_shape x, const k_reduce_param *p) {
  int64_t idx = 0, mul = 1;
  for (int a = x.rank - 1; a >= 0; a--) {
    int64_t coord = i % x.d[a];
    i /= x.d[a];
    if (reduced(p, a)) continue;
    idx += coord * mul;
    mul *= x.d[a];
  }
  return idx;
}

static void reference(kind k, const float *x, k_shape xs, const k_reduce_param *p, float *want) {
  k_shape os = out_shape(xs, p);
  int64_t no = k_shape_numel(&os), nx = k_shape_numel(&xs);
  double *acc = calloc((size_t)no + 1, sizeof(double));
  for (int64_t o = 0; o < no; o++) acc[o] = k == MAX ? -INFINITY : 0;
  for (int64_t i = 0; i < nx; i++) {
    int64_t o = out_index(i, xs, p);
    acc[o] = k == MAX ? fmax(acc[o], x[i]) : acc[o] + x[i];
  }
  for (int64_t o = 0; o < no; o++) want[o] = (float)(k == MEAN ? acc[o] * no / nx : acc[o]);
  free(acc);
}

static kt_case make_case(kind k, k_tensor *x, const k_reduce_param *p) {
  kt_case c = {.name = names[k], .fwd = fwds[k], .bwd = bwds[k], .nargs = 1, .nout = 1,
               .nvisible = 1, .param = p, .deps_og = 1, .deps_in = k == MAX, .deps_out = k == MAX,
               .rtol = 2e-3f, .atol = 2e-4f};   /* tight: see test_elemwise.c */
  c.in[0] = *x;
  c.out_shape[0] = out_shape(x->shape, p);
  return c;
}

static void check_forward(kind k, kt_case *c) {
  k_tensor y;
  int64_t n = k_shape_numel(&c->out_shape[0]);
  float *want = malloc((size_t)n * sizeof(float) + 4);
  reference(k, c->in[0].data, c->in[0].shape, c->param, want);
  int rc = kt_forward(c, &y);
  KT_CHECK(rc == 0 && kt_expect_close(names[k], y.data, want, n, 1e-5f, 1e-6f) == 0,
           "%s forward vs reference", names[k]);
  free(y.data);
  free(want);
}

/* sum / mean backward by hand: og of the element's group, over the group size for mean. */
static void check_spread(kind k, const kt_case *c, const float *og, const float *got) {
  k_shape xs = c->in[0].shape;
  int64_t n = k_shape_numel(&xs), no = k_shape_numel(&c->out_shape[0]);
  float *want = malloc((size_t)n * sizeof(float) + 4);
  for (int64_t i = 0; i < n; i++)
    want[i] = (float)(og[out_index(i, xs, c->param)] * (k == MEAN ? (double)no / n : 1.0));
  KT_CHECK(kt_expect_close(names[k], got, want, n, 1e-6f, 0) == 0, "%s backward values", names[k]);
  free(want);
}

/* amax backward by hand: og of the element's group over the group's ties, 0 off the max. */
static void check_max_spread(const kt_case *c, const float *og, const float *y, const float *got) {
  k_shape xs = c->in[0].shape;
  int64_t n = k_shape_numel(&xs), no = k_shape_numel(&c->out_shape[0]);
  const float *x = c->in[0].data;
  float *want = malloc((size_t)n * sizeof(float) + 4);
  int *ties = calloc((size_t)no + 1, sizeof(int));
  for (int64_t i = 0; i < n; i++) ties[out_index(i, xs, c->param)] += x[i] == y[out_index(i, xs, c->param)];
  for (int64_t i = 0; i < n; i++) {
    int64_t o = out_index(i, xs, c->param);
    want[i] = x[i] == y[o] ? og[o] / (float)ties[o] : 0.0f;
  }
  KT_CHECK(kt_expect_close("max", got, want, n, 1e-6f, 0) == 0, "max backward values");
  free(want);
  free(ties);
}

/* The same backward into a NaN-filled and a zeroed buffer must agree under kWriteTo. */
static void check_overwrites(kind k, kt_case *c) {
  k_tensor y, og = kt_tensor_f32(c->out_shape[0], -1, 1, 3);
  kt_forward(c, &y);
  int64_t n = k_shape_numel(&c->in[0].shape);
  k_tensor g1 = kt_tensor_f32(c->in[0].shape, 0, 0, 1), g2 = kt_tensor_f32(c->in[0].shape, 0, 0, 1);
  for (int64_t i = 0; i < n; i++) ((float *)g2.data)[i] = NAN;
  k_tensor in[3] = {og, c->in[0], y};
  k_req w = kWriteTo;
  char err[64];
  k_call call = {in, 3, &g1, 1, &w, c->param, NULL, 0, 0, 0, 0, err, sizeof err, NULL};
  bwds[k](&call);
  call.out = &g2;
  bwds[k](&call);
  KT_CHECK(kt_expect_close("overwrite", g2.data, g1.data, n, 0, 0) == 0,
           "%s backward kWriteTo overwrites", names[k]);
  if (k != MAX) check_spread(k, c, og.data, g1.data);
  else check_max_spread(c, og.data, y.data, g1.data);
  kt_tensor_free(&og); kt_tensor_free(&g1); kt_tensor_free(&g2); free(y.data);
}

static void test_axes(void) {
  static const int axes[][3] = {{0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1}, {0, 1, 2}};
  static const int nax[] = {1, 1, 1, 2, 2, 2, 3};
  for (int k = SUM; k <= MAX; k++)
    for (int a = 0; a < 7; a++)
      for (int keep = 0; keep < 2; keep++) {
        k_reduce_param p = make_param(nax[a], axes[a], keep);
        k_tensor x = kt_tensor_f32(kt_shape(3, 2, 3, 4), -2, 2, 40 + 3 * a + keep);
        kt_case c = make_case(k, &x, &p);
        kt_gradcheck(&c);
        check_forward(k, &c);
        check_overwrites(k, &c);
        kt_tensor_free(&x);
      }
}

/* Odd shapes: a rank-1 vector to a scalar, a rank-4 tensor over its middle axes, no axes. */
static void test_shapes(void) {
  int all[] = {0}, mid[] = {1, 2};
  k_reduce_param p1 = make_param(1, all, 0), p2 = make_param(2, mid, 0), p0 = make_param(0, all, 0);
  k_tensor v = kt_tensor_f32(kt_shape(1, 9), -3, 3, 8);
  k_tensor t = kt_tensor_f32(kt_shape(4, 2, 3, 2, 5), -3, 3, 9);
  for (int k = SUM; k <= MAX; k++) {
    kt_case a = make_case(k, &v, &p1), b = make_case(k, &t, &p2), c0 = make_case(k, &t, &p0);
    KT_CHECK(a.out_shape[0].rank == 0, "vector reduces to a scalar");
    kt_gradcheck(&a); check_forward(k, &a);
    kt_gradcheck(&b); check_forward(k, &b);
    kt_gradcheck(&c0); check_forward(k, &c0);
  }
  kt_tensor_free(&v);
  kt_tensor_free(&t);
}

/* Runs longer than a block (256) and off the 16 lanes, reduced along the run (lanes), across
 * it (blocks accumulating rows) and both, for every kind. */
static void test_long_runs(void) {
  static const int axes[][3] = {{1}, {2}, {0, 2}, {0, 1}, {0, 1, 2}};
  static const int nax[] = {1, 1, 2, 2, 3};
  k_tensor x = kt_tensor_f32(kt_shape(3, 3, 7, 300), -2, 2, 77);
  for (int k = SUM; k <= MAX; k++)
    for (int a = 0; a < 5; a++) {
      k_reduce_param p = make_param(nax[a], axes[a], a & 1);
      kt_case c = make_case(k, &x, &p);
      c.atol = 2e-3f;   /* float sums of up to 6300 terms, against a double reference */
      if (k != MAX) kt_gradcheck(&c);   /* a 1e-3 step reorders near-ties among 6300 values */
      check_overwrites(k, &c);
      k_tensor y;
      int64_t n = k_shape_numel(&c.out_shape[0]);
      float *want = malloc((size_t)n * sizeof(float) + 4);
      reference(k, x.data, x.shape, &p, want);
      KT_CHECK(kt_forward(&c, &y) == 0 && kt_expect_close(names[k], y.data, want, n, 1e-5f, 2e-5f) == 0,
               "%s forward vs reference, axes %d", names[k], a);
      free(y.data);
      free(want);
    }
  kt_tensor_free(&x);
}

/* A NaN anywhere in a group makes that group's max NaN (torch.amax), along the run (lanes)
 * and across runs (blocks), and leaves the other groups alone. */
static void test_max_nan(void) {
  int run[] = {1}, across[] = {0};
  k_tensor x = kt_tensor_f32(kt_shape(2, 3, 300), -2, 2, 78);
  float *xs = x.data, y[300];
  xs[1 * 300 + 257] = NAN;                     /* row 1, past the first block */
  k_reduce_param p1 = make_param(1, run, 0), p0 = make_param(1, across, 0);
  k_tensor ty = {y, kt_shape(1, 3), K_F32};
  k_req w = kWriteTo;
  char err[64];
  k_call c = {&x, 1, &ty, 1, &w, &p1, NULL, 0, 0, 0, 0, err, sizeof err, NULL};
  k_max_forward(&c);
  KT_CHECK(!isnan(y[0]) && isnan(y[1]) && !isnan(y[2]), "max along the run: NaN only in row 1");
  ty.shape = kt_shape(1, 300);
  c.param = &p0;
  k_max_forward(&c);
  int others_ok = 1;
  for (int j = 0; j < 300; j++) others_ok &= (j == 257) == (isnan(y[j]) != 0);
  KT_CHECK(others_ok, "max across runs: NaN only in column 257");
  kt_tensor_free(&x);
}

/* amax backward: og split evenly among the elements equal to the max. */
static void test_max_ties(void) {
  float x[8] = {1, 3, 3, 2, 5, 5, 5, 0}, og[2] = {0.9f, 0.6f}, y[2], g[8];
  int ax[] = {1};
  k_reduce_param p = make_param(1, ax, 0);
  k_tensor tx = {x, kt_shape(2, 2, 4), K_F32}, ty = {y, kt_shape(1, 2), K_F32};
  k_tensor tog = {og, ty.shape, K_F32}, tg = {g, tx.shape, K_F32}, in[3] = {tog, tx, ty};
  k_req w = kWriteTo;
  char err[64];
  k_call f = {&tx, 1, &ty, 1, &w, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL};
  k_call b = {in, 3, &tg, 1, &w, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL};
  k_max_forward(&f);
  KT_CHECK(y[0] == 3 && y[1] == 5, "max values %g %g", y[0], y[1]);
  k_max_backward(&b);
  float want[8] = {0, 0.45f, 0.45f, 0, 0.2f, 0.2f, 0.2f, 0};
  KT_CHECK(kt_expect_close("amax ties", g, want, 8, 1e-6f, 0) == 0, "max ties split evenly");
}

int main(void) {
  test_axes();
  test_shapes();
  test_long_runs();
  test_max_nan();
  test_max_ties();
  return kt_finish("reduce");
}
