/* bench_kernels.c — GEMM and convolution throughput (GFLOP/s) of Kiln's kernels on the layer
 * shapes of the example models, next to OpenBLAS's cblas_sgemm on the equivalent GEMM (the
 * practical limit: no im2col, no bias, one call for the whole batch). run.sh pairs the output
 * with torch_kernels.py. Output: one tab-separated row per layer and pass. */
#include "kernels.h"
#include "k_blas.h"

#include <cblas.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { B_FC, B_CONV, B_MM };

typedef struct {
  const char *model, *layer;
  int kind;
  int v[9];   /* FC: rows in hidden; CONV: N C H W F k stride pad [groups]; MM: B M N K tb */
} b_layer;

/* The example models' layers (see bench/README.md). */
static const b_layer layers[] = {
  {"mlp", "fc1 784-128", B_FC, {64, 784, 128}},
  {"mlp", "fc2 128-10", B_FC, {64, 128, 10}},
  {"lenet", "conv1 1-20 5x5", B_CONV, {64, 1, 28, 28, 20, 5, 1, 0}},
  {"lenet", "conv2 20-50 5x5", B_CONV, {64, 20, 12, 12, 50, 5, 1, 0}},
  {"lenet", "fc1 800-500", B_FC, {64, 800, 500}},
  {"lenet", "fc2 500-10", B_FC, {64, 500, 10}},
  {"resnet", "conv 3-16 32x32", B_CONV, {64, 3, 32, 32, 16, 3, 1, 1}},
  {"resnet", "conv 16-16 32x32", B_CONV, {64, 16, 32, 32, 16, 3, 1, 1}},
  {"resnet", "conv 16-32 s2", B_CONV, {64, 16, 32, 32, 32, 3, 2, 1}},
  {"resnet", "conv 16-32 1x1 s2", B_CONV, {64, 16, 32, 32, 32, 1, 2, 0}},
  {"resnet", "conv 32-32 16x16", B_CONV, {64, 32, 16, 16, 32, 3, 1, 1}},
  {"resnet", "conv 32-64 s2", B_CONV, {64, 32, 16, 16, 64, 3, 2, 1}},
  {"resnet", "conv 32-64 1x1 s2", B_CONV, {64, 32, 16, 16, 64, 1, 2, 0}},
  {"resnet", "conv 64-64 8x8", B_CONV, {64, 64, 8, 8, 64, 3, 1, 1}},
  {"resnet", "fc 64-10", B_FC, {64, 64, 10}},
  /* ONNX mobilenet_v2's depthwise 3x3 layers (groups = channels), batch 8 */
  {"mobilenet_v2", "dw 32 112x112 s1", B_CONV, {8, 32, 112, 112, 32, 3, 1, 1, 32}},
  {"mobilenet_v2", "dw 96 112x112 s2", B_CONV, {8, 96, 112, 112, 96, 3, 2, 1, 96}},
  {"mobilenet_v2", "dw 144 56x56 s1", B_CONV, {8, 144, 56, 56, 144, 3, 1, 1, 144}},
  {"mobilenet_v2", "dw 144 56x56 s2", B_CONV, {8, 144, 56, 56, 144, 3, 2, 1, 144}},
  {"mobilenet_v2", "dw 192 28x28 s1", B_CONV, {8, 192, 28, 28, 192, 3, 1, 1, 192}},
  {"mobilenet_v2", "dw 192 28x28 s2", B_CONV, {8, 192, 28, 28, 192, 3, 2, 1, 192}},
  {"mobilenet_v2", "dw 384 14x14 s1", B_CONV, {8, 384, 14, 14, 384, 3, 1, 1, 384}},
  {"mobilenet_v2", "dw 576 14x14 s1", B_CONV, {8, 576, 14, 14, 576, 3, 1, 1, 576}},
  {"mobilenet_v2", "dw 576 14x14 s2", B_CONV, {8, 576, 14, 14, 576, 3, 2, 1, 576}},
  {"mobilenet_v2", "dw 960 7x7 s1", B_CONV, {8, 960, 7, 7, 960, 3, 1, 1, 960}},
  /* ONNX mobilenet_v3_large's and efficientnet_b1's pointwise (1x1) layers at batch 1, the
   * share of their time fwd_rows takes (bench/README.md, "Where the time goes") */
  {"mobilenet_v3", "pw 160-960 7x7", B_CONV, {1, 160, 7, 7, 960, 1, 1, 0}},
  {"mobilenet_v3", "pw 960-160 7x7", B_CONV, {1, 960, 7, 7, 160, 1, 1, 0}},
  {"mobilenet_v3", "pw 112-672 14x14", B_CONV, {1, 112, 14, 14, 672, 1, 1, 0}},
  {"mobilenet_v3", "pw 480-80 14x14", B_CONV, {1, 480, 14, 14, 80, 1, 1, 0}},
  {"mobilenet_v3", "pw 40-120 28x28", B_CONV, {1, 40, 28, 28, 120, 1, 1, 0}},
  {"mobilenet_v3", "pw 24-72 56x56", B_CONV, {1, 24, 56, 56, 72, 1, 1, 0}},
  {"transformer", "qkv 128-384", B_FC, {512, 128, 384}},
  {"transformer", "scores QK^T", B_MM, {32, 64, 64, 32, 1}},
  {"transformer", "attn x V", B_MM, {32, 64, 32, 64}},
  {"transformer", "out proj 128-128", B_FC, {512, 128, 128}},
  {"transformer", "ffn1 128-512", B_FC, {512, 128, 512}},
  {"transformer", "ffn2 512-128", B_FC, {512, 512, 128}},
};

