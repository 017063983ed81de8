/* test_engine.c — the dependency engine against a serial replay: random push sequences on
 * both engines and several worker counts must give every writer its push-order turn and
 * every reader exactly the write pushed before it. Also errors, push_delete, operators. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "k_parallel.h"
#include "rt_test.h"
#include "runtime.h"

#define NVARS 50
#define NOPS 2000
#define MAXC 4
#define MAXM 3

/* ---- a helper thread that completes async functions, as an I/O thread would ---------- */

typedef struct job { void (*body)(void *); void *arg; rt_run_ctx *rc; int status; struct job *next; } job;
static pthread_mutex_t cq_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cq_cv = PTHREAD_COND_INITIALIZER;
static job *cq_head;
static int cq_stop;

static void *completer_main(void *unused) {
  pthread_mutex_lock(&cq_mu);
  for (;;) {
    while (!cq_head && !cq_stop) pthread_cond_wait(&cq_cv, &cq_mu);
    if (!cq_head) break;
    job *j = cq_head;
    cq_head = j->next;
    pthread_mutex_unlock(&cq_mu);
    if (j->body) j->body(j->arg);
    rt_engine_complete(j->rc, j->status);
    free(j);
    pthread_mutex_lock(&cq_mu);
  }
  pthread_mutex_unlock(&cq_mu);
  return NULL;
}

static void hand_off(void (*body)(void *), void *arg, rt_run_ctx *rc, int status) {
  job *j = calloc(1, sizeof *j);
  *j = (job){body, arg, rc, status, NULL};
  pthread_mutex_lock(&cq_mu);
  j->next = cq_head;  /* LIFO on purpose: completions come back out of order */
  cq_head = j;
  pthread_cond_signal(&cq_cv);
  pthread_mutex_unlock(&cq_mu);
}

/* ---- the randomized ordering test ----------------------------------------------------- */

typedef struct {
  int id, nc, nm, async, spin;
  int cv[MAXC], mv[MAXM];
  int seen_c[MAXC], seen_m[MAXM];
} op_rec;

/* Plain ints on purpose: if the engine let a reader overlap a writer, ThreadSanitizer
 * reports the race and the replay check sees a wrong value. */
static int var_value[NVARS];
static int var_log[NVARS][NOPS];
static int var_log_n[NVARS];
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

static void op_body(void *arg) {
  op_rec *o = arg;
  for (int j = 0; j < o->nc; j++) o->seen_c[j] = var_value[o->cv[j]];
  volatile int sink = 0;
  for (int k = 0; k < o->spin; k++) sink += k;
  for (int j = 0; j < o->nm; j++) {
    o->seen_m[j] = var_value[o->mv[j]];
    var_value[o->mv[j]] = o->id + 1;
    pthread_mutex_lock(&log_mu);
    var_log[o->mv[j]][var_log_n[o->mv[j]]++] = o->id;
    pthread_mutex_unlock(&log_mu);
  }
}

static int op_sync(void *arg, rt_run_ctx *rc) {
  op_body(arg);
  return 0;
}

static void op_async(void *arg, rt_run_ctx *rc) { hand_off(op_body, arg, rc, 0); }

static int contains(const int *a, int n, int x) {
  for (int i = 0; i < n; i++)
    if (a[i] == x) return 1;
  return 0;
}

static void make_ops(op_rec *ops, unsigned long long seed) {
  for (int i = 0; i < NOPS; i++) {
    op_rec *o = &ops[i];
    memset(o, 0, sizeof *o);
    o->id = i;
    o->nc = (int)(rt_test_rand(&seed) % (MAXC + 1));
    o->nm = (int)(rt_test_rand(&seed) % (MAXM + 1));
    for (int j = 0; j < o->nm; j++) {
      int v;
      do v = (int)(rt_test_rand(&seed) % NVARS); while (contains(o->mv, j, v));
      o->mv[j] = v;
    }
    /* const vars may repeat and may also be mutated: the engine must dedupe them */
    for (int j = 0; j < o->nc; j++) o->cv[j] = (int)(rt_test_rand(&seed) % NVARS);
    o->async = rt_test_rand(&seed) % 4 == 0;
    o->spin = rt_test_rand(&seed) % 8 == 0 ? 2000 : 0;
  }
}

