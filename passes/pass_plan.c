/* pass_plan.c — memory planning: which storage each tensor needs, its lifetime over the
 * node order, and its place in one arena; plus the validator that checks any plan. The
 * naive plan (every tensor its own buffer) is the baseline the figures compare against and
 * what the plan pass gives when switched off. */
#include "passes.h"
#include "k_epilogue.h"

#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#define PASS_ALIGN 64

static int64_t pass_align(int64_t n) { return (n + PASS_ALIGN - 1) & ~(int64_t)(PASS_ALIGN - 1); }

/* The op row's workspace function on the shapes of the node's arguments (a backward node's
 * in_data, after its out_grads; a pruned slot's shape is still recorded in slot_shape); with
 * N > 0, on one sample: each value whose first axis is N at 1 (the plan runs the node per
 * sample, and the direct and im2col paths choose by N, so one sample's workspace can exceed
 * the batch's). */
static size_t pass_node_temp_at(const ir_graph *g, const ir_node *n, int64_t N) {
  if (n->epi) return pass_node_temp_at(g, &n->sub[0], N);     /* the heavy op's workspace */
  if ((n->kind != IR_N_OP && n->kind != IR_N_BACKWARD) || !(ir_ops[n->op].resources & IR_RES_TEMP)) return 0;
  const ir_opdef *op = &ir_ops[n->op];
  int base = n->kind == IR_N_BACKWARD ? ir_op_nouts(op) : 0, nargs = ir_op_nargs(op);
  k_shape args[16];
  if (!op->temp || nargs > 16) KILN_ICE("%s: an op asking for temp space needs a k_temp_fn", n->name);
  for (int j = 0; j < nargs; j++) {
    int t = base + j < n->nin ? n->in[base + j] : -1;
    args[j] = t >= 0 ? ir_tensor_at(g, t)->shape : n->slot_shape ? n->slot_shape[base + j] : (k_shape){0, {0}};
    if (N > 0 && t >= 0 && ir_tensor_at(g, t)->kind == IR_T_VALUE && args[j].rank > 0 && args[j].d[0] == N) args[j].d[0] = 1;
  }
  return op->temp(args, n->param);
}

size_t pass_node_temp_bytes(const ir_graph *g, const ir_node *n) { return pass_node_temp_at(g, n, 0); }

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
    *b = (ir_buffer){pass_plan_class(x), 0, ir_tensor_bytes(x), write ? pos : 0, pos, -1, -1, 0, 0};
  }
  if (write && pos < b->first) b->first = pos;
  if (pos > b->last) b->last = pos;
}

/* Lifetimes in node positions; graph outputs and the loss live to the end (position n),
 * where the entry point copies them out. Workspaces live for their node only. */
void pass_plan_liveness(const ir_graph *g, ir_plan *p) {
  int nn = ir_nnodes(g);
  for (int t = 0; t < ir_ntensors(g); t++) p->buf[t] = (ir_buffer){IR_MEM_NONE, 0, 0, 0, 0, -1, -1, 0, 0};
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

ir_plan *pass_plan_new(const ir_graph *g) {
  ir_plan *p = calloc(1, sizeof *p);
  if (p) {
    p->buf = calloc((size_t)ir_ntensors(g) + 1, sizeof *p->buf);
    p->temp_offset = calloc((size_t)ir_nnodes(g) + 1, sizeof(int64_t));
    p->temp_bytes = calloc((size_t)ir_nnodes(g) + 1, sizeof(int64_t));
    p->samples = calloc((size_t)ir_nnodes(g) + 1, sizeof(int32_t));
  }
  if (!p || !p->buf || !p->temp_offset || !p->temp_bytes || !p->samples) KILN_ICE("out of memory planning %s", g->name);
  return p;
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
  ir_plan_free(g->plan);
  g->plan = pass_plan_naive(g);
  return 0;
}

/* ---- the validator ---- */

static bool pass_overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) { return a0 < b1 && b0 < a1; }

/* The samples of tensor t (its first axis; 1 for a scalar). */
static int64_t pass_plan_nsamples(const ir_graph *g, int t) {
  const k_shape *s = &ir_tensor_at(g, t)->shape;
  return s->rank > 0 && s->d[0] > 0 ? s->d[0] : 1;
}

