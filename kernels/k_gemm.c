/* k_gemm.c — matmul (torch.matmul for rank >= 2, broadcast batch dims, optional transposes of
 * the last two dims) and fully_connected (F.linear), forward and backward, on k_sgemm (which
 * splits one large product over the threads); batches of small products are split instead.
 * OpReqType maps onto sgemm's beta: kWriteTo -> 0, kAddTo -> 1, kNullOp skips the product. */
#include "kernels.h"
#include "k_mm_geom.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k_blas.h"
#include "k_epilogue.h"
#include "k_vec.h"
#include "k_cache.h"

/* beta for a single product written straight into a req'd output. */
static float k_beta(k_req r) { return r == kAddTo ? 1.0f : 0.0f; }

/* After rows [m0, m1) of a product whose rows are `row` elements of out[0]: the epilogue. */
typedef struct { const k_call *c; int64_t row; } k_gemm_epi;

static void k_gemm_after(void *ctx, int64_t m0, int64_t m1) {
  const k_gemm_epi *e = ctx;
  k_epi_apply(e->c, m0 * e->row, m1 * e->row);
}

/* A product into out[0] with c's epilogue (if any) applied to each block of rows; bp: op(B)
 * packed ahead (k_gemm_packed_b), or NULL; bias: per column, with beta 0 (or NULL). */
static void k_gemm_out(const k_call *c, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N,
                       int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, const float *bp,
                       float beta, const float *bias) {
  k_gemm_epi e = {c, N};
  k_sgemm_rows_packed(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, bp, beta, bias, c->out[0].data, N,
                      c->epi ? k_gemm_after : NULL, &e);
}

/* op(B) of a product whose B is input 1, packed ahead (fully_connected's W [N, K] is op(B) =
 * W^T, tb = CblasTrans; a matmul's B is op(B) by its transpose_b): from the call's cache when B
 * is a stable input (a predict program: packed once per weight change, which clears the key);
 * NULL — pack per call — without a cache or memory, and for one row of input, which runs as a
 * matrix-vector product that reads B as it is. */
static const float *k_gemm_packed_b(const k_call *c, int64_t rows, int64_t N, int64_t K, CBLAS_TRANSPOSE tb,
                                    int64_t ldb) {
  k_cache *k = c->cache;
  size_t bytes = k_sgemm_packed_bytes(N, K);
  if (!k || !k_cache_stable(k, 1, 1) || rows <= 1 || N <= 1 || bytes == 0) return NULL;
  uint64_t key = k_sgemm_packed_key();
  int fill;
  float *d = k_cache_reserve(k, key, bytes, &fill);
  if (fill) k_sgemm_pack(tb, N, K, c->in[1].data, ldb, d), k->key = key;
  return d;
}

/* ---- matmul ---------------------------------------------------------------------------- */

/* Batches [lo, hi) of a matmul that is not one GEMM: the products are independent. */
typedef struct { const k_call *c; const k_mm_geom *g; int which; } k_mm_job;

/* Batches per chunk: enough that a chunk is worth a thread (each product is usually small). */
static int64_t k_mm_batch_grain(const k_mm_geom *g) {
  int64_t macs = g->M * g->N * (g->K > 0 ? g->K : 1);
  return macs >= (1 << 18) ? 1 : (1 << 18) / (macs > 0 ? macs : 1);
}

/* The epilogue over rows [m0, m1) of output batch i, where the output stores them: a swapped
 * output's rows lie ldc apart, each of N elements (the steps index the output as stored). */
static void k_mm_epi_rows(const k_call *c, const k_mm_geom *g, int64_t i, int64_t m0, int64_t m1) {
  int64_t at = k_mm_offset(g, g->sc, i);
  if (g->ldc == g->N) return k_epi_apply(c, at + m0 * g->N, at + m1 * g->N);
  for (int64_t r = m0; r < m1; r++) k_epi_apply(c, at + r * g->ldc, at + r * g->ldc + g->N);
}

/* k_sgemm_rows_packed's `after` for output batch i. */
typedef struct { const k_call *c; const k_mm_geom *g; int64_t i; } k_mm_after_ctx;

