/* rt_profile.c — per-step profiles: KILN_PROFILE=trace.json (or `kiln run --profile`) times
 * every step of every predict and train_step, and when the model is destroyed writes a Chrome
 * trace-event file (chrome://tracing, Perfetto: one event per step of every run) and prints a
 * table of the steps that took the most time to stderr. A CPU model times its steps here
 * (rt_model_run.c); a CUDA model (runtime/cuda/rtc_model.c) times each with CUDA events and
 * hands the times in, through its host twin, which runs no steps.
 *
 * Why in the runtime and not in the generated code: the steps are already called one by one
 * from rt_model_run.c, so timing them costs nothing when profiling is off (one branch per
 * run: rt_run asks whether the model has a profile), and a .so from any kiln compile can be
 * profiled without rebuilding it. A profiled run calls its steps in order on the calling
 * thread (the naive engine's order), each kernel still using the thread pool, so each
 * step's time is its own. */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "k_parallel.h"
#include "k_profile.h"
#include "rt_model_int.h"

/* A run of many steps keeps its first events; the table counts every run. */
#define RT_PROF_MAX_EVENTS 200000
#define RT_PROF_TABLE_ROWS 20

/* A step's first call is kept apart: it does one-time work (a convolution packs its weights
 * into its cache), which would swamp the mean of a short run. */
typedef struct {
  int64_t first_ns;               /* the first call */
  int64_t ns, min_ns, calls;      /* every call: the sum, the fastest, how many */
  char path[96];                  /* the kernel's note on its last call (k_profile.h) */
} rt_prof_step;
typedef struct { int32_t prog, step; int64_t t0, dur; } rt_prof_event;
typedef struct { int64_t t0, dur; int32_t prog; } rt_prof_run;
/* An allreduce of data-parallel training (rt_comm.c): from its start to the end of its wait. */
typedef struct { int64_t t0, dur, elements; int32_t bucket, after_step; } rt_prof_comm;

struct rt_profile {
  char *path;
  int64_t origin;                 /* the model's creation: every timestamp is from it */
  rt_prof_step *steps[2];         /* predict, train: one per step */
  int64_t runs[2], run_ns[2], first_run_ns[2];
  rt_prof_event *ev;
  int64_t nev, dropped;
  rt_prof_run *rv;
  int64_t nrv, rv_cap;
  rt_prof_comm *cv;
  int64_t ncv, cv_cap;
};

static const char *const rt_prof_op_names[] = {
#define K_BINARY(op) #op,
#define K_UNARY(op) #op,
#define K_OP(op) #op,
#include "k_ops.def"
#undef K_BINARY
#undef K_UNARY
#undef K_OP
};
#define RT_PROF_NOPS ((int)(sizeof rt_prof_op_names / sizeof *rt_prof_op_names))

int64_t rt_profile_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The first profiled model of the process writes PATH; the k-th, PATH with "-k" before its
 * extension (trace-2.json), so that a program with several models loses none. */
static char *rt_prof_path(const char *path) {
  static atomic_int made;
  int k = atomic_fetch_add(&made, 1) + 1;
  if (k == 1) return strdup(path);
  const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
  size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - path) : strlen(path);
  size_t n = strlen(path) + 16;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%.*s-%d%s", (int)stem, path, k, path + stem);
  return s;
}

rt_profile *rt_profile_from_env(const rt_model_desc *d) {
  const char *path = getenv("KILN_PROFILE");
  if (!path || !*path) return NULL;
  rt_profile *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->path = rt_prof_path(path);
  atomic_store(&k_profile_on, 1);   /* the kernels' notes: for every model of this process from now on */
  p->origin = rt_profile_now();
  p->steps[0] = calloc((size_t)d->predict.nsteps + 1, sizeof *p->steps[0]);
  p->steps[1] = calloc((size_t)(d->has_train ? d->train.nsteps : 0) + 1, sizeof *p->steps[1]);
  if (!p->path || !p->steps[0] || !p->steps[1]) {
    fprintf(stderr, "kiln profile: out of memory; not profiling\n");
    rt_profile_free(p);
    return NULL;
  }
  return p;
}

void rt_profile_free(rt_profile *p) {
  if (!p) return;
  free(p->path), free(p->steps[0]), free(p->steps[1]), free(p->ev), free(p->rv), free(p->cv);
  free(p);
}