/* The rows before a concat's axis in its output o: more than one, its pieces' runs interleave. */
static int64_t pass_plan_outer(const ir_tensor *o, int dim) {
  int64_t outer = 1;
  for (int d = 0; d < dim && d < o->shape.rank; d++) outer *= o->shape.d[d];
  return outer;
}

/* The bytes between the samples of a piece placed inside tensor o, which a concat writes: 0
 * where the concat holds each piece as one run, else o's sample (o's own samples may lie
 * apart inside a further concat). */
static int64_t pass_piece_sample_bytes(const ir_graph *g, const ir_plan *p, int o) {
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    if (n->kind != IR_N_OP || n->op != IR_OP_concat || n->nout < 1 || n->out[0] != o) continue;
    if (pass_plan_outer(ir_tensor_at(g, o), ((const k_concat_param *)n->param)->dim) == 1) return 0;
    return p->buf[o].sample_bytes > 0 ? p->buf[o].sample_bytes : p->buf[o].bytes / pass_plan_nsamples(g, o);
  }
  return 0;
}

/* The end of the bytes t's storage spans: its samples' last byte where they lie apart. */
static int64_t pass_buf_end(const ir_graph *g, const ir_plan *p, int t) { return p->buf[t].offset + ir_plan_span(g, p, t); }

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

/* Whether b's storage holds a's by design: b is reached from a through in-place shares and
 * concat placements (a piece inside its concat's output). */
static bool pass_holds(const ir_plan *p, int a, int b) {
  for (int t = a, hops = 0; t >= 0 && hops <= 1 << 24; hops++) {
    if (t == b) return true;
    t = p->buf[t].share >= 0 ? p->buf[t].share : p->buf[t].within;
  }
  return false;
}

static bool pass_shares(const ir_plan *p, int a, int b) { return pass_holds(p, a, b) || pass_holds(p, b, a); }

/* A piece placed inside its concat's output sits at the byte the concat would copy it to,
 * within that output, and is read last by the concat (the slice is the output's after it). */
static int pass_validate_within(const ir_graph *g, const ir_plan *p, int t, FILE *out) {
  const ir_buffer *b = &p->buf[t];
  if (b->within < 0) return 0;
  const ir_buffer *o = &p->buf[b->within];
  const char *tn = ir_tensor_at(g, t)->name, *on = ir_tensor_at(g, b->within)->name;
  int64_t n = b->sample_bytes > 0 ? pass_plan_nsamples(g, t) : 1;   /* a sample of t in each of o's */
  if (o->cls != IR_MEM_ARENA || b->within_at < 0 || n != (b->sample_bytes > 0 ? pass_plan_nsamples(g, b->within) : 1) ||
      b->within_at + b->bytes / n > o->bytes / n)
    return fprintf(out, "plan: %s is placed inside %s but does not fit there\n", tn, on), 1;
  if (b->sample_bytes != pass_piece_sample_bytes(g, p, b->within))
    return fprintf(out, "plan: %s is placed inside %s but its samples are not %s's apart\n", tn, on, on), 1;
  if (b->offset != o->offset + b->within_at)
    return fprintf(out, "plan: %s is placed inside %s but not at its byte %lld\n", tn, on, (long long)b->within_at), 1;
  if (o->first < b->first) return fprintf(out, "plan: %s is placed inside %s, written before it\n", tn, on), 1;
  return 0;
}

static int pass_plan_top(const ir_plan *p, int t, int64_t *at);

/* Two tensors whose samples lie apart inside one concat's output, at one stride: whether a
 * sample of each overlaps (the pieces of a concat at batch N interleave, sample by sample). */
static bool pass_plan_samples_overlap(const ir_graph *g, const ir_plan *p, int a, int b) {
  const ir_buffer *x = &p->buf[a], *y = &p->buf[b];
  int64_t xa = 0, ya = 0;
  int64_t na = pass_plan_nsamples(g, a), nb = pass_plan_nsamples(g, b);
  pass_plan_top(p, a, &xa), pass_plan_top(p, b, &ya);
  return pass_overlap(xa, xa + x->bytes / na, ya, ya + y->bytes / nb);
}

