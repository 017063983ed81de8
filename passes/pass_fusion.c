/* pass_fusion.c — groups chains of elementwise and broadcast nodes, linked by dataflow, into
 * IR_N_FUSED nodes placed where their last member was; values used only inside a group get
 * no buffer. Every producer -> consumer pair left unfused gets an explain line saying why.
 *
 * Moving a member later, to the group's position, is legal when it commutes with every node
 * it moves past (neither reads what the other writes, nor do both write one tensor); a group
 * keeps the invariant "each member commutes with every non-member between it and the end". */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  int first, last, count;
  int head, tail;        /* members, linked through next[] in merge order */
  k_shape shape;
  k_dtype dtype;
} pass_fgroup;

typedef struct {
  ir_graph *g;
  pass_ctx *cx;
  int *gid;              /* per node: its group, or -1 when it is not fusible */
  int *next;             /* per node: the next member of its group, or -1 */
  pass_fgroup *grp;      /* indexed by the gid of the node that founded it */
  int *ntouch;           /* per tensor: nodes that read or write it */
  int *seen;             /* per tensor: scratch mark (stamp) */
  int stamp;
} pass_fuse;

/* ---- which nodes may join a group ---- */

static int pass_fuse_out0(const ir_node *n) {
  for (int j = 0; j < n->nout; j++)
    if (n->out[j] >= 0) return n->out[j];
  return -1;
}

/* Why node n cannot be a member, or NULL when it can. A backward node of a broadcast op is
 * elementwise only when no input gradient it writes is broadcast (it would reduce over the
 * broadcast axes): each has the shape of the out_grad. */
static const char *pass_fuse_unfit(const ir_graph *g, const ir_node *n, char *buf, size_t len) {
  if (n->kind == IR_N_FUSED) return "already fused";
  if ((n->kind != IR_N_OP && n->kind != IR_N_BACKWARD) || ir_ops[n->op].fusion == IR_FUSE_NONE)
    return snprintf(buf, len, "%s is not elementwise", ir_node_kind_name(n)), buf;
  int o = pass_fuse_out0(n);
  if (o < 0) return "it writes no output";
  const k_shape *s = &ir_tensor_at(g, n->kind == IR_N_BACKWARD && n->in[0] >= 0 ? n->in[0] : o)->shape;
  for (int j = 0; n->kind == IR_N_BACKWARD && j < n->nout; j++)
    if (n->out[j] >= 0 && !ir_shape_eq(&ir_tensor_at(g, n->out[j])->shape, s))
      return snprintf(buf, len, "%s broadcasts, so its gradient reduces over the broadcast axes", ir_node_kind_name(n)), buf;
  return NULL;
}

/* ---- reads and writes, for moving a node past another ---- */

/* Whether node n writes tensor t: an output, an input it overwrites in place, or an input it
 * mutates (ir_node_mutates_input: an update's parameter and state, training aux states). */
static bool pass_fuse_writes(const ir_graph *g, const ir_node *n, int t) {
  for (int j = 0; j < n->nout; j++)
    if (n->out[j] == t || (n->inplace && n->inplace[j] >= 0 && n->in[n->inplace[j]] == t)) return true;
  for (int j = 0; j < n->nin; j++)
    if (n->in[j] == t && ir_node_mutates_input(g, n, j)) return true;
  return false;
}

static bool pass_fuse_reads(const ir_node *n, int t) {
  for (int j = 0; j < n->nin; j++)
    if (n->in[j] == t) return true;
  return false;
}

/* A tensor that member m and node k cannot both touch if m moves past k, or -1; *k_writes
 * says whether k writes it (else k reads what m writes). Also used by pass_epilogue.c. */
int pass_node_conflict(const ir_graph *g, const ir_node *m, const ir_node *k, bool *k_writes) {
  const ir_node *pair[2] = {m, k};
  for (int s = 0; s < 2; s++) {
    const ir_node *x = pair[s], *y = pair[1 - s];
    for (int j = 0; j < x->nin + x->nout; j++) {
      int t = j < x->nin ? x->in[j] : x->out[j - x->nin];
      if (t < 0 || !pass_fuse_writes(g, y, t) || !(pass_fuse_reads(x, t) || pass_fuse_writes(g, x, t))) continue;
      *k_writes = y == k;
      return t;
    }
  }
  return -1;
}

/* ---- merging groups ---- */

static bool pass_fuse_same_type(const pass_fgroup *a, const pass_fgroup *b) {
  return a->dtype == b->dtype && ir_shape_eq(&a->shape, &b->shape);
}

/* Group G's members all move to position `to`; each must commute with the non-members of
 * G ∪ H after G's end. Writes why not into buf, or returns NULL. */
