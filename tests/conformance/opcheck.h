/* opcheck.h — what the conformance suite's two C tools share: kiln_opcheck (opcheck.c, one
 * op's kernels on .npy tensors) and kiln_opcheck_at (opcheck_at.c, a bounded model's train
 * step through the C API, which links LLVM: kept out of kiln_opcheck, which runs once per case
 * and whose start would then cost a dynamic LLVM load each time). */
#ifndef KILN_OPCHECK_H
#define KILN_OPCHECK_H

#include <stdarg.h>
#include <stdio.h>

static inline int oc_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int oc_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("kiln_opcheck: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

static inline void oc_path(char *buf, size_t n, const char *dir, const char *name, const char *suffix) {
  snprintf(buf, n, "%s/%s%s", dir, name, suffix);
}

#endif