static int pass_validate_pair(const ir_graph *g, const ir_plan *p, int a, int b, FILE *out) {
  const ir_buffer *x = &p->buf[a], *y = &p->buf[b];
  if (!pass_overlap(x->first, x->last + 1, y->first, y->last + 1)) return 0;
  if (!pass_overlap(x->offset, pass_buf_end(g, p, a), y->offset, pass_buf_end(g, p, b))) return 0;
  if (pass_shares(p, a, b)) return 0;
  if (x->sample_bytes > 0 && x->sample_bytes == y->sample_bytes && pass_plan_top(p, a, NULL) == pass_plan_top(p, b, NULL) &&
      !pass_plan_samples_overlap(g, p, a, b))
    return 0;
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
      if (pass_overlap(b->offset, pass_buf_end(g, p, t), p->temp_offset[i], p->temp_offset[i] + p->temp_bytes[i]))
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

/* Every tensor a node touches has the storage its kind needs, and an arena value the bytes
 * of its type (a value internal to a fused group appears in no top-level node). */
static int pass_validate_classes(const ir_graph *g, const ir_plan *p, FILE *out) {
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    for (int j = 0; j < n->nin + n->nout; j++) {
      int t = j < n->nin ? n->in[j] : n->out[j - n->nin];
      if (t < 0) continue;
      const ir_tensor *x = ir_tensor_at(g, t);
      if (p->buf[t].cls != pass_plan_class(x))
        return fprintf(out, "plan: %s, used by node %s, has the wrong storage class\n", x->name, n->name), 1;
      if (p->buf[t].cls == IR_MEM_ARENA && p->buf[t].bytes != ir_tensor_bytes(x))
        return fprintf(out, "plan: %s has %lld bytes, not the size of its type\n", x->name, (long long)p->buf[t].bytes), 1;
    }
  }
  return 0;
}

static bool pass_plan_split_ok(const ir_graph *g, const ir_node *x, int j);

/* Each node touching a tensor whose samples lie apart runs per sample, and can. */
static int pass_validate_samples(const ir_graph *g, const ir_plan *p, FILE *out) {
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *x = ir_node_at(g, i);
    for (int j = 0; j < x->nin + x->nout; j++) {
      int t = j < x->nin ? x->in[j] : x->out[j - x->nin];
      if (t < 0 || p->buf[t].sample_bytes <= 0) continue;
      if (p->samples[i] != pass_plan_nsamples(g, t) || !pass_plan_split_ok(g, x, j))
        return fprintf(out, "plan: %s's samples lie apart but %s does not run once per sample\n", ir_tensor_at(g, t)->name,
                       x->name), 1;
    }
  }
  return 0;
}

int pass_plan_validate(const ir_graph *g, const ir_plan *p, FILE *out) {
  int nt = ir_ntensors(g);
  if (pass_validate_classes(g, p, out)) return 1;
  for (int a = 0; a < nt; a++) {
    const ir_buffer *b = &p->buf[a];
    if (b->cls != IR_MEM_ARENA) continue;
    if (b->offset % PASS_ALIGN || pass_buf_end(g, p, a) > p->arena_bytes)
      return fprintf(out, "plan: %s is misaligned or ends past the arena\n", ir_tensor_at(g, a)->name), 1;
    if (pass_validate_share(g, p, a, out) || pass_validate_within(g, p, a, out)) return 1;
    for (int c = a + 1; c < nt; c++)
      if (p->buf[c].cls == IR_MEM_ARENA && pass_validate_pair(g, p, a, c, out)) return 1;
  }
  return pass_validate_temps(g, p, out) || pass_validate_reads(g, p, out) || pass_validate_samples(g, p, out);
}

/* ---- arena packing (co-share): buffers whose lifetimes do not overlap share memory ---- */

/* One thing to place: an in-place chain of tensors (their lifetimes united) or a workspace. */
typedef struct {
  int64_t bytes, offset;
  int first, last;
  int tensor, node;      /* the chain's root tensor, or -1; the workspace's node, or -1 */
} pass_item;

/* The end of t's chain of in-place shares. A share the plan cannot honour (not an arena
 * value of the same size) is dropped: kWriteInplace allows, but never requires, aliasing. */
