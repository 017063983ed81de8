/* rt_test.h — the tiny check harness the runtime tests share: CHECK counts and reports,
 * and rt_test_done prints "<suite>: N passed, N failed" and gives the exit status. */
#ifndef KILN_RT_TEST_H
#define KILN_RT_TEST_H

#include <stdio.h>

static int rt_pass, rt_fail;

#define CHECK(cond, ...)                                               \
  do {                                                                 \
    if (cond) {                                                        \
      rt_pass++;                                                       \
    } else {                                                           \
      rt_fail++;                                                       \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                    \
      fputc('\n', stderr);                                             \
    }                                                                  \
  } while (0)

static inline int rt_test_done(const char *suite) {
  printf("%s: %d passed, %d failed\n", suite, rt_pass, rt_fail);
  return rt_fail ? 1 : 0;
}

/* xorshift64*: a reproducible generator for test cases, independent of libc's rand. */
static inline unsigned long long rt_test_rand(unsigned long long *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

#endif
