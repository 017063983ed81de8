/* test_threads.c — every kernel that splits its work with k_parallel_for gives the same bits
 * with 1, 2 and 3 threads: convolution (a batch in parts, and batch 1 through split GEMMs),
 * fully_connected, matmul (one GEMM, batches, a broadcast operand), pooling and batch_norm,
 * forward and backward, the unary and binary elementwise ops, softmax, log_softmax,
 * softmax_cross_entropy's gradient and layer_norm, and the SGD and Adam updates, at sizes large
 * enough that the work really is split (several K_GRAIN chunks, and a ragged last one). */
#include "kt_harness.h"

#include <stdlib.h>
#include <string.h>

#include "k_vec.h"

#define TT_MAX 12

typedef struct {
  const char *name;
  k_fn fn;
  k_tensor in[TT_MAX];
  int nin;
  k_shape out[4];
  int nout;
  const void *param;
  size_t temp;
  int is_train;
} tt_call;

static int64_t tt_numel(const k_tensor *t) { return t->data ? k_shape_numel(&t->shape) : 0; }

/* Runs c with `threads` threads on fresh copies of its inputs (batch_norm updates its moving
 * statistics in place) and returns every output and input after the call, end to end. */
static float *tt_run(const tt_call *c, int threads, int64_t *n) {
  k_parallel_set_threads(threads);
  k_tensor in[TT_MAX], out[4];
  k_req req[4];
  int64_t total = 0;
  for (int i = 0; i < c->nin; i++) {
    in[i] = c->in[i];
    int64_t m = tt_numel(&c->in[i]);
    in[i].data = m ? malloc((size_t)m * 4) : NULL;
    if (m) memcpy(in[i].data, c->in[i].data, (size_t)m * 4);
    total += m;
  }
  for (int k = 0; k < c->nout; k++) {
    out[k] = kt_tensor_f32(c->out[k], 0.5f, 0.5f, 1);
    req[k] = kWriteTo;
    total += k_shape_numel(&c->out[k]);
  }
  void *temp = c->temp ? malloc(c->temp) : NULL;
  char err[256] = "";
  k_call call = {in, c->nin, out, c->nout, req, c->param, temp, c->temp, 0, 0, c->is_train, err, sizeof err, NULL, NULL, NULL};
  int rc = c->fn(&call);
  KT_CHECK(rc == 0, "%s with %d threads: %s", c->name, threads, err);
  float *all = malloc((size_t)total * 4 + 4), *p = all;
  for (int k = 0; k < c->nout; k++) {
    memcpy(p, out[k].data, (size_t)k_shape_numel(&c->out[k]) * 4), p += k_shape_numel(&c->out[k]);
    kt_tensor_free(&out[k]);
  }
  for (int i = 0; i < c->nin; i++) {
    if (in[i].data) memcpy(p, in[i].data, (size_t)tt_numel(&c->in[i]) * 4), p += tt_numel(&c->in[i]);
    free(in[i].data);
  }
  free(temp);
  *n = total;
  return all;
}

static void tt_check(tt_call *c) {
  int64_t n1, n;
  float *one = tt_run(c, 1, &n1);
  for (int t = 2; t <= 3; t++) {
    float *got = tt_run(c, t, &n);
    KT_CHECK(n == n1 && memcmp(one, got, (size_t)n * 4) == 0, "%s: %d threads differ from 1", c->name, t);
    free(got);
  }
  free(one);
  for (int i = 0; i < c->nin; i++) kt_tensor_free(&c->in[i]);
}

static k_tensor tt_rand(k_shape s, uint64_t seed) { return kt_tensor_f32(s, -1.0f, 1.0f, seed); }

/* ---- convolution --------------------------------------------------------------------------- */

