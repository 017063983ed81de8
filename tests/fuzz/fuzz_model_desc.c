/* fuzz_model_desc.c — libFuzzer harness for the runtime's descriptor validation
 * (rt_model_create). A generated .so hands its descriptor to the runtime as constant data; a
 * corrupted one (a hostile or damaged file) must be refused or accepted without a crash.
 *
 * A valid descriptor of a small training model (convolution, batch_norm, pooling, reshape,
 * fully_connected, the loss; fusion off, so every step names a kernel) with a bounded batch
 * (`dim batch = 1..2`, so it has dims and patches: its tensors' and steps' sizes, and
 * reshape's shape attribute) is built once; each input is a list of 6-byte edits [field,
 * program, index (u16), value (i16)] applied to it in place, then undone after
 * rt_model_create. Counts (nin, nout, ndeps, ninputs, ndims, npatches, ...) only shrink, so
 * every array stays inside its allocation, as it is in any real descriptor; shape dims stay
 * small so a model that validates can still be allocated. Edits also reach the descriptor's
 * target (a CUDA model's descriptor must be refused by the CPU runtime), the epilogues the
 * predict program's convolution and fully_connected steps carry (k_epi_valid), the bounded
 * dims' ranges, every field of a patch (program bit 1: the tensors' patches instead of the
 * program's; a patch's a and b are the value times 2^(index >> 10), to reach overflow) and a
 * step's param_bytes, which takes any value: the runtime checks it against the op's struct
 * before it reads the param; and a step's per-sample run (samples, any value; sample_stride
 * pointed at a table of FUZZ_STRIDES entries the edits fill), which the runtime refuses on a
 * model with bounded dims and checks against the arena otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg.h"
#include "fe.h"
#include "k_epilogue.h"

static const char fuzz_src[] =
    "dim batch = 1..2\n"
    "model m {\n"
    "  input x : f32[batch, 1, 6, 6]\n  input l : i32[batch]\n"
    "  k = convolution(x, kernel=(3, 3), num_filter=4, pad=(1, 1))\n"
    "  c = relu(batch_norm(k))\n"
    "  p = pooling(c, kernel=(2, 2), pool_type=\"max\")\n"
    "  y = fully_connected(reshape(p, shape=(batch, 36)), num_hidden=3)\n"
    "  loss = softmax_cross_entropy(y, l)\n"
    "  output y\n  train loss with sgd(lr=0.1, momentum=0.9)\n}\n";

/* g compiled for mode as the seed is: fusion off. */
static ir_graph *fuzz_compile(const ir_graph *g, ir_mode mode, ir_diag *d) {
  pass_ctx cx;
  pass_ctx_init(&cx, mode, d);
  cx.disabled = 1u << PASS_fusion;
  ir_graph *out = pass_compile(g, &cx);
  pass_ctx_free(&cx);
  return out;
}

/* The bounded dims' patches of desc, from the lowered graph's probes compiled alike (as
 * cg_build_graphs does, without the LLVM back end this harness does not link). */
static int fuzz_dims(rt_model_desc *desc, const ir_graph *low, ir_diag *d, char *err, size_t n) {
  cg_probes pr = {.lowered = low, .n = ir_dims_nprobes(low->nbdims)};
  int bad = !low->probes;
  for (int k = 0; !bad && k < pr.n; k++)
    bad = !(pr.predict[k] = fuzz_compile(low->probes[k], IR_MODE_PREDICT, d)) ||
          !(pr.train[k] = fuzz_compile(low->probes[k], IR_MODE_TRAIN, d));
  if (!bad) bad = cg_desc_dims(desc, &pr, err, n);
  for (int k = 0; k < pr.n; k++) ir_graph_free(pr.predict[k]), ir_graph_free(pr.train[k]), cg_desc_free(pr.desc[k]);
  return bad;
}

static rt_model_desc *fuzz_desc(void) {
  ir_diag d;
  FILE *null = fopen("/dev/null", "w");
  ir_diag_init(&d, null);
  fe_file *f = fe_parse_text("fuzz.kiln", fuzz_src, sizeof fuzz_src - 1, &d);
  ir_graph *low = f ? fe_lower_model(f, f->models, NULL, 0, &d) : NULL, *g[2] = {NULL, NULL};
  for (int k = 0; low && k < 2; k++) g[k] = fuzz_compile(low, k ? IR_MODE_TRAIN : IR_MODE_PREDICT, &d);
  char err[512] = "";
  rt_model_desc *desc = g[0] && g[1] ? cg_desc_build(g[0], g[1], err, sizeof err) : NULL;
  if (desc && (fuzz_dims(desc, low, &d, err, sizeof err) || !desc->ndims || !desc->predict.npatches))
    cg_desc_free(desc), desc = NULL;
  if (!desc) fprintf(stderr, "fuzz_model_desc: the seed model does not build: %s\n", err), abort();
  ir_graph_free(g[0]), ir_graph_free(g[1]), ir_graph_free(low);
  fe_file_free(f);
  ir_diag_free(&d);
  return desc;
}