static const char *pass_fuse_check_move(pass_fuse *f, int G, int H, int to, char *buf, size_t len) {
  for (int k = f->grp[G].last + 1; k < to; k++) {
    if (f->gid[k] == G || f->gid[k] == H) continue;
    const ir_node *kn = ir_node_at(f->g, k);
    for (int m = f->grp[G].head; m >= 0; m = f->next[m]) {
      bool k_writes;
      int t = pass_node_conflict(f->g, ir_node_at(f->g, m), kn, &k_writes);
      if (t < 0) continue;
      snprintf(buf, len, "the group would run %s after %s, which %s %s", ir_node_at(f->g, m)->name, kn->name,
               k_writes ? "writes" : "reads", ir_tensor_at(f->g, t)->name);
      return buf;
    }
  }
  return NULL;
}

static void pass_fuse_join(pass_fuse *f, int G, int H) {
  pass_fgroup *g = &f->grp[G], *h = &f->grp[H];
  for (int m = g->head; m >= 0; m = f->next[m]) f->gid[m] = H;
  f->next[h->tail] = g->head;
  h->tail = g->tail;
  h->count += g->count;
  if (g->first < h->first) h->first = g->first;
  g->count = 0;
}

/* The most members a group takes. Past a few dozen ops a loop gains nothing more (it is
 * compute-bound by then), while the group's bookkeeping here and LLVM's register allocation
 * of one huge loop body grow faster than linearly: a 10k-node chain fused whole took 22 s to
 * compile. */
#define PASS_FUSE_MAX_MEMBERS 64

/* Merges the group G (ending before node i) into node i's group H, or says why not. */
static const char *pass_fuse_try(pass_fuse *f, int G, int H, int i, char *buf, size_t len) {
  char a[64], b[64];
  if (f->grp[G].count + f->grp[H].count > PASS_FUSE_MAX_MEMBERS) {
    snprintf(buf, len, "the group would have more than %d members", PASS_FUSE_MAX_MEMBERS);
    return buf;
  }
  if (!pass_fuse_same_type(&f->grp[G], &f->grp[H])) {
    ir_type_str(f->grp[H].dtype, &f->grp[H].shape, a, sizeof a);
    ir_type_str(f->grp[G].dtype, &f->grp[G].shape, b, sizeof b);
    snprintf(buf, len, "output %s differs from the group's %s", a, b);
    return buf;
  }
  const char *why = pass_fuse_check_move(f, G, H, i, buf, len);
  if (!why) pass_fuse_join(f, G, H);
  return why;
}

static void pass_fuse_found(pass_fuse *f, int i) {
  const ir_tensor *o = ir_tensor_at(f->g, pass_fuse_out0(ir_node_at(f->g, i)));
  f->gid[i] = i;
  f->grp[i] = (pass_fgroup){i, i, 1, i, i, o->shape, o->dtype};
}

static void pass_fuse_say(pass_fuse *f, int p, int c, const char *why) {
  const ir_node *pn = ir_node_at(f->g, p), *cn = ir_node_at(f->g, c);
  char pk[96];
  snprintf(pk, sizeof pk, "%s", ir_node_kind_name(pn));
  pass_explain(f->cx, "%s (%s) -> %s (%s): %s", pn->name, pk, cn->name, ir_node_kind_name(cn), why);
}

/* The node that writes tensor t first (its producer), or -1 for inputs and parameters. */
static int pass_fuse_producer(const pass_fuse *f, int t) {
  return t >= 0 && ir_tensor_at(f->g, t)->kind == IR_T_VALUE ? ir_tensor_at(f->g, t)->producer : -1;
}

/* Node i meets each distinct producer of its inputs once, in slot order. */
static void pass_fuse_visit(pass_fuse *f, int i) {
  const ir_node *n = ir_node_at(f->g, i);
  char buf[320];
  const char *unfit_c = pass_fuse_unfit(f->g, n, buf, sizeof buf);
  char cwhy[320];
  snprintf(cwhy, sizeof cwhy, "%s", unfit_c ? unfit_c : "");
  if (!unfit_c) pass_fuse_found(f, i);
  for (int j = 0; j < n->nin; j++) {
    int p = pass_fuse_producer(f, n->in[j]);
    bool dup = false;
    for (int k = 0; k < j; k++) dup |= pass_fuse_producer(f, n->in[k]) == p;
    if (p < 0 || dup) continue;
    const char *unfit_p = pass_fuse_unfit(f->g, ir_node_at(f->g, p), buf, sizeof buf);
    if (unfit_c && unfit_p) continue;                       /* neither could fuse: nothing to say */
    if (unfit_c) { pass_fuse_say(f, p, i, cwhy); continue; }
    if (unfit_p) { pass_fuse_say(f, p, i, unfit_p); continue; }
    if (f->gid[p] == f->gid[i]) continue;                   /* joined through another input */
    const char *why = pass_fuse_try(f, f->gid[p], f->gid[i], i, buf, sizeof buf);
    if (why) pass_fuse_say(f, p, i, why);
  }
}