static void tt_conv(const char *name, int N, int C, int HW, int F) {
  k_conv_param p = {.num_filter = F, .num_group = 1};
  p.kernel = p.stride = p.pad = p.dilate = (k_ints){2, {1, 1}};
  p.kernel.v[0] = p.kernel.v[1] = 3;
  k_shape xs = kt_shape(4, N, C, HW, HW), ws = kt_shape(4, F, C, 3, 3), ys = kt_shape(4, N, F, HW, HW);
  size_t temp = k_conv_temp_bytes(&xs, &ws, &p);
  tt_call f = {name, k_convolution_forward, {tt_rand(xs, 1), tt_rand(ws, 2), tt_rand(kt_shape(1, F), 3)}, 3,
               {ys}, 1, &p, temp, 1};
  tt_check(&f);
  tt_call b = {name, k_convolution_backward,
               {tt_rand(ys, 4), tt_rand(xs, 5), tt_rand(ws, 6), tt_rand(kt_shape(1, F), 7), tt_rand(ys, 8)}, 5,
               {xs, ws, kt_shape(1, F)}, 3, &p, temp, 1};
  tt_check(&b);
}

/* ---- fully_connected and matmul ------------------------------------------------------------ */

static void tt_fc(void) {
  k_fc_param p = {256, 0, 1};
  k_shape xs = kt_shape(2, 64, 512), ws = kt_shape(2, 256, 512), bs = kt_shape(1, 256), ys = kt_shape(2, 64, 256);
  tt_call f = {"fully_connected forward", k_fully_connected_forward, {tt_rand(xs, 1), tt_rand(ws, 2), tt_rand(bs, 3)},
               3, {ys}, 1, &p, 0, 1};
  tt_check(&f);
  tt_call b = {"fully_connected backward", k_fully_connected_backward,
               {tt_rand(ys, 4), tt_rand(xs, 5), tt_rand(ws, 6), tt_rand(bs, 7), tt_rand(ys, 8)}, 5,
               {xs, ws, bs}, 3, &p, 0, 1};
  tt_check(&b);
}

static void tt_matmul(const char *name, k_shape as, k_shape bs, k_shape cs) {
  k_matmul_param p = {0};
  tt_call f = {name, k_matmul_forward, {tt_rand(as, 1), tt_rand(bs, 2)}, 2, {cs}, 1, &p, 0, 1};
  tt_check(&f);
  tt_call b = {name, k_matmul_backward, {tt_rand(cs, 3), tt_rand(as, 4), tt_rand(bs, 5), tt_rand(cs, 6)}, 4,
               {as, bs}, 2, &p, 0, 1};
  tt_check(&b);
}

/* ---- pooling and batch_norm ---------------------------------------------------------------- */

static void tt_pool(const char *name, int type, int k, int s, int pad) {
  k_pool_param p = {.pool_type = type, .count_include_pad = 1};
  p.kernel = p.stride = p.pad = (k_ints){2, {k, k}};
  p.stride.v[0] = p.stride.v[1] = s;
  p.pad.v[0] = p.pad.v[1] = pad;
  int o = (17 + 2 * pad - k) / s + 1;
  k_shape xs = kt_shape(4, 16, 32, 17, 17), ys = kt_shape(4, 16, 32, o, o);
  tt_call f = {name, k_pooling_forward, {tt_rand(xs, 1)}, 1, {ys}, 1, &p, 0, 1};
  tt_check(&f);
  tt_call b = {name, k_pooling_backward, {tt_rand(ys, 2), tt_rand(xs, 3), tt_rand(ys, 4)}, 3, {xs}, 1, &p, 0, 1};
  tt_check(&b);
}

static void tt_batch_norm(int is_train) {
  k_batch_norm_param p = {1e-5f, 0.9f, 1, 0};
  k_shape xs = kt_shape(4, 16, 32, 12, 12), cs = kt_shape(1, 32);
  k_tensor mv = kt_tensor_f32(cs, 0.5f, 2.0f, 5);
  tt_call f = {is_train ? "batch_norm train forward" : "batch_norm predict forward", k_batch_norm_forward,
               {tt_rand(xs, 1), tt_rand(cs, 2), tt_rand(cs, 3), tt_rand(cs, 4), mv}, 5, {xs, cs, cs}, 3, &p, 0,
               is_train};
  tt_check(&f);
  k_tensor none = {NULL, cs, K_F32};
  tt_call b = {"batch_norm backward", k_batch_norm_backward,
               {tt_rand(xs, 6), none, none, tt_rand(xs, 7), tt_rand(cs, 8), tt_rand(cs, 9), tt_rand(xs, 10),
                tt_rand(cs, 11), kt_tensor_f32(cs, 0.5f, 2.0f, 12)}, 9, {xs, cs, cs}, 3, &p, 0, 1};
  tt_check(&b);
}