static void k_mm_after(void *ctx, int64_t m0, int64_t m1) {
  const k_mm_after_ctx *a = ctx;
  k_mm_epi_rows(a->c, a->g, a->i, m0, m1);
}

static void k_mm_forward_batches(void *ctx, int64_t lo, int64_t hi) {
  const k_mm_job *j = ctx;
  const k_mm_geom *g = j->g;
  const float *A = j->c->in[0].data, *B = j->c->in[1].data;
  float *C = j->c->out[0].data;
  for (int64_t i = lo; i < hi; i++) {
    k_sgemm(g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans, g->M, g->N,
            g->K, 1.0f, A + k_mm_offset(g, g->sa, i), g->lda, B + k_mm_offset(g, g->sb, i), g->ldb,
            k_beta(j->c->req[0]), C + k_mm_offset(g, g->sc, i), g->ldc);
    if (j->c->epi) k_mm_epi_rows(j->c, g, i, 0, g->M);   /* this product, still in cache */
  }
}

/* A product this large is worth splitting over the threads by itself. */
#define K_MM_SPLIT_MACS (1 << 22)

/* Whether every output batch reads the same B, and each product is large: attention's
 * projections with the head split folded in (an output or an operand stored swapped, so the
 * batches do not fold into one GEMM) multiply each sample's rows by one weight. */
static int k_mm_shared_b(const k_mm_geom *g) {
  return k_mm_one_b(g) && g->batch > 1 && g->M > 1 && g->M * g->N * g->K >= K_MM_SPLIT_MACS;
}

/* Such a matmul with op(B) packed once (the call's cache: B a weight of a predict program),
 * the batches one after another, each product split over the threads. Run as independent
 * products, one a thread, each packed its own copy of op(B): ViT-B/16's query-key-value
 * projection at batch 8 (8 products of [197, 768] by the 7 MB weight) took 418 ms of a
 * 1,280 ms call on two Zen 5 threads, 207 ms this way. Same bits (k_sgemm_rows_packed). 0
 * when there is no packing to share: the caller runs the batches. */
static int k_mm_shared_b_forward(const k_call *c, const k_mm_geom *g) {
  CBLAS_TRANSPOSE TA = g->ta ? CblasTrans : CblasNoTrans, TB = g->tb ? CblasTrans : CblasNoTrans;
  const float *bp = k_gemm_packed_b(c, g->M, g->N, g->K, TB, g->ldb);
  if (!bp) return 0;
  const float *A = c->in[0].data, *B = c->in[1].data;
  float *C = c->out[0].data;
  for (int64_t i = 0; i < g->batch; i++) {
    k_mm_after_ctx a = {c, g, i};
    k_sgemm_rows_packed(TA, TB, g->M, g->N, g->K, 1.0f, A + k_mm_offset(g, g->sa, i), g->lda, B, g->ldb, bp,
                        k_beta(c->req[0]), NULL, C + k_mm_offset(g, g->sc, i), g->ldc, c->epi ? k_mm_after : NULL, &a);
  }
  return 1;
}

int k_matmul_forward(const k_call *c) {
  if (c->req[0] == kNullOp) return 0;
  k_mm_geom g = k_mm_geometry(&c->in[0].shape, &c->in[1].shape, &c->out[0].shape, c->param);
  const float *A = c->in[0].data, *B = c->in[1].data;
  CBLAS_TRANSPOSE TA = g.ta ? CblasTrans : CblasNoTrans, TB = g.tb ? CblasTrans : CblasNoTrans;
  if (k_mm_foldable(&g)) {
    k_gemm_out(c, TA, TB, g.batch * g.M, g.N, g.K, A, g.lda, B, g.ldb,
               k_gemm_packed_b(c, g.batch * g.M, g.N, g.K, TB, g.ldb), k_beta(c->req[0]), NULL);
    return 0;
  }
  if (k_mm_shared_b(&g) && k_mm_shared_b_forward(c, &g)) return 0;
  k_mm_job j = {c, &g, 0};
  k_parallel_for(g.batch, k_mm_batch_grain(&g), k_mm_forward_batches, &j);
  return 0;
}