/* BENCH_CLOCK=cpu: the process's CPU time instead of the wall clock (see run.sh). */
static clockid_t b_clock(void) {
  const char *c = getenv("BENCH_CLOCK");
  return c && !strcmp(c, "cpu") ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
}

static double b_now(void) {
  struct timespec ts;
  clock_gettime(b_clock(), &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef void (*b_fn)(void *ctx);

/* Seconds per call: calibrate to >= 50 ms per batch of calls, then the best of 5 batches, since
 * the machine is shared and the minimum is the least noisy estimate. */
static double b_time(b_fn f, void *ctx) {
  f(ctx);
  int iters = 1;
  double t;
  for (;;) {
    double t0 = b_now();
    for (int i = 0; i < iters; i++) f(ctx);
    t = b_now() - t0;
    if (t > 0.05 || iters > (1 << 20)) break;
    iters *= 2;
  }
  double best = t / iters;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = b_now();
    for (int i = 0; i < iters; i++) f(ctx);
    double s = (b_now() - t0) / iters;
    if (s < best) best = s;
  }
  return best;
}

static float *b_buf(int64_t n) {
  float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!p) { fprintf(stderr, "out of memory\n"); exit(1); }
  for (int64_t i = 0; i < n; i++) p[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
  return p;
}

static k_shape b_shape(int rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  k_shape s = {rank, {d0, d1, d2, d3}};
  return s;
}

/* One kernel call, ready to repeat. */
typedef struct {
  k_fn fn;
  k_call call;
} b_kernel;

static void b_run_kernel(void *ctx) {
  b_kernel *k = ctx;
  if (k->fn(&k->call)) { fprintf(stderr, "kernel failed: %s\n", k->call.err); exit(1); }
}

/* The GEMM list of a cblas reference: up to 2 products run back to back. */
typedef struct {
  int n;
  CBLAS_TRANSPOSE ta[2], tb[2];
  int M[2], N[2], K[2];
  float *A[2], *B[2], *C[2];
} b_gemms;

static void b_run_gemms(void *ctx) {
  b_gemms *g = ctx;
  for (int i = 0; i < g->n; i++) {
    int lda = g->ta[i] == CblasNoTrans ? g->K[i] : g->M[i];
    int ldb = g->tb[i] == CblasNoTrans ? g->N[i] : g->K[i];
    cblas_sgemm(CblasRowMajor, g->ta[i], g->tb[i], g->M[i], g->N[i], g->K[i], 1.0f, g->A[i], lda,
                g->B[i], ldb, 0.0f, g->C[i], g->N[i]);
  }
}

static void b_gemm_add(b_gemms *g, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K) {
  int i = g->n++;
  g->ta[i] = ta; g->tb[i] = tb; g->M[i] = M; g->N[i] = N; g->K[i] = K;
  g->A[i] = b_buf((int64_t)M * K); g->B[i] = b_buf((int64_t)K * N); g->C[i] = b_buf((int64_t)M * N);
}

static void b_gemms_free(b_gemms *g) {
  for (int i = 0; i < g->n; i++) { free(g->A[i]); free(g->B[i]); free(g->C[i]); }
}

static void b_report(const b_layer *l, const char *pass, double flops, double t_kiln, double t_blas) {
  printf("%s\t%s\t%s\t%.2f\t%.2f\n", l->model, l->layer, pass, flops / t_kiln * 1e-9, flops / t_blas * 1e-9);
  fflush(stdout);
}

/* ---- fully_connected ------------------------------------------------------------------- */

static void b_fc(const b_layer *l, int backward) {
  int rows = l->v[0], in = l->v[1], H = l->v[2];
  k_fc_param p = {H, 0, 1};
  float *x = b_buf((int64_t)rows * in), *w = b_buf((int64_t)H * in), *bias = b_buf(H);
  float *y = b_buf((int64_t)rows * H), *dx = b_buf((int64_t)rows * in), *dw = b_buf((int64_t)H * in), *db = b_buf(H);
  k_tensor fin[3] = {{x, b_shape(2, rows, in, 0, 0), K_F32}, {w, b_shape(2, H, in, 0, 0), K_F32}, {bias, b_shape(1, H, 0, 0, 0), K_F32}};
  k_tensor yt = {y, b_shape(2, rows, H, 0, 0), K_F32};
  k_tensor bin[5] = {yt, fin[0], fin[1], {NULL, fin[2].shape, K_F32}, {NULL, yt.shape, K_F32}};
  k_tensor bout[3] = {{dx, fin[0].shape, K_F32}, {dw, fin[1].shape, K_F32}, {db, fin[2].shape, K_F32}};
  k_req req[3] = {kWriteTo, kWriteTo, kWriteTo};
  char err[128];
  b_kernel k = {k_fully_connected_forward, {fin, 3, &yt, 1, req, &p, NULL, 0, 0, 0, 1, err, sizeof err, NULL, NULL, NULL}};
  b_gemms g = {0};
  if (backward) {
    k.fn = k_fully_connected_backward;
    k.call.in = bin; k.call.nin = 5; k.call.out = bout; k.call.nout = 3;
    b_gemm_add(&g, CblasNoTrans, CblasNoTrans, rows, in, H);
    b_gemm_add(&g, CblasTrans, CblasNoTrans, H, in, rows);
  } else {
    b_gemm_add(&g, CblasNoTrans, CblasTrans, rows, H, in);
  }
  double flops = (backward ? 4.0 : 2.0) * rows * in * H;
  b_report(l, backward ? "bwd" : "fwd", flops, b_time(b_run_kernel, &k), b_time(b_run_gemms, &g));
  b_gemms_free(&g);
  free(x); free(w); free(bias); free(y); free(dx); free(dw); free(db);
}

/* ---- convolution ----------------------------------------------------------------------- */

/* The reference of a grouped layer: one sgemm is no bound for G tiny products, so it is
 * Kiln's own im2col path instead (KILN_CONV=grouped-im2col: what ran before k_conv_dw.c). */
static double b_time_grouped_im2col(b_kernel *k) {
  const char *old = getenv("KILN_CONV");
  char *saved = old ? strdup(old) : NULL;
  setenv("KILN_CONV", "grouped-im2col", 1);
  double t = b_time(b_run_kernel, k);
  if (saved) setenv("KILN_CONV", saved, 1); else unsetenv("KILN_CONV");
  free(saved);
  return t;
}

static void b_conv(const b_layer *l, int backward) {
  int N = l->v[0], C = l->v[1], H = l->v[2], W = l->v[3], F = l->v[4], kk = l->v[5], s = l->v[6], pad = l->v[7];
  int G = l->v[8] > 0 ? l->v[8] : 1;
  int OH = (H + 2 * pad - kk) / s + 1, OW = (W + 2 * pad - kk) / s + 1, ckk = C / G * kk * kk;
  k_conv_param p = {F, {2, {kk, kk}}, {2, {s, s}}, {2, {pad, pad}}, {2, {1, 1}}, G, 0, 0, 0, 0, 0, 0, 0.0f};
  k_tensor fin[3] = {{b_buf((int64_t)N * C * H * W), b_shape(4, N, C, H, W), K_F32},
                     {b_buf((int64_t)F * ckk), b_shape(4, F, C / G, kk, kk), K_F32},
                     {b_buf(F), b_shape(1, F, 0, 0, 0), K_F32}};
  k_tensor yt = {b_buf((int64_t)N * F * OH * OW), b_shape(4, N, F, OH, OW), K_F32};
  k_tensor bin[5] = {yt, fin[0], fin[1], fin[2], {NULL, yt.shape, K_F32}};
  k_tensor bout[3] = {{b_buf((int64_t)N * C * H * W), fin[0].shape, K_F32},
                      {b_buf((int64_t)F * ckk), fin[1].shape, K_F32}, {b_buf(F), fin[2].shape, K_F32}};
  size_t tb = k_conv_temp_bytes(&fin[0].shape, &fin[1].shape, &p);
  void *temp = b_buf((int64_t)(tb / sizeof(float)) + 1);
  k_req req[3] = {kWriteTo, kWriteTo, kWriteTo};
  char err[128];
  /* The forward keeps its packed weights between calls, as a model's predict step does (the
   * weights and bias stable); backward repacks them each call, as a train step does. */
  k_cache cache = {.stable = 6u};
  b_kernel k = {k_convolution_forward, {fin, 3, &yt, 1, req, &p, temp, tb, 0, 0, 1, err, sizeof err, backward ? NULL : &cache, NULL, NULL}};
  b_gemms g = {0};
  int cols = N * OH * OW;
  if (backward) {
    k.fn = k_convolution_backward;
    k.call.in = bin; k.call.nin = 5; k.call.out = bout; k.call.nout = 3;
    b_gemm_add(&g, CblasNoTrans, CblasTrans, F, ckk, cols);
    b_gemm_add(&g, CblasTrans, CblasNoTrans, ckk, cols, F);
  } else {
    b_gemm_add(&g, CblasNoTrans, CblasNoTrans, F, cols, ckk);
  }
  double flops = (backward ? 4.0 : 2.0) * F * ckk * (double)cols;
  double t_ref = G > 1 ? b_time_grouped_im2col(&k) : b_time(b_run_gemms, &g);
  b_report(l, backward ? "bwd" : "fwd", flops, b_time(b_run_kernel, &k), t_ref);
  b_gemms_free(&g);
  for (int i = 0; i < 3; i++) { free(fin[i].data); free(bout[i].data); }
  free(yt.data); free(temp); free(cache.data);
}

/* ---- matmul (attention) ---------------------------------------------------------------- */

/* cblas reference for a batched product: one sgemm per batch, which is what it is. */
typedef struct { int batch, M, N, K, tb; float *A, *B, *C; } b_batched;

static void b_run_batched(void *ctx) {
  b_batched *b = ctx;
  for (int i = 0; i < b->batch; i++)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, b->tb ? CblasTrans : CblasNoTrans, b->M, b->N, b->K, 1.0f,
                b->A + (int64_t)i * b->M * b->K, b->K, b->B + (int64_t)i * b->K * b->N, b->tb ? b->K : b->N,
                0.0f, b->C + (int64_t)i * b->M * b->N, b->N);
}