static void push_op(rt_engine *e, rt_var **vars, op_rec *o) {
  rt_var *cv[MAXC], *mv[MAXM];
  for (int j = 0; j < o->nc; j++) cv[j] = vars[o->cv[j]];
  for (int j = 0; j < o->nm; j++) mv[j] = vars[o->mv[j]];
  if (o->async) rt_engine_push_async(e, op_async, o, cv, o->nc, mv, o->nm);
  else rt_engine_push_sync(e, op_sync, o, cv, o->nc, mv, o->nm);
}

/* Serial replay: what each op must have seen, and each variable's writers in push order. */
static int replay_check(const op_rec *ops) {
  int last[NVARS], bad = 0;
  static int want_log[NVARS][NOPS];
  int want_n[NVARS] = {0};
  for (int v = 0; v < NVARS; v++) last[v] = 0;
  for (int i = 0; i < NOPS && bad < 5; i++) {
    const op_rec *o = &ops[i];
    for (int j = 0; j < o->nc; j++)
      if (o->seen_c[j] != last[o->cv[j]]) bad++, fprintf(stderr, "op %d read var %d: saw %d want %d\n", i, o->cv[j], o->seen_c[j], last[o->cv[j]]);
    for (int j = 0; j < o->nm; j++) {
      if (o->seen_m[j] != last[o->mv[j]]) bad++, fprintf(stderr, "op %d wrote var %d after %d want %d\n", i, o->mv[j], o->seen_m[j], last[o->mv[j]]);
      last[o->mv[j]] = i + 1;
      want_log[o->mv[j]][want_n[o->mv[j]]++] = i;
    }
  }
  for (int v = 0; v < NVARS && !bad; v++)
    if (want_n[v] != var_log_n[v] || memcmp(want_log[v], var_log[v], sizeof(int) * (size_t)want_n[v]))
      bad++, fprintf(stderr, "var %d: writers ran out of push order\n", v);
  return bad;
}

static void test_random(rt_engine_kind kind, int nthreads, unsigned long long seed) {
  static op_rec ops[NOPS];
  make_ops(ops, seed);
  memset(var_value, 0, sizeof var_value);
  memset(var_log_n, 0, sizeof var_log_n);
  rt_engine *e = rt_engine_create(kind, nthreads);
  rt_var *vars[NVARS];
  for (int v = 0; v < NVARS; v++) vars[v] = rt_engine_new_var(e);
  int wait_bad = 0;
  for (int i = 0; i < NOPS; i++) {
    push_op(e, vars, &ops[i]);
    if (i % 250 == 249) {  /* wait_for_var mid-stream: that var must hold its last write */
      int v = (int)(seed % NVARS), want = 0;
      for (int k = 0; k <= i; k++)
        if (contains(ops[k].mv, ops[k].nm, v)) want = k + 1;
      CHECK(rt_engine_wait_for_var(e, vars[v], NULL, 0) == 0, "wait_for_var status");
      pthread_mutex_lock(&log_mu);  /* the lock only orders this read for the checker */
      wait_bad += var_value[v] != want;
      pthread_mutex_unlock(&log_mu);
    }
  }
  CHECK(wait_bad == 0, "wait_for_var returned before the var's last writer (kind %d, %d threads)", kind, nthreads);
  CHECK(rt_engine_wait_for_all(e, NULL, 0) == 0, "wait_for_all status");
  CHECK(replay_check(ops) == 0, "replay mismatch (kind %d, %d threads, seed %llu)", kind, nthreads, seed);
  for (int v = 0; v < NVARS; v++) rt_engine_push_delete(e, vars[v]);
  rt_engine_wait_for_all(e, NULL, 0);
  CHECK(rt_engine_num_vars(e) == 0, "vars left after push_delete: %d", rt_engine_num_vars(e));
  rt_engine_destroy(e);
}

