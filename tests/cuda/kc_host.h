/* kc_host.h — runs kernels/cuda/kc_ops.cu on the host, so the library kernels are tested
 * without a GPU: the CUDA keywords become nothing, the grid is one thread of one block (every
 * kernel is grid-stride, so that thread covers every element), and rtc_launch looks the
 * kernel up by name in a table built from kc_args.h's KC_KERNELS and calls it with the args
 * bytes, as the driver would. Include from exactly one C++ file; host pointers stand in for
 * device pointers. */
#ifndef KILN_KC_HOST_H
#define KILN_KC_HOST_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "fake/emul.h"   /* the CUDA keywords on the host: one thread of one block */

extern "C" {
#include "k_params.h"
#include "k_scalar.h"
#include "k_philox.h"
#include "kc_args.h"
#include "rtc.h"
}

#include "kc_ops.cu"

/* The context the host halves see: the last failure's message and a launch count. */
struct rtc_ctx {
  char err[512];
  int launches;
  int64_t threads;    /* of the last launch */
};

typedef void (*kc_host_fn)(const void *args);
struct kc_host_kernel {
  const char *name;
  kc_host_fn fn;
  size_t size;
};

#define KC_HOST_ENTRY(n)                                                     \
  {"kc_" #n, [](const void *p) {                                             \
     kc_##n##_args a;                                                        \
     memcpy(&a, p, sizeof a);                                                \
     kc_##n(a);                                                              \
   }, sizeof(kc_##n##_args)},
static const kc_host_kernel kc_host_kernels[] = {KC_KERNELS(KC_HOST_ENTRY)};

extern "C" int rtc_fail(rtc_ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  return 1;
}

extern "C" int rtc_launch(rtc_ctx *c, const char *name, int64_t threads, const void *args, size_t size) {
  for (const kc_host_kernel &k : kc_host_kernels)
    if (strcmp(k.name, name) == 0) {
      if (k.size != size) return rtc_fail(c, "%s: args of %zu bytes, expected %zu", name, size, k.size);
      if (threads <= 0) return rtc_fail(c, "%s: launched with %lld threads", name, (long long)threads);
      c->launches++;
      c->threads = threads;
      k.fn(args);
      return 0;
    }
  return rtc_fail(c, "no kernel %s", name);
}

/* The scratch: batch_norm's training steps split a large channel's sums there (their prepare
 * reserves it; the cases call the ops without prepare, so the shim's is fixed, and larger than
 * any case's). */
enum { KC_HOST_SCRATCH = 1 << 20 };
extern "C" int rtc_reserve_scratch(rtc_ctx *c, size_t bytes) {
  return bytes > KC_HOST_SCRATCH ? rtc_fail(c, "a library op reserved %zu bytes of scratch", bytes) : 0;
}
extern "C" void *rtc_scratch(rtc_ctx *) {
  static double buf[KC_HOST_SCRATCH / sizeof(double)];
  return buf;
}
extern "C" void *rtc_stream(rtc_ctx *) { return NULL; }
extern "C" void *rtc_cublas(rtc_ctx *) { return NULL; }
extern "C" void *rtc_cudnn(rtc_ctx *) { return NULL; }

#endif