static void b_mm(const b_layer *l) {
  int B = l->v[0], M = l->v[1], N = l->v[2], K = l->v[3], tb = l->v[4];
  k_matmul_param p = {.transpose_b = tb};
  b_batched r = {B, M, N, K, tb, b_buf((int64_t)B * M * K), b_buf((int64_t)B * K * N), b_buf((int64_t)B * M * N)};
  k_tensor in[2] = {{r.A, b_shape(4, 8, B / 8, M, K), K_F32},
                    {r.B, tb ? b_shape(4, 8, B / 8, N, K) : b_shape(4, 8, B / 8, K, N), K_F32}};
  k_tensor out = {r.C, b_shape(4, 8, B / 8, M, N), K_F32};
  k_req req = kWriteTo;
  char err[128];
  b_kernel k = {k_matmul_forward, {in, 2, &out, 1, &req, &p, NULL, 0, 0, 0, 1, err, sizeof err, NULL, NULL, NULL}};
  b_report(l, "fwd", 2.0 * B * M * N * K, b_time(b_run_kernel, &k), b_time(b_run_batched, &r));
  free(r.A); free(r.B); free(r.C);
}

/* ---- bare GEMM: k_sgemm next to cblas_sgemm --------------------------------------------- */

/* The GEMMs of the example models (batch 64 / 8 sequences of 64): forward and both backward
 * products of each fully_connected, the attention's per-head products, and 512^3. */
