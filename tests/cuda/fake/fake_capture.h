/* fake_capture.h — how the fake cuBLAS and cuDNN take part in the fake driver's stream capture
 * (fake_cuda.c): while a capture is open, a library call checks its arguments as it always does,
 * then hands the driver a copy of them and a function that makes the call again (with the
 * capture closed, it computes), instead of computing now; a launch of the graph makes the calls
 * in order. The driver is found at the first call (dlopen with RTLD_NOLOAD: the runtime loaded
 * it); without it (the fakes' own test) nothing is ever captured. */
#ifndef KILN_FAKE_CAPTURE_H
#define KILN_FAKE_CAPTURE_H

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef int (*fake_capturing_fn)(void);
typedef void (*fake_defer_fn)(void (*run)(void *), void *ctx);

static fake_capturing_fn fake_capturing_p;
static fake_defer_fn fake_defer_p;

static void fake_capture_lookup(void) {
  static int looked;
  if (looked) return;
  looked = 1;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  void *a = h ? dlsym(h, "fake_cuda_capturing") : NULL, *b = h ? dlsym(h, "fake_cuda_defer") : NULL;
  if (!a || !b) return;
  memcpy(&fake_capturing_p, &a, sizeof a);
  memcpy(&fake_defer_p, &b, sizeof b);
}

/* Whether a call now is captured rather than run. */
static int fake_capture_on(void) {
  fake_capture_lookup();
  return fake_capturing_p && fake_capturing_p();
}

/* A copy of n bytes of a call's arguments, handed to the open capture with run (which the graph
 * calls with it, and which frees nothing: the graph frees it). */
static void fake_capture_defer(void (*run)(void *), const void *args, size_t n) {
  void *ctx = malloc(n);
  if (!ctx) abort();
  memcpy(ctx, args, n);
  fake_defer_p(run, ctx);
}

#endif
