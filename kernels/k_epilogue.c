/* k_epilogue.c — runs an epilogue (k_epilogue.h) on a block of a heavy kernel's output, in
 * place. Unary steps call the op's own forward kernel on the block, viewed as a flat tensor,
 * and binary steps the block function that kernel's loops run, so the bits are those of the
 * unfused op; batch_norm's affine uses k_norm.c's
 * coefficients and its expression y * a + b, and a training batch_norm's statistics its row
 * sums (k_bn_row_sums). */
#include "k_epilogue.h"

#include <string.h>

#include "k_vec.h"

/* The steps run one after another over sub-blocks of this many floats (16 KiB), so each step
 * reads what the previous one wrote from L1 rather than L2. */
#define K_EPI_CHUNK 4096
#define K_EPI_VMAX 16   /* the widest block of a blocked output */

/* Indexed by K_EPI_FN_*: the same rows of the op list (k_ops.def). */
#define K_OP(op)
#define K_UNARY(op) [K_EPI_FN_##op] = k_##op##_forward,
#define K_BINARY K_UNARY
static const k_fn k_epi_kernels[K_EPI_FN_COUNT] = {
#include "k_ops.def"
};
#undef K_UNARY
#undef K_BINARY
/* The binary rows' block functions (NULL for the unary ones), for k_epi_binary. */
#define K_UNARY(op)
#define K_BINARY(op) [K_EPI_FN_##op] = k_##op##_fwd_block,
static const k_fwd_block_fn k_epi_blocks[K_EPI_FN_COUNT] = {
#include "k_ops.def"
};
#undef K_UNARY
#undef K_BINARY
#define K_BINARY K_UNARY
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

static int k_epi_step_valid(const k_epi_step *s, int nin, int nout, int last) {
  switch (s->kind) {
  case K_EPI_AFFINE: return s->slot >= 0 && s->slot + 3 < nin && s->channels > 0 && s->inner > 0;
  case K_EPI_UNARY: return s->fn >= 0 && s->fn < K_EPI_FN_COUNT;
  case K_EPI_BINARY:
    return s->fn >= 0 && s->fn < K_EPI_FN_COUNT && s->slot >= 0 && s->slot < nin && s->period >= 0 &&
           !(s->scalar && s->period);
  case K_EPI_STATS: return last && s->slot >= 1 && s->slot < nout && s->inner > 0;
  default: return 0;
  }
}

int k_epi_valid(const k_epilogue *e, int nin, int nout) {
  if (e->nsteps < 0 || e->nsteps > K_EPI_MAX_STEPS) return 0;
  for (int i = 0; i < e->nsteps; i++)
    if (!k_epi_step_valid(&e->step[i], nin, nout, i == e->nsteps - 1)) return 0;
  return nout == 1 + k_epi_has_stats(e);
}

int k_epi_operand_fit(const k_epi_step *s, const k_shape *other, const k_shape *y) {
  int64_t n = k_shape_numel(other), ny = k_shape_numel(y);
  if (s->scalar) return n == 1;
  if (s->period) return n == s->period && ny % s->period == 0;
  return n == ny;
}

/* e's STATS step (its last), or NULL. */
static const k_epi_step *k_epi_stats_step(const k_epilogue *e) {
  return e && e->nsteps > 0 && e->step[e->nsteps - 1].kind == K_EPI_STATS ? &e->step[e->nsteps - 1] : NULL;
}

int k_epi_has_stats(const k_epilogue *e) { return k_epi_stats_step(e) != NULL; }

int k_epi_stats_fit(const k_epilogue *e, const k_shape *y, const k_shape *st) {
  const k_epi_step *s = k_epi_stats_step(e);
  int64_t n = k_shape_numel(y);
  return !s || (s->inner > 0 && n % s->inner == 0 && k_shape_numel(st) == n / s->inner * K_BN_STATS_FLOATS);
}

/* y[lo, hi) = y * a + b per channel run, as k_norm.c's predict path writes it. */
static void k_epi_affine(const k_call *c, const k_epi_step *s, float *y, int64_t base, int64_t lo, int64_t hi) {
  const float *gamma = c->in[s->slot].data, *beta = c->in[s->slot + 1].data;
  const float *mean = c->in[s->slot + 2].data, *var = c->in[s->slot + 3].data;
  for (int64_t e = lo; e < hi;) {
    int64_t run = e / s->inner, ch = run % s->channels, end = (run + 1) * s->inner;
    if (end > hi) end = hi;
    float invstd, a, b;
    k_batch_norm_predict_coeffs(gamma[ch], beta[ch], mean[ch], var[ch], s->eps, &invstd, &a, &b);
    k_epi_axpb(y + (e - base), end - e, a, b);
    e = end;
  }
}