/* Where one edit goes, and the value to undo it. */
typedef struct { void *at; int size; int64_t old; } fuzz_undo;

static void fuzz_store(fuzz_undo *u, void *at, int size, int64_t v) {
  u->at = at, u->size = size;
  if (size == 4) u->old = *(int32_t *)at, *(int32_t *)at = (int32_t)v;
  else u->old = *(int64_t *)at, *(int64_t *)at = v;
}

static int64_t fuzz_shrink(int64_t cur, int v) { return cur > 0 ? (int64_t)((unsigned)v % (unsigned)(cur + 1)) : cur; }

/* An edit of step s's epilogue (field 17: its step count, 18-20: a step's kind, function and
 * input slot); 0 when s has none. The step array has K_EPI_MAX_STEPS entries whatever the
 * count says, so any value may be stored: validation must refuse what is out of range. */
static int fuzz_edit_epi(rt_step *s, int field, unsigned idx, int v, fuzz_undo *u) {
  k_epilogue *e = s ? (k_epilogue *)s->epi : NULL;
  if (!e) return 0;
  k_epi_step *es = &e->step[idx % K_EPI_MAX_STEPS];
  int32_t *at = field == 17 ? &e->nsteps : field == 18 ? &es->kind : field == 19 ? &es->fn : &es->slot;
  fuzz_store(u, at, 4, v);
  return 1;
}

/* v times 2^shift in two's complement: a patch's a or b far out of range, to reach overflow. */
static int64_t fuzz_wide(int v, unsigned shift) { return (int64_t)((uint64_t)(int64_t)v << (shift & 63)); }

/* An edit of a bounded dim (field 21: lo, 22: hi) or of their count (23); 0 without dims. */
static int fuzz_edit_dims(rt_model_desc *d, int field, unsigned idx, int v, fuzz_undo *u) {
  if (!d->ndims) return 0;
  rt_dim *x = (rt_dim *)&d->dims[idx % (unsigned)d->ndims];
  if (field == 23) return fuzz_store(u, &d->ndims, 4, fuzz_shrink(d->ndims, v)), 1;
  return fuzz_store(u, field == 21 ? &x->lo : &x->hi, 8, v), 1;
}

/* An edit of a patch (fields 24-30: kind, index, slot, axis, mask, a, b) or of their count
 * (31) in program p, or with `tensors` in the descriptor's tensor patches. The patch is
 * index % 1024 (mod the count), and a or b the value times 2^(index / 1024). */
static int fuzz_edit_patch(rt_model_desc *d, rt_program *p, int tensors, int field, unsigned idx, int v, fuzz_undo *u) {
  int32_t *n = tensors ? &d->ntensor_patches : &p->npatches;
  if (field == 31) return fuzz_store(u, n, 4, fuzz_shrink(*n, v)), 1;
  if (*n <= 0) return 0;
  rt_dimpatch *x = (rt_dimpatch *)(tensors ? d->tensor_patches : p->patches) + (idx % 1024) % (unsigned)*n;
  switch (field) {
  case 24: return fuzz_store(u, &x->kind, 4, v), 1;
  case 25: return fuzz_store(u, &x->index, 4, v), 1;
  case 26: return fuzz_store(u, &x->slot, 4, v), 1;
  case 27: return fuzz_store(u, &x->axis, 4, v), 1;
  case 28: return fuzz_store(u, &x->v.mask, 4, v), 1;
  case 29: return fuzz_store(u, &x->v.a, 8, fuzz_wide(v, idx / 1024)), 1;
  default: return fuzz_store(u, &x->v.b, 8, fuzz_wide(v, idx / 1024)), 1;
  }
}

enum { FUZZ_FIELDS = 36, FUZZ_STRIDES = 64 };

/* The per-sample strides a step may be pointed at (fields 34, 35): more entries than any step
 * of the seed model has slots, so the runtime reads inside it. */
static int64_t fuzz_strides[FUZZ_STRIDES];

