/* test_elemwise.c — unary and broadcasting binary kernels: finite-difference gradients
 * (kWriteTo and kAddTo), forward values against double-precision references computed here,
 * in-place execution, and torch's tie and NaN conventions for maximum / minimum. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kt_harness.h"
#include "k_scalar.h"

static const k_leaky_relu_param leaky = {0.2f};
static const k_clip_param clip = {-0.5f, 0.7f};
static const k_smooth_l1_param sl1_a = {1.0f}, sl1_b = {2.0f};
static const k_hard_sigmoid_param hsig_torch = {1.0f / 6.0f, 0.5f}, hsig_onnx = {0.2f, 0.5f};
static const k_activation_param act[4] = {{K_ACT_RELU}, {K_ACT_SIGMOID}, {K_ACT_TANH},
                                          {K_ACT_SOFTRELU}};

/* ---- double-precision references ---- */
static double r_neg(double x) { return -x; }
static double r_abs(double x) { return fabs(x); }
static double r_exp(double x) { return exp(x); }
static double r_log(double x) { return log(x); }
static double r_sqrt(double x) { return sqrt(x); }
static double r_rsqrt(double x) { return 1.0 / sqrt(x); }
static double r_square(double x) { return x * x; }
static double r_sin(double x) { return sin(x); }
static double r_cos(double x) { return cos(x); }
static double r_sign(double x) { return x > 0 ? 1 : (x < 0 ? -1 : 0); }
static double r_recip(double x) { return 1.0 / x; }
static double r_relu(double x) { return x > 0 ? x : 0; }
static double r_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double r_tanh(double x) { return tanh(x); }
static double r_softplus(double x) { return x > 20 ? x : log1p(exp(x)); }
static double r_gelu(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
static double r_leaky(double x) { return x > 0 ? x : 0.2 * x; }
static double r_clip(double x) { return x < -0.5 ? -0.5 : (x > 0.7 ? 0.7 : x); }
static double r_sl1(double x, double sigma) {
  double beta = 1.0 / (sigma * sigma);
  return fabs(x) < beta ? 0.5 * x * x / beta : fabs(x) - 0.5 * beta;
}
static double r_sl1_a(double x) { return r_sl1(x, 1.0); }
static double r_sl1_b(double x) { return r_sl1(x, 2.0); }
static double r_erf(double x) { return erf(x); }
static double r_clamp01(double v) { return v < 0 ? 0 : (v > 1 ? 1 : v); }
static double r_hsig_torch(double x) { return r_clamp01(x / 6.0 + 0.5); }
static double r_hsig_onnx(double x) { return r_clamp01(0.2 * x + 0.5); }
static double r_hswish(double x) { return x * r_clamp01(x / 6.0 + 0.5); }
static double r_silu(double x) { return x / (1.0 + exp(-x)); }

typedef struct {
  const char *name;
  k_fn fwd, bwd;
  uint32_t deps_in, deps_out;   /* x and y bits of the declared backward dependencies */
  float lo, hi;
  float kink[2];                /* samples are kept 0.05 away from these (NAN = none) */
  double (*ref)(double);
  const void *param;
} unary_row;

#define OP(o) #o, k_##o##_forward, k_##o##_backward
#define NK {NAN, NAN}
static const unary_row unary[] = {
  {OP(neg), 0, 0, -2, 2, NK, r_neg, NULL},
  {OP(abs), 1, 0, -2, 2, {0, NAN}, r_abs, NULL},
  {OP(exp), 0, 1, -2, 2, NK, r_exp, NULL},
  {OP(log), 1, 0, 0.2f, 3, NK, r_log, NULL},
  {OP(sqrt), 0, 1, 0.2f, 3, NK, r_sqrt, NULL},
  {OP(rsqrt), 0, 1, 0.2f, 3, NK, r_rsqrt, NULL},
  {OP(square), 1, 0, -2, 2, NK, r_square, NULL},
  {OP(sin), 1, 0, -3, 3, NK, r_sin, NULL},
  {OP(cos), 1, 0, -3, 3, NK, r_cos, NULL},
  {OP(sign), 0, 0, -2, 2, {0, NAN}, r_sign, NULL},
  {OP(reciprocal), 0, 1, 0.3f, 3, NK, r_recip, NULL},
  {OP(relu), 0, 1, -2, 2, {0, NAN}, r_relu, NULL},
  {OP(sigmoid), 0, 1, -6, 6, NK, r_sigmoid, NULL},
  {OP(tanh), 0, 1, -3, 3, NK, r_tanh, NULL},
  {OP(softplus), 1, 0, -5, 5, NK, r_softplus, NULL},
  {OP(softplus), 1, 0, -30, 30, {20, NAN}, r_softplus, NULL},
  {OP(gelu), 1, 0, -3, 3, NK, r_gelu, NULL},
  {OP(leaky_relu), 1, 0, -2, 2, {0, NAN}, r_leaky, &leaky},
  {OP(clip), 1, 0, -2, 2, {-0.5f, 0.7f}, r_clip, &clip},
  {OP(smooth_l1), 1, 0, -3, 3, NK, r_sl1_a, &sl1_a},
  {OP(smooth_l1), 1, 0, -1, 1, NK, r_sl1_b, &sl1_b},
  {OP(activation), 0, 1, -2, 2, {0, NAN}, r_relu, &act[0]},
  {OP(activation), 0, 1, -6, 6, NK, r_sigmoid, &act[1]},
  {OP(activation), 0, 1, -3, 3, NK, r_tanh, &act[2]},
  {OP(activation), 0, 1, -5, 5, NK, r_softplus, &act[3]},
  {OP(erf), 1, 0, -4, 4, NK, r_erf, NULL},
  {OP(hard_sigmoid), 0, 1, -5, 5, {-3, 3}, r_hsig_torch, &hsig_torch},
  {OP(hard_sigmoid), 0, 1, -4, 4, {-2.5f, 2.5f}, r_hsig_onnx, &hsig_onnx},
  {OP(hard_swish), 1, 0, -5, 5, {-3, 3}, r_hswish, NULL},
  {OP(silu), 1, 0, -8, 8, NK, r_silu, NULL},
};

static int call(k_fn fn, const k_tensor *in, int nin, k_tensor *out, int nout, const k_req *req,
                const void *param) {
  char err[128] = "";
  k_call c = {in, nin, out, nout, req, param, NULL, 0, 1, 0, 0, err, sizeof err, NULL, NULL, NULL};
  return fn(&c);
}

static k_tensor unary_input(const unary_row *r, k_shape s, uint64_t seed) {
  k_tensor t = kt_tensor_f32(s, r->lo, r->hi, seed);
  float *x = t.data;
  for (int64_t i = 0; i < k_shape_numel(&s); i++)
    for (int k = 0; k < 2; k++)
      if (fabsf(x[i] - r->kink[k]) < 0.05f) x[i] += 0.1f;
  return t;
}

/* Tolerances tighter than the harness default: a perturbation moves only the outputs it
 * feeds, so central differences are good to ~1e-4 here and a 1% slip in a formula fails. */
static kt_case unary_case(const unary_row *r, k_tensor *x) {
  kt_case c = {.name = r->name, .fwd = r->fwd, .bwd = r->bwd, .nargs = 1, .nout = 1,
               .nvisible = 1, .param = r->param, .deps_og = 1, .deps_in = r->deps_in,
               .deps_out = r->deps_out, .rtol = 2e-3f, .atol = 2e-4f};
  c.in[0] = *x;
  c.out_shape[0] = x->shape;
  return c;
}

static void check_unary_forward(const unary_row *r, k_tensor *x) {
  kt_case c = unary_case(r, x);
  k_tensor y;
  int64_t n = k_shape_numel(&x->shape);
  float *want = malloc((size_t)n * sizeof(float) + 4);
  for (int64_t i = 0; i < n; i++) want[i] = (float)r->ref(((float *)x->data)[i]);
  int rc = kt_forward(&c, &y);
  KT_CHECK(rc == 0 && kt_expect_close(r->name, y.data, want, n, 1e-5f, 1e-6f) == 0,
           "%s forward vs double reference", r->name);
  free(y.data);
  free(want);
}

/* Forward with y over x, backward with gx over og; both must match the out-of-place runs. */
static void check_unary_inplace(const unary_row *r, k_tensor *x) {
  int64_t n = k_shape_numel(&x->shape);
  size_t bytes = (size_t)n * sizeof(float);
  k_tensor y = *x, og = *x, gx = *x, buf = *x, in3[3];
  y.data = malloc(bytes); og.data = malloc(bytes); gx.data = malloc(bytes); buf.data = malloc(bytes);
  k_req w = kWriteTo, ip = kWriteInplace;
  kt_fill_uniform(og.data, n, -1, 1, 77);
  call(r->fwd, x, 1, &y, 1, &w, r->param);
  memcpy(buf.data, x->data, bytes);
  call(r->fwd, &buf, 1, &buf, 1, &ip, r->param);
  KT_CHECK(memcmp(buf.data, y.data, bytes) == 0, "%s forward in place", r->name);
  in3[0] = og; in3[1] = *x; in3[2] = y;
  call(r->bwd, in3, 3, &gx, 1, &w, r->param);
  memcpy(buf.data, og.data, bytes);
  in3[0] = buf;
  call(r->bwd, in3, 3, &buf, 1, &ip, r->param);
  KT_CHECK(memcmp(buf.data, gx.data, bytes) == 0, "%s backward in place over og", r->name);
  free(y.data); free(og.data); free(gx.data); free(buf.data);
}

static void test_unary(void) {
  k_shape shapes[] = {kt_shape(3, 2, 3, 4), kt_shape(1, 7), kt_shape(0)};
  for (size_t k = 0; k < sizeof unary / sizeof unary[0]; k++)
    for (int s = 0; s < 3; s++) {
      k_tensor x = unary_input(&unary[k], shapes[s], 10 * k + s);
      kt_case c = unary_case(&unary[k], &x);
      kt_gradcheck(&c);
      check_unary_forward(&unary[k], &x);
      if (s == 0) check_unary_inplace(&unary[k], &x);
      kt_tensor_free(&x);
    }
}

/* ---- binary ---- */
typedef struct {
  const char *name;
  k_fn fwd, bwd;
  uint32_t deps_in, uses_y;     /* declared backward dependencies besides og */
  float alo, ahi, blo, bhi;
  double (*ref)(double, double);
} binary_row;

static double r_add(double a, double b) { return a + b; }
static double r_sub(double a, double b) { return a - b; }
static double r_mul(double a, double b) { return a * b; }
static double r_div(double a, double b) { return a / b; }
static double r_pow(double a, double b) { return pow(a, b); }
static double r_max(double a, double b) { return a > b ? a : b; }
static double r_min(double a, double b) { return a < b ? a : b; }

static const binary_row binary[] = {
  {OP(add), 0, 0, -2, 2, -2, 2, r_add},   {OP(sub), 0, 0, -2, 2, -2, 2, r_sub},
  {OP(mul), 3, 0, -2, 2, -2, 2, r_mul},   {OP(div), 3, 0, -2, 2, 0.5f, 2, r_div},
  {OP(pow), 3, 1, 0.5f, 2, -1.5f, 1.5f, r_pow},
  {OP(maximum), 3, 0, -2, 2, -2, 2, r_max}, {OP(minimum), 3, 0, -2, 2, -2, 2, r_min},
};

/* NumPy broadcast of a and b, written independently of the kernels' helpers. */
static k_shape bcast(k_shape a, k_shape b) {
  k_shape o = {a.rank > b.rank ? a.rank : b.rank, {0}};
  for (int i = 0; i < o.rank; i++) {
    int ia = i - (o.rank - a.rank), ib = i - (o.rank - b.rank);
    int64_t da = ia >= 0 ? a.d[ia] : 1, db = ib >= 0 ? b.d[ib] : 1;
    o.d[i] = da == 1 ? db : da;
  }
  return o;
}

/* Flat index into s of output element `flat` of shape o (s right-aligned, 1s broadcast). */
static int64_t src_index(int64_t flat, k_shape o, k_shape s) {
  int64_t idx = 0, mul = 1;
  for (int i = o.rank - 1; i >= 0; i--) {
    int64_t coord = flat % o.d[i];
    flat /= o.d[i];
    int is = i - (o.rank - s.rank);
    if (is < 0) continue;
    if (s.d[is] != 1) idx += coord * mul;
    mul *= s.d[is];
  }
  return idx;
}

static kt_case binary_case(const binary_row *r, k_tensor *a, k_tensor *b) {
  kt_case c = {.name = r->name, .fwd = r->fwd, .bwd = r->bwd, .nargs = 2, .nout = 1,
               .nvisible = 1, .deps_og = 1, .deps_in = r->deps_in, .deps_out = r->uses_y,
               .rtol = 2e-3f, .atol = 2e-4f};
  c.in[0] = *a;
  c.in[1] = *b;
  c.out_shape[0] = bcast(a->shape, b->shape);
  return c;
}

static void check_binary_forward(const binary_row *r, kt_case *c) {
  k_tensor y;
  k_shape o = c->out_shape[0];
  int64_t n = k_shape_numel(&o);
  float *want = malloc((size_t)n * sizeof(float) + 4);
  const float *a = c->in[0].data, *b = c->in[1].data;
  for (int64_t i = 0; i < n; i++)
    want[i] = (float)r->ref(a[src_index(i, o, c->in[0].shape)], b[src_index(i, o, c->in[1].shape)]);
  int rc = kt_forward(c, &y);
  KT_CHECK(rc == 0 && kt_expect_close(r->name, y.data, want, n, 1e-5f, 1e-6f) == 0,
           "%s forward broadcast [rank %d] vs reference", r->name, o.rank);
  free(y.data);
  free(want);
}

static void test_binary(void) {
  k_shape pairs[][2] = {
    {kt_shape(3, 2, 3, 4), kt_shape(2, 3, 1)}, {kt_shape(1, 4), kt_shape(0)},
    {kt_shape(1, 3), kt_shape(2, 2, 1)},       {kt_shape(2, 2, 3), kt_shape(2, 2, 3)},
    {kt_shape(0), kt_shape(0)},                {kt_shape(0), kt_shape(2, 2, 3)},
    {kt_shape(3, 3, 1, 2), kt_shape(2, 4, 1)}, {kt_shape(1, 5), kt_shape(3, 2, 1, 5)},
  };
  for (size_t k = 0; k < sizeof binary / sizeof binary[0]; k++)
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
      const binary_row *r = &binary[k];
      k_tensor a = kt_tensor_f32(pairs[p][0], r->alo, r->ahi, 100 + 7 * k + p);
      k_tensor b = kt_tensor_f32(pairs[p][1], r->blo, r->bhi, 300 + 11 * k + p);
      kt_case c = binary_case(r, &a, &b);
      kt_gradcheck(&c);
      check_binary_forward(r, &c);
      kt_tensor_free(&a);
      kt_tensor_free(&b);
    }
}