/* ---- elementwise, softmax, layer_norm ------------------------------------------------------ */

/* 3 chunks of K_GRAIN elements and a ragged end; K_GRAIN_LIGHT chunks for light ops. */
#define TT_EW_ROWS 7
#define TT_EW_COLS 7031
#define TT_EW_LIGHT_COLS 100003

static void tt_unary(const char *name, k_fn fwd, k_fn bwd, const void *param) {
  int64_t cols = k_vec_light_stem(name) ? TT_EW_LIGHT_COLS : TT_EW_COLS;
  KT_CHECK(k_parallel_chunks(TT_EW_ROWS * cols, k_vec_light_stem(name) ? K_GRAIN_LIGHT : K_GRAIN) > 2,
           "%s: the test size is not split", name);
  k_shape xs = kt_shape(2, TT_EW_ROWS, cols);
  char bname[96];
  snprintf(bname, sizeof bname, "%s backward", name);
  tt_call f = {name, fwd, {tt_rand(xs, 1)}, 1, {xs}, 1, param, 0, 1};
  tt_check(&f);
  tt_call b = {bname, bwd, {tt_rand(xs, 2), tt_rand(xs, 3), tt_rand(xs, 4)}, 3, {xs}, 1, param, 0, 1};
  tt_check(&b);
  k_tensor none = {NULL, xs, K_F32};   /* undeclared x: read from og and masked to 0 */
  snprintf(bname, sizeof bname, "%s backward without x", name);
  tt_call bn = {bname, bwd, {tt_rand(xs, 5), none, tt_rand(xs, 6)}, 3, {xs}, 1, param, 0, 1};
  tt_check(&bn);
}

/* a [rows, 1, 2347] against b [3, 2347]: both broadcast, both gradients reduced. */
static void tt_binary(const char *name, k_fn fwd, k_fn bwd, int64_t rows) {
  k_shape ys = kt_shape(3, rows, 3, 2347), bs = kt_shape(2, 3, 2347), as = kt_shape(3, rows, 1, 2347);
  char bname[96];
  snprintf(bname, sizeof bname, "%s backward", name);
  tt_call f = {name, fwd, {tt_rand(as, 1), tt_rand(bs, 2)}, 2, {ys}, 1, NULL, 0, 1};
  tt_check(&f);
  tt_call b = {bname, bwd, {tt_rand(ys, 3), tt_rand(as, 4), tt_rand(bs, 5), tt_rand(ys, 6)}, 4, {as, bs}, 2, NULL, 0, 1};
  tt_check(&b);
}

static void tt_softmax(int is_log, int axis) {
  k_softmax_param p = {axis};
  k_shape xs = kt_shape(3, 40, 33, 41);
  k_tensor none = {NULL, xs, K_F32};
  char name[64];
  snprintf(name, sizeof name, "%s axis %d", is_log ? "log_softmax" : "softmax", axis);
  tt_call f = {name, is_log ? k_log_softmax_forward : k_softmax_forward, {tt_rand(xs, 1)}, 1, {xs}, 1, &p, 0, 1};
  tt_check(&f);
  tt_call b = {name, is_log ? k_log_softmax_backward : k_softmax_backward,
               {tt_rand(xs, 2), none, tt_rand(xs, 3)}, 3, {xs}, 1, &p, 0, 1};
  tt_check(&b);
}

static void tt_sce(void) {
  k_shape xs = kt_shape(2, 300, 257), ls = kt_shape(1, 300);
  k_tensor none = {NULL, kt_shape(0), K_F32};
  tt_call b = {"softmax_cross_entropy backward", k_softmax_cross_entropy_backward,
               {tt_rand(kt_shape(0), 1), tt_rand(xs, 2), kt_tensor_i32(ls, 0, 257, 3), none}, 4, {xs, ls}, 2, NULL, 0, 1};
  tt_check(&b);
}

