/* test_embedding.c — embedding: gather forward against a loop written here, the weight gradient
 * by scatter-add with repeated indices (explicitly and by finite differences), no gradient for
 * the indices, and out-of-range indices reported as an error with a message. */
#include "kt_harness.h"

#include <stdlib.h>
#include <string.h>

static kt_case emb_case(const char *name, k_shape is, int rows, int d, const k_embedding_param *p) {
  kt_case c = {0};
  c.name = name; c.fwd = k_embedding_forward; c.bwd = k_embedding_backward;
  c.nargs = 2; c.nout = 1; c.nvisible = 1;
  c.in[0] = kt_tensor_i32(is, 0, rows, 51);
  c.in[1] = kt_tensor_f32(kt_shape(2, rows, d), -1, 1, 52);
  c.out_shape[0] = is;
  c.out_shape[0].d[c.out_shape[0].rank++] = d;
  c.param = p;
  c.deps_og = 1; c.deps_in = 1;   /* backward reads the output gradient and the indices only */
  c.no_grad = 1;                  /* indices take no gradient */
  return c;
}

static void check_forward(kt_case *c, int d) {
  k_tensor out[KT_MAX_IO];
  KT_CHECK(kt_forward(c, out) == 0, "%s rc", c->name);
  int64_t n = k_shape_numel(&c->in[0].shape);
  const int32_t *idx = c->in[0].data;
  const float *w = c->in[1].data, *y = out[0].data;
  int bad = 0;
  for (int64_t i = 0; i < n; i++)
    for (int j = 0; j < d; j++) bad += y[i * d + j] != w[idx[i] * d + j];
  KT_CHECK(bad == 0, "%s forward: %d mismatches", c->name, bad);
  kt_tensor_free(&out[0]);
}

/* Rows hit by several indices receive the sum of their output gradients. */
static void check_scatter_add(void) {
  int32_t idx[5] = {2, 0, 2, 2, 1};
  float dy[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, dw[8];
  k_embedding_param p = {4, 2};
  k_tensor in[4] = {{dy, kt_shape(2, 5, 2), K_F32}, {idx, kt_shape(1, 5), K_I32},
                    {NULL, kt_shape(2, 4, 2), K_F32}, {NULL, kt_shape(2, 5, 2), K_F32}};
  k_tensor out[2] = {{NULL, kt_shape(1, 5), K_I32}, {dw, kt_shape(2, 4, 2), K_F32}};
  k_req req[2] = {kNullOp, kWriteTo};
  char err[128];
  for (int i = 0; i < 8; i++) dw[i] = 100;   /* kWriteTo must overwrite, rows never hit included */
  k_call c = {in, 4, out, 2, req, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  KT_CHECK(k_embedding_backward(&c) == 0, "scatter-add rc");
  float want[8] = {3, 4, 9, 10, 1 + 5 + 7, 2 + 6 + 8, 0, 0};
  KT_CHECK(kt_expect_close("scatter-add", dw, want, 8, 0, 0) == 0, "scatter-add with repeated indices");
}

static void check_out_of_range(int32_t bad_index) {
  int32_t idx[3] = {0, bad_index, 1};
  float w[6] = {0}, y[6];
  k_embedding_param p = {3, 2};
  k_tensor in[2] = {{idx, kt_shape(1, 3), K_I32}, {w, kt_shape(2, 3, 2), K_F32}};
  k_tensor out = {y, kt_shape(2, 3, 2), K_F32};
  k_req req = kWriteTo;
  char err[128] = "";
  k_call c = {in, 2, &out, 1, &req, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  int rc = k_embedding_forward(&c);
  KT_CHECK(rc != 0 && strstr(err, "out of range") != NULL, "index %d: rc %d, message '%s'", bad_index, rc, err);
}

int main(void) {
  k_embedding_param p1 = {7, 5}, p2 = {3, 4};
  kt_case a = emb_case("embedding [2,3] -> 5", kt_shape(2, 2, 3), 7, 5, &p1);
  kt_case b = emb_case("embedding [12] repeated -> 4", kt_shape(1, 12), 3, 4, &p2);
  kt_case *cases[2] = {&a, &b};
  for (int i = 0; i < 2; i++) {
    check_forward(cases[i], (int)cases[i]->in[1].shape.d[1]);
    kt_gradcheck(cases[i]);
    kt_tensor_free(&cases[i]->in[0]);
    kt_tensor_free(&cases[i]->in[1]);
  }
  check_scatter_add();
  check_out_of_range(3);
  check_out_of_range(-1);
  return kt_finish("test_embedding");
}
