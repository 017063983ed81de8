/* test_reduce.c — sum, mean, max, and min, prod, logsumexp, norm (ord 1, 2) over single,
 * multiple and all axes, with and without keepdims: gradients by finite differences, values
 * against double loops written here, torch.amax's even split among ties, prod's gradient at
 * zeros, logsumexp at large and infinite values, and kWriteTo overwriting whatever the buffer
 * held. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kt_harness.h"

typedef enum { SUM, MEAN, MAX, MIN, PROD, LSE, L1, L2, NKIND } kind;
static const char *names[] = {"sum", "mean", "max", "min", "prod", "logsumexp", "norm ord=1", "norm ord=2"};
static const k_fn fwds[] = {k_sum_forward, k_mean_forward, k_max_forward, k_min_forward, k_prod_forward,
                            k_logsumexp_forward, k_norm_forward, k_norm_forward};
static const k_fn bwds[] = {k_sum_backward, k_mean_backward, k_max_backward, k_min_backward, k_prod_backward,
                            k_logsumexp_backward, k_norm_backward, k_norm_backward};

static k_reduce_param make_param(int n, const int *axes, int keepdims) {
  k_reduce_param p = {{n, {0}}, keepdims, 0};
  for (int i = 0; i < n; i++) p.axis.v[i] = axes[i];
  return p;
}

/* The param for kind k: norm's order set. */
static k_reduce_param kind_param(kind k, k_reduce_param p) {
  p.ord = k == L1 ? 1 : k == L2 ? 2 : 0;
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

/* One term of a group's accumulator, in double. */
static double accumulate(kind k, double acc, double x, double m) {
  switch (k) {
  case MAX: return fmax(acc, x);
  case MIN: return fmin(acc, x);
  case PROD: return acc * x;
  case LSE: return acc + exp(x - m);
  case L1: return acc + fabs(x);
  case L2: return acc + x * x;
  default: return acc + x;
  }
}

static void reference(kind k, const float *x, k_shape xs, const k_reduce_param *p, float *want) {
  k_shape os = out_shape(xs, p);
  int64_t no = k_shape_numel(&os), nx = k_shape_numel(&xs);
  double *acc = calloc((size_t)no + 1, sizeof(double)), *m = calloc((size_t)no + 1, sizeof(double));
  for (int64_t o = 0; o < no; o++) m[o] = -INFINITY;
  for (int64_t i = 0; i < nx; i++) m[out_index(i, xs, p)] = fmax(m[out_index(i, xs, p)], x[i]);
  for (int64_t o = 0; o < no; o++) acc[o] = k == MAX ? -INFINITY : k == MIN ? INFINITY : k == PROD ? 1 : 0;
  for (int64_t i = 0; i < nx; i++) {
    int64_t o = out_index(i, xs, p);
    acc[o] = accumulate(k, acc[o], x[i], m[o]);
  }
  for (int64_t o = 0; o < no; o++)
    want[o] = (float)(k == MEAN ? acc[o] * no / nx : k == LSE ? m[o] + log(acc[o]) : k == L2 ? sqrt(acc[o]) : acc[o]);
  free(acc);
  free(m);
}

static size_t temp_bytes(kind k, const k_shape *xs, const k_reduce_param *p) {
  return k == PROD ? k_prod_temp_bytes(xs, p) : k == LSE ? k_logsumexp_temp_bytes(xs, p) : 0;
}

static kt_case make_case(kind k, k_tensor *x, const k_reduce_param *p) {
  kt_case c = {.name = names[k], .fwd = fwds[k], .bwd = bwds[k], .nargs = 1, .nout = 1,
               .nvisible = 1, .param = p, .deps_og = 1, .deps_in = k >= MAX, .deps_out = k >= MAX,
               .temp_bytes = temp_bytes(k, &x->shape, p), .rtol = 2e-3f, .atol = 2e-4f};   /* tight: see test_elemwise.c */
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

/* d y / d x of one element, in double, from its group's y, size ratio, zero count and product
 * of nonzero elements: prod's at a zero is the product of the others. */
static double partial(kind k, double x, double y, double ratio, int zeros, double pnz) {
  switch (k) {
  case MEAN: return ratio;
  case PROD: return zeros == 0 ? y / x : zeros == 1 && x == 0 ? pnz : 0;
  case LSE: return exp(x - y);
  case L1: return (x > 0) - (x < 0);
  case L2: return y == 0 ? 0 : x / y;
  default: return 1;
  }
}

/* sum / mean / prod / logsumexp / norm backward by hand: og of the element's group times the
 * partial derivative. */
static void check_spread(kind k, const kt_case *c, const float *og, const float *y, const float *got) {
  k_shape xs = c->in[0].shape;
  int64_t n = k_shape_numel(&xs), no = k_shape_numel(&c->out_shape[0]);
  const float *x = c->in[0].data;
  float *want = malloc((size_t)n * sizeof(float) + 4);
  int *zeros = calloc((size_t)no + 1, sizeof(int));
  double *pnz = malloc(((size_t)no + 1) * sizeof(double));
  for (int64_t o = 0; o < no; o++) pnz[o] = 1;
  for (int64_t i = 0; i < n; i++) {
    int64_t o = out_index(i, xs, c->param);
    if (x[i] == 0) zeros[o]++;
    else pnz[o] *= x[i];
  }
  for (int64_t i = 0; i < n; i++) {
    int64_t o = out_index(i, xs, c->param);
    want[i] = (float)(og[o] * partial(k, x[i], y[o], (double)no / n, zeros[o], pnz[o]));
  }
  KT_CHECK(kt_expect_close(names[k], got, want, n, 2e-5f, 1e-7f) == 0, "%s backward values", names[k]);
  free(want);
  free(zeros);
  free(pnz);
}

/* amax / amin backward by hand: og of the element's group over the group's ties, 0 off the max. */
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
  KT_CHECK(kt_expect_close("max/min", got, want, n, 1e-6f, 0) == 0, "max/min backward values");
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
  void *temp = calloc(1, c->temp_bytes + 4);
  k_call call = {in, 3, &g1, 1, &w, c->param, temp, c->temp_bytes, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  bwds[k](&call);
  call.out = &g2;
  bwds[k](&call);
  KT_CHECK(kt_expect_close("overwrite", g2.data, g1.data, n, 0, 0) == 0,
           "%s backward kWriteTo overwrites", names[k]);
  if (k != MAX && k != MIN) check_spread(k, c, og.data, y.data, g1.data);
  else check_max_spread(c, og.data, y.data, g1.data);
  kt_tensor_free(&og); kt_tensor_free(&g1); kt_tensor_free(&g2); free(y.data); free(temp);
}

static void test_axes(void) {
  static const int axes[][3] = {{0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1}, {0, 1, 2}};
  static const int nax[] = {1, 1, 1, 2, 2, 2, 3};
  for (int k = SUM; k < NKIND; k++)
    for (int a = 0; a < 7; a++)
      for (int keep = 0; keep < 2; keep++) {
        k_reduce_param p = kind_param(k, make_param(nax[a], axes[a], keep));
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
  for (int k = SUM; k < NKIND; k++) {
    k_reduce_param q1 = kind_param(k, p1), q2 = kind_param(k, p2), q0 = kind_param(k, p0);
    kt_case a = make_case(k, &v, &q1), b = make_case(k, &t, &q2), c0 = make_case(k, &t, &q0);
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
  /* products of up to 6300 factors stay finite and normal near 1 */
  k_tensor xp = kt_tensor_f32(kt_shape(3, 3, 7, 300), 0.995f, 1.005f, 79);
  for (int k = SUM; k < NKIND; k++)
    for (int a = 0; a < 5; a++) {
      k_reduce_param p = kind_param(k, make_param(nax[a], axes[a], a & 1));
      kt_case c = make_case(k, k == PROD ? &xp : &x, &p);
      c.atol = 2e-3f;   /* float sums of up to 6300 terms, against a double reference */
      /* a 1e-3 step reorders near-ties among 6300 values; a product of 6300 factors, and the
       * norms (sums of 6300 positive terms, whose float ulp is near the step's change), are
       * too coarse for a difference quotient: their gradients are checked by hand below */
      if (k == SUM || k == MEAN || k == LSE) kt_gradcheck(&c);
      check_overwrites(k, &c);
      k_tensor y;
      int64_t n = k_shape_numel(&c.out_shape[0]);
      float *want = malloc((size_t)n * sizeof(float) + 4);
      reference(k, c.in[0].data, x.shape, &p, want);
      KT_CHECK(kt_forward(&c, &y) == 0 && kt_expect_close(names[k], y.data, want, n, 1e-5f, 2e-5f) == 0,
               "%s forward vs reference, axes %d", names[k], a);
      free(y.data);
      free(want);
    }
  kt_tensor_free(&x);
  kt_tensor_free(&xp);
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
  k_call c = {&x, 1, &ty, 1, &w, &p1, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
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
  k_call f = {&tx, 1, &ty, 1, &w, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  k_call b = {in, 3, &tg, 1, &w, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  k_max_forward(&f);
  KT_CHECK(y[0] == 3 && y[1] == 5, "max values %g %g", y[0], y[1]);
  k_max_backward(&b);
  float want[8] = {0, 0.45f, 0.45f, 0, 0.2f, 0.2f, 0.2f, 0};
  KT_CHECK(kt_expect_close("amax ties", g, want, 8, 1e-6f, 0) == 0, "max ties split evenly");
}

/* Runs kind k's forward and backward on x (axis 1 of [rows, 4]) with og, into y and g. */
static void run_rows(kind k, float *x, int rows, float *og, float *y, float *g) {
  int ax[] = {1};
  k_reduce_param p = kind_param(k, make_param(1, ax, 0));
  k_tensor tx = {x, kt_shape(2, rows, 4), K_F32}, ty = {y, kt_shape(1, rows), K_F32};
  k_tensor tog = {og, ty.shape, K_F32}, tg = {g, tx.shape, K_F32}, in[3] = {tog, tx, ty};
  size_t tb = temp_bytes(k, &tx.shape, &p);
  void *temp = calloc(1, tb + 4);
  k_req w = kWriteTo;
  char err[64];
  k_call f = {&tx, 1, &ty, 1, &w, &p, temp, tb, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  k_call b = {in, 3, &tg, 1, &w, &p, temp, tb, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  fwds[k](&f);
  bwds[k](&b);
  free(temp);
}

/* torch.prod's gradient at zeros: one zero in a group gets og times the product of the
 * others and the rest 0; two zeros give 0 everywhere. Finite differences agree at exact
 * zeros too, the product being linear in each factor. */
static void test_prod_zeros(void) {
  float x[12] = {2, 0, 3, 4, 0, 5, 0, 1, 1, 2, 3, 4}, og[3] = {1, 0.5f, 2}, y[3], g[12];
  run_rows(PROD, x, 3, og, y, g);
  float want_y[3] = {0, 0, 24}, want_g[12] = {0, 24, 0, 0, 0, 0, 0, 0, 48, 24, 16, 12};
  KT_CHECK(kt_expect_close("prod zeros", y, want_y, 3, 0, 0) == 0, "prod forward with zeros");
  KT_CHECK(kt_expect_close("prod zeros grad", g, want_g, 12, 1e-6f, 0) == 0, "prod gradient at zeros");
  int ax[] = {1};
  k_reduce_param p = make_param(1, ax, 1);
  k_tensor tx = {x, kt_shape(2, 3, 4), K_F32};
  kt_case c = make_case(PROD, &tx, &p);
  KT_CHECK(kt_gradcheck(&c) == 0, "prod gradcheck with zeros");
}

/* logsumexp stays finite where exp overflows, and gives -inf for a group of -inf and +inf
 * for one holding +inf, as torch.logsumexp does. */
static void test_logsumexp_edges(void) {
  float x[12] = {1000, 1001, 999, 1000.5f, -INFINITY, -INFINITY, -INFINITY, -INFINITY, 1, INFINITY, 2, 3};
  float og[3] = {1, 1, 1}, y[3], g[12];
  run_rows(LSE, x, 3, og, y, g);
  double y0 = 1001 + log(exp(-1.0) + 1 + exp(-2.0) + exp(-0.5));
  KT_CHECK(fabs(y[0] - y0) < 1e-4 && y[1] == -INFINITY && y[2] == INFINITY,
           "logsumexp edges: %g (want %g), %g, %g", y[0], y0, y[1], y[2]);
  double s = 0;
  for (int i = 0; i < 4; i++) s += g[i];
  /* y near 1000 is rounded to 6e-5, and exp(x - y) with it */
  KT_CHECK(fabs(s - 1) < 2e-4 && g[1] > g[3] && g[3] > g[0], "logsumexp gradient is the softmax (sum %g)", s);
}

/* amin: NaN wins; og splits evenly among the minima. */
static void test_min_edges(void) {
  float x[8] = {1, 3, 1, 2, 4, NAN, 0, 5}, og[2] = {0.8f, 1}, y[2], g[8];
  run_rows(MIN, x, 2, og, y, g);
  KT_CHECK(y[0] == 1 && isnan(y[1]), "min values %g %g", y[0], y[1]);
  float want[4] = {0.4f, 0, 0.4f, 0};
  KT_CHECK(kt_expect_close("amin ties", g, want, 4, 1e-6f, 0) == 0, "min ties split evenly");
}

int main(void) {
  test_axes();
  test_shapes();
  test_long_runs();
  test_max_nan();
  test_max_ties();
  test_prod_zeros();
  test_logsumexp_edges();
  test_min_edges();
  return kt_finish("reduce");
}