typedef struct { const char *name; int ta, tb, M, N, K; } b_gemm_shape;

static const b_gemm_shape gemm_shapes[] = {
  {"mlp fc1 fwd", 0, 1, 64, 128, 784},        {"mlp fc1 dX", 0, 0, 64, 784, 128},
  {"mlp fc1 dW", 1, 0, 128, 784, 64},         {"mlp fc2 fwd", 0, 1, 64, 10, 128},
  {"mlp fc2 dX", 0, 0, 64, 128, 10},          {"mlp fc2 dW", 1, 0, 10, 128, 64},
  {"transformer fc 128-128 fwd", 0, 1, 512, 128, 128}, {"transformer fc 128-128 dX", 0, 0, 512, 128, 128},
  {"transformer fc 128-128 dW", 1, 0, 128, 128, 512},  {"transformer ffn1 fwd", 0, 1, 512, 512, 128},
  {"transformer ffn1 dX", 0, 0, 512, 128, 512},  {"transformer ffn1 dW", 1, 0, 512, 128, 512},
  {"transformer ffn2 fwd", 0, 1, 512, 128, 512}, {"transformer ffn2 dX", 0, 0, 512, 512, 128},
  {"transformer ffn2 dW", 1, 0, 128, 512, 512},  {"transformer scores QK^T", 0, 1, 64, 64, 32},
  {"transformer attn x V", 0, 0, 64, 32, 64},    {"transformer dP = dctx V^T", 0, 1, 64, 64, 32},
  {"transformer dV = P^T dctx", 1, 0, 64, 32, 64}, {"transformer dQ = dS K", 0, 0, 64, 32, 64},
  {"transformer dK = dS^T Q", 1, 0, 64, 32, 64}, {"square 512^3 NN", 0, 0, 512, 512, 512},
  {"square 512^3 NT", 0, 1, 512, 512, 512},     {"square 512^3 TN", 1, 0, 512, 512, 512},
};

