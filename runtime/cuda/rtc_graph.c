/* rtc_graph.c — each program's run as one CUDA graph (issue 34). A call of a CUDA model is a long
 * run of short kernels, cuBLAS and cuDNN calls, and at the sizes models train at, launch and
 * host overhead decide its speed. So a program's run is captured from the model's stream
 * (cuStreamBeginCapture .. cuStreamEndCapture) and instantiated, and every run after it is one
 * cuGraphLaunch. The first run at a set of extents goes step by step: cuBLAS and cuDNN load
 * their kernels at their first call, which a capture may refuse; the second is captured. What
 * makes the replay valid:
 *   - the plan's memory is static: the arena, the store, the model's input buffers and the
 *     scratch keep their addresses (a _device call copies the caller's inputs into the input
 *     buffers rather than binding the caller's pointers, when it replays); when the scratch
 *     must grow (new extents), every graph goes (rtc_graph_drop);
 *   - what changes per call (the learning rate, Adam's step, dropout's counter) is read by the
 *     kernels from device memory (kc_live), written on the stream before each launch; the
 *     extents of bounded dims likewise (rtc_ctx.dext);
 *   - a graph per set of extents (RTC_GRAPHS of them, the least recent one replaced): the
 *     steps' shapes and cuDNN's algorithms are those of its extents.
 * Runs step by step instead: with KILN_CUDA_GRAPH=0, under KILN_CUDA_PROFILE (each step timed),
 * the data-parallel train step (the host sums the gradients between its halves), and a program
 * whose capture the driver refused (said once on stderr). */
#include "rtc_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int rtc_graph_wanted(void) {
  const char *e = getenv("KILN_CUDA_GRAPH");
  return !e || strcmp(e, "0") != 0;
}

static void rtc_graph_forget(rtc_ctx *c, rtc_graph_entry *g) {
  if (g->exec) c->cu->GraphExecDestroy(g->exec);
  if (g->graph) c->cu->GraphDestroy(g->graph);
  memset(g, 0, sizeof *g);
}

void rtc_graph_drop(rtc_ctx *c, rtc_prog *r) {
  for (int k = 0; k < RTC_GRAPHS; k++) rtc_graph_forget(c, &r->graphs[k]);
}

static const char *rtc_prog_name(const rtc_prog *r) { return r->p->is_train ? "train_step" : "predict"; }

/* The entry of the run's extents: the one made for them, else a free one or the least recent,
 * made anew. */
static rtc_graph_entry *rtc_graph_entry_of(rtc_ctx *c, rtc_prog *r) {
  const int64_t *e = c->host->extent;
  rtc_graph_entry *old = &r->graphs[0];
  for (int k = 0; k < RTC_GRAPHS; k++) {
    rtc_graph_entry *g = &r->graphs[k];
    if (g->used && memcmp(g->extent, e, sizeof g->extent) == 0) return g;
    if (g->used < old->used) old = g;
  }
  rtc_graph_forget(c, old);
  memcpy(old->extent, e, sizeof old->extent);
  return old;
}

/* The run captured and instantiated: 0. Otherwise the program runs step by step from then on,
 * and says why once: a call the driver refused in the capture, or a step that could not be
 * queued (which running it step by step then reports as the call's error). */