static void tt_layer_norm(void) {
  k_layer_norm_param p = {-1, 1e-5f};
  k_shape xs = kt_shape(3, 20, 30, 96), ds = kt_shape(1, 96), rs = kt_shape(3, 20, 30, 1);
  p.axis = 2;
  tt_call f = {"layer_norm forward", k_layer_norm_forward, {tt_rand(xs, 1), tt_rand(ds, 2), tt_rand(ds, 3)}, 3,
               {xs, rs, rs}, 3, &p, 0, 1};
  tt_check(&f);
  k_tensor none = {NULL, xs, K_F32};
  tt_call b = {"layer_norm backward", k_layer_norm_backward,
               {tt_rand(xs, 4), none, none, tt_rand(xs, 5), tt_rand(ds, 6), tt_rand(ds, 7), none,
                tt_rand(rs, 8), kt_tensor_f32(rs, 0.5f, 2.0f, 9)}, 9, {xs, ds, ds}, 3, &p, 0, 1};
  tt_check(&b);
}

/* ---- optimizer updates ------------------------------------------------------------------- */

#define TT_OPT_N 100003

/* Weights and state after 3 updates with `threads` threads (adam 0: sgd, 1: adam, 2: adamw):
 * w, then mom or m, v. */
static float *tt_optim(int adam, int threads) {
  k_parallel_set_threads(threads);
  float *buf = calloc(4 * TT_OPT_N, sizeof(float)), *w = buf, *g = buf + TT_OPT_N;
  float *m = buf + 2 * TT_OPT_N, *v = buf + 3 * TT_OPT_N;
  kt_fill_uniform(w, TT_OPT_N, -1.0f, 1.0f, 31);
  kt_fill_uniform(g, TT_OPT_N, -1.0f, 1.0f, 32);
  k_sgd_param sp = {0.9f, 1e-4f, 0};
  k_adam_param ap = {0.9f, 0.999f, 1e-8f, 1e-4f};
  for (int step = 1; step <= 3; step++) {
    if (adam) k_adam_update(w, g, m, v, TT_OPT_N, 1e-3f, &ap, step, adam == 2);
    else k_sgd_update(w, g, m, TT_OPT_N, 0.05f, &sp);
  }
  return buf;
}

static void tt_optimizers(void) {
  for (int adam = 0; adam < 3; adam++) {   /* sgd, adam, adamw */
    float *one = tt_optim(adam, 1);
    for (int t = 2; t <= 3; t++) {
      float *got = tt_optim(adam, t);
      KT_CHECK(memcmp(one, got, 4 * TT_OPT_N * sizeof(float)) == 0, "%s: %d threads differ from 1",
               adam == 2 ? "adamw" : adam ? "adam" : "sgd", t);
      free(got);
    }
    free(one);
  }
}

int main(void) {
  tt_conv("convolution, batch of 20 in parts", 20, 16, 16, 32);
  tt_conv("convolution, batch 1", 1, 32, 32, 64);
  tt_fc();
  tt_matmul("matmul, one GEMM", kt_shape(3, 6, 48, 64), kt_shape(2, 64, 80), kt_shape(3, 6, 48, 80));
  tt_matmul("matmul, batches", kt_shape(3, 6, 48, 64), kt_shape(3, 6, 64, 80), kt_shape(3, 6, 48, 80));
  tt_matmul("matmul, broadcast a", kt_shape(2, 48, 64), kt_shape(3, 6, 64, 80), kt_shape(3, 6, 48, 80));
  tt_pool("max pooling 3x3 s2 p1", K_POOL_MAX, 3, 2, 1);
  tt_pool("avg pooling 2x2 s2", K_POOL_AVG, 2, 2, 0);
  tt_batch_norm(1);
  tt_batch_norm(0);
  k_leaky_relu_param lr = {0.1f};
  tt_unary("relu", k_relu_forward, k_relu_backward, NULL);
  tt_unary("tanh", k_tanh_forward, k_tanh_backward, NULL);
  tt_unary("leaky_relu", k_leaky_relu_forward, k_leaky_relu_backward, &lr);
  tt_binary("mul (light: K_GRAIN_LIGHT chunks)", k_mul_forward, k_mul_backward, 40);
  tt_binary("pow", k_pow_forward, k_pow_backward, 7);
  tt_softmax(0, 2);
  tt_softmax(1, 1);
  tt_sce();
  tt_layer_norm();
  tt_optimizers();
  return kt_finish("threads");
}
