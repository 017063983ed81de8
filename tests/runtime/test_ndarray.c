/* test_ndarray.c — NDArray on both engines: host round trips, engine-ordered copies, views
 * sharing a chunk, deferred freeing through the engine, errors surfacing at the host copy,
 * and rejected shapes and contexts. */
#include <stdint.h>
#include <string.h>

#include "rt_test.h"
#include "runtime.h"

static const rt_ctx CPU = {RT_CPU, 0};

static int fail_fn(void *arg, rt_run_ctx *rc) {
  rt_errf(rc->err, rc->err_len, "kernel failed on %s", (const char *)arg);
  return 2;
}

static int scale_fn(void *arg, rt_run_ctx *rc) {
  nd_array *a = arg;
  float *p = nd_data(a);
  for (int64_t i = 0; i < nd_numel(a); i++) p[i] *= 2.0f;
  return 0;
}

static void test_round_trip(rt_engine *e) {
  rt_storage_stats s0, s1;
  rt_storage_get_stats(rt_storage_default(CPU), &s0);
  k_shape sh = {3, {2, 3, 4}};
  nd_array *a = nd_create(e, CPU, K_F32, &sh), *b = nd_create(e, CPU, K_F32, &sh);
  CHECK(a && b && nd_numel(a) == 24 && nd_nbytes(a) == 96, "create");
  CHECK(((uintptr_t)nd_data(a) & 63) == 0, "aligned");
  float in[24], out[24];
  for (int i = 0; i < 24; i++) in[i] = (float)i * 0.5f;
  char msg[RT_ERR_LEN];
  CHECK(nd_copy_from_host(a, in, sizeof in, msg, sizeof msg) == 0, "from host");
  CHECK(nd_copy(b, a, msg, sizeof msg) == 0, "copy pushed");
  rt_var *bv = nd_var(b);
  rt_engine_push_sync(e, scale_fn, b, NULL, 0, &bv, 1);  /* ordered after the copy */
  CHECK(nd_copy_to_host(b, out, sizeof out, msg, sizeof msg) == 0, "to host");
  int ok = 1;
  for (int i = 0; i < 24; i++) ok &= out[i] == in[i] * 2.0f;
  CHECK(ok, "copy then scale, in push order");
  k_tensor t = nd_tensor(a);
  CHECK(t.data == nd_data(a) && t.dtype == K_F32 && t.shape.rank == 3 && t.shape.d[2] == 4, "tensor");

  k_shape flat = {1, {24}}, wrong = {1, {25}};
  nd_array *v = nd_reshape(a, &flat);
  CHECK(v && nd_data(v) == nd_data(a) && nd_var(v) == nd_var(a), "view shares chunk and var");
  CHECK(nd_reshape(a, &wrong) == NULL, "reshape must keep the size");
  nd_free(a);  /* the view keeps the chunk alive */
  CHECK(nd_copy_to_host(v, out, sizeof out, msg, sizeof msg) == 0 && out[5] == in[5], "view alive");
  CHECK(nd_copy_to_host(v, out, 8, msg, sizeof msg) == -1 && strstr(msg, "96"), "size check: %s", msg);
  nd_free(v);
  nd_free(b);
  CHECK(rt_engine_wait_for_all(e, NULL, 0) == 0, "clean");
  rt_storage_get_stats(rt_storage_default(CPU), &s1);
  CHECK(s1.bytes_in_use == s0.bytes_in_use, "memory back after free: %zu vs %zu", s1.bytes_in_use, s0.bytes_in_use);
  CHECK(rt_engine_num_vars(e) == 0, "vars deleted");
}

static void test_errors(rt_engine *e) {
  k_shape sh = {2, {4, 4}};
  nd_array *a = nd_create(e, CPU, K_I32, &sh), *b = nd_create(e, CPU, K_F32, &sh);
  char msg[RT_ERR_LEN];
  int32_t buf[16] = {0};
  rt_var *av = nd_var(a);
  rt_engine_push_sync(e, fail_fn, "a", NULL, 0, &av, 1);
  CHECK(nd_copy_to_host(a, buf, sizeof buf, msg, sizeof msg) == 2, "error surfaces");
  CHECK(strcmp(msg, "kernel failed on a") == 0, "message: %s", msg);
  CHECK(nd_copy_from_host(a, buf, sizeof buf, msg, sizeof msg) == 0, "reported once, then usable");
  CHECK(nd_copy(b, a, msg, sizeof msg) == -1 && strstr(msg, "I32"), "dtype mismatch: %s", msg);
  rt_engine_push_sync(e, fail_fn, "a", NULL, 0, &av, 1);
  nd_free(a);  /* freed even though its last function failed */
  nd_free(b);
  CHECK(rt_engine_wait_for_all(e, msg, sizeof msg) == 2, "failure seen by wait_for_all");
  CHECK(rt_engine_num_vars(e) == 0, "vars deleted after failure");
}

static void test_bad_shapes(rt_engine *e) {
  k_shape rank7 = {7, {1, 1, 1, 1, 1, 1}}, neg = {2, {3, -1}};
  k_shape huge = {4, {1 << 20, 1 << 20, 1 << 20, 1 << 20}}, ok = {0, {0}};
  CHECK(nd_create(e, CPU, K_F32, &rank7) == NULL, "rank 7");
  CHECK(nd_create(e, CPU, K_F32, &neg) == NULL, "negative dim");
  CHECK(nd_create(e, CPU, K_F32, &huge) == NULL, "size overflow");
  CHECK(nd_create(e, (rt_ctx){RT_GPU, 0}, K_F32, &ok) == NULL, "no GPU context yet");
  CHECK(nd_create(e, CPU, (k_dtype)9, &ok) == NULL, "unknown dtype");
  nd_array *s = nd_create(e, CPU, K_F32, &ok);
  CHECK(s && nd_numel(s) == 1 && nd_nbytes(s) == 4, "scalar");
  k_shape empty = {2, {0, 5}};
  nd_array *z = nd_create(e, CPU, K_F32, &empty);
  CHECK(z && nd_nbytes(z) == 0 && nd_data(z) != NULL, "empty array still has a chunk");
  nd_free(s);
  nd_free(z);
  rt_engine_wait_for_all(e, NULL, 0);
}

int main(void) {
  rt_engine *e[2] = {rt_engine_create(RT_ENGINE_NAIVE, 0), rt_engine_create(RT_ENGINE_THREADED, 3)};
  for (int i = 0; i < 2; i++) {
    test_round_trip(e[i]);
    test_errors(e[i]);
    test_bad_shapes(e[i]);
    rt_engine_destroy(e[i]);
  }
  return rt_test_done("ndarray");
}
