/* fuzz_model_desc.c — libFuzzer harness for the runtime's descriptor validation
 * (rt_model_create). A generated .so hands its descriptor to the runtime as constant data; a
 * corrupted one (a hostile or damaged file) must be refused or accepted without a crash.
 *
 * A valid descriptor of a small training model (convolution, batch_norm, pooling,
 * fully_connected, the loss; fusion off, so every step names a kernel) is built once; each
 * input is a list of 6-byte edits [field, program, index (u16), value (i16)] applied to it
 * in place, then undone after rt_model_create. Counts (nin, nout, ndeps, ninputs, ...) only
 * shrink, so every array stays inside its allocation, as it is in any real descriptor;
 * shape dims stay small so a model that validates can still be allocated. Edits also reach the
 * descriptor's target (a CUDA model's descriptor must be refused by the CPU runtime) and the
 * epilogues the predict program's convolution and fully_connected steps carry (k_epi_valid). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg.h"
#include "fe.h"
#include "k_epilogue.h"

static const char fuzz_src[] =
    "model m {\n"
    "  input x : f32[2, 1, 6, 6]\n  input l : i32[2]\n"
    "  k = convolution(x, kernel=(3, 3), num_filter=4, pad=(1, 1))\n"
    "  c = relu(batch_norm(k))\n"
    "  p = pooling(c, kernel=(2, 2), pool_type=\"max\")\n"
    "  y = fully_connected(flatten(p), num_hidden=3)\n"
    "  loss = softmax_cross_entropy(y, l)\n"
    "  output y\n  train loss with sgd(lr=0.1, momentum=0.9)\n}\n";

static rt_model_desc *fuzz_desc(void) {
  ir_diag d;
  FILE *null = fopen("/dev/null", "w");
  ir_diag_init(&d, null);
  fe_file *f = fe_parse_text("fuzz.kiln", fuzz_src, sizeof fuzz_src - 1, &d);
  ir_graph *low = f ? fe_lower_model(f, f->models, NULL, 0, &d) : NULL, *g[2] = {NULL, NULL};
  for (int k = 0; low && k < 2; k++) {
    pass_ctx cx;
    pass_ctx_init(&cx, k ? IR_MODE_TRAIN : IR_MODE_PREDICT, &d);
    cx.disabled = 1u << PASS_fusion;
    g[k] = pass_compile(low, &cx);
    pass_ctx_free(&cx);
  }
  char err[512];
  rt_model_desc *desc = g[0] && g[1] ? cg_desc_build(g[0], g[1], err, sizeof err) : NULL;
  if (!desc) fprintf(stderr, "fuzz_model_desc: the seed model does not build\n"), abort();
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

/* Applies edit (field, index, value) to program p of d; 0 when it did nothing. */
static int fuzz_edit(rt_model_desc *d, rt_program *p, int field, unsigned idx, int v, fuzz_undo *u) {
  rt_step *s = p->nsteps ? (rt_step *)&p->steps[idx % (unsigned)p->nsteps] : NULL;
  rt_tensor_info *t = (rt_tensor_info *)&d->tensors[idx % (unsigned)d->ntensors];
  switch (field % 21) {
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
  default: return fuzz_edit_epi(s, field % 21, idx, v, u);
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
    n += fuzz_edit(d, p, data[i], (unsigned)data[i + 2] | (unsigned)data[i + 3] << 8, v, &undo[n]);
  }
  rt_model_destroy(rt_model_create(d, 1));
  while (n--) {
    if (undo[n].size == 4) *(int32_t *)undo[n].at = (int32_t)undo[n].old;
    else *(int64_t *)undo[n].at = undo[n].old;
  }
  return 0;
}
