/* test_null.c — every entry point of include/kiln.h that can fail, given NULL where it needs
 * an object or a pointer (and, with valid objects, NULL for each other pointer argument),
 * returns KILN_ERR with a message naming the call or the argument, and never crashes. The
 * free functions accept NULL. tests/api/test_graph.c and test_array.c check wrong shapes. */
#include <string.h>

#include "kiln.h"
#include "kiln_test.h"

/* A failure with a message; a successful call clears the message first, so an old one
 * cannot pass for the new one. */
static kiln_attrs *clearer;
static void clear_error(void) {
  kiln_attrs_int(clearer, "k", 1);
  CHECK(*kiln_last_error() == 0, "a successful call clears the message");
}
#define REFUSED(call) do { clear_error(); int rc_ = (call); \
    CHECK(rc_ == KILN_ERR && *kiln_last_error(), "%s: rc %d, message '%s'", #call, rc_, kiln_last_error()); } while (0)

static void test_without_objects(void) {
  int64_t d[2] = {2, 2}, h, m;
  int rank;
  float f = 0;
  const char *in[] = {"x"};
  REFUSED(kiln_attrs_new(NULL));
  REFUSED(kiln_attrs_int(NULL, "k", 1));
  REFUSED(kiln_attrs_float(NULL, "k", 1));
  REFUSED(kiln_attrs_bool(NULL, "k", 1));
  REFUSED(kiln_attrs_str(NULL, "k", "v"));
  REFUSED(kiln_attrs_ints(NULL, "k", 2, d));
  REFUSED(kiln_attrs_parse(NULL, "k", "1"));
  REFUSED(kiln_graph_new("g", NULL));
  REFUSED(kiln_graph_load(NULL, NULL, NULL));
  REFUSED(kiln_graph_load_dims(NULL, NULL, 0, NULL, NULL, NULL));
  REFUSED(kiln_graph_dim(NULL, "n", 1));
  REFUSED(kiln_graph_input(NULL, "x", KILN_F32, 2, d, NULL));
  REFUSED(kiln_graph_op(NULL, "y", "relu", 1, in, NULL));
  REFUSED(kiln_graph_param(NULL, "w", KILN_F32, 2, d, NULL, NULL));
  REFUSED(kiln_graph_const(NULL, "w", KILN_F32, 2, d, NULL, NULL));
  REFUSED(kiln_graph_output(NULL, "y"));
  REFUSED(kiln_graph_train(NULL, "y", "sgd", NULL));
  REFUSED(kiln_graph_train_ex(NULL, "y", "sgd", NULL, &(kiln_train_options){0}));
  REFUSED(kiln_graph_shape(NULL, "y", NULL, &rank, d));
  REFUSED(kiln_graph_text(NULL, NULL));
  REFUSED(kiln_graph_compile(NULL, "x.so", 2));
  REFUSED(kiln_graph_jit(NULL, 0, NULL));
  REFUSED(kiln_model_predict(NULL, NULL, NULL));
  REFUSED(kiln_model_train_step(NULL, NULL, &f));
  REFUSED(kiln_model_set_lr(NULL, 0.1f));
  REFUSED(kiln_model_lr(NULL, &(float){0}));
  REFUSED(kiln_model_save_state(NULL, "x"));
  REFUSED(kiln_model_load_state(NULL, "x"));
  REFUSED(kiln_model_load(NULL, "w.safetensors"));
  REFUSED(kiln_model_save(NULL, "w.safetensors"));
  REFUSED(kiln_model_count(NULL, 0, &rank, &rank));
  REFUSED(kiln_model_tensor(NULL, 0, 0, 0, NULL, NULL, NULL, NULL));
  REFUSED(kiln_session_new(NULL));
  REFUSED(kiln_session_cache_stats(NULL, &h, &m));
  REFUSED(kiln_session_seed(NULL, 1));
  REFUSED(kiln_array_from_data(NULL, KILN_F32, 2, d, &f, NULL));
  REFUSED(kiln_array_load_npy(NULL, NULL, NULL));
  REFUSED(kiln_array_zeros(NULL, KILN_F32, 2, d, NULL));
  REFUSED(kiln_array_ones(NULL, KILN_F32, 2, d, NULL));
  REFUSED(kiln_array_uniform(NULL, 2, d, 0, 1, 0, NULL));
  REFUSED(kiln_array_normal(NULL, 2, d, 0, 1, 0, NULL));
  REFUSED(kiln_array_op(NULL, "relu", 0, NULL, NULL, NULL));
  REFUSED(kiln_array_shape(NULL, NULL, &rank, d));
  REFUSED(kiln_array_is_lazy(NULL, NULL));
  REFUSED(kiln_array_eval(NULL, 0, NULL));
  REFUSED(kiln_grad(NULL, 0, NULL, NULL));
  REFUSED(kiln_graph_predict_arrays(NULL, NULL, 0, NULL, 0, NULL, NULL, 1, NULL));
  REFUSED(kiln_array_read(NULL, &f, 4));
  REFUSED(kiln_array_save_npy(NULL, "x.npy"));
  REFUSED(kiln_export(NULL, "m.kiln", "m.safetensors", "m", 0, NULL, NULL, 0, NULL, NULL));
  kiln_attrs_free(NULL), kiln_graph_free(NULL), kiln_model_free(NULL), kiln_session_free(NULL), kiln_array_free(NULL), kiln_free(NULL);
  CHECK(kiln_version() && *kiln_version(), "a version");
}

/* Valid objects, NULL in each other pointer argument. */
static void test_with_objects(void) {
  kiln_attrs *a = NULL;
  kiln_graph *g = NULL;
  kiln_model *md = NULL;
  kiln_session *s = NULL;
  kiln_array *x = NULL, *y = NULL;
  int64_t d[2] = {2, 2};
  int rank, n1, n2;
  float v[4] = {1, 2, 3, 4};
  CHECK(!kiln_attrs_new(&a) && !kiln_graph_new("g", &g) && !kiln_session_new(&s), "objects");
  REFUSED(kiln_attrs_int(a, NULL, 1));
  REFUSED(kiln_attrs_str(a, "k", NULL));
  REFUSED(kiln_attrs_ints(a, "k", 2, NULL));
  REFUSED(kiln_attrs_parse(a, "k", NULL));
  REFUSED(kiln_graph_dim(g, NULL, 1));
  REFUSED(kiln_graph_input(g, NULL, KILN_F32, 2, d, NULL));
  REFUSED(kiln_graph_input(g, "x", KILN_F32, 2, NULL, NULL));
  CHECK(!kiln_graph_input(g, "x", KILN_F32, 2, d, NULL), "input");
  REFUSED(kiln_graph_op(g, NULL, "relu", 1, (const char *[]){"x"}, NULL));
  REFUSED(kiln_graph_op(g, "y", NULL, 1, (const char *[]){"x"}, NULL));
  REFUSED(kiln_graph_op(g, "y", "relu", 1, NULL, NULL));
  REFUSED(kiln_graph_op(g, "y", "relu", 1, (const char *[]){NULL}, NULL));
  REFUSED(kiln_graph_param(g, NULL, KILN_F32, 2, d, NULL, NULL));
  REFUSED(kiln_graph_const(g, NULL, KILN_F32, 2, d, NULL, NULL));
  REFUSED(kiln_graph_output(g, NULL));
  REFUSED(kiln_graph_train(g, NULL, "sgd", NULL));
  REFUSED(kiln_graph_train(g, "x", NULL, NULL));
  REFUSED(kiln_graph_train_ex(g, NULL, "sgd", NULL, &(kiln_train_options){.schedule = NULL}));
  REFUSED(kiln_graph_shape(g, NULL, NULL, &rank, d));
  REFUSED(kiln_graph_shape(g, "x", NULL, NULL, d));
  REFUSED(kiln_graph_text(g, NULL));
  REFUSED(kiln_graph_compile(g, NULL, 2));
  REFUSED(kiln_graph_jit(g, 0, NULL));
  CHECK(!kiln_graph_op(g, "y", "relu", 1, (const char *[]){"x"}, NULL) && !kiln_graph_output(g, "y") && !kiln_graph_jit(g, 0, &md), "jit");
  REFUSED(kiln_model_predict(md, NULL, NULL));
  REFUSED(kiln_model_predict(md, (const void *[]){NULL}, (void *[]){v}));
  REFUSED(kiln_model_train_step(md, (const void *[]){v}, NULL));
  REFUSED(kiln_model_load(md, NULL));
  REFUSED(kiln_model_save(md, NULL));
  REFUSED(kiln_model_count(md, 0, NULL, &n2));
  REFUSED(kiln_model_count(md, 1, &n1, &n2));          /* no train statement */
  REFUSED(kiln_model_tensor(md, 0, 0, 5, NULL, NULL, NULL, NULL));
  REFUSED(kiln_session_cache_stats(s, NULL, NULL));
  REFUSED(kiln_array_from_data(s, KILN_F32, 2, d, NULL, &x));
  REFUSED(kiln_array_from_data(s, KILN_F32, 2, NULL, v, &x));
  REFUSED(kiln_array_load_npy(s, NULL, &x));
  REFUSED(kiln_array_zeros(s, KILN_F32, 2, NULL, &x));
  CHECK(!kiln_array_from_data(s, KILN_F32, 2, d, v, &x), "array");
  REFUSED(kiln_array_op(s, NULL, 1, &x, NULL, &y));
  REFUSED(kiln_array_op(s, "relu", 1, NULL, NULL, &y));
  REFUSED(kiln_array_op(s, "relu", 1, &x, NULL, NULL));
  REFUSED(kiln_array_shape(x, NULL, NULL, d));
  REFUSED(kiln_array_is_lazy(x, NULL));
  REFUSED(kiln_array_eval(s, 1, NULL));
  REFUSED(kiln_grad(x, 1, NULL, &y));
  REFUSED(kiln_graph_predict_arrays(g, NULL, 1, &x, 0, NULL, NULL, 1, &y));
  REFUSED(kiln_graph_predict_arrays(g, s, 1, NULL, 0, NULL, NULL, 1, &y));
  REFUSED(kiln_graph_predict_arrays(g, s, 1, (kiln_array *[]){NULL}, 0, NULL, NULL, 1, &y));
  REFUSED(kiln_graph_predict_arrays(g, s, 1, &x, 1, NULL, NULL, 1, &y));
  REFUSED(kiln_graph_predict_arrays(g, s, 1, &x, 0, NULL, NULL, 1, NULL));
  REFUSED(kiln_array_read(x, NULL, 16));
  REFUSED(kiln_array_save_npy(x, NULL));
  REFUSED(kiln_export(s, NULL, "w", "m", 1, &x, (const char *[]){"x"}, 0, NULL, NULL));
  REFUSED(kiln_export(s, "m.kiln", "w", "m", 1, NULL, NULL, 0, NULL, NULL));
  kiln_model_free(md), kiln_graph_free(g), kiln_attrs_free(a), kiln_session_free(s);
}

int main(void) {
  if (kiln_attrs_new(&clearer)) return 1;
  test_without_objects();
  test_with_objects();
  kiln_attrs_free(clearer);
  return ts_summary("api.test_null");
}