void rt_profile_step(rt_profile *p, int prog, int step, int64_t t0, int64_t t1) {
  rt_prof_step *s = &p->steps[prog][step];
  int64_t dur = t1 - t0;
  if (!s->calls) s->first_ns = dur;
  if (!s->calls || dur < s->min_ns) s->min_ns = dur;
  s->ns += dur, s->calls++;
  const char *note = k_profile_take();
  if (note[0]) snprintf(s->path, sizeof s->path, "%s", note);
  if (!p->ev && !(p->ev = malloc(RT_PROF_MAX_EVENTS * sizeof *p->ev))) { p->dropped++; return; }
  if (p->nev == RT_PROF_MAX_EVENTS) { p->dropped++; return; }
  p->ev[p->nev++] = (rt_prof_event){prog, step, t0 - p->origin, dur};
}

/* Room for one more of n events of `size` bytes in *v (doubled, up to RT_PROF_MAX_EVENTS):
 * false when there is none, and the event is not kept. */
static bool rt_prof_room(void **v, int64_t n, int64_t *cap, size_t size) {
  if (n < *cap) return true;
  int64_t c = *cap ? 2 * *cap : 64;
  void *grown = c <= RT_PROF_MAX_EVENTS ? realloc(*v, (size_t)c * size) : NULL;
  if (!grown) return false;
  *v = grown, *cap = c;
  return true;
}

void rt_profile_run(rt_profile *p, int prog, int64_t t0, int64_t t1) {
  if (!p->runs[prog]) p->first_run_ns[prog] = t1 - t0;
  p->runs[prog]++, p->run_ns[prog] += t1 - t0;
  if (rt_prof_room((void **)&p->rv, p->nrv, &p->rv_cap, sizeof *p->rv))
    p->rv[p->nrv++] = (rt_prof_run){t0 - p->origin, t1 - t0, prog};
}

void rt_profile_comm(rt_profile *p, int bucket, int after_step, int64_t elements, int64_t t0, int64_t t1) {
  if (rt_prof_room((void **)&p->cv, p->ncv, &p->cv_cap, sizeof *p->cv))
    p->cv[p->ncv++] = (rt_prof_comm){t0 - p->origin, t1 - t0, elements, bucket, after_step};
}

/* ---- what a step is: its op, kind, shapes, bytes and FLOPs ---- */

static const char *rt_prof_op(const rt_step *s) {
  switch (s->kind) {
  case RT_STEP_FUSED: return "fused";
  case RT_STEP_UPDATE: return s->op == K_OPT_ADAMW ? "adamw" : s->op == K_OPT_ADAM ? "adam" : "sgd";
  default: return s->op >= 0 && s->op < RT_PROF_NOPS ? rt_prof_op_names[s->op] : "?";
  }
}

static const char *rt_prof_kind(const rt_step *s) {
  static const char *const kinds[] = {"forward", "backward", "update", "fused"};
  return s->kind >= 0 && s->kind <= RT_STEP_FUSED ? kinds[s->kind] : "?";
}

static const rt_step *rt_prof_step_of(const rt_model *m, int prog, int step) {
  return &(prog ? &m->d->train : &m->d->predict)->steps[step];
}

/* Slot j of a step's inputs (out: outputs) as the profile shows it, NULL for an empty slot:
 * on the CPU the run's shape; for a CUDA model's host twin, which has no step states, the
 * descriptor's. */
static const k_shape *rt_prof_slot(const rt_model *m, int prog, int step, bool out, int j) {
  if (m->ps[prog].sr) {
    const rt_step_run *r = &m->ps[prog].sr[step];
    const k_tensor *t = out ? &r->out[j] : &r->in[j];
    return t->data ? &t->shape : NULL;
  }
  const rt_step *s = rt_prof_step_of(m, prog, step);
  int t = out ? s->out[j] : s->in[j];
  const k_shape *own = out ? s->out_shape : s->in_shape;
  return t < 0 ? NULL : own ? &own[j] : &m->tshape[t];
}

static int64_t rt_prof_bytes(const rt_model *m, int prog, int step) {
  const rt_step *s = rt_prof_step_of(m, prog, step);
  int64_t b = 0;
  for (int io = 0; io < 2; io++)
    for (int j = 0; j < (io ? s->nout : s->nin); j++) {
      const k_shape *sh = rt_prof_slot(m, prog, step, io, j);
      if (sh) b += k_shape_numel(sh) * 4;
    }
  return b;
}