/* Applies edit (field, index, value) to program p of d (tensors: the tensors' patches for a
 * patch's fields); 0 when it did nothing. */
static int fuzz_edit(rt_model_desc *d, rt_program *p, int tensors, int field, unsigned idx, int v, fuzz_undo *u) {
  rt_step *s = p->nsteps ? (rt_step *)&p->steps[idx % (unsigned)p->nsteps] : NULL;
  rt_tensor_info *t = (rt_tensor_info *)&d->tensors[idx % (unsigned)d->ntensors];
  switch (field % FUZZ_FIELDS) {
  case 0: return s ? fuzz_store(u, &s->nin, 4, fuzz_shrink(s->nin, v)), 1 : 0;
  case 1: return s ? fuzz_store(u, &s->nout, 4, fuzz_shrink(s->nout, v)), 1 : 0;
  case 2: return s && s->nin ? fuzz_store(u, (void *)&s->in[idx % (unsigned)s->nin], 4, v), 1 : 0;
  case 3: return s && s->nout ? fuzz_store(u, (void *)&s->out[idx % (unsigned)s->nout], 4, v), 1 : 0;
  case 4: return s ? fuzz_store(u, &s->ndeps, 4, fuzz_shrink(s->ndeps, v)), 1 : 0;
  case 5: return s && s->ndeps ? fuzz_store(u, (void *)&s->deps[idx % (unsigned)s->ndeps], 4, v), 1 : 0;
  case 6: return s ? fuzz_store(u, &s->temp_offset, 8, v), 1 : 0;
  case 7: return s ? fuzz_store(u, &s->temp_bytes, 8, v), 1 : 0;
  case 8: return fuzz_store(u, (void *)&p->offset[idx % (unsigned)d->ntensors], 8, v), 1;
  case 9: return fuzz_store(u, &p->arena_bytes, 8, v), 1;
  case 10: return t->shape.rank ? fuzz_store(u, &t->shape.d[idx % (unsigned)t->shape.rank], 8, v % 64), 1 : 0;
  case 11: return fuzz_store(u, &t->shape.rank, 4, fuzz_shrink(t->shape.rank, v)), 1;
  case 12: return p->ninputs ? fuzz_store(u, (void *)&p->inputs[idx % (unsigned)p->ninputs], 4, v), 1 : 0;
  case 13: return p->noutputs ? fuzz_store(u, (void *)&p->outputs[idx % (unsigned)p->noutputs], 4, v), 1 : 0;
  case 14: return fuzz_store(u, &t->role, 4, v), 1;
  case 15: return fuzz_store(u, &t->dtype, 4, v), 1;
  case 16: return fuzz_store(u, &d->target, 4, v), 1;
  case 17: case 18: case 19: case 20: return fuzz_edit_epi(s, field % FUZZ_FIELDS, idx, v, u);
  case 21: case 22: case 23: return fuzz_edit_dims(d, field % FUZZ_FIELDS, idx, v, u);
  case 32: return s ? fuzz_store(u, &s->param_bytes, 4, v), 1 : 0;
  case 33: return s ? fuzz_store(u, &s->samples, 4, v), 1 : 0;
  case 34: return s ? fuzz_store(u, (void *)&s->sample_stride, 8, (int64_t)(intptr_t)fuzz_strides), 1 : 0;
  case 35: return fuzz_store(u, &fuzz_strides[idx % FUZZ_STRIDES], 8, fuzz_wide(v, idx / 1024)), 1;
  default: return fuzz_edit_patch(d, p, tensors, field % FUZZ_FIELDS, idx, v, u);
  }
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  static rt_model_desc *d;
  if (!d) d = fuzz_desc();
  enum { MAX_EDITS = 64 };
  fuzz_undo undo[MAX_EDITS];
  int n = 0;
  for (size_t i = 0; i + 6 <= size && n < MAX_EDITS; i += 6) {
    int16_t v;
    memcpy(&v, data + i + 4, 2);
    rt_program *p = (data[i + 1] & 1) ? &d->train : &d->predict;
    n += fuzz_edit(d, p, data[i + 1] >> 1 & 1, data[i], (unsigned)data[i + 2] | (unsigned)data[i + 3] << 8, v, &undo[n]);
  }
  rt_model_destroy(rt_model_create(d, 1));
  while (n--) {
    if (undo[n].size == 4) *(int32_t *)undo[n].at = (int32_t)undo[n].old;
    else *(int64_t *)undo[n].at = undo[n].old;
  }
  return 0;
}