static int pass_plan_root(const ir_plan *p, int t) {
  for (int hops = 0; p->buf[t].share >= 0; hops++) {
    const ir_buffer *s = &p->buf[p->buf[t].share];
    if (s->cls != IR_MEM_ARENA || s->bytes != p->buf[t].bytes || hops > 1 << 24) return t;
    t = p->buf[t].share;
  }
  return t;
}

/* The tensor whose item holds t: its chain's root, or, for a root placed inside a concat's
 * output, that output's (transitively); *at (may be NULL) gets t's byte there. */
static int pass_plan_top(const ir_plan *p, int t, int64_t *at) {
  int64_t off = 0;
  t = pass_plan_root(p, t);
  for (int hops = 0; p->buf[t].within >= 0 && hops <= 1 << 24; hops++)
    off += p->buf[t].within_at, t = pass_plan_root(p, p->buf[t].within);
  if (at) *at = off;
  return t;
}

static void pass_plan_drop_bad_shares(ir_plan *p, int nt) {
  for (int t = 0; t < nt; t++) {
    int s = p->buf[t].share;
    if (s >= 0 && (p->buf[s].cls != IR_MEM_ARENA || p->buf[s].bytes != p->buf[t].bytes)) p->buf[t].share = -1;
  }
}

/* Items for every chain root and workspace; root[t] maps each arena tensor to its item. */
static int pass_plan_items(const ir_graph *g, const ir_plan *p, pass_item *it, int *item_of) {
  int n = 0, nt = ir_ntensors(g);
  for (int t = 0; t < nt; t++) item_of[t] = -1;
  for (int t = 0; t < nt; t++)
    if (p->buf[t].cls == IR_MEM_ARENA && pass_plan_top(p, t, NULL) == t)
      item_of[t] = n, it[n++] = (pass_item){p->buf[t].bytes, 0, p->buf[t].first, p->buf[t].last, t, -1};
  for (int t = 0; t < nt; t++) {
    if (p->buf[t].cls != IR_MEM_ARENA) continue;
    pass_item *r = &it[item_of[pass_plan_top(p, t, NULL)]];
    if (p->buf[t].first < r->first) r->first = p->buf[t].first;
    if (p->buf[t].last > r->last) r->last = p->buf[t].last;
  }
  for (int i = 0; i < ir_nnodes(g); i++)
    if (p->temp_bytes[i]) it[n++] = (pass_item){p->temp_bytes[i], 0, i, i, -1, i};
  return n;
}

static int pass_by_size(const void *a, const void *b) {
  const pass_item *x = *(pass_item *const *)a, *y = *(pass_item *const *)b;
  if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
  return x->first != y->first ? (x->first < y->first ? -1 : 1) : (x < y ? -1 : x > y);
}

static int pass_by_start(const void *a, const void *b) {
  const pass_item *x = *(pass_item *const *)a, *y = *(pass_item *const *)b;
  if (x->first != y->first) return x->first < y->first ? -1 : 1;
  return pass_by_size(a, b);
}

static int pass_by_span(const void *a, const void *b) {
  const pass_item *x = *(pass_item *const *)a, *y = *(pass_item *const *)b;
  int64_t sx = (int64_t)(x->last - x->first + 1) * x->bytes, sy = (int64_t)(y->last - y->first + 1) * y->bytes;
  return sx != sy ? (sx > sy ? -1 : 1) : pass_by_size(a, b);
}

static int pass_by_offset(const void *a, const void *b) {
  const pass_item *x = *(pass_item *const *)a, *y = *(pass_item *const *)b;
  return x->offset != y->offset ? (x->offset < y->offset ? -1 : 1) : 0;
}

/* The offset for x among the placed items live at the same time (sorted by offset): the
 * lowest gap that fits (first fit) or the smallest one (best fit); else above them all. */
static int64_t pass_plan_fit(pass_item **live, int n, int64_t size, bool best) {
  int64_t at = 0, choice = -1, choice_gap = INT64_MAX;
  for (int i = 0; i < n; i++) {
    int64_t gap = live[i]->offset - at;
    if (gap >= size && gap < choice_gap) {
      choice = at, choice_gap = gap;
      if (!best) return choice;
    }
    int64_t end = pass_align(live[i]->offset + live[i]->bytes);
    if (end > at) at = end;
  }
  return choice >= 0 ? choice : at;
}

