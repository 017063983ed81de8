/* peak.c — the core's float32 multiply-add peak, GFLOP/s on one thread: ten independent chains
 * of vector FMAs (enough to cover the FMA latency times the units on every x86 core Kiln
 * targets), the widest vectors the compiler was told it may use (-march=native: 512-bit on
 * AVX-512, 256-bit on AVX2). bench/onnx/limits.sh measures the rate a convolution or GEMM
 * could reach at most against it.
 * Usage: peak [SECONDS]   prints the best of five runs of about SECONDS/5 each (default 1). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__AVX512F__)
#define PEAK_LANES 16
#else
#define PEAK_LANES 8
#endif
typedef float peak_vec __attribute__((vector_size(PEAK_LANES * 4)));

static double peak_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* n rounds of ten FMAs; the result is printed so the loop is not dropped. */
static float peak_run(long n) {
  peak_vec b, c, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9;
  for (int l = 0; l < PEAK_LANES; l++) {
    b[l] = 1.0000001f, c[l] = 1e-7f;
    a0[l] = 0, a1[l] = 1, a2[l] = 2, a3[l] = 3, a4[l] = 4, a5[l] = 5, a6[l] = 6, a7[l] = 7, a8[l] = 8, a9[l] = 9;
  }
  for (long i = 0; i < n; i++) {
    a0 = a0 * b + c, a1 = a1 * b + c, a2 = a2 * b + c, a3 = a3 * b + c, a4 = a4 * b + c;
    a5 = a5 * b + c, a6 = a6 * b + c, a7 = a7 * b + c, a8 = a8 * b + c, a9 = a9 * b + c;
  }
  peak_vec a = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9;
  float s = 0;
  for (int l = 0; l < PEAK_LANES; l++) s += a[l];
  return s;
}

int main(int argc, char **argv) {
  double secs = argc > 1 ? atof(argv[1]) : 1.0, best = 0;
  long n = 1000000;
  float sink = 0;
  for (;; n *= 2) {   /* size a run: secs / 5 */
    double t0 = peak_now();
    sink += peak_run(n);
    double t = peak_now() - t0;
    if (t >= 0.02) { n = (long)((double)n * secs / 5 / t); break; }
  }
  for (int r = 0; r < 5; r++) {
    double t0 = peak_now();
    sink += peak_run(n);
    double g = (double)n * 10 * PEAK_LANES * 2 / (peak_now() - t0) / 1e9;
    if (g > best) best = g;
  }
  printf("%.1f\n", best);
  fprintf(stderr, "peak: %d-lane FMAs, best of 5 runs of %ld rounds (%g)\n", PEAK_LANES, n, (double)sink);
  return 0;
}