typedef struct { const b_gemm_shape *s; float *A, *B, *C; int kiln; } b_gemm_run;

static void b_run_gemm(void *ctx) {
  b_gemm_run *r = ctx;
  const b_gemm_shape *s = r->s;
  CBLAS_TRANSPOSE ta = s->ta ? CblasTrans : CblasNoTrans, tb = s->tb ? CblasTrans : CblasNoTrans;
  int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
  if (r->kiln) k_sgemm(ta, tb, s->M, s->N, s->K, 1.0f, r->A, lda, r->B, ldb, 0.0f, r->C, s->N);
  else cblas_sgemm(CblasRowMajor, ta, tb, s->M, s->N, s->K, 1.0f, r->A, lda, r->B, ldb, 0.0f, r->C, s->N);
}

/* One row per shape: GFLOP/s of k_sgemm with each implementation this CPU runs (KILN_GEMM's
 * choices) and of cblas_sgemm called directly. Rows whose name lacks `filter` are skipped. */
static int b_gemm(const char *filter) {
  static const char *impls[] = {"avx512", "avx2"};
  printf("gemm\tta\ttb\tM\tN\tK");
  for (int i = 0; i < 2; i++) printf("\tk_sgemm_%s", impls[i]);
  printf("\tcblas_gflops\n");
  for (size_t i = 0; i < sizeof gemm_shapes / sizeof gemm_shapes[0]; i++) {
    const b_gemm_shape *s = &gemm_shapes[i];
    if (filter && !strstr(s->name, filter)) continue;
    b_gemm_run r = {s, b_buf((int64_t)s->M * s->K), b_buf((int64_t)s->K * s->N), b_buf((int64_t)s->M * s->N), 1};
    double flops = 2.0 * s->M * s->N * s->K;
    printf("%s\t%d\t%d\t%d\t%d\t%d", s->name, s->ta, s->tb, s->M, s->N, s->K);
    for (int k = 0; k < 2; k++) {
      if (strcmp(k_sgemm_use(impls[k]), impls[k]) != 0) { printf("\t-"); continue; }
      printf("\t%.1f", flops / b_time(b_run_gemm, &r) * 1e-9);
    }
    r.kiln = 0;
    printf("\t%.1f\n", flops / b_time(b_run_gemm, &r) * 1e-9);
    fflush(stdout);
    free(r.A); free(r.B); free(r.C);
  }
  k_sgemm_use(NULL);
  return 0;
}