/* ---- errors --------------------------------------------------------------------------- */

typedef struct { int status; const char *msg; atomic_int ran; } err_op;

static int err_fn(void *arg, rt_run_ctx *rc) {
  err_op *o = arg;
  atomic_fetch_add(&o->ran, 1);
  if (o->msg) rt_errf(rc->err, rc->err_len, "%s", o->msg);
  return o->status;
}

static void err_async(void *arg, rt_run_ctx *rc) {
  err_op *o = arg;
  atomic_fetch_add(&o->ran, 1);
  if (o->msg) rt_errf(rc->err, rc->err_len, "%s", o->msg);
  hand_off(NULL, NULL, rc, o->status);
}

static void test_errors(rt_engine_kind kind) {
  rt_engine *e = rt_engine_create(kind, 3);
  rt_var *a = rt_engine_new_var(e), *b = rt_engine_new_var(e), *c = rt_engine_new_var(e),
         *d = rt_engine_new_var(e);
  err_op fail = {7, "boom", 0}, rb = {0, NULL, 0}, rc_ = {0, NULL, 0}, rd = {0, NULL, 0};
  char msg[RT_ERR_LEN];
  rt_engine_push_sync(e, err_fn, &fail, NULL, 0, &a, 1);
  rt_engine_push_sync(e, err_fn, &rb, &a, 1, &b, 1);   /* reads a failed var: skipped */
  rt_engine_push_sync(e, err_fn, &rc_, NULL, 0, &c, 1);  /* independent: runs */
  rt_engine_push_sync(e, err_fn, &rd, &b, 1, &d, 1);   /* transitively skipped */
  CHECK(rt_engine_wait_for_var(e, d, msg, sizeof msg) == 7, "d carries the failure");
  CHECK(strcmp(msg, "boom") == 0, "message '%s'", msg);
  CHECK(rt_engine_wait_for_var(e, c, msg, sizeof msg) == 0 && msg[0] == 0, "c is clean");
  CHECK(rt_engine_wait_for_var(e, a, msg, sizeof msg) == 7, "a failed");
  CHECK(fail.ran == 1 && rb.ran == 0 && rc_.ran == 1 && rd.ran == 0, "ran %d %d %d %d",
        fail.ran, rb.ran, rc_.ran, rd.ran);
  CHECK(rt_engine_wait_for_all(e, msg, sizeof msg) == 0, "already reported by wait_for_var");
  CHECK(rt_engine_wait_for_var(e, b, msg, sizeof msg) == 0, "wait_for_all cleared b");
  rt_engine_push_sync(e, err_fn, &rb, NULL, 0, &a, 1);  /* a rewritten after the report */
  CHECK(rt_engine_wait_for_var(e, a, NULL, 0) == 0 && rb.ran == 1, "a usable again");

  /* two failures: wait_for_all reports the first in push order; default message */
  err_op f3 = {3, NULL, 0}, f5 = {5, "five", 0};
  rt_engine_push_async(e, err_async, &f5, NULL, 0, &b, 1);
  rt_engine_push_sync(e, err_fn, &f3, NULL, 0, &c, 1);
  CHECK(rt_engine_wait_for_all(e, msg, sizeof msg) == 5, "first pushed failure wins");
  CHECK(strcmp(msg, "five") == 0, "message '%s'", msg);
  CHECK(rt_engine_wait_for_all(e, msg, sizeof msg) == 0, "errors cleared");
  rt_engine_push_sync(e, err_fn, &f3, NULL, 0, &c, 1);
  CHECK(rt_engine_wait_for_var(e, c, msg, sizeof msg) == 3, "status 3");
  CHECK(strcmp(msg, "function failed with status 3") == 0, "default message '%s'", msg);

  /* push_delete of a failed variable still frees it */
  rt_engine_push_sync(e, err_fn, &fail, NULL, 0, &d, 1);
  rt_engine_push_delete(e, d);
  CHECK(rt_engine_wait_for_all(e, msg, sizeof msg) == 7, "failure before delete reported");
  CHECK(rt_engine_num_vars(e) == 3, "d deleted: %d vars", rt_engine_num_vars(e));
  rt_engine_destroy(e);
}

