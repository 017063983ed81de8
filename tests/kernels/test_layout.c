/* test_layout.c — data-movement kernels. Each op is y[i] = x_piece[src(i)] for an index map
 * written here from coordinates; forward must equal the map, backward (into a NaN-filled
 * buffer, kWriteTo) must equal og scattered back through it, and gradcheck must pass. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kt_harness.h"

typedef struct { int piece; int64_t idx; } src_t;   /* piece -1: pad's constant */
typedef src_t (*map_fn)(const kt_case *c, int64_t i);

static void unravel(int64_t i, const k_shape *s, int64_t *co) {
  for (int a = s->rank - 1; a >= 0; a--) { co[a] = i % s->d[a]; i /= s->d[a]; }
}

static int64_t ravel(const int64_t *co, const k_shape *s) {
  int64_t i = 0;
  for (int a = 0; a < s->rank; a++) i = i * s->d[a] + co[a];
  return i;
}

static src_t map_same(const kt_case *c, int64_t i) { return (src_t){0, i}; }

static src_t map_transpose(const kt_case *c, int64_t i) {
  const k_transpose_param *p = c->param;
  int64_t oc[K_MAX_RANK], xc[K_MAX_RANK];
  unravel(i, &c->out_shape[0], oc);
  for (int k = 0; k < c->out_shape[0].rank; k++) xc[p->axes.v[k]] = oc[k];
  return (src_t){0, ravel(xc, &c->in[0].shape)};
}

static src_t map_broadcast(const kt_case *c, int64_t i) {
  int64_t oc[K_MAX_RANK], xc[K_MAX_RANK];
  const k_shape *xs = &c->in[0].shape, *os = &c->out_shape[0];
  unravel(i, os, oc);
  for (int a = 0; a < xs->rank; a++) {
    int64_t v = oc[a + os->rank - xs->rank];
    xc[a] = xs->d[a] == 1 ? 0 : v;
  }
  return (src_t){0, ravel(xc, xs)};
}

static src_t map_slice(const kt_case *c, int64_t i) {
  const k_slice_param *p = c->param;
  int64_t co[K_MAX_RANK];
  unravel(i, &c->out_shape[0], co);
  co[p->axis] = p->step > 0 ? p->begin + co[p->axis] * p->step : p->end - 1 + co[p->axis] * p->step;
  return (src_t){0, ravel(co, &c->in[0].shape)};
}

static src_t map_concat(const kt_case *c, int64_t i) {
  int dim = ((const k_concat_param *)c->param)->dim, k = 0;
  int64_t co[K_MAX_RANK];
  unravel(i, &c->out_shape[0], co);
  while (co[dim] >= c->in[k].shape.d[dim]) co[dim] -= c->in[k++].shape.d[dim];
  return (src_t){k, ravel(co, &c->in[k].shape)};
}

/* pad: per axis, the input coordinate by F.pad's rule (mode), or the constant. */
static src_t map_pad(const kt_case *c, int64_t i) {
  const k_pad_param *p = c->param;
  const k_shape *xs = &c->in[0].shape;
  int64_t co[K_MAX_RANK];
  unravel(i, &c->out_shape[0], co);
  for (int a = 0; a < xs->rank; a++) {
    int64_t v = co[a] - p->pad.v[2 * (xs->rank - 1 - a)], d = xs->d[a];
    if (p->mode == K_PAD_REFLECT) v = v < 0 ? -v : (v >= d ? 2 * (d - 1) - v : v);
    if (p->mode == K_PAD_REPLICATE) v = v < 0 ? 0 : (v >= d ? d - 1 : v);
    if (v < 0 || v >= d) return (src_t){-1, 0};
    co[a] = v;
  }
  return (src_t){0, ravel(co, xs)};
}