static int rtc_graph_capture(rtc_ctx *c, rtc_prog *r, rtc_graph_entry *g, rtc_enqueue_fn enqueue) {
  CUresult e = c->cu->StreamBeginCapture(c->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  const char *what = "cuStreamBeginCapture";
  char why[RT_MODEL_ERR_LEN] = "";
  if (e == CUDA_SUCCESS) {
    if (enqueue(c, r)) snprintf(why, sizeof why, "%s", c->err);
    e = c->cu->StreamEndCapture(c->stream, &g->graph);
    what = "cuStreamEndCapture";
    if (e == CUDA_SUCCESS && !why[0]) e = c->cu->GraphInstantiate(&g->exec, g->graph, 0), what = "cuGraphInstantiate";
  }
  if (e == CUDA_SUCCESS && !why[0]) return 0;
  if (!why[0]) snprintf(why, sizeof why, "%s: %s", what, rtc_lib_strerror(c->cu, e));
  rtc_graph_drop(c, r);
  r->graph_off = 1;
  c->err[0] = 0;
  fprintf(stderr, "kiln: %s %s runs step by step, not as a CUDA graph: %s\n", c->d->name, rtc_prog_name(r), why);
  return 1;
}

/* Step by step on the model's stream, after what the call queued on s and before what it
 * queues there next. */
static int rtc_graph_direct(rtc_ctx *c, rtc_prog *r, CUstream s, rtc_enqueue_fn enqueue) {
  if (s != c->stream && rtc_cu_check(c, c->cu->StreamSynchronize(s), "waiting for the caller's stream")) return 1;
  if (enqueue(c, r)) return 1;
  return s != c->stream && rtc_cu_check(c, c->cu->StreamSynchronize(c->stream), rtc_prog_name(r));
}

/* KILN_CUDA_PROFILE=graph: the replay's GPU time, from the event recorded before its launch to
 * one after it, which is waited for before the call copies its outputs (so a profiled call is a
 * little slower). */
static int rtc_graph_prof_launched(rtc_ctx *c, const rtc_prog *r, CUstream s) {
  float ms = 0;
  if (rtc_cu_check(c, c->cu->EventRecord(c->ev[1], s), "cuEventRecord") || rtc_cu_check(c, c->cu->EventSynchronize(c->ev[1]), rtc_prog_name(r)) ||
      rtc_cu_check(c, c->cu->EventElapsedTime(&ms, c->ev[0], c->ev[1]), "cuEventElapsedTime"))
    return 1;
  c->graph_prog = r->p->is_train;
  c->graph_ms = ms;
  return 0;
}

int rtc_graph_run(rtc_ctx *c, rtc_prog *r, CUstream s, rtc_enqueue_fn enqueue) {
  if (!c->graphs || r->graph_off) return rtc_graph_direct(c, r, s, enqueue);
  rtc_graph_entry *g = rtc_graph_entry_of(c, r);
  g->used = ++r->graph_clock;
  if (!g->exec && g->runs++ == 0) return rtc_graph_direct(c, r, s, enqueue);
  if (!g->exec && rtc_graph_capture(c, r, g, enqueue)) return rtc_graph_direct(c, r, s, enqueue);
  if (c->graph_prof && rtc_cu_check(c, c->cu->EventRecord(c->ev[0], s), "cuEventRecord")) return 1;
  if (rtc_cu_check(c, c->cu->GraphLaunch(g->exec, s), "launching the CUDA graph")) return 1;
  return c->graph_prof && rtc_graph_prof_launched(c, r, s);
}

/* ---- KILN_CUDA_PROFILE=graph: the GPU's time per graph against the call's wall time ---- */

static double rtc_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void rtc_graph_prof_enter(rtc_ctx *c) {
  c->graph_prog = -1;
  if (c->graph_prof) c->call_t0 = rtc_now();
}

void rtc_graph_prof_leave(rtc_ctx *c, int rc) {
  if (!c->graph_prof || c->graph_prog < 0 || rc) return;   /* a failed call is not counted */
  int k = c->graph_prog;
  c->gprof_gpu_ms[k] += c->graph_ms, c->gprof_wall_ms[k] += 1e3 * (rtc_now() - c->call_t0), c->gprof_n[k]++;
}

void rtc_graph_prof_print(rtc_ctx *c) {
  for (int k = 0; c->graph_prof && k < 2; k++) {
    if (!c->gprof_n[k]) continue;
    double n = (double)c->gprof_n[k], gpu = 1e3 * c->gprof_gpu_ms[k] / n, wall = 1e3 * c->gprof_wall_ms[k] / n;
    fprintf(stderr, "kiln cuda graph profile: %s %s on %s: %lld replays, GPU %.1f us a graph, call %.1f us (host and copies %.1f us), GPU busy %.0f%%\n",
            c->d->name, k ? "train_step" : "predict", c->device_name, (long long)c->gprof_n[k], gpu, wall, wall - gpu,
            wall > 0 ? 100 * gpu / wall : 0.0);
  }
}