/* Places items in `order`; returns the arena size. `live` is scratch for n pointers. */
static int64_t pass_plan_place(pass_item **order, int n, bool best, pass_item **live) {
  int64_t top = 0;
  for (int i = 0; i < n; i++) {
    pass_item *x = order[i];
    int nl = 0;
    for (int j = 0; j < i; j++)
      if (order[j]->first <= x->last && x->first <= order[j]->last) live[nl++] = order[j];
    qsort(live, (size_t)nl, sizeof *live, pass_by_offset);
    x->offset = pass_plan_fit(live, nl, pass_align(x->bytes), best);
    if (x->offset + pass_align(x->bytes) > top) top = x->offset + pass_align(x->bytes);
  }
  return top;
}

/* Tries three orders (size, start, size x lifetime) with first and best fit; keeps the
 * smallest arena in the items' offsets. */
static int64_t pass_plan_pack(pass_item *it, int n) {
  int (*orders[])(const void *, const void *) = {pass_by_size, pass_by_start, pass_by_span};
  pass_item **ord = malloc(sizeof *ord * ((size_t)n + 1)), **live = malloc(sizeof *live * ((size_t)n + 1));
  int64_t *best_off = malloc(sizeof(int64_t) * ((size_t)n + 1)), best = INT64_MAX;
  if (!ord || !live || !best_off) KILN_ICE("out of memory packing the arena");
  for (int o = 0; o < 6; o++) {
    for (int i = 0; i < n; i++) ord[i] = &it[i];
    qsort(ord, (size_t)n, sizeof *ord, orders[o / 2]);
    int64_t size = pass_plan_place(ord, n, o % 2, live);
    if (size >= best) continue;
    best = size;
    for (int i = 0; i < n; i++) best_off[i] = it[i].offset;
  }
  for (int i = 0; i < n; i++) it[i].offset = best_off[i];
  free(ord), free(live), free(best_off);
  return n ? best : 0;
}

static int64_t pass_plan_naive_bytes(const ir_graph *g, const ir_plan *p) {
  int64_t b = 0;
  for (int t = 0; t < ir_ntensors(g); t++)
    if (p->buf[t].cls == IR_MEM_ARENA) b += pass_align(p->buf[t].bytes);
  for (int i = 0; i < ir_nnodes(g); i++) b += pass_align(p->temp_bytes[i]);
  return b;
}

/* ---- concat in place: each piece written where the concat would copy it ----
 * A concat whose output has one row before its axis (dim 1 at batch 1: SqueezeNet's fire
 * modules, Inception's branches) holds each piece as one run of bytes. A piece read by nothing
 * after the concat is then planned inside the output, its chain (the in-place values before
 * it) with it, and the one buffer lives from the first piece's write to the output's last
 * read: the producers write into the output and the concat's copy of each such piece is a copy
 * onto itself, which the kernels skip (k_copy_req, rtc_copy). Not with bounded
 * dims, where the runtime extents move the runs; not for a run off the arena's alignment.
 *
 * At batch N > 1 a concat along axis 1 holds a run of each piece per sample. In predict a
 * piece is placed there too when every node that touches it (or its chain, or what was placed
 * inside it) is one the executors can run once per sample, each call on one sample of each
 * value: a convolution or pooling forward, or a concat along an axis >= 1 (ir_plan.samples,
 * ir_plan_slot_stride). Its samples then lie the output's sample apart (sample_bytes). At
 * batch 8 the concats were 13% of DenseNet-169's call (bench/README.md). Not where the
 * target runs each node as one call (PASS_NO_SPLIT: the GPU). */

static bool pass_plan_concat_node(const ir_graph *g, const ir_plan *p, const ir_node *n, bool split) {
  if (n->kind != IR_N_OP || n->op != IR_OP_concat || n->nout != 1 || n->out[0] < 0 || ir_node_req(n, 0) != kWriteTo)
    return false;
  const ir_buffer *o = &p->buf[n->out[0]];
  const ir_tensor *x = ir_tensor_at(g, n->out[0]);
  int dim = ((const k_concat_param *)n->param)->dim;
  int64_t outer = pass_plan_outer(x, dim), numel = k_shape_numel(&x->shape);
  bool per_sample = split && dim == 1 && outer > 1 && o->bytes % (outer * PASS_ALIGN) == 0;
  return o->cls == IR_MEM_ARENA && o->share < 0 && (outer == 1 || per_sample) && numel > 0;
}