static void check_forward(const kt_case *c, map_fn m) {
  k_tensor y;
  int64_t n = k_shape_numel(&c->out_shape[0]);
  float *want = malloc((size_t)n * sizeof(float) + 4);
  for (int64_t i = 0; i < n; i++) {
    src_t s = m(c, i);
    want[i] = s.piece < 0 ? ((const k_pad_param *)c->param)->value : ((const float *)c->in[s.piece].data)[s.idx];
  }
  KT_CHECK(kt_forward(c, &y) == 0 && kt_expect_close(c->name, y.data, want, n, 0, 0) == 0,
           "%s forward matches the index map", c->name);
  free(y.data);
  free(want);
}

/* Runs backward with og random, x and y undeclared (NULL), into NaN-filled gradients. */
static void run_backward(const kt_case *c, const float *og, k_tensor *g) {
  k_tensor in[KT_MAX_IO + 2];
  k_req req[KT_MAX_IO];
  char err[64];
  in[0] = (k_tensor){(void *)og, c->out_shape[0], K_F32};
  for (int k = 0; k < c->nargs; k++) {
    in[1 + k] = c->in[k];
    in[1 + k].data = NULL;
    g[k] = kt_tensor_f32(c->in[k].shape, 0, 0, 1);
    for (int64_t j = 0; j < k_shape_numel(&g[k].shape); j++) ((float *)g[k].data)[j] = NAN;
    req[k] = kWriteTo;
  }
  in[1 + c->nargs] = (k_tensor){NULL, c->out_shape[0], K_F32};
  k_call call = {in, c->nargs + 2, g, c->nargs, req, c->param, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  c->bwd(&call);
}

static void check_backward(const kt_case *c, map_fn m) {
  k_tensor og = kt_tensor_f32(c->out_shape[0], -1, 1, 21), g[KT_MAX_IO], want[KT_MAX_IO];
  int64_t n = k_shape_numel(&og.shape);
  int fails = 0;
  run_backward(c, og.data, g);
  for (int k = 0; k < c->nargs; k++) want[k] = kt_tensor_f32(c->in[k].shape, 0, 0, 1);
  for (int64_t i = 0; i < n; i++) {
    src_t s = m(c, i);
    if (s.piece >= 0) ((float *)want[s.piece].data)[s.idx] += ((float *)og.data)[i];
  }
  for (int k = 0; k < c->nargs; k++) {
    fails += kt_expect_close(c->name, g[k].data, want[k].data, k_shape_numel(&g[k].shape),
                             1e-6f, 1e-6f);
    kt_tensor_free(&g[k]);
    kt_tensor_free(&want[k]);
  }
  KT_CHECK(fails == 0, "%s backward scatters og through the index map", c->name);
  kt_tensor_free(&og);
}

static void check_all(kt_case *c, map_fn m) {
  c->nout = c->nvisible = 1;
  c->deps_og = 1;
  c->rtol = 1e-3f;
  c->atol = 1e-4f;
  kt_gradcheck(c);
  check_forward(c, m);
  check_backward(c, m);
}

static kt_case one_input(const char *name, k_fn f, k_fn b, k_tensor *x, k_shape out,
                         const void *p) {
  kt_case c = {.name = name, .fwd = f, .bwd = b, .nargs = 1, .param = p};
  c.in[0] = *x;
  c.out_shape[0] = out;
  return c;
}

/* reshape-like ops, plus their in-place (no copy) and kAddTo forward paths. */
static void test_copies(void) {
  k_tensor x = kt_tensor_f32(kt_shape(3, 2, 3, 4), -1, 1, 1);
  k_tensor x2 = kt_tensor_f32(kt_shape(2, 3, 4), -1, 1, 2), x3 = kt_tensor_f32(kt_shape(3, 3, 1, 4), -1, 1, 3);
  k_expand_dims_param ep = {1};
  k_squeeze_param sp = {{1, {1}}};
  kt_case cs[] = {
    one_input("reshape", k_reshape_forward, k_reshape_backward, &x, kt_shape(2, 6, 4), NULL),
    one_input("flatten", k_flatten_forward, k_flatten_backward, &x, kt_shape(2, 2, 12), NULL),
    one_input("expand_dims", k_expand_dims_forward, k_expand_dims_backward, &x2,
              kt_shape(3, 3, 1, 4), &ep),
    one_input("squeeze", k_squeeze_forward, k_squeeze_backward, &x3, kt_shape(2, 3, 4), &sp),
  };
  for (int i = 0; i < 4; i++) check_all(&cs[i], map_same);
  float buf[24], sum[24];
  memcpy(buf, x.data, sizeof buf);
  for (int i = 0; i < 24; i++) sum[i] = 2 * buf[i];
  k_tensor t = {buf, kt_shape(2, 6, 4), K_F32}, tx = {buf, x.shape, K_F32};
  k_req ip = kWriteInplace, add = kAddTo;
  char err[64];
  k_call call = {&tx, 1, &t, 1, &ip, NULL, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  k_reshape_forward(&call);
  KT_CHECK(memcmp(buf, x.data, sizeof buf) == 0, "reshape in place leaves the data");
  call.in = &x;
  call.req = &add;
  k_reshape_forward(&call);
  KT_CHECK(kt_expect_close("reshape kAddTo", buf, sum, 24, 0, 0) == 0, "reshape kAddTo adds");
  kt_tensor_free(&x); kt_tensor_free(&x2); kt_tensor_free(&x3);
}

static k_transpose_param perm(int n, int a, int b, int c, int d) {
  k_transpose_param p = {{n, {a, b, c, d}}};
  return p;
}

/* Every permutation of two rank-4 shapes: one with a size-1 axis and sides over a 16-wide tile
 * ([3,1,19,20]: contiguous runs, tiles with partial edges), one shaped like attention heads
 * ([2,5,4,32]: the [B,T,H,D] <-> [B,H,T,D] runs of 32). */
static void test_transpose_all_perms(void) {
  k_shape shapes[] = {kt_shape(4, 3, 1, 19, 20), kt_shape(4, 2, 5, 4, 32)};
  for (int s = 0; s < 2; s++) {
    k_tensor x = kt_tensor_f32(shapes[s], -1, 1, 60 + s);
    for (int code = 0; code < 256; code++) {
      int a[4] = {code & 3, code >> 2 & 3, code >> 4 & 3, code >> 6 & 3}, seen = 0;
      for (int k = 0; k < 4; k++) seen |= 1 << a[k];
      if (seen != 15) continue;
      k_transpose_param p = perm(4, a[0], a[1], a[2], a[3]);
      k_shape out = kt_shape(4, shapes[s].d[a[0]], shapes[s].d[a[1]], shapes[s].d[a[2]], shapes[s].d[a[3]]);
      kt_case c = one_input("transpose (all permutations)", k_transpose_forward, k_transpose_backward,
                            &x, out, &p);
      check_all(&c, map_transpose);
    }
    kt_tensor_free(&x);
  }
}

/* A tile large enough to be split over threads ([97, 1601]: ragged 8 x 8 blocks on both sides),
 * at 1 and 2 threads, written and added to, against the index map element by element. */
static void test_transpose_large(void) {
  const int64_t R = 97, C = 1601;
  k_tensor x = kt_tensor_f32(kt_shape(2, R, C), -1, 1, 70);
  k_transpose_param p = perm(2, 1, 0, 0, 0);
  float *y = malloc((size_t)(R * C) * sizeof(float)), *x_ = x.data;
  k_tensor ty = {y, kt_shape(2, C, R), K_F32};
  char err[64];
  for (int threads = 1; threads <= 2; threads++) {
    k_parallel_set_threads(threads);
    for (int add = 0; add < 2; add++) {
      k_req req = add ? kAddTo : kWriteTo;
      for (int64_t i = 0; i < R * C; i++) y[i] = add ? 0.5f : -7.0f;
      k_call call = {&x, 1, &ty, 1, &req, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
      k_transpose_forward(&call);
      int64_t bad = 0;
      for (int64_t c = 0; c < C; c++)
        for (int64_t r = 0; r < R; r++) bad += y[c * R + r] != (add ? 0.5f + x_[r * C + c] : x_[r * C + c]);
      KT_CHECK(bad == 0, "transpose [%lld, %lld] at %d threads, %s: %lld elements wrong", (long long)R, (long long)C,
               threads, add ? "kAddTo" : "kWriteTo", (long long)bad);
    }
  }
  k_parallel_set_threads(0);
  free(y);
  kt_tensor_free(&x);
}

/* Runs contiguous on both sides, enough of them to split over threads: [37, 50, 3, 24] ->
 * axes (1, 0, 2, 3) (runs of 72 after collapsing, 1850 of them, chunks of 228), at 1 and 2
 * threads, written and added to, element by element. */
static void test_transpose_runs(void) {
  const int64_t A = 37, B = 50, D = 72;
  k_tensor x = kt_tensor_f32(kt_shape(4, A, B, 3, 24), -1, 1, 71);
  k_transpose_param p = perm(4, 1, 0, 2, 3);
  float *y = malloc((size_t)(A * B * D) * sizeof(float)), *x_ = x.data;
  k_tensor ty = {y, kt_shape(4, B, A, 3, 24), K_F32};
  char err[64];
  for (int threads = 1; threads <= 2; threads++) {
    k_parallel_set_threads(threads);
    for (int add = 0; add < 2; add++) {
      k_req req = add ? kAddTo : kWriteTo;
      for (int64_t i = 0; i < A * B * D; i++) y[i] = add ? 0.5f : -7.0f;
      k_call call = {&x, 1, &ty, 1, &req, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
      k_transpose_forward(&call);
      int64_t bad = 0;
      for (int64_t b = 0; b < B; b++)
        for (int64_t a = 0; a < A; a++)
          for (int64_t d = 0; d < D; d++) {
            float v = x_[(a * B + b) * D + d];
            bad += y[(b * A + a) * D + d] != (add ? 0.5f + v : v);
          }
      KT_CHECK(bad == 0, "transpose runs [%lld, %lld, %lld] at %d threads, %s: %lld elements wrong", (long long)A,
               (long long)B, (long long)D, threads, add ? "kAddTo" : "kWriteTo", (long long)bad);
    }
  }
  k_parallel_set_threads(0);
  free(y);
  kt_tensor_free(&x);
}

static void test_transpose(void) {
  k_transpose_param p3 = perm(3, 2, 0, 1, 0), p2 = perm(2, 1, 0, 0, 0), p4 = perm(4, 3, 1, 0, 2);
  k_tensor a = kt_tensor_f32(kt_shape(3, 2, 3, 4), -1, 1, 4), b = kt_tensor_f32(kt_shape(2, 3, 5), -1, 1, 5);
  k_tensor d = kt_tensor_f32(kt_shape(4, 2, 1, 3, 2), -1, 1, 6);
  kt_case cs[] = {
    one_input("transpose(2,0,1)", k_transpose_forward, k_transpose_backward, &a, kt_shape(3, 4, 2, 3), &p3),
    one_input("transpose(1,0)", k_transpose_forward, k_transpose_backward, &b, kt_shape(2, 5, 3), &p2),
    one_input("transpose(3,1,0,2)", k_transpose_forward, k_transpose_backward, &d,
              kt_shape(4, 2, 1, 2, 3), &p4),
  };
  for (int i = 0; i < 3; i++) check_all(&cs[i], map_transpose);
  float *x = a.data, y[24];   /* one element by hand: y[k][i][j] = x[i][j][k] */
  k_tensor ty = {y, kt_shape(3, 4, 2, 3), K_F32};
  k_req w = kWriteTo;
  char err[64];
  k_call call = {&a, 1, &ty, 1, &w, &p3, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  k_transpose_forward(&call);
  KT_CHECK(y[3 * 6 + 1 * 3 + 2] == x[1 * 12 + 2 * 4 + 3], "transpose y[3][1][2] == x[1][2][3]");
  kt_tensor_free(&a); kt_tensor_free(&b); kt_tensor_free(&d);
}

static void test_broadcast_to(void) {
  k_tensor a = kt_tensor_f32(kt_shape(2, 3, 1), -1, 1, 7), s = kt_tensor_f32(kt_shape(0), -1, 1, 8);
  k_tensor v = kt_tensor_f32(kt_shape(1, 4), -1, 1, 9), m = kt_tensor_f32(kt_shape(3, 2, 1, 3), -1, 1, 10);
  k_broadcast_to_param pa = {{3, {2, 3, 4}}}, ps = {{2, {2, 2}}}, pv = {{2, {3, 4}}};
  k_broadcast_to_param pm = {{3, {2, 5, 3}}};
  kt_case cs[] = {
    one_input("broadcast_to [3,1]->[2,3,4]", k_broadcast_to_forward, k_broadcast_to_backward, &a,
              kt_shape(3, 2, 3, 4), &pa),
    one_input("broadcast_to []->[2,2]", k_broadcast_to_forward, k_broadcast_to_backward, &s,
              kt_shape(2, 2, 2), &ps),
    one_input("broadcast_to [4]->[3,4]", k_broadcast_to_forward, k_broadcast_to_backward, &v,
              kt_shape(2, 3, 4), &pv),
    one_input("broadcast_to [2,1,3]->[2,5,3]", k_broadcast_to_forward, k_broadcast_to_backward, &m,
              kt_shape(3, 2, 5, 3), &pm),
  };
  for (int i = 0; i < 4; i++) check_all(&cs[i], map_broadcast);
  kt_tensor_free(&a); kt_tensor_free(&s); kt_tensor_free(&v); kt_tensor_free(&m);
}

static void test_slice(void) {
  k_tensor x = kt_tensor_f32(kt_shape(3, 2, 5, 3), -1, 1, 11);
  k_slice_param p1 = {1, 1, 4, 1}, p0 = {0, 1, 2, 1}, p2 = {2, 0, 3, 1}, pe = {2, 1, 2, 1};
  /* strided: inner > 1 and inner == 1, up and down, a step that takes one element */
  k_slice_param s2 = {1, 0, 5, 2}, s3 = {2, 0, 3, 2}, n2 = {1, 1, 5, -2}, n1 = {2, 0, 3, -1}, s5 = {1, 2, 5, 5};
  kt_case cs[] = {
    one_input("slice axis 1 [1,4)", k_slice_forward, k_slice_backward, &x, kt_shape(3, 2, 3, 3), &p1),
    one_input("slice axis 0 [1,2)", k_slice_forward, k_slice_backward, &x, kt_shape(3, 1, 5, 3), &p0),
    one_input("slice axis 2 [0,3)", k_slice_forward, k_slice_backward, &x, kt_shape(3, 2, 5, 3), &p2),
    one_input("slice axis 2 [1,2)", k_slice_forward, k_slice_backward, &x, kt_shape(3, 2, 5, 1), &pe),
    one_input("slice axis 1 [0,5) step 2", k_slice_forward, k_slice_backward, &x, kt_shape(3, 2, 3, 3), &s2),
    one_input("slice axis 2 [0,3) step 2", k_slice_forward, k_slice_backward, &x, kt_shape(3, 2, 5, 2), &s3),
    one_input("slice axis 1 [1,5) step -2", k_slice_forward, k_slice_backward, &x, kt_shape(3, 2, 2, 3), &n2),
    one_input("slice axis 2 [0,3) step -1", k_slice_forward, k_slice_backward, &x, kt_shape(3, 2, 5, 3), &n1),
    one_input("slice axis 1 [2,5) step 5", k_slice_forward, k_slice_backward, &x, kt_shape(3, 2, 1, 3), &s5),
  };
  for (int i = 0; i < 9; i++) check_all(&cs[i], map_slice);
  kt_tensor_free(&x);
}

static void concat_case(int dim, k_shape s0, k_shape s1, k_shape s2, k_shape out) {
  static k_concat_param p[4];
  p[dim].dim = dim;
  kt_case c = {.name = "concat", .fwd = k_concat_forward, .bwd = k_concat_backward, .nargs = 3,
               .param = &p[dim]};
  k_shape s[3] = {s0, s1, s2};
  for (int k = 0; k < 3; k++) c.in[k] = kt_tensor_f32(s[k], -1, 1, 30 + 3 * dim + k);
  c.out_shape[0] = out;
  check_all(&c, map_concat);
  for (int k = 0; k < 3; k++) kt_tensor_free(&c.in[k]);
}

static void test_concat(void) {
  concat_case(0, kt_shape(3, 1, 3, 4), kt_shape(3, 2, 3, 4), kt_shape(3, 3, 3, 4), kt_shape(3, 6, 3, 4));
  concat_case(1, kt_shape(3, 2, 1, 4), kt_shape(3, 2, 3, 4), kt_shape(3, 2, 2, 4), kt_shape(3, 2, 6, 4));
  concat_case(2, kt_shape(3, 2, 3, 1), kt_shape(3, 2, 3, 2), kt_shape(3, 2, 3, 3), kt_shape(3, 2, 3, 6));
  concat_case(0, kt_shape(1, 2), kt_shape(1, 1), kt_shape(1, 4), kt_shape(1, 7));
}

/* Normalised params (every axis, last first): constant with padding, cropping and both,
 * reflect and replicate on every axis, and a rank-1 tensor. */
static void test_pad(void) {
  k_tensor x = kt_tensor_f32(kt_shape(3, 3, 4, 5), -1, 1, 40), v = kt_tensor_f32(kt_shape(1, 6), -1, 1, 41);
  k_pad_param pc = {{6, {1, 2, 0, 3, 2, 0}}, K_PAD_CONSTANT, 0.5f};
  k_pad_param pn = {{6, {-1, 2, -2, 0, 0, -1}}, K_PAD_CONSTANT, -1.0f};
  k_pad_param pr = {{6, {2, 4, 3, 1, 1, 2}}, K_PAD_REFLECT, 0};
  k_pad_param pe = {{6, {3, 0, 5, 2, 0, 4}}, K_PAD_REPLICATE, 0};
  k_pad_param p1 = {{2, {-2, 3}}, K_PAD_CONSTANT, 2.0f}, p1r = {{2, {5, 4}}, K_PAD_REFLECT, 0};
  kt_case cs[] = {
    one_input("pad constant", k_pad_forward, k_pad_backward, &x, kt_shape(3, 5, 7, 8), &pc),
    one_input("pad constant cropping", k_pad_forward, k_pad_backward, &x, kt_shape(3, 2, 2, 6), &pn),
    one_input("pad reflect", k_pad_forward, k_pad_backward, &x, kt_shape(3, 6, 8, 11), &pr),
    one_input("pad replicate", k_pad_forward, k_pad_backward, &x, kt_shape(3, 7, 11, 8), &pe),
    one_input("pad 1-D", k_pad_forward, k_pad_backward, &v, kt_shape(1, 7), &p1),
    one_input("pad 1-D reflect", k_pad_forward, k_pad_backward, &v, kt_shape(1, 15), &p1r),
  };
  for (int i = 0; i < 6; i++) check_all(&cs[i], map_pad);
  kt_tensor_free(&x); kt_tensor_free(&v);
}

int main(void) {
  test_copies();
  test_transpose();
  test_transpose_all_perms();
  test_transpose_large();
  test_transpose_runs();
  test_broadcast_to();
  test_slice();
  test_concat();
  test_pad();
  return kt_finish("layout");
}