/* ---- the machine's peak ---------------------------------------------------------------- */

/* Measured, not looked up (clock speeds and FMA pipe counts vary by part and by load): a loop
 * of vector multiply-adds on 12 independent accumulators (enough to hide the FMA latency on
 * two pipes) that never touches memory. One FMA counts 2 FLOPs per lane. */
typedef struct { long iters; volatile float sink; } b_peak_ctx;   /* sink: keeps the result live */

__attribute__((target("avx512f"))) static void b_peak_avx512(void *ctx) {
  b_peak_ctx *c = ctx;
  __m512 a[12], m = _mm512_set1_ps(0.999999f), d = _mm512_set1_ps(1e-7f);
  for (int j = 0; j < 12; j++) a[j] = _mm512_set1_ps((float)j);
  for (long i = 0; i < c->iters; i++)
    for (int j = 0; j < 12; j++) a[j] = _mm512_fmadd_ps(a[j], m, d);
  for (int j = 1; j < 12; j++) a[0] = _mm512_add_ps(a[0], a[j]);
  c->sink += _mm512_reduce_add_ps(a[0]);
}

__attribute__((target("avx2,fma"))) static void b_peak_avx2(void *ctx) {
  b_peak_ctx *c = ctx;
  __m256 a[12], m = _mm256_set1_ps(0.999999f), d = _mm256_set1_ps(1e-7f);
  for (int j = 0; j < 12; j++) a[j] = _mm256_set1_ps((float)j);
  for (long i = 0; i < c->iters; i++)
    for (int j = 0; j < 12; j++) a[j] = _mm256_fmadd_ps(a[j], m, d);
  float lanes[8];
  for (int j = 1; j < 12; j++) a[0] = _mm256_add_ps(a[0], a[j]);
  _mm256_storeu_ps(lanes, a[0]);
  for (int j = 0; j < 8; j++) c->sink += lanes[j];
}

/* Prints "peak<TAB>GFLOP/s<TAB>isa" for one core at the widest vector width the CPU has. */
static int b_peak(void) {
  __builtin_cpu_init();
  int wide = __builtin_cpu_supports("avx512f");
  if (!wide && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    fprintf(stderr, "kiln_bench_kernels: --peak needs AVX2+FMA or AVX-512\n");
    return 1;
  }
  b_peak_ctx c = {1 << 16, 0};
  double t = b_time(wide ? b_peak_avx512 : b_peak_avx2, &c);
  double flops = 2.0 * 12 * (wide ? 16 : 8) * (double)c.iters;
  printf("peak\t%.1f\t%s\n", flops / t * 1e-9, wide ? "AVX-512 FMA" : "AVX2 FMA");
  return 0;
}

/* Usage: kiln_bench_kernels [substring]: only layers whose "model layer" contains it.
 *        kiln_bench_kernels --peak: the measured FMA peak of one core (see b_peak).
 *        kiln_bench_kernels --gemm [substring]: bare k_sgemm against cblas_sgemm (b_gemm). */
int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--peak")) return b_peak();
  if (argc > 1 && !strcmp(argv[1], "--gemm")) return b_gemm(argc > 2 ? argv[2] : NULL);
  printf("model\tlayer\tpass\tkiln_gflops\tcblas_gflops\n");
  for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
    const b_layer *l = &layers[i];
    char name[128];
    snprintf(name, sizeof name, "%s %s", l->model, l->layer);
    if (argc > 1 && !strstr(name, argv[1])) continue;
    if (l->kind == B_MM) { b_mm(l); continue; }
    for (int bwd = 0; bwd < 2; bwd++) (l->kind == B_FC ? b_fc : b_conv)(l, bwd);
  }
  return 0;
}
