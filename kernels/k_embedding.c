/* k_embedding.c — embedding (F.embedding): a gather of weight rows by i32 index; backward
 * scatter-adds the output gradient into the weight gradient (repeated indices accumulate).
 * An index outside [0, input_dim) is a data error reported through c->err. */
#include "kernels.h"

#include <stdio.h>
#include <string.h>

/* Returns the position of the first out-of-range index, or -1. */
static int64_t k_emb_bad_index(const int32_t *idx, int64_t n, int64_t rows) {
  for (int64_t i = 0; i < n; i++)
    if (idx[i] < 0 || idx[i] >= rows) return i;
  return -1;
}

static int k_emb_check(const k_call *c, const int32_t *idx, int64_t n, int64_t rows) {
  int64_t bad = k_emb_bad_index(idx, n, rows);
  if (bad < 0) return 0;
  snprintf(c->err, c->err_len, "embedding: index %d at position %lld is out of range [0, %lld)",
           (int)idx[bad], (long long)bad, (long long)rows);
  return 1;
}

int k_embedding_forward(const k_call *c) {
  const int32_t *idx = c->in[0].data;
  const float *w = c->in[1].data;
  int64_t n = k_shape_numel(&c->in[0].shape);
  int64_t rows = c->in[1].shape.d[0], d = c->in[1].shape.d[1];
  if (k_emb_check(c, idx, n, rows)) return 1;
  if (c->req[0] == kNullOp) return 0;
  float *y = c->out[0].data;
  for (int64_t i = 0; i < n; i++) {
    const float *src = w + (int64_t)idx[i] * d;
    float *dst = y + i * d;
    if (c->req[0] == kAddTo)
      for (int64_t j = 0; j < d; j++) dst[j] += src[j];
    else
      memcpy(dst, src, (size_t)d * sizeof(float));
  }
  return 0;
}

/* Backward in = [dY, indices, -, -]; out = [- (kNullOp), dW]. */
int k_embedding_backward(const k_call *c) {
  if (c->req[1] == kNullOp) return 0;
  const float *dy = c->in[0].data;
  const int32_t *idx = c->in[1].data;
  int64_t n = k_shape_numel(&c->in[1].shape);
  int64_t rows = c->out[1].shape.d[0], d = c->out[1].shape.d[1];
  if (k_emb_check(c, idx, n, rows)) return 1;
  float *dw = c->out[1].data;
  if (c->req[1] != kAddTo) memset(dw, 0, (size_t)(rows * d) * sizeof(float));
  for (int64_t i = 0; i < n; i++) {
    float *dst = dw + (int64_t)idx[i] * d;
    for (int64_t j = 0; j < d; j++) dst[j] += dy[i * d + j];
  }
  return 0;
}
