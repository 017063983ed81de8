/* test_comm.c — kiln_model_set_comm without MPI: hooks that stand in for a transport.
 * - A world of one (the allreduce leaves the buffer as it is) trains bit for bit as no hook.
 * - A world of two whose ranks hold the same rows (the allreduce doubles each value, as the
 *   sum of two equal ranks): the sum divided by two is exact, so again bit for bit, and the
 *   gradients went through the hook in buckets (bucket_bytes small: two a step).
 * - A failing allreduce makes train_step fail with the hook's message and the rank, and
 *   leaves the weights as they were; so does a failing wait. A failure of the rank's own (a
 *   bad label) is handed to the hook's `failed` for the other ranks; a failed allreduce is not.
 * - set_comm refuses a malformed hook, and NULL removes the hook.
 * - The buckets overlap the backward pass: in a profiled step's trace (KILN_PROFILE) the first
 *   bucket's allreduce starts before the last backward step does.
 * - batch_norm(sync=true) (tests/mpi/bn_sync.kiln) on two equal ranks of b rows trains as one
 *   process on the 2b rows twice over: the job's statistics, count and gradient means; with
 *   each rank's own, the moving variances would differ (b - 1 against 2b - 1 in the unbiased
 *   variance), which the predictions after three steps show. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln.h"
#include "kiln_comm.h"
#include "kiln_test.h"

typedef struct {
  int doubles;        /* the other rank's equal contribution (after the first call, set_comm's
                         broadcast, where the other rank gives zeros) */
  int fail_start_at;  /* the allreduce that fails to start (1-based; 0: none) */
  int fail_wait;      /* every wait fails */
  int calls;
  int progressed;     /* progress calls */
  char told[256];     /* the message `failed` was given */
} fake;

static void fake_progress(void *ctx) { ((fake *)ctx)->progressed++; }
static void fake_failed(void *ctx, const char *msg) { snprintf(((fake *)ctx)->told, sizeof ((fake *)ctx)->told, "%s", msg); }

static int fake_start(void *ctx, float *buf, int64_t n, void **req, char *err, size_t errn) {
  fake *f = ctx;
  if (++f->calls == f->fail_start_at) return snprintf(err, errn, "the fake transport refused"), 1;
  if (f->doubles && f->calls > 1)
    for (int64_t i = 0; i < n; i++) buf[i] *= 2;
  *req = buf;
  return 0;
}

static int fake_wait(void *ctx, void *req, char *err, size_t errn) {
  fake *f = ctx;
  if (f->fail_wait) return snprintf(err, errn, "rank 1 did not answer"), 1;
  return req ? 0 : (snprintf(err, errn, "no request"), 1);
}

static kiln_model *model(void) {
  kiln_graph *g = NULL;
  kiln_model *m = NULL;
  const char *names[] = {"batch"};
  int64_t v[] = {4};
  char path[4096];
  snprintf(path, sizeof path, "%sexamples/mlp.kiln", ts_root());
  if (kiln_graph_load_dims(path, NULL, 1, names, v, &g) || kiln_graph_jit(g, 7, &m))
    CHECK(0, "mlp: %s", kiln_last_error());
  kiln_graph_free(g);
  return m;
}

static float x[4 * 784];
static int32_t label[4] = {1, 7, 3, 3};

/* Three steps; the weights after them into a file; 0 when every step ran. */
static int train3(kiln_model *m, const char *path, float *loss) {
  const void *in[] = {x, label};
  for (int s = 0; s < 3; s++)
    if (kiln_model_train_step(m, in, &loss[s])) return 1;
  return kiln_model_save(m, path);
}

static int same_file(const char *a, const char *b) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  int same = fa && fb;
  for (int ca = 0, cb = 0; same && ca != EOF;) same = (ca = fgetc(fa)) == (cb = fgetc(fb));
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return same;
}

/* The trace's events of category cat: the earliest and the latest start ("ts"). */
static void trace_span(const char *text, const char *cat, double *first, double *last) {
  char key[64];
  snprintf(key, sizeof key, "\"cat\":\"%s\"", cat);
  *first = 1e300, *last = -1;
  for (const char *p = strstr(text, key); p; p = strstr(p + 1, key)) {
    const char *ts = strstr(p, "\"ts\":");
    if (!ts) break;
    double t = atof(ts + 5);
    if (t < *first) *first = t;
    if (t > *last) *last = t;
  }
}