/* Whether node x can run once per sample with tensor t in slot j: a forward convolution
 * (weights not values), pooling, or concat along an axis >= 1, not viewed otherwise, t a
 * value whose first axis is the node's N (what ir_plan_slot_stride splits). */
static bool pass_plan_split_ok(const ir_graph *g, const ir_node *x, int j) {
  if (!(x->kind == IR_N_OP || (x->kind == IR_N_FUSED && x->epi)) || x->view_shape || x->nout < 1 || x->out[0] < 0)
    return false;
  if (x->op == IR_OP_concat) {
    if (((const k_concat_param *)x->param)->dim < 1) return false;
  } else if (x->op == IR_OP_convolution) {
    for (int w = 1; w < 3 && w < x->nin; w++)
      if (x->in[w] >= 0 && ir_tensor_at(g, x->in[w])->kind == IR_T_VALUE) return false;
  } else if (x->op != IR_OP_pooling) {
    return false;
  }
  if (x->epi && k_epi_has_stats(x->epi)) return false;
  int t = j < x->nin ? x->in[j] : x->out[j - x->nin];
  const ir_tensor *v = ir_tensor_at(g, t), *o = ir_tensor_at(g, x->out[0]);
  return v->kind == IR_T_VALUE && v->shape.rank > 0 && o->shape.rank > 0 && v->shape.d[0] == o->shape.d[0];
}

/* Whether tensor u's storage lies in r's: u's chain and placements lead to r. */
static bool pass_plan_inside(const ir_plan *p, int u, int r) {
  for (int hops = 0; hops <= 1 << 24; hops++) {
    u = pass_plan_root(p, u);
    if (u == r) return true;
    if (p->buf[u].within < 0) return false;
    u = p->buf[u].within;
  }
  return false;
}

/* Whether root r can take samples apart: every slot of every node touching r's storage can be
 * run per sample, and nothing inside r sits there as one run (a placement at one row). */
static bool pass_plan_can_split(const ir_graph *g, const ir_plan *p, int r) {
  for (int u = 0; u < ir_ntensors(g); u++)
    if (p->buf[u].cls == IR_MEM_ARENA && u != r && p->buf[u].within >= 0 && p->buf[u].sample_bytes == 0 &&
        pass_plan_inside(p, u, r))
      return false;
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *x = ir_node_at(g, i);
    for (int j = 0; j < x->nin + x->nout; j++) {
      int t = j < x->nin ? x->in[j] : x->out[j - x->nin];
      if (t >= 0 && p->buf[t].cls == IR_MEM_ARENA && pass_plan_inside(p, t, r) && !pass_plan_split_ok(g, x, j)) return false;
    }
  }
  return true;
}

/* Whether piece j of concat node i (at position i) can be placed inside the output. */
static bool pass_plan_piece_ok(const ir_graph *g, const ir_plan *p, const ir_node *n, int i, int j) {
  int t = n->in[j];
  if (t < 0 || p->buf[t].cls != IR_MEM_ARENA || p->buf[t].last != i) return false;
  for (int k = 0; k < n->nin; k++)
    if (k != j && n->in[k] == t) return false;   /* one tensor twice: two places */
  int r = pass_plan_root(p, t);   /* a chain's members have one size (pass_plan_root) */
  return p->buf[r].within < 0 && pass_plan_top(p, n->out[0], NULL) != r;
}

/* sample_bytes marks a root placed at N > 1 with -1 while the concats are placed; then every
 * tensor inside such a placement gets its top's sample, and each node touching one runs per
 * sample (samples[i] = N). */
