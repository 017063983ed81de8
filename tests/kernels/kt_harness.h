/* kt_harness.h — what kernel tests share: random fills, closeness checks, and a
 * finite-difference gradient checker that drives an op's forward and backward kernels through
 * the k_call contract exactly as the executor will (undeclared backward dependencies passed
 * as NULL, kWriteTo and kAddTo both exercised). */
#ifndef KILN_KT_HARNESS_H
#define KILN_KT_HARNESS_H

#include "kernels.h"

#define KT_MAX_IO 8

typedef struct {
  const char *name;            /* printed on failure */
  k_fn fwd, bwd;
  int nargs, naux;             /* in = [args..., aux...] */
  int nout, nvisible;          /* out = [visible..., hidden...] */
  k_tensor in[KT_MAX_IO];      /* data owned by the test */
  k_shape out_shape[KT_MAX_IO];
  k_dtype out_dtype[KT_MAX_IO];/* K_F32 unless set (zero) */
  const void *param;
  size_t temp_bytes;           /* for forward and backward alike */
  uint32_t deps_og, deps_in, deps_out;  /* declared backward dependencies, bit i = index i */
  uint32_t no_grad;            /* args that take no gradient (bit i = arg i): req kNullOp */
  int is_train;                /* forward mode for the check (1 for dropout, batch_norm) */
  float eps;                   /* finite-difference step (default 1e-3) */
  float rtol, atol;            /* default 2e-2 and 2e-3 */
  int max_points;              /* elements checked per input (default 64, spread evenly) */
} kt_case;

/* Deterministic fills (xorshift), independent of libc's rand. */
void kt_fill_uniform(float *x, int64_t n, float lo, float hi, uint64_t seed);
void kt_fill_int(int32_t *x, int64_t n, int32_t lo, int32_t hi_exclusive, uint64_t seed);
k_shape kt_shape(int rank, ...);   /* kt_shape(2, 3, 4) == [3, 4] */
k_tensor kt_tensor_f32(k_shape s, float lo, float hi, uint64_t seed);  /* malloc'd data */
k_tensor kt_tensor_i32(k_shape s, int32_t lo, int32_t hi_exclusive, uint64_t seed);
void kt_tensor_free(k_tensor *t);
float *kt_data_copy(const k_tensor *t);   /* malloc'd copy of t's floats (one spare) */
/* NCHW [N][C][P] -> channel-blocked [N][ceil(C / V)][P][V] (malloc'd; lanes past C are NaN,
 * which a kernel that read them as channels would carry to its result), and back. */
float *kt_to_blocked(const float *x, int64_t N, int64_t C, int64_t P, int64_t V);
void kt_from_blocked(const float *b, int64_t N, int64_t C, int64_t P, int64_t V, float *x);

/* Runs the forward kernel once into freshly allocated outputs (caller frees with free()). */
int kt_forward(const kt_case *c, k_tensor *out);

/* The check: analytic gradients of L = sum_k <r_k, out_k> over visible outputs (r_k random)
 * against central differences, then the same backward with kAddTo onto a prefilled buffer.
 * Returns the number of failures (0 = pass) and prints each one. */
int kt_gradcheck(const kt_case *c);

/* Compares n floats; prints the first few mismatches; returns the number of failures. */
int kt_expect_close(const char *what, const float *got, const float *want, int64_t n,
                    float rtol, float atol);

/* Test-program bookkeeping: KT_CHECK counts failures; kt_finish prints the summary line
 * "N passed, N failed" and returns the exit code. */
extern int kt_passed, kt_failed;
#define KT_CHECK(cond, ...) do { if (cond) kt_passed++; else { kt_failed++; \
  fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); \
  fputc('\n', stderr); } } while (0)
int kt_finish(const char *suite);

#include <stdio.h>
#endif