/* The multiply-adds (times two) of the ops that do them, from the shapes alone: a
 * convolution's weight is [Cout, Cin/groups, kh, kw], a fully_connected's [out, in], a
 * matmul's reduction is its first input's last axis. 0 for every other step. */
static int64_t rt_prof_flops(const rt_model *m, int prog, int step) {
  const rt_step *s = rt_prof_step_of(m, prog, step);
  if (s->kind != RT_STEP_FORWARD || s->nin < 2 || s->nout < 1 || s->op < 0 || s->op >= RT_PROF_NOPS) return 0;
  const char *op = rt_prof_op_names[s->op];
  const k_shape *w = rt_prof_slot(m, prog, step, false, 1), *x = rt_prof_slot(m, prog, step, false, 0);
  const k_shape *o = rt_prof_slot(m, prog, step, true, 0);
  if (!w || !x || !o) return 0;
  int64_t out = k_shape_numel(o);
  if (strcmp(op, "convolution") == 0 && w->rank >= 2) return 2 * out * (k_shape_numel(w) / w->d[0]);
  if (strcmp(op, "fully_connected") == 0 && w->rank == 2) return 2 * out * w->d[1];
  if ((strcmp(op, "matmul") == 0 || strcmp(op, "batch_matmul") == 0) && x->rank >= 1) return 2 * out * x->d[x->rank - 1];
  return 0;
}

static void rt_prof_shape(FILE *f, const k_shape *s) {
  fputc('[', f);
  for (int k = 0; k < s->rank; k++) fprintf(f, "%s%lld", k ? "," : "", (long long)s->d[k]);
  fputc(']', f);
}

/* A JSON string: the node names are the user's. */
static void rt_prof_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

/* ---- the trace ---- */

static void rt_prof_event_json(FILE *f, const rt_model *m, const rt_profile *p, const rt_prof_event *e) {
  const rt_step *s = rt_prof_step_of(m, e->prog, e->step);
  fputs(",\n{\"name\":", f);
  rt_prof_str(f, s->name);
  fprintf(f, ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,\"tid\":%d,\"args\":{\"program\":\"%s\",\"step\":%d,\"op\":\"%s\"",
          rt_prof_kind(s), (double)e->t0 / 1e3, (double)e->dur / 1e3, 1 + e->prog, e->prog ? "train_step" : "predict", e->step,
          rt_prof_op(s));
  for (int io = 0; io < 2; io++) {
    fputs(io ? "],\"out\":[" : ",\"in\":[", f);
    for (int j = 0, n = 0; j < (io ? s->nout : s->nin); j++) {
      const k_shape *sh = rt_prof_slot(m, e->prog, e->step, io, j);
      if (sh) fputs(n++ ? "," : "", f), rt_prof_shape(f, sh);
    }
  }
  fputc(']', f);
  int64_t fl = rt_prof_flops(m, e->prog, e->step);
  if (fl) fprintf(f, ",\"flops\":%lld", (long long)fl);
  const char *path = p->steps[e->prog][e->step].path;
  if (path[0]) fputs(",\"path\":", f), rt_prof_str(f, path);
  fprintf(f, ",\"bytes\":%lld}}", (long long)rt_prof_bytes(m, e->prog, e->step));
}

static int rt_prof_write_trace(const rt_model *m, const rt_profile *p) {
  FILE *f = fopen(p->path, "w");
  if (!f) return 1;
  fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"threads\":%d,\"dropped_events\":%lld},\"traceEvents\":[\n",
          k_parallel_threads(), (long long)p->dropped);
  fputs("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"predict\"}},\n"
        "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":2,\"args\":{\"name\":\"train_step\"}},\n"
        "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":3,\"args\":{\"name\":\"allreduce\"}}", f);
  for (int64_t i = 0; i < p->ncv; i++)
    fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"allreduce\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,\"tid\":3,"
            "\"args\":{\"bucket\":%d,\"elements\":%lld,\"after_step\":%d}}",
            p->cv[i].bucket < 0 ? "allreduce loss" : "allreduce gradients", (double)p->cv[i].t0 / 1e3, (double)p->cv[i].dur / 1e3,
            p->cv[i].bucket, (long long)p->cv[i].elements, p->cv[i].after_step);
  for (int64_t i = 0; i < p->nrv; i++)
    fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"run\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,\"tid\":%d}",
            p->rv[i].prog ? "train_step" : "predict", (double)p->rv[i].t0 / 1e3, (double)p->rv[i].dur / 1e3, 1 + p->rv[i].prog);
  for (int64_t i = 0; i < p->nev; i++) rt_prof_event_json(f, m, p, &p->ev[i]);
  fputs("\n]}\n", f);
  return fclose(f) != 0;
}