static void pass_plan_sample_strides(const ir_graph *g, ir_plan *p) {
  int nt = ir_ntensors(g);
  int64_t *sb = calloc((size_t)nt + 1, sizeof *sb);
  if (!sb) KILN_ICE("out of memory planning %s", g->name);
  for (int t = 0; t < nt; t++) {
    if (p->buf[t].cls != IR_MEM_ARENA) continue;
    bool apart = false;
    int u = pass_plan_root(p, t);
    for (int hops = 0; p->buf[u].within >= 0 && hops <= 1 << 24; hops++)
      apart |= p->buf[u].sample_bytes < 0, u = pass_plan_root(p, p->buf[u].within);
    if (apart) sb[t] = p->buf[u].bytes / pass_plan_nsamples(g, u);
  }
  for (int t = 0; t < nt; t++) p->buf[t].sample_bytes = sb[t];
  free(sb);
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *x = ir_node_at(g, i);
    for (int j = 0; j < x->nin + x->nout; j++) {
      int t = j < x->nin ? x->in[j] : x->out[j - x->nin];
      if (t >= 0 && p->buf[t].sample_bytes > 0) p->samples[i] = (int32_t)pass_plan_nsamples(g, x->out[0]);
    }
  }
}

static void pass_plan_sample_temps(const ir_graph *g, ir_plan *p) {
  for (int i = 0; i < ir_nnodes(g); i++) {
    if (p->samples[i] < 2) continue;
    int64_t one = (int64_t)pass_node_temp_at(g, ir_node_at(g, i), p->samples[i]);
    if (one > p->temp_bytes[i]) p->temp_bytes[i] = one;
  }
}

static void pass_plan_concat(const ir_graph *g, ir_plan *p, bool split) {
  if (g->nbdims) return;
  split = split && g->mode == IR_MODE_PREDICT;
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    if (!pass_plan_concat_node(g, p, n, split)) continue;
    const ir_tensor *o = ir_tensor_at(g, n->out[0]);
    int dim = ((const k_concat_param *)n->param)->dim;
    int64_t outer = pass_plan_outer(o, dim);
    int64_t elem = p->buf[n->out[0]].bytes / k_shape_numel(&o->shape), inner = 1, at = 0;
    for (int d = dim + 1; d < o->shape.rank; d++) inner *= o->shape.d[d];
    for (int j = 0; j < n->nin; j++) {
      if (n->in[j] < 0) continue;
      int64_t bytes = ir_tensor_at(g, n->in[j])->shape.d[dim] * inner * elem;   /* a sample's */
      if (at % PASS_ALIGN == 0 && p->buf[n->in[j]].bytes == outer * bytes && pass_plan_piece_ok(g, p, n, i, j) &&
          (outer == 1 || (pass_plan_split_ok(g, n, j) && pass_plan_can_split(g, p, pass_plan_root(p, n->in[j]))))) {
        int r = pass_plan_root(p, n->in[j]);
        p->buf[r].within = n->out[0], p->buf[r].within_at = at;
        if (outer > 1) p->buf[r].sample_bytes = -1;
      }
      at += bytes;
    }
  }
  pass_plan_sample_strides(g, p);
}

/* Liveness, in-place chains as one buffer each, concat pieces inside their output, and every
 * buffer and workspace packed into one arena over their lifetimes. */
int pass_plan(ir_graph *g, pass_ctx *cx) {
  int nt = ir_ntensors(g), nn = ir_nnodes(g);
  ir_plan *p = pass_plan_new(g);
  pass_plan_liveness(g, p);
  pass_plan_drop_bad_shares(p, nt);
  pass_plan_concat(g, p, !(cx->disabled & PASS_NO_SPLIT));
  pass_plan_sample_temps(g, p);
  pass_item *it = malloc(sizeof *it * ((size_t)nt + (size_t)nn + 1));
  int *item_of = malloc(sizeof(int) * ((size_t)nt + 1));
  if (!it || !item_of) KILN_ICE("out of memory planning %s", g->name);
  int n = pass_plan_items(g, p, it, item_of);
  p->arena_bytes = pass_plan_pack(it, n);
  p->naive_bytes = pass_plan_naive_bytes(g, p);
  for (int t = 0; t < nt; t++) {
    int64_t at = 0;
    if (p->buf[t].cls == IR_MEM_ARENA) p->buf[t].offset = it[item_of[pass_plan_top(p, t, &at)]].offset + at;
  }
  for (int i = 0; i < n; i++)
    if (it[i].node >= 0) p->temp_offset[it[i].node] = it[i].offset;
  free(it), free(item_of);
  ir_plan_free(g->plan);
  g->plan = p;
#ifdef KILN_DEBUG
  if (pass_plan_validate(g, p, stderr)) KILN_ICE("the memory plan of %s is invalid", g->name);
#endif
  return 0;
}