/* ---- the vectorised broadcast loops against the generic per-element reference ----
 * The reference walks every output element and adds its term into the operand element it
 * came from (src_index), in double; it is the function-pointer iterator the kernels used
 * before their loops were specialised. */
typedef float (*grad2_fn)(float og, float a, float b, float y);
typedef struct { grad2_fn ga, gb; } grad_pair;
static const grad_pair grads[] = {
  {k_sf_add_grad_a, k_sf_add_grad_b}, {k_sf_sub_grad_a, k_sf_sub_grad_b},
  {k_sf_mul_grad_a, k_sf_mul_grad_b}, {k_sf_div_grad_a, k_sf_div_grad_b},
  {k_sf_pow_grad_a, k_sf_pow_grad_b}, {k_sf_maximum_grad_a, k_sf_maximum_grad_b},
  {k_sf_minimum_grad_a, k_sf_minimum_grad_b},
};
typedef float (*fwd2_fn)(float a, float b);
static const fwd2_fn fwds[] = {k_sf_add, k_sf_sub, k_sf_mul, k_sf_div, k_sf_pow, k_sf_maximum,
                               k_sf_minimum};

/* out += sum over o's elements of g into the operand element each came from (shape s). */
static void ref_grad(grad2_fn g, int j, const float *og, const float *a, const float *b,
                     const float *y, k_shape o, k_shape sa, k_shape sb, float *out, int64_t nout) {
  int64_t n = k_shape_numel(&o);
  double *acc = calloc((size_t)nout + 1, sizeof(double));
  for (int64_t i = 0; i < n; i++) {
    int64_t ia = src_index(i, o, sa), ib = src_index(i, o, sb);
    acc[j ? ib : ia] += g(og[i], a[ia], b[ib], y[i]);
  }
  for (int64_t i = 0; i < nout; i++) out[i] += (float)acc[i];
  free(acc);
}