static void test_overlap(void) {
  char trace[] = "/tmp/kiln-comm-trace-XXXXXX";
  close(mkstemp(trace));
  setenv("KILN_PROFILE", trace, 1);
  fake two = {.doubles = 1};
  kiln_comm c = {0, 2, &two, fake_start, fake_wait, 4096, NULL, NULL};
  kiln_model *m = model();
  unsetenv("KILN_PROFILE");
  const void *in[] = {x, label};
  float loss;
  CHECK(m && !kiln_model_set_comm(m, &c) && !kiln_model_train_step(m, in, &loss), "a profiled step: %s", kiln_last_error());
  kiln_model_free(m);   /* writes the trace */
  FILE *f = fopen(trace, "r");
  char *text = calloc(1, 1 << 20);
  if (f && text) text[fread(text, 1, (1 << 20) - 1, f)] = 0;
  if (f) fclose(f);
  double bw0, bw1;
  trace_span(text ? text : "", "backward", &bw0, &bw1);
  const char *first = text ? strstr(text, "\"allreduce gradients\"") : NULL, *ts = first ? strstr(first, "\"ts\":") : NULL;
  CHECK(ts && bw1 >= 0, "the trace holds the gradients' allreduces and the backward steps");
  double g0 = ts ? atof(ts + 5) : 1e300;   /* the events are written in the order they started */
  CHECK(g0 < bw1, "the first gradients' allreduce (%.1f us) starts before the last backward step (%.1f us)", g0, bw1);
  free(text);
  unlink(trace);
}

static kiln_model *bn_model(int64_t batch) {
  kiln_graph *g = NULL;
  kiln_model *m = NULL;
  const char *names[] = {"batch"};
  int64_t v[] = {batch};
  char path[4096];
  snprintf(path, sizeof path, "%stests/mpi/bn_sync.kiln", ts_root());
  if (kiln_graph_load_dims(path, NULL, 1, names, v, &g) || kiln_graph_jit(g, 3, &m)) CHECK(0, "bn_sync: %s", kiln_last_error());
  kiln_graph_free(g);
  return m;
}

static void test_sync_bn(void) {
  enum { B = 3, IMG = 2 * 8 * 8 };
  static float img[2 * B * IMG], logits[2][2 * B * 4];
  int32_t lab[2 * B];
  for (int i = 0; i < B * IMG; i++) img[i] = img[B * IMG + i] = (float)((i * 29) % 53) / 26.0f - 1.0f;
  for (int i = 0; i < B; i++) lab[i] = lab[B + i] = i % 4;
  kiln_model *lone = bn_model(2 * B), *rank = bn_model(B);
  fake two = {.doubles = 1};
  kiln_comm c = {0, 2, &two, fake_start, fake_wait, 0, NULL, NULL};
  CHECK(lone && rank && !kiln_model_set_comm(rank, &c), "bn_sync: %s", kiln_last_error());
  if (!lone || !rank) return;
  const void *in[] = {img, lab};
  void *out0[] = {logits[0]}, *out1[] = {logits[1]};
  float l0, l1;
  for (int s = 0; s < 3; s++)
    CHECK(!kiln_model_train_step(lone, in, &l0) && !kiln_model_train_step(rank, in, &l1) && fabsf(l0 - l1) <= 1e-5f * fabsf(l0),
          "bn_sync step %d: losses %g and %g (%s)", s, l0, l1, kiln_last_error());
  CHECK(!kiln_model_predict(lone, in, out0) && !kiln_model_predict(rank, in, out1), "bn_sync predict: %s", kiln_last_error());
  double worst = 0, scale = 1e-3;
  for (int i = 0; i < B * 4; i++) scale = fmax(scale, fabs(logits[0][i]));
  for (int i = 0; i < B * 4; i++) worst = fmax(worst, fabs((double)logits[0][i] - logits[1][i]) / scale);
  CHECK(worst <= 1e-5, "synchronised batch_norm on two equal ranks predicts as one process on both (worst %.2g)", worst);
  kiln_model_free(lone), kiln_model_free(rank);
}

