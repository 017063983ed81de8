/* k_epilogue.c — runs an epilogue (k_epilogue.h) on a block of a heavy kernel's output, in
 * place. Unary and binary steps call the op's own forward kernel on the block, viewed as a
 * flat tensor, so the bits are those of the unfused op; batch_norm's affine uses k_norm.c's
 * coefficients and its expression y * a + b. */
#include "k_epilogue.h"

#include <string.h>

#include "k_vec.h"

/* The steps run one after another over sub-blocks of this many floats (16 KiB), so each step
 * reads what the previous one wrote from L1 rather than L2. */
#define K_EPI_CHUNK 4096

/* Indexed by K_EPI_FN_*: the same rows of the op list (k_ops.def). */
#define K_OP(op)
#define K_UNARY(op) [K_EPI_FN_##op] = k_##op##_forward,
#define K_BINARY K_UNARY
static const k_fn k_epi_kernels[K_EPI_FN_COUNT] = {
#include "k_ops.def"
};
#undef K_UNARY
#define K_UNARY(op) [K_EPI_FN_##op] = #op,
static const char *const k_epi_names[K_EPI_FN_COUNT] = {
#include "k_ops.def"
};
#undef K_OP
#undef K_UNARY
#undef K_BINARY

int k_epi_fn_lookup(const char *name) {
  for (int i = 0; i < K_EPI_FN_COUNT; i++)
    if (!strcmp(k_epi_names[i], name)) return i;
  return -1;
}

/* One channel run, the expression of k_norm.c's k_bn_apply (no FMA in any clone). */
K_VEC_TARGETS static void k_epi_axpb(float *y, int64_t n, float a, float b) {
  for (int64_t i = 0; i < n; i++) y[i] = y[i] * a + b;
}

static int k_epi_step_valid(const k_epi_step *s, int nin) {
  switch (s->kind) {
  case K_EPI_AFFINE: return s->slot >= 0 && s->slot + 3 < nin && s->channels > 0 && s->inner > 0;
  case K_EPI_UNARY: return s->fn >= 0 && s->fn < K_EPI_FN_COUNT;
  case K_EPI_BINARY: return s->fn >= 0 && s->fn < K_EPI_FN_COUNT && s->slot >= 0 && s->slot < nin;
  default: return 0;
  }
}

int k_epi_valid(const k_epilogue *e, int nin) {
  if (e->nsteps < 0 || e->nsteps > K_EPI_MAX_STEPS) return 0;
  for (int i = 0; i < e->nsteps; i++)
    if (!k_epi_step_valid(&e->step[i], nin)) return 0;
  return 1;
}

/* y[lo, hi) = y * a + b per channel run, as k_norm.c's predict path writes it. */
static void k_epi_affine(const k_call *c, const k_epi_step *s, float *y, int64_t lo, int64_t hi) {
  const float *gamma = c->in[s->slot].data, *beta = c->in[s->slot + 1].data;
  const float *mean = c->in[s->slot + 2].data, *var = c->in[s->slot + 3].data;
  for (int64_t e = lo; e < hi;) {
    int64_t run = e / s->inner, ch = run % s->channels, end = (run + 1) * s->inner;
    if (end > hi) end = hi;
    float invstd, a, b;
    k_batch_norm_predict_coeffs(gamma[ch], beta[ch], mean[ch], var[ch], s->eps, &invstd, &a, &b);
    k_epi_axpb(y + e, end - e, a, b);
    e = end;
  }
}

/* The op's kernel on the block as a flat [n] tensor, written in place (elementwise kernels
 * read each element before they write it). */
static void k_epi_kernel(const k_call *c, const k_epi_step *s, float *y, int64_t lo, int64_t hi) {
  k_shape flat = {1, {hi - lo}}, one = {0, {0}};
  k_tensor run = {y + lo, flat, K_F32}, in[2] = {run, run};
  if (s->kind == K_EPI_BINARY) {
    const float *o = c->in[s->slot].data;
    k_tensor other = s->scalar ? (k_tensor){(void *)o, one, K_F32} : (k_tensor){(void *)(o + lo), flat, K_F32};
    in[s->swap ? 0 : 1] = other;
    in[s->swap ? 1 : 0] = run;
  }
  k_req req = kWriteInplace;
  char msg[8];
  k_call k = {in, s->kind == K_EPI_BINARY ? 2 : 1, &run, 1, &req, s->has_param ? s->param : NULL, NULL, 0,
              0, 0, c->is_train, msg, sizeof msg, NULL, NULL};
  k_epi_kernels[s->fn](&k);   /* elementwise kernels cannot fail */
}

void k_epi_apply(const k_call *c, int64_t lo, int64_t hi) {
  const k_epilogue *e = c->epi;
  float *y = c->out[0].data;
  for (int64_t a = lo; e && a < hi; a += K_EPI_CHUNK) {
    int64_t b = hi - a < K_EPI_CHUNK ? hi : a + K_EPI_CHUNK;
    for (int i = 0; i < e->nsteps; i++) {
      const k_epi_step *s = &e->step[i];
      if (s->kind == K_EPI_AFFINE) k_epi_affine(c, s, y, a, b);
      else k_epi_kernel(c, s, y, a, b);
    }
  }
}