/* Operand shape for output o: axis i kept when bit i of keep is set, else 1; with `drop`, the
 * leading 1s are removed (a lower-rank operand, right-aligned). */
static k_shape operand_shape(k_shape o, unsigned keep, int drop) {
  k_shape s = o;
  for (int i = 0; i < o.rank; i++) if (!(keep >> i & 1u)) s.d[i] = 1;
  while (drop && s.rank > 0 && s.d[0] == 1) {
    memmove(s.d, s.d + 1, (size_t)(s.rank - 1) * sizeof s.d[0]);
    s.rank--;
  }
  return s;
}

static void fill_const(float *x, int64_t n, float v) { for (int64_t i = 0; i < n; i++) x[i] = v; }

/* One op on one pair of shapes: forward bit-identical to the per-element reference, both
 * gradients within float summation error of the double reference, kWriteTo and kAddTo. */
static int check_vs_reference(size_t op, k_shape sa, k_shape sb) {
  const binary_row *r = &binary[op];
  k_tensor a = kt_tensor_f32(sa, r->alo, r->ahi, 900 + op), b = kt_tensor_f32(sb, r->blo, r->bhi, 901);
  k_shape o = bcast(sa, sb);
  int64_t n = k_shape_numel(&o), na = k_shape_numel(&sa), nb = k_shape_numel(&sb), fails = 0;
  k_tensor y = kt_tensor_f32(o, 0, 0, 1), og = kt_tensor_f32(o, -1, 1, 902);
  k_tensor g[2] = {kt_tensor_f32(sa, 0, 0, 1), kt_tensor_f32(sb, 0, 0, 1)};
  float *want = malloc((size_t)(n + na + nb) * sizeof(float) + 4), *wa = want + n, *wb = wa + na;
  for (int64_t i = 0; i < n; i++)
    want[i] = fwds[op](((float *)a.data)[src_index(i, o, sa)], ((float *)b.data)[src_index(i, o, sb)]);
  k_tensor ab[2] = {a, b};
  for (int pass = 0; pass < 2; pass++) {
    k_req req[2] = {pass ? kAddTo : kWriteTo, pass ? kAddTo : kWriteTo};
    float pre = pass ? 0.25f : NAN;         /* kWriteTo must overwrite NaN */
    fill_const(y.data, n, pass ? 0.0f : NAN);
    call(r->fwd, ab, 2, &y, 1, req, NULL);
    fails += kt_expect_close("forward", y.data, want, n, 0, 0);
    k_tensor in4[4] = {og, r->deps_in & 1 ? a : (k_tensor){NULL, sa, K_F32},
                       r->deps_in & 2 ? b : (k_tensor){NULL, sb, K_F32},
                       r->uses_y ? y : (k_tensor){NULL, o, K_F32}};
    fill_const(g[0].data, na, pre);
    fill_const(g[1].data, nb, pre);
    fill_const(wa, na, pass ? pre : 0.0f);
    fill_const(wb, nb, pass ? pre : 0.0f);
    ref_grad(grads[op].ga, 0, og.data, a.data, b.data, y.data, o, sa, sb, wa, na);
    ref_grad(grads[op].gb, 1, og.data, a.data, b.data, y.data, o, sa, sb, wb, nb);
    call(r->bwd, in4, 4, g, 2, req, NULL);
    fails += kt_expect_close("ga", g[0].data, wa, na, 1e-5f, 1e-5f);
    fails += kt_expect_close("gb", g[1].data, wb, nb, 1e-5f, 1e-5f);
  }
  k_tensor all[] = {a, b, y, og, g[0], g[1]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kt_tensor_free(&all[i]);
  free(want);
  return (int)fails;
}

/* Every keep/broadcast pattern of both operands on outputs with odd runs, runs longer than a
 * block (K_BLOCK = 256), size-1 axes, and an empty axis; and short runs that divide a block
 * (16, 8: a channel scale on blocked values, one operand tiled) over spans longer and shorter
 * than a block. */
static void test_binary_vs_reference(void) {
  k_shape outs[] = {kt_shape(3, 2, 3, 5), kt_shape(3, 3, 17, 33), kt_shape(3, 2, 1, 300),
                    kt_shape(4, 2, 3, 1, 7), kt_shape(1, 600), kt_shape(2, 4, 0),
                    kt_shape(4, 3, 1, 2, 19), kt_shape(4, 2, 3, 40, 16), kt_shape(3, 3, 5, 8)};
  for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++) {
    unsigned masks = 1u << outs[k].rank;
    for (size_t op = 0; op < sizeof binary / sizeof binary[0]; op++)
      for (unsigned ma = 0; ma < masks; ma++)
        for (unsigned mb = 0; mb < masks; mb++) {
          if ((ma | mb) != masks - 1) continue;   /* the output must be o itself */
          k_shape sa = operand_shape(outs[k], ma, 0), sb = operand_shape(outs[k], mb, (ma ^ mb) & 1);
          KT_CHECK(check_vs_reference(op, sa, sb) == 0, "%s vs reference: out rank %d, keep a %x b %x",
                   binary[op].name, outs[k].rank, ma, mb);
        }
  }
}