/* ---- building the fused nodes ---- */

static void pass_fuse_count_touches(pass_fuse *f) {
  for (int i = 0; i < ir_nnodes(f->g); i++) {
    const ir_node *n = ir_node_at(f->g, i);
    f->stamp++;
    for (int j = 0; j < n->nin + n->nout; j++) {
      int t = j < n->nin ? n->in[j] : n->out[j - n->nin];
      if (t >= 0 && f->seen[t] != f->stamp) f->seen[t] = f->stamp, f->ntouch[t]++;
    }
  }
}

static bool pass_fuse_is_result(const ir_graph *g, int t) {
  for (int i = 0; i < g->outputs.len; i++)
    if (IR_VEC_AT(g->outputs, int, i) == t) return true;
  return t == g->loss;
}

/* Members of a group in execution order (ascending positions). */
static int pass_fuse_members(const pass_fuse *f, int G, int *m) {
  int n = 0;
  for (int i = f->grp[G].first; i <= f->grp[G].last; i++)
    if (f->gid[i] == G) m[n++] = i;
  return n;
}

/* How many members touch tensor t (read or write). */
static int pass_fuse_inside(const pass_fuse *f, const int *m, int nm, int t) {
  int c = 0;
  for (int k = 0; k < nm; k++) {
    const ir_node *n = ir_node_at(f->g, m[k]);
    c += pass_fuse_reads(n, t) || pass_fuse_writes(f->g, n, t);
  }
  return c;
}

static int pass_fuse_index(const int *v, int n, int t) {
  for (int i = 0; i < n; i++)
    if (v[i] == t) return i;
  return -1;
}

typedef struct { int *in, nin, *out, nout; k_req *req; int *inplace; } pass_fio;

/* Member m[k]'s output j reuses, in place, a chain of values written inside the group; the
 * fused input slot at the chain's start, or -1. Each value is reused once (pass_inplace), and
 * each link's source is dead after it, so the group's output may take the input's buffer. */
static int pass_fuse_inplace_root(const pass_fuse *f, const int *m, int k, int j, const pass_fio *io) {
  for (;;) {
    const ir_node *n = ir_node_at(f->g, m[k]);
    if (!n->inplace || n->inplace[j] < 0) return -1;
    int t = n->in[n->inplace[j]], x = pass_fuse_index(io->in, io->nin, t), w = -1;
    if (x >= 0) return x;
    for (int a = k - 1; a >= 0 && w < 0; a--) {          /* the member that wrote t */
      const ir_node *p = ir_node_at(f->g, m[a]);
      for (int b = 0; b < p->nout && w < 0; b++)
        if (p->out[b] == t) w = b, k = a;
    }
    if (w < 0) return -1;
    j = w;
  }
}

/* in: tensors members read before any member wrote them. out: tensors members write that
 * a node outside the group touches, or that the entry point returns. */
static void pass_fuse_collect(pass_fuse *f, const int *m, int nm, pass_fio *io) {
  f->stamp++;                                  /* seen == stamp: written inside so far */
  for (int k = 0; k < nm; k++) {
    const ir_node *n = ir_node_at(f->g, m[k]);
    for (int j = 0; j < n->nin; j++) {
      int t = n->in[j];
      if (t >= 0 && f->seen[t] != f->stamp && pass_fuse_index(io->in, io->nin, t) < 0) io->in[io->nin++] = t;
    }
    for (int j = 0; j < n->nout; j++) {
      int t = n->out[j];
      if (t < 0 || pass_fuse_index(io->out, io->nout, t) >= 0) continue;
      f->seen[t] = f->stamp;
      if (!pass_fuse_is_result(f->g, t) && f->ntouch[t] == pass_fuse_inside(f, m, nm, t)) continue;
      io->req[io->nout] = ir_node_req(n, j) == kWriteInplace ? kWriteTo : ir_node_req(n, j);
      io->inplace[io->nout] = -1;
      int x = pass_fuse_inplace_root(f, m, k, j, io);
      if (x >= 0) io->inplace[io->nout] = x, io->req[io->nout] = kWriteInplace;
      io->out[io->nout++] = t;
    }
  }
}