/* ---- the table ---- */

typedef struct { int step; int64_t ns; } rt_prof_rank;

static int rt_prof_by_time(const void *a, const void *b) {
  int64_t x = ((const rt_prof_rank *)a)->ns, y = ((const rt_prof_rank *)b)->ns;
  return (x < y) - (x > y);
}

/* A step's mean over the calls after its first (the first alone when there is one call). */
static double rt_prof_steady_ns(const rt_prof_step *st) {
  return st->calls > 1 ? (double)(st->ns - st->first_ns) / (double)(st->calls - 1) : (double)st->ns;
}

static void rt_prof_table(const rt_model *m, const rt_profile *p, int prog) {
  int n = (prog ? &m->d->train : &m->d->predict)->nsteps;
  double total = 0;
  rt_prof_rank *rank = malloc((size_t)(n + 1) * sizeof *rank);
  if (!rank) return;
  for (int i = 0; i < n; i++) {
    double t = rt_prof_steady_ns(&p->steps[prog][i]);
    rank[i] = (rt_prof_rank){i, (int64_t)t}, total += t;
  }
  qsort(rank, (size_t)n, sizeof *rank, rt_prof_by_time);
  int64_t runs = p->runs[prog];
  double steady = runs > 1 ? (double)(p->run_ns[prog] - p->first_run_ns[prog]) / (double)(runs - 1) : (double)p->run_ns[prog];
  fprintf(stderr, "kiln profile: %s, %lld runs, %.3f ms a run after the first (the first %.3f ms), %d steps, %d threads\n",
          prog ? "train_step" : "predict", (long long)runs, steady / 1e6, (double)p->first_run_ns[prog] / 1e6, n,
          k_parallel_threads());
  fprintf(stderr, "  %5s %-28s %-16s %-8s %10s %10s %10s %6s %8s %8s  %s\n", "step", "name", "op", "kind", "mean us",
          "min us", "first us", "share", "GFLOP/s", "GB/s", "path");
  int rows = n < RT_PROF_TABLE_ROWS ? n : RT_PROF_TABLE_ROWS;
  for (int k = 0; k < rows; k++) {
    const rt_step *s = rt_prof_step_of(m, prog, rank[k].step);
    const rt_prof_step *st = &p->steps[prog][rank[k].step];
    double mean = rt_prof_steady_ns(st);
    char gf[16] = "-";
    int64_t fl = rt_prof_flops(m, prog, rank[k].step);
    if (fl && mean > 0) snprintf(gf, sizeof gf, "%.1f", (double)fl / mean);
    fprintf(stderr, "  %5d %-28.28s %-16.16s %-8s %10.1f %10.1f %10.1f %5.1f%% %8s %8.1f  %s\n", rank[k].step,
            s->name ? s->name : "", rt_prof_op(s), rt_prof_kind(s), mean / 1e3, (double)st->min_ns / 1e3,
            (double)st->first_ns / 1e3, total > 0 ? 100.0 * mean / total : 0.0, gf,
            mean > 0 ? (double)rt_prof_bytes(m, prog, rank[k].step) / mean : 0.0, st->path);
  }
  if (n > rows) fprintf(stderr, "  ... %d more steps\n", n - rows);
  free(rank);
}

void rt_profile_finish(const rt_model *m, const rt_profile *p) {
  if (!p) return;
  if (rt_prof_write_trace(m, p)) fprintf(stderr, "kiln profile: cannot write %s\n", p->path);
  else fprintf(stderr, "kiln profile: wrote %s\n", p->path);
  for (int prog = 0; prog < 2; prog++)
    if (p->runs[prog]) rt_prof_table(m, p, prog);
}