/* y over a (b broadcast), then ga over og: both must match the out-of-place results. */
static void check_binary_inplace(const binary_row *r) {
  k_tensor a = kt_tensor_f32(kt_shape(2, 2, 3), r->alo, r->ahi, 5);
  k_tensor b = kt_tensor_f32(kt_shape(1, 3), r->blo, r->bhi, 6);
  k_tensor y = kt_tensor_f32(a.shape, 0, 0, 1), og = kt_tensor_f32(a.shape, -1, 1, 7);
  k_tensor g[2] = {kt_tensor_f32(a.shape, 0, 0, 1), kt_tensor_f32(b.shape, 0, 0, 1)};
  k_tensor g2[2] = {kt_tensor_f32(a.shape, 0, 0, 1), kt_tensor_f32(b.shape, 0, 0, 1)};
  k_tensor ab[2] = {a, b}, buf = kt_tensor_f32(a.shape, 0, 0, 1), in4[4] = {og, a, b, y};
  k_req w[2] = {kWriteTo, kWriteTo}, ip[2] = {kWriteInplace, kWriteTo};
  call(r->fwd, ab, 2, &y, 1, w, NULL);
  memcpy(buf.data, a.data, 6 * sizeof(float));
  ab[0] = buf;
  call(r->fwd, ab, 2, &buf, 1, ip, NULL);
  KT_CHECK(memcmp(buf.data, y.data, 6 * sizeof(float)) == 0, "%s forward in place", r->name);
  call(r->bwd, in4, 4, g, 2, w, NULL);
  g2[0].data = memcpy(g2[0].data, og.data, 6 * sizeof(float));
  in4[0] = g2[0];
  call(r->bwd, in4, 4, g2, 2, ip, NULL);
  KT_CHECK(kt_expect_close("ga", g2[0].data, g[0].data, 6, 0, 0) == 0 &&
           kt_expect_close("gb", g2[1].data, g[1].data, 3, 0, 0) == 0,
           "%s backward with ga in place over og", r->name);
  k_tensor all[] = {a, b, y, og, g[0], g[1], g2[0], g2[1], buf};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kt_tensor_free(&all[i]);
}

