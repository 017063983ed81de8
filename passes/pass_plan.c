/* pass_plan.c — memory planning: which storage each tensor needs, its lifetime over the
 * node order, and its place in one arena; plus the validator that checks any plan. The
 * naive plan (every tensor its own buffer) is the baseline the figures compare against and
 * what the plan pass gives when switched off. */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

#define PASS_ALIGN 64

static int64_t pass_align(int64_t n) { return (n + PASS_ALIGN - 1) & ~(int64_t)(PASS_ALIGN - 1); }

size_t pass_node_temp_bytes(const ir_graph *g, const ir_node *n) {
  if ((n->kind != IR_N_OP && n->kind != IR_N_BACKWARD) || !(ir_ops[n->op].resources & IR_RES_TEMP)) return 0;
  int base = n->kind == IR_N_BACKWARD ? ir_op_nouts(&ir_ops[n->op]) : 0;   /* in_data follows the out_grads */
  if (n->in[base] < 0 || n->in[base + 1] < 0) KILN_ICE("%s: workspace needs data and weight", n->name);
  const ir_tensor *d = ir_tensor_at(g, n->in[base]), *w = ir_tensor_at(g, n->in[base + 1]);
  if (n->op == IR_OP_convolution) return k_conv_temp_bytes(&d->shape, &w->shape, n->param);
  return 0;
}

static ir_mem_class pass_plan_class(const ir_tensor *t) {
  switch (t->kind) {
  case IR_T_INPUT: return IR_MEM_INPUT;
  case IR_T_VALUE: return IR_MEM_ARENA;
  default: return IR_MEM_PERSIST;
  }
}

static void pass_plan_touch(ir_plan *p, const ir_graph *g, int t, int pos, bool write) {
  ir_buffer *b = &p->buf[t];
  if (b->cls == IR_MEM_NONE) {
    const ir_tensor *x = ir_tensor_at(g, t);
    *b = (ir_buffer){pass_plan_class(x), 0, ir_tensor_numel(x) * 4, write ? pos : 0, pos, -1};
  }
  if (write && pos < b->first) b->first = pos;
  if (pos > b->last) b->last = pos;
}

/* Lifetimes in node positions; graph outputs and the loss live to the end (position n),
 * where the entry point copies them out. Workspaces live for their node only. */
void pass_plan_liveness(const ir_graph *g, ir_plan *p) {
  int nn = ir_nnodes(g);
  for (int t = 0; t < ir_ntensors(g); t++) p->buf[t] = (ir_buffer){IR_MEM_NONE, 0, 0, 0, 0, -1};
  for (int i = 0; i < nn; i++) {
    const ir_node *n = ir_node_at(g, i);
    for (int j = 0; j < n->nin; j++)
      if (n->in[j] >= 0) pass_plan_touch(p, g, n->in[j], i, false);
    for (int j = 0; j < n->nout; j++)
      if (n->out[j] >= 0) pass_plan_touch(p, g, n->out[j], i, true);
    for (int j = 0; j < n->nout && n->inplace; j++)
      if (n->out[j] >= 0 && n->inplace[j] >= 0 && n->in[n->inplace[j]] >= 0) p->buf[n->out[j]].share = n->in[n->inplace[j]];
    p->temp_bytes[i] = (int64_t)pass_node_temp_bytes(g, n);
  }
  for (int i = 0; i < g->outputs.len; i++) pass_plan_touch(p, g, IR_VEC_AT(g->outputs, int, i), nn, false);
  if (g->mode == IR_MODE_TRAIN && g->loss >= 0) pass_plan_touch(p, g, g->loss, nn, false);
}

static ir_plan *pass_plan_new(const ir_graph *g) {
  ir_plan *p = calloc(1, sizeof *p);
  if (p) {
    p->buf = calloc((size_t)ir_ntensors(g) + 1, sizeof *p->buf);
    p->temp_offset = calloc((size_t)ir_nnodes(g) + 1, sizeof(int64_t));
    p->temp_bytes = calloc((size_t)ir_nnodes(g) + 1, sizeof(int64_t));
  }
  if (!p || !p->buf || !p->temp_offset || !p->temp_bytes) KILN_ICE("out of memory planning %s", g->name);
  return p;
}

void pass_plan_free(ir_plan *p) {
  if (!p) return;
  free(p->buf);
  free(p->temp_offset);
  free(p->temp_bytes);
  free(p);
}

/* The bytes of every ARENA tensor and workspace, each in its own buffer. */
static int64_t pass_plan_naive_layout(const ir_graph *g, ir_plan *p) {
  int64_t off = 0;
  for (int t = 0; t < ir_ntensors(g); t++)
    if (p->buf[t].cls == IR_MEM_ARENA) p->buf[t].offset = off, off += pass_align(p->buf[t].bytes);
  for (int i = 0; i < ir_nnodes(g); i++)
    if (p->temp_bytes[i]) p->temp_offset[i] = off, off += pass_align(p->temp_bytes[i]);
  return off;
}

