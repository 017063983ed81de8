/* test_threads.c — the C API from several threads at once: each thread has a session of its
 * own (compiles and runs in parallel), all of them share one more session and one graph
 * (calls serialised by their locks), and each thread's last error stays its own. */
#include <pthread.h>
#include <string.h>

#include "kiln.h"
#include "kiln_test.h"

enum { NTHREADS = 4, ITERS = 20 };

typedef struct { kiln_session *shared; kiln_graph *g; int id; int failures; } job;

/* tanh(x * k) + x on a session, read back and checked against C. */
static int one_eval(kiln_session *s, int id, int it) {
  float x[6], out[6], k = (float)(id + 1);
  for (int i = 0; i < 6; i++) x[i] = (float)(i + it) / 7.0f;
  kiln_array *a = NULL, *c = NULL, *m = NULL, *t = NULL, *r = NULL;
  int rc = kiln_array_from_data(s, KILN_F32, 1, (int64_t[]){6}, x, &a) || kiln_array_from_data(s, KILN_F32, 0, NULL, &k, &c) ||
           kiln_array_op(s, "mul", 2, (kiln_array *[]){a, c}, NULL, &m) || kiln_array_op(s, "tanh", 1, &m, NULL, &t) ||
           kiln_array_op(s, "add", 2, (kiln_array *[]){t, a}, NULL, &r) || kiln_array_read(r, out, sizeof out);
  for (int i = 0; !rc && i < 6; i++) rc = out[i] < x[i] || out[i] > x[i] + 1.0f;
  kiln_array_free(r), kiln_array_free(t), kiln_array_free(m), kiln_array_free(c), kiln_array_free(a);
  return rc;
}

static void *worker(void *arg) {
  job *j = arg;
  kiln_session *own = NULL;
  if (kiln_session_new(&own)) return j->failures++, NULL;
  for (int it = 0; it < ITERS; it++) {
    j->failures += one_eval(own, j->id, it) + one_eval(j->shared, j->id, it);
    int rank = 0;
    int64_t d[KILN_MAX_RANK];
    j->failures += kiln_graph_shape(j->g, "h", NULL, &rank, d) || rank != 2;
    /* this thread's error stays this thread's */
    char name[32];
    snprintf(name, sizeof name, "missing_%d", j->id);
    j->failures += !kiln_graph_shape(j->g, name, NULL, &rank, d) || !strstr(kiln_last_error(), name);
  }
  kiln_session_free(own);
  return NULL;
}

int main(void) {
  kiln_session *shared = NULL;
  kiln_graph *g = NULL;
  kiln_attrs *a = NULL;
  CHECK(!kiln_session_new(&shared) && !kiln_graph_new("t", &g) && !kiln_graph_input(g, "x", KILN_F32, 2, (int64_t[]){3, 4}, NULL) &&
        !kiln_attrs_new(&a) && !kiln_attrs_int(a, "num_hidden", 2) && !kiln_graph_op(g, "h", "fully_connected", 1, (const char *[]){"x"}, a),
        "setup: %s", kiln_last_error());
  pthread_t th[NTHREADS];
  job jobs[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    jobs[i] = (job){shared, g, i, 0};
    pthread_create(&th[i], NULL, worker, &jobs[i]);
  }
  for (int i = 0; i < NTHREADS; i++) {
    pthread_join(th[i], NULL);
    CHECK(jobs[i].failures == 0, "thread %d: %d failures", i, jobs[i].failures);
  }
  int64_t hits = 0, misses = 0;
  kiln_session_cache_stats(shared, &hits, &misses);
  CHECK(misses == 1 && hits == NTHREADS * ITERS - 1, "the shared session compiled once (%lld hits, %lld misses)",
        (long long)hits, (long long)misses);
  kiln_attrs_free(a), kiln_graph_free(g), kiln_session_free(shared);
  return ts_summary("api.test_threads");
}