static int pass_fuse_slots(const pass_fuse *f, const int *m, int nm, bool outs) {
  int s = 0;
  for (int k = 0; k < nm; k++) s += outs ? ir_node_at(f->g, m[k])->nout : ir_node_at(f->g, m[k])->nin;
  return s;
}

static ir_node pass_fuse_make(pass_fuse *f, int G, int number) {
  ir_arena *a = &f->g->arena;
  int *m = malloc(sizeof(int) * (size_t)f->grp[G].count);
  if (!m) KILN_ICE("out of memory fusing %s", f->g->name);
  int nm = pass_fuse_members(f, G, m), ni = pass_fuse_slots(f, m, nm, false), no = pass_fuse_slots(f, m, nm, true);
  pass_fio io = {ir_alloc(a, sizeof(int) * (size_t)(ni + 1)), 0, ir_alloc(a, sizeof(int) * (size_t)(no + 1)), 0,
                 ir_alloc(a, sizeof(k_req) * (size_t)(no + 1)), ir_alloc(a, sizeof(int) * (size_t)(no + 1))};
  pass_fuse_collect(f, m, nm, &io);
  const ir_node *last = ir_node_at(f->g, m[nm - 1]);
  ir_node fn = {.kind = IR_N_FUSED, .op = -1, .name = ir_strfmt(a, "fused%d", number), .nin = io.nin,
                .nout = io.nout, .in = io.in, .out = io.out, .loc = last->loc, .req = io.req,
                .inplace = io.inplace, .sub = ir_alloc(a, sizeof(ir_node) * (size_t)nm), .nsub = nm};
  for (int k = 0; k < nm; k++) fn.sub[k] = *ir_node_at(f->g, m[k]), fn.flops = ir_sat_add(fn.flops, fn.sub[k].flops);
  free(m);
  return fn;
}

static void pass_fuse_say_group(pass_fuse *f, const ir_node *fn) {
  char *s = NULL;
  size_t len = 0;
  FILE *o = open_memstream(&s, &len);
  if (!o) KILN_ICE("out of memory");
  fprintf(o, "group %s: %d nodes", fn->name, fn->nsub);
  for (int k = 0; k < fn->nsub; k++) fprintf(o, "%s%s (%s)", k ? ", " : " ", fn->sub[k].name, ir_node_kind_name(&fn->sub[k]));
  fprintf(o, "; in:");
  for (int k = 0; k < fn->nin; k++) fprintf(o, " %s", ir_tensor_at(f->g, fn->in[k])->name);
  fprintf(o, "; out:");
  for (int k = 0; k < fn->nout; k++) fprintf(o, " %s", ir_tensor_at(f->g, fn->out[k])->name);
  fclose(o);
  pass_explain(f->cx, "%s", s);
  free(s);
}

/* The new node list: a fused node at its last member's position, other members dropped. */
static int pass_fuse_rebuild(pass_fuse *f) {
  ir_vec nodes = {.elem = sizeof(ir_node)};
  int groups = 0;
  for (int i = 0; i < ir_nnodes(f->g); i++) {
    int G = f->gid[i];
    if (G < 0 || f->grp[G].count < 2) *(ir_node *)ir_vec_push(&nodes) = *ir_node_at(f->g, i);
    else if (f->grp[G].last == i) {
      ir_node fn = pass_fuse_make(f, G, groups++);
      pass_fuse_say_group(f, &fn);
      *(ir_node *)ir_vec_push(&nodes) = fn;
    }
  }
  ir_graph_set_nodes(f->g, &nodes);
  return groups;
}

int pass_fusion(ir_graph *g, pass_ctx *cx) {
  int nn = ir_nnodes(g), nt = ir_ntensors(g);
  pass_fuse f = {g, cx, malloc(sizeof(int) * ((size_t)nn + 1)), malloc(sizeof(int) * ((size_t)nn + 1)),
                 malloc(sizeof(pass_fgroup) * ((size_t)nn + 1)), calloc((size_t)nt + 1, sizeof(int)),
                 calloc((size_t)nt + 1, sizeof(int)), 0};
  if (!f.gid || !f.next || !f.grp || !f.ntouch || !f.seen) KILN_ICE("out of memory fusing %s", g->name);
  for (int i = 0; i < nn; i++) f.gid[i] = -1, f.next[i] = -1;
  for (int i = 0; i < nn; i++) pass_fuse_visit(&f, i);
  pass_fuse_count_touches(&f);
  cx->stats[PASS_fusion].fused_groups = pass_fuse_rebuild(&f);
  free(f.gid), free(f.next), free(f.grp), free(f.ntouch), free(f.seen);
  return 0;
}