/* ---- push_delete, operators, wait_for_var, shutdown ----------------------------------- */

typedef struct { int count; int reads[400]; atomic_int nreads; } counter;

static int inc_fn(void *arg, rt_run_ctx *rc) {
  counter *c = arg;
  if (c->count % 37 == 0) usleep(200);
  c->count++;
  return 0;
}

static int read_fn(void *arg, rt_run_ctx *rc) {
  counter *c = arg;
  c->reads[atomic_fetch_add(&c->nreads, 1)] = c->count;
  return 0;
}

static int cmp_int(const void *x, const void *y) { return *(const int *)x - *(const int *)y; }

static void test_operators(rt_engine_kind kind, int nthreads) {
  rt_engine *e = rt_engine_create(kind, nthreads);
  rt_var *v = rt_engine_new_var(e);
  counter c = {0};
  rt_opr *inc = rt_engine_new_operator(e, inc_fn, &c, NULL, 0, &v, 1);
  rt_opr *rd = rt_engine_new_operator(e, read_fn, &c, &v, 1, NULL, 0);
  int want[400], nw = 0, incs = 0;
  for (int i = 0; i < 600; i++) {
    if (i % 3 == 2) {
      rt_engine_push_operator(e, rd);
      want[nw++] = incs;
    } else {
      rt_engine_push_operator(e, inc);
      incs++;
    }
  }
  rt_engine_delete_operator(e, inc);  /* while pushes are pending: freed after the last */
  rt_engine_delete_operator(e, rd);
  CHECK(rt_engine_wait_for_var(e, v, NULL, 0) == 0, "status");
  CHECK(c.count == incs, "count %d want %d", c.count, incs);
  qsort(c.reads, (size_t)nw, sizeof(int), cmp_int);  /* readers between two writers may swap */
  CHECK(c.nreads == nw && memcmp(c.reads, want, sizeof(int) * (size_t)nw) == 0, "reader values");

  /* push_delete: the var outlives its pending work, then goes */
  counter c2 = {0};
  rt_var *w = rt_engine_new_var(e);
  for (int i = 0; i < 100; i++) rt_engine_push_sync(e, inc_fn, &c2, NULL, 0, &w, 1);
  rt_engine_push_delete(e, w);
  rt_engine_wait_for_all(e, NULL, 0);
  CHECK(c2.count == 100 && rt_engine_num_vars(e) == 1, "delete after work: %d, %d vars",
        c2.count, rt_engine_num_vars(e));

  /* destroy with work pending: it waits, runs everything, joins */
  counter c3 = {0};
  rt_var *x = rt_engine_new_var(e);
  for (int i = 0; i < 50; i++) rt_engine_push_sync(e, inc_fn, &c3, NULL, 0, &x, 1);
  rt_opr *never_deleted = rt_engine_new_operator(e, inc_fn, &c3, NULL, 0, &x, 1);
  rt_engine_push_operator(e, never_deleted);
  rt_engine_destroy(e);  /* frees v, x and the operator */
  CHECK(c3.count == 51, "destroy ran pending work: %d", c3.count);
}

/* ---- readers run together; an async function frees its worker ------------------------ */

typedef struct { pthread_mutex_t mu; pthread_cond_t cv; int arrived, met, flag; } meet;

/* Waits (at most 2 s) until all four readers are inside at once: only possible if the
 * engine lets readers of one variable overlap. */
static int meet_fn(void *arg, rt_run_ctx *rc) {
  meet *m = arg;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 2;
  pthread_mutex_lock(&m->mu);
  m->arrived++;
  pthread_cond_broadcast(&m->cv);
  while (m->arrived < 4 && pthread_cond_timedwait(&m->cv, &m->mu, &ts) == 0) {}
  m->met += m->arrived >= 4;
  pthread_mutex_unlock(&m->mu);
  return 0;
}