/* dA for one batch: op(A) = A -> dA = dC op(B)^T;  op(A) = A^T -> dA = op(B) dC^T. Each
 * gradient is stored as its operand is (an operand stored swapped gets its gradient so), at
 * the geometry's leading dimensions. */
static void k_mm_grad_a(const k_mm_geom *g, int64_t rows, const float *dC, const float *B,
                        float beta, float *dA) {
  if (!g->ta)
    k_sgemm(CblasNoTrans, g->tb ? CblasNoTrans : CblasTrans, rows, g->K, g->N, 1.0f, dC, g->ldc, B, g->ldb, beta,
            dA, g->lda);
  else
    k_sgemm(g->tb ? CblasTrans : CblasNoTrans, CblasTrans, g->K, g->M, g->N, 1.0f, B, g->ldb, dC, g->ldc, beta,
            dA, g->lda);
}

/* dB for one batch: op(B) = B -> dB = op(A)^T dC;  op(B) = B^T -> dB = dC^T op(A). */
static void k_mm_grad_b(const k_mm_geom *g, int64_t rows, const float *dC, const float *A,
                        float beta, float *dB) {
  if (!g->tb)
    k_sgemm(g->ta ? CblasNoTrans : CblasTrans, CblasNoTrans, g->K, g->N, rows, 1.0f, A, g->lda, dC, g->ldc, beta,
            dB, g->ldb);
  else
    k_sgemm(CblasTrans, g->ta ? CblasTrans : CblasNoTrans, g->N, g->K, rows, 1.0f, dC, g->ldc, A, g->lda, beta,
            dB, g->ldb);
}

/* Broadcast operands receive the sum over the batches they were reused in, so for kWriteTo
 * the gradient is cleared once and every batch then accumulates (beta = 1). */
static void k_mm_prepare(k_req r, k_tensor *t) {
  if (r == kWriteTo || r == kWriteInplace)
    memset(t->data, 0, (size_t)k_shape_numel(&t->shape) * sizeof(float));
}

/* True when an operand with batch strides s is reused by several output batches. */
static int k_mm_broadcast(const k_mm_geom *g, const int64_t *s) {
  for (int d = 0; d < g->nb; d++)
    if (s[d] == 0 && g->bd[d] != 1) return 1;
  return 0;
}

/* Gradient of operand j->which for batches [lo, hi), accumulated onto the prepared output. */
static void k_mm_backward_batches(void *ctx, int64_t lo, int64_t hi) {
  const k_mm_job *j = ctx;
  const k_mm_geom *g = j->g;
  const float *dC = j->c->in[0].data, *A = j->c->in[1].data, *B = j->c->in[2].data;
  float *out = j->c->out[j->which].data;
  for (int64_t i = lo; i < hi; i++) {
    const float *dCi = dC + k_mm_offset(g, g->sc, i);
    int64_t oa = k_mm_offset(g, g->sa, i), ob = k_mm_offset(g, g->sb, i);
    if (j->which == 0) k_mm_grad_a(g, g->M, dCi, B + ob, 1.0f, out + oa);
    else k_mm_grad_b(g, g->M, dCi, A + oa, 1.0f, out + ob);
  }
}

int k_matmul_backward(const k_call *c) {
  const k_tensor *og = &c->in[0], *a = &c->in[1], *b = &c->in[2];
  k_mm_geom g = k_mm_geometry(&a->shape, &b->shape, &og->shape, c->param);
  const float *dC = og->data, *A = a->data, *B = b->data;
  if (k_mm_foldable(&g)) {
    if (c->req[0] != kNullOp) k_mm_grad_a(&g, g.batch * g.M, dC, B, k_beta(c->req[0]), c->out[0].data);
    if (c->req[1] != kNullOp) k_mm_grad_b(&g, g.batch * g.M, dC, A, k_beta(c->req[1]), c->out[1].data);
    return 0;
  }
  for (int k = 0; k < 2; k++) {
    if (c->req[k] == kNullOp) continue;
    k_mm_prepare(c->req[k], &c->out[k]);
    k_mm_job j = {c, &g, k};
    /* a broadcast operand's gradient sums over batches: those go in order, one at a time */
    int64_t grain = k_mm_broadcast(&g, k ? g.sb : g.sa) ? g.batch : k_mm_batch_grain(&g);
    k_parallel_for(g.batch, grain, k_mm_backward_batches, &j);
  }
  return 0;
}