/* torch.maximum / minimum: ties split og in half; NaN propagates forward. */
static void test_ties_and_nan(void) {
  float a[3] = {1, -2, NAN}, b[3] = {1, -2, 3}, og[3] = {0.8f, -0.6f, 1}, y[3], ga[3], gb[3];
  k_tensor ta = {a, kt_shape(1, 3), K_F32}, tb = ta, ty = ta, tog = ta, tga = ta, tgb = ta;
  tb.data = b; ty.data = y; tog.data = og; tga.data = ga; tgb.data = gb;
  k_req w[2] = {kWriteTo, kWriteTo};
  k_fn fwd[2] = {k_maximum_forward, k_minimum_forward}, bwd[2] = {k_maximum_backward,
                                                                    k_minimum_backward};
  for (int k = 0; k < 2; k++) {
    k_tensor ab[2] = {ta, tb}, in4[4] = {tog, ta, tb, ty}, g[2] = {tga, tgb};
    call(fwd[k], ab, 2, &ty, 1, w, NULL);
    KT_CHECK(y[0] == 1 && y[1] == -2 && isnan(y[2]), "max/min %d value and NaN", k);
    call(bwd[k], in4, 4, g, 2, w, NULL);
    KT_CHECK(ga[0] == 0.4f && gb[0] == 0.4f && ga[1] == -0.3f && gb[1] == -0.3f,
             "max/min %d tie splits og: %g %g %g %g", k, ga[0], gb[0], ga[1], gb[1]);
  }
}

int main(void) {
  test_unary();
  test_binary();
  for (size_t k = 0; k < sizeof binary / sizeof binary[0]; k++) check_binary_inplace(&binary[k]);
  test_ties_and_nan();
  test_binary_vs_reference();
  return kt_finish("elemwise");
}