int main(void) {
  for (int i = 0; i < 4 * 784; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
  char ref[] = "/tmp/kiln-comm-ref-XXXXXX", got[] = "/tmp/kiln-comm-got-XXXXXX", before[] = "/tmp/kiln-comm-before-XXXXXX";
  close(mkstemp(ref)), close(mkstemp(got)), close(mkstemp(before));
  float lref[3], l[3];
  kiln_model *m = model();
  CHECK(m && !train3(m, ref, lref), "three steps alone: %s", kiln_last_error());
  kiln_model_free(m);

  fake one = {0};
  kiln_comm c1 = {0, 1, &one, fake_start, fake_wait, 0, NULL, NULL};
  m = model();
  CHECK(m && !kiln_model_set_comm(m, &c1) && !train3(m, got, l), "a world of one: %s", kiln_last_error());
  CHECK(same_file(ref, got) && !memcmp(l, lref, sizeof l), "a world of one trains bit for bit as no hook");
  kiln_model_free(m);

  fake two = {.doubles = 1};
  kiln_comm c2 = {0, 2, &two, fake_start, fake_wait, 4096, fake_progress, NULL};   /* 1,024 floats a bucket: two a step */
  m = model();
  CHECK(m && !kiln_model_set_comm(m, &c2) && !train3(m, got, l), "two equal ranks: %s", kiln_last_error());
  CHECK(same_file(ref, got) && !memcmp(l, lref, sizeof l), "two ranks with equal rows train bit for bit as one");
  /* the broadcast, then each step the loss and two buckets: logits' gradients (1,290 floats,
   * past 1,024: the bucket is cut after them) and hidden's; a gradient is never split */
  CHECK(two.calls == 1 + 3 * 3, "a broadcast and three allreduces a step: %d in three steps", two.calls);
  CHECK(two.progressed >= 3, "progress is called between backward steps while allreduces are in flight: %d calls", two.progressed);
  kiln_model_free(m);

  fake bad = {.fail_start_at = 3};
  kiln_comm cb = {1, 2, &bad, fake_start, fake_wait, 0, NULL, fake_failed};
  const void *in[] = {x, label};
  float loss;
  m = model();
  CHECK(m && !kiln_model_set_comm(m, &cb) && !kiln_model_save(m, before), "set_comm: %s", kiln_last_error());
  CHECK(m && kiln_model_train_step(m, in, &loss) && strstr(kiln_last_error(), "the fake transport refused") &&
        strstr(kiln_last_error(), "rank 1 of 2"), "a failing allreduce fails train_step naming the rank: %s", kiln_last_error());
  CHECK(m && !kiln_model_save(m, got) && same_file(before, got), "and leaves the weights as they were");
  bad = (fake){.fail_wait = 1};
  CHECK(m && kiln_model_train_step(m, in, &loss) && strstr(kiln_last_error(), "rank 1 did not answer"),
        "a failing wait: %s", kiln_last_error());
  CHECK(m && !kiln_model_save(m, got) && same_file(before, got), "the weights as they were after a failing wait");
  CHECK(!bad.told[0], "a failed allreduce is not told to the others as this rank's own failure: '%s'", bad.told);
  int32_t wrong[4] = {1, 7, 30, 3};   /* 10 classes: this rank's own failure, in the loss */
  const void *win[] = {x, wrong};
  bad = (fake){0};
  CHECK(m && kiln_model_train_step(m, win, &loss) && strstr(bad.told, "label 30"), "a bad label is told to the others: '%s'", bad.told);
  CHECK(m && !kiln_model_save(m, got) && same_file(before, got), "the weights as they were after a bad label");
  CHECK(m && !kiln_model_set_comm(m, NULL) && !kiln_model_train_step(m, in, &loss), "NULL removes the hook: %s", kiln_last_error());
  kiln_comm malformed = {2, 2, &one, fake_start, fake_wait, 0, NULL, NULL};
  CHECK(m && kiln_model_set_comm(m, &malformed) && strstr(kiln_last_error(), "rank"), "rank 2 of 2 is refused");
  malformed = (kiln_comm){0, 2, &one, NULL, fake_wait, 0, NULL, NULL};
  CHECK(m && kiln_model_set_comm(m, &malformed), "a hook without start is refused");
  CHECK(kiln_model_set_comm(NULL, &c1), "a NULL model is refused");
  kiln_model_free(m);
  test_overlap();
  test_sync_bn();
  unlink(ref), unlink(got), unlink(before);
  return ts_summary("api.test_comm");
}