/* ---- fully_connected ------------------------------------------------------------------- */

/* data viewed as [rows, in]: flatten=1 keeps axis 0 as rows, flatten=0 keeps all but the last. */
static void k_fc_dims(const k_shape *data, const k_fc_param *p, int64_t *rows, int64_t *in) {
  int64_t n = k_shape_numel(data);
  *in = p->flatten ? (data->d[0] ? n / data->d[0] : 0) : data->d[data->rank - 1];
  *rows = *in ? n / *in : 0;
}

/* kAddTo: Y's rows get the bias added first, and the product is added on top. Vector clones:
 * each element's one addition. */
K_VEC_TARGETS static void k_fc_bias_add(float *restrict Y, const float *restrict bias, int64_t rows, int64_t H) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t h = 0; h < H; h++) Y[r * H + h] = Y[r * H + h] + bias[h];
}

/* Y = X W^T + b. For kWriteTo the GEMM adds the bias as it stores each tile (the bits of laying
 * it down first and accumulating onto it, which kAddTo still does). */
int k_fully_connected_forward(const k_call *c) {
  const k_fc_param *p = c->param;
  if (c->req[0] == kNullOp) return 0;
  int64_t rows, in, H = p->num_hidden;
  k_fc_dims(&c->in[0].shape, p, &rows, &in);
  float *Y = c->out[0].data;
  float beta = k_beta(c->req[0]);
  const float *bias = p->no_bias ? NULL : c->in[2].data;
  if (bias && c->req[0] == kAddTo) {
    k_fc_bias_add(Y, bias, rows, H);
    bias = NULL;
  }
  k_gemm_out(c, CblasNoTrans, CblasTrans, rows, H, in, c->in[0].data, in, c->in[1].data, in,
             k_gemm_packed_b(c, rows, H, in, CblasTrans, in), beta, bias);
  return 0;
}

/* db[h] (op) sum over rows of dY[r, h], the rows in order (vector clones across h). */
K_VEC_TARGETS static void k_fc_bias_grad(const float *dY, int64_t rows, int64_t H, k_req r, float *db) {
  if (r == kNullOp) return;
  if (r != kAddTo) memset(db, 0, (size_t)H * sizeof(float));
  for (int64_t i = 0; i < rows; i++)
    for (int64_t h = 0; h < H; h++) db[h] += dY[i * H + h];
}

/* Backward in = [dY, X, W, (b), Y]: dX = dY W, dW = dY^T X, db = column sums of dY. */
int k_fully_connected_backward(const k_call *c) {
  const k_fc_param *p = c->param;
  int nargs = p->no_bias ? 2 : 3;
  int64_t rows, in, H = p->num_hidden;
  k_fc_dims(&c->in[1].shape, p, &rows, &in);
  const float *dY = c->in[0].data, *X = c->in[1].data, *W = c->in[2].data;
  if (c->req[0] != kNullOp)
    k_sgemm(CblasNoTrans, CblasNoTrans, (int)rows, (int)in, (int)H, 1.0f,
                dY, (int)H, W, (int)in, k_beta(c->req[0]), c->out[0].data, (int)in);
  if (c->req[1] != kNullOp)
    k_sgemm(CblasTrans, CblasNoTrans, (int)H, (int)in, (int)rows, 1.0f,
                dY, (int)H, X, (int)in, k_beta(c->req[1]), c->out[1].data, (int)in);
  if (nargs == 3) k_fc_bias_grad(dY, rows, H, c->req[2], c->out[2].data);
  return 0;
}