/* One channel block's run y[0, n) of positions of V lanes: y = y * a[lane] + b[lane]. */
K_VEC_TARGETS static void k_epi_axpb_lanes(float *y, int64_t n, const float *a, const float *b, int64_t V) {
  for (int64_t i = 0; i < n; i += V)
    for (int64_t l = 0; l < V; l++) y[i + l] = y[i + l] * a[l] + b[l];
}

/* k_epi_affine on a blocked output: runs of inner * V floats share a channel block. */
static void k_epi_affine_blocked(const k_call *c, const k_epi_step *s, float *y, int64_t base, int64_t lo, int64_t hi,
                                 int64_t V) {
  const float *gamma = c->in[s->slot].data, *beta = c->in[s->slot + 1].data;
  const float *mean = c->in[s->slot + 2].data, *var = c->in[s->slot + 3].data;
  int64_t blocks = (s->channels + V - 1) / V, len = s->inner * V;
  for (int64_t e = lo; e < hi;) {
    int64_t run = e / len, cb = run % blocks, end = (run + 1) * len;
    if (end > hi) end = hi;
    float a[K_EPI_VMAX], b[K_EPI_VMAX], invstd;
    for (int64_t l = 0; l < V; l++) {
      int64_t ch = cb * V + l;
      a[l] = b[l] = 0;
      if (ch < s->channels)
        k_batch_norm_predict_coeffs(gamma[ch], beta[ch], mean[ch], var[ch], s->eps, &invstd, &a[l], &b[l]);
    }
    k_epi_axpb_lanes(y + (e - base), end - e, a, b, V);
    e = end;
  }
}

/* A unary step: the op's kernel on elements [lo, hi) as a flat tensor, written in place
 * (elementwise kernels read each element before they write it). */
static void k_epi_unary(const k_call *c, const k_epi_step *s, float *y, int64_t base, int64_t lo, int64_t hi) {
  k_shape flat = {1, {hi - lo}};
  k_tensor run = {y + (lo - base), flat, K_F32};
  k_req req = kWriteInplace;
  char msg[8];
  k_call k = {&run, 1, &run, 1, &req, s->has_param ? s->param : NULL, NULL, 0,
              0, 0, c->is_train, msg, sizeof msg, NULL, NULL, NULL};
  k_epi_kernels[s->fn](&k);   /* elementwise kernels cannot fail */
}

/* A binary step on elements [lo, hi), element lo stored at y + lo - base: runs of at most a
 * stack block that do not cross a period's end (a bias over the last axes repeats every
 * period elements), each through the op's block function as its broadcasting kernel runs it
 * on same-shaped runs or a one-value operand, so the same bits — but without a kernel call
 * a run: a 384-wide bias by a call a row cost ConvNeXt-T's first matmul a fifth of its time. */
K_VEC_TARGETS static void k_epi_binary(const k_call *c, const k_epi_step *s, float *y, int64_t base, int64_t lo,
                                       int64_t hi) {
  const float *o = c->in[s->slot].data;
  k_fwd_block_fn blk = k_epi_blocks[s->fn];
  int64_t so = s->scalar ? 0 : 1;   /* the operand's stride */
  float t[K_BLOCK];
  for (int64_t e = lo, len; e < hi; e += len) {
    int64_t at = s->scalar ? 0 : s->period ? e % s->period : e;
    len = s->period && s->period - at < hi - e ? s->period - at : hi - e;
    len = len < K_BLOCK ? len : K_BLOCK;
    float *r = y + (e - base);
    if (s->swap) blk(t, o + at, r, len, so, 1);
    else blk(t, r, o + at, len, 1, so);
    k_store_block(r, t, len, kWriteTo);
  }
}

/* A step on elements [lo, hi) (the output's own indices), element lo stored at y + lo - base. */
static void k_epi_kernel(const k_call *c, const k_epi_step *s, float *y, int64_t base, int64_t lo, int64_t hi) {
  if (s->kind == K_EPI_BINARY) k_epi_binary(c, s, y, base, lo, hi);
  else k_epi_unary(c, s, y, base, lo, hi);
}

/* A unary step on blocked elements [lo, hi): in a last channel block that is mostly padding
 * (LeNet's 20 filters leave 4 of the second block's 16 lanes real), the real lanes are copied
 * out, the op runs on them alone, and they go back; the padding lanes keep whatever they held,
 * which nothing reads as a channel. An elementwise op gives each real element the same bits
 * either way. Other blocks run whole. */