static void wait_flag_body(void *arg) {
  meet *m = arg;
  pthread_mutex_lock(&m->mu);
  while (!m->flag) pthread_cond_wait(&m->cv, &m->mu);
  pthread_mutex_unlock(&m->mu);
}

static void wait_flag_async(void *arg, rt_run_ctx *rc) { hand_off(wait_flag_body, arg, rc, 0); }

static int set_flag_fn(void *arg, rt_run_ctx *rc) {
  meet *m = arg;
  pthread_mutex_lock(&m->mu);
  m->flag = 1;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
  return 0;
}

static void test_concurrency(void) {
  rt_engine *e = rt_engine_create(RT_ENGINE_THREADED, 4);
  rt_var *v = rt_engine_new_var(e), *w = rt_engine_new_var(e);
  meet m = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};
  for (int i = 0; i < 4; i++) rt_engine_push_sync(e, meet_fn, &m, &v, 1, NULL, 0);
  rt_engine_wait_for_all(e, NULL, 0);
  CHECK(m.met == 4, "readers of one var overlapped: %d of 4 met", m.met);
  rt_engine_destroy(e);
  /* one worker: the async function returns at once, so the worker can run the function
   * that lets the async work finish; a blocking engine would deadlock here */
  e = rt_engine_create(RT_ENGINE_THREADED, 1);
  v = rt_engine_new_var(e), w = rt_engine_new_var(e);
  rt_engine_push_async(e, wait_flag_async, &m, NULL, 0, &v, 1);
  rt_engine_push_sync(e, set_flag_fn, &m, NULL, 0, &w, 1);
  CHECK(rt_engine_wait_for_all(e, NULL, 0) == 0 && m.flag == 1, "async released its worker");
  rt_engine_destroy(e);
}

static void test_env(void) {
  setenv("KILN_ENGINE", "naive", 1);
  rt_engine *e = rt_engine_create_from_env();
  CHECK(rt_engine_get_kind(e) == RT_ENGINE_NAIVE && rt_engine_num_threads(e) == 0, "naive");
  rt_engine_destroy(e);
  setenv("KILN_ENGINE", "threaded", 1);
  setenv("KILN_NUM_THREADS", "3", 1);
  e = rt_engine_create_from_env();
  CHECK(rt_engine_get_kind(e) == RT_ENGINE_THREADED && rt_engine_num_threads(e) == 3, "3 threads");
  rt_engine_destroy(e);
  setenv("KILN_NUM_THREADS", "3x", 1);  /* rejected, so the core count is used */
  e = rt_engine_create_from_env();
  CHECK(rt_engine_num_threads(e) == k_parallel_cpu_count(), "bad value ignored");
  rt_engine_destroy(e);
  unsetenv("KILN_ENGINE");
  unsetenv("KILN_NUM_THREADS");
  e = rt_engine_default();
  CHECK(e == rt_engine_default() && rt_engine_get_kind(e) == RT_ENGINE_NAIVE, "default is naive");
  rt_engine_shutdown_default();
}

int main(void) {
  pthread_t completer;
  pthread_create(&completer, NULL, completer_main, NULL);
  const int threads[] = {1, 2, 4, 8};
  test_random(RT_ENGINE_NAIVE, 0, 12345);
  for (int t = 0; t < 4; t++)
    for (unsigned long long s = 1; s <= 2; s++) test_random(RT_ENGINE_THREADED, threads[t], s * 7919 + (unsigned)t);
  test_errors(RT_ENGINE_NAIVE);
  test_errors(RT_ENGINE_THREADED);
  test_operators(RT_ENGINE_NAIVE, 0);
  test_operators(RT_ENGINE_THREADED, 4);
  test_concurrency();
  test_env();
  pthread_mutex_lock(&cq_mu);
  cq_stop = 1;
  pthread_cond_broadcast(&cq_cv);
  pthread_mutex_unlock(&cq_mu);
  pthread_join(completer, NULL);
  return rt_test_done("engine");
}