ir_plan *pass_plan_naive(const ir_graph *g) {
  ir_plan *p = pass_plan_new(g);
  pass_plan_liveness(g, p);
  for (int t = 0; t < ir_ntensors(g); t++) p->buf[t].share = -1;   /* naive: nothing shared */
  p->arena_bytes = p->naive_bytes = pass_plan_naive_layout(g, p);
  return p;
}

int pass_plan_off(ir_graph *g, pass_ctx *cx) {
  (void)cx;
  pass_plan_free(g->plan);
  g->plan = pass_plan_naive(g);
  return 0;
}

/* ---- the validator ---- */

static bool pass_overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) { return a0 < b1 && b0 < a1; }

/* An in-place pair is legal when the reused tensor is an arena value of the same size whose
 * last read is the node that writes the new one, and both sit at the same offset. */
static int pass_validate_share(const ir_graph *g, const ir_plan *p, int t, FILE *out) {
  const ir_buffer *b = &p->buf[t];
  if (b->share < 0) return 0;
  const ir_buffer *s = &p->buf[b->share];
  const char *tn = ir_tensor_at(g, t)->name, *sn = ir_tensor_at(g, b->share)->name;
  if (s->cls != IR_MEM_ARENA) return fprintf(out, "plan: %s reuses %s, which is not an arena value\n", tn, sn), 1;
  if (s->bytes != b->bytes) return fprintf(out, "plan: %s reuses %s of another size\n", tn, sn), 1;
  if (s->last != b->first) return fprintf(out, "plan: %s reuses %s, which is still read after position %d\n", tn, sn, b->first), 1;
  if (s->offset != b->offset) return fprintf(out, "plan: %s reuses %s but sits at another offset\n", tn, sn), 1;
  return 0;
}

static bool pass_shares(const ir_plan *p, int a, int b) {
  for (int t = a; t >= 0; t = p->buf[t].share)
    if (t == b) return true;
  for (int t = b; t >= 0; t = p->buf[t].share)
    if (t == a) return true;
  return false;
}

static int pass_validate_pair(const ir_graph *g, const ir_plan *p, int a, int b, FILE *out) {
  const ir_buffer *x = &p->buf[a], *y = &p->buf[b];
  if (!pass_overlap(x->first, x->last + 1, y->first, y->last + 1)) return 0;
  if (!pass_overlap(x->offset, x->offset + x->bytes, y->offset, y->offset + y->bytes)) return 0;
  if (pass_shares(p, a, b)) return 0;
  fprintf(out, "plan: %s [%d, %d] and %s [%d, %d] are live together and overlap in the arena\n",
          ir_tensor_at(g, a)->name, x->first, x->last, ir_tensor_at(g, b)->name, y->first, y->last);
  return 1;
}

static int pass_validate_temps(const ir_graph *g, const ir_plan *p, FILE *out) {
  for (int i = 0; i < ir_nnodes(g); i++) {
    if (!p->temp_bytes[i]) continue;
    if (p->temp_offset[i] + p->temp_bytes[i] > p->arena_bytes) return fprintf(out, "plan: workspace of node %d ends past the arena\n", i), 1;
    for (int t = 0; t < ir_ntensors(g); t++) {
      const ir_buffer *b = &p->buf[t];
      if (b->cls != IR_MEM_ARENA || b->first > i || b->last < i) continue;
      if (pass_overlap(b->offset, b->offset + b->bytes, p->temp_offset[i], p->temp_offset[i] + p->temp_bytes[i]))
        return fprintf(out, "plan: workspace of node %d overlaps %s, live at the same time\n", i, ir_tensor_at(g, t)->name), 1;
    }
  }
  return 0;
}

static int pass_validate_reads(const ir_graph *g, const ir_plan *p, FILE *out) {
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    for (int j = 0; j < n->nin; j++) {
      int t = n->in[j];
      if (t < 0 || p->buf[t].cls != IR_MEM_ARENA) continue;
      if (p->buf[t].first >= i) return fprintf(out, "plan: node %s reads %s before its write\n", n->name, ir_tensor_at(g, t)->name), 1;
    }
  }
  return 0;
}

int pass_plan_validate(const ir_graph *g, const ir_plan *p, FILE *out) {
  int nt = ir_ntensors(g);
  for (int a = 0; a < nt; a++) {
    const ir_buffer *b = &p->buf[a];
    if (b->cls != IR_MEM_ARENA) continue;
    if (b->offset % PASS_ALIGN || b->offset + b->bytes > p->arena_bytes)
      return fprintf(out, "plan: %s is misaligned or ends past the arena\n", ir_tensor_at(g, a)->name), 1;
    if (pass_validate_share(g, p, a, out)) return 1;
    for (int c = a + 1; c < nt; c++)
      if (p->buf[c].cls == IR_MEM_ARENA && pass_validate_pair(g, p, a, c, out)) return 1;
  }
  return pass_validate_temps(g, p, out) || pass_validate_reads(g, p, out);
}

/* Arena packing arrives with its own change; until then the plan pass lays out naively. */
int pass_plan(ir_graph *g, pass_ctx *cx) { return pass_plan_off(g, cx); }