static void k_epi_unary_blocked(const k_call *c, const k_epi_step *s, float *y, int64_t base, int64_t lo, int64_t hi,
                                int64_t V) {
  const k_shape *o = &c->out[0].shape;
  int64_t C = o->d[1], Cb = (C + V - 1) / V, len = V, cn = C - (Cb - 1) * V;
  for (int i = 2; i < o->rank; i++) len *= o->d[i];
  if (2 * cn > V) return k_epi_kernel(c, s, y, base, lo, hi);
  float t[K_EPI_CHUNK];
  for (int64_t e = lo; e < hi;) {
    int64_t run = e / len, end = (run + 1) * len < hi ? (run + 1) * len : hi;
    if (run % Cb != Cb - 1) {
      k_epi_kernel(c, s, y, base, e, end);
    } else {
      float *r = y + (e - base);
      int64_t m = 0;
      for (int64_t p = 0; p < end - e; p += V)
        for (int64_t l = 0; l < cn; l++) t[m++] = r[p + l];
      k_epi_kernel(c, s, t, 0, 0, m);
      m = 0;
      for (int64_t p = 0; p < end - e; p += V)
        for (int64_t l = 0; l < cn; l++) r[p + l] = t[m++];
    }
    e = end;
  }
}

/* Elements [lo, hi) of the output (NCHW when V = 0), element lo stored at y; operands are
 * read at the elements' own indices. K_EPI_CHUNK is a multiple of every V, so the sub-blocks
 * stay whole vectors. */
static void k_epi_run(const k_call *c, float *y, int64_t lo, int64_t hi, int64_t V) {
  const k_epilogue *e = c->epi;
  for (int64_t a = lo; e && a < hi; a += K_EPI_CHUNK) {
    int64_t b = hi - a < K_EPI_CHUNK ? hi : a + K_EPI_CHUNK;
    for (int i = 0; i < e->nsteps; i++) {
      const k_epi_step *s = &e->step[i];
      if (s->kind == K_EPI_AFFINE && V) k_epi_affine_blocked(c, s, y, lo, a, b, V);
      else if (s->kind == K_EPI_AFFINE) k_epi_affine(c, s, y, lo, a, b);
      else if (s->kind == K_EPI_UNARY && V) k_epi_unary_blocked(c, s, y, lo, a, b, V);
      else if (s->kind != K_EPI_STATS) k_epi_kernel(c, s, y, lo, a, b);
    }
  }
}

void k_epi_stats(const k_call *c, int64_t plo, int64_t phi) {
  const k_epi_step *s = k_epi_stats_step(c->epi);
  if (!s || c->req[s->slot] == kNullOp || !c->out[s->slot].data) return;
  const float *y = c->out[0].data;
  float *st = c->out[s->slot].data;
  for (int64_t p = plo; p < phi; p++) {
    double sq[2];   /* copied in, so the output needs no double alignment */
    k_bn_row_sums(y + p * s->inner, s->inner, sq);
    memcpy(st + p * K_BN_STATS_FLOATS, sq, sizeof sq);
  }
}

void k_epi_apply_rows(const k_call *c, int64_t lo, int64_t hi) {
  if (c->epi) k_epi_run(c, (float *)c->out[0].data + lo, lo, hi, 0);
}

void k_epi_apply(const k_call *c, int64_t lo, int64_t hi) {
  k_epi_apply_rows(c, lo, hi);
  const k_epi_step *s = k_epi_stats_step(c->epi);
  if (s) k_epi_stats(c, (lo + s->inner - 1) / s->inner, hi / s->inner);   /* the planes whole in [lo, hi) */
}

int k_epi_store_of(const k_epilogue *e, k_epi_store *t) {
  int n = e ? e->nsteps : 0, i = 0;
  *t = (k_epi_store){-1, 0, 0, 0, 0.0f, 0.0f};
  if (i < n && e->step[i].kind == K_EPI_BINARY && e->step[i].fn == K_EPI_FN_add && !e->step[i].scalar &&
      !e->step[i].period) {
    t->add_slot = e->step[i].slot, t->add_swap = e->step[i].swap;
    i++;
  }
  if (i < n && e->step[i].kind == K_EPI_UNARY && e->step[i].fn == K_EPI_FN_relu) t->relu = 1, i++;
  else if (i < n && e->step[i].kind == K_EPI_UNARY && e->step[i].fn == K_EPI_FN_clip && e->step[i].has_param) {
    k_clip_param cp;
    memcpy(&cp, e->step[i].param, sizeof cp);
    t->clip = 1, t->clip_lo = cp.a_min, t->clip_hi = cp.a_max, i++;
  }
  return i == n;
}

void k_epi_apply_blocked(const k_call *c, float *y, int64_t lo, int64_t hi, int64_t V) {
  if (c->epi) k_epi_run(c, y, lo, hi, V);
}
