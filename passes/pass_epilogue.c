/* pass_epilogue.c — a heavy op (convolution, fully_connected, matmul) and the chain of
 * elementwise nodes that consume only its output become one fused node whose kernel runs the
 * chain on each output block while the block is in cache (kernels/k_epilogue.h): batch_norm in
 * predict (a per-channel affine), unary ops, binary ops whose other operand has the output's
 * shape, is one value, or (after a matmul or fully_connected) is a weight over the output's
 * last axes, a bias; in training, the statistics a batch_norm needs of a convolution's
 * output (pass_epi_stats). Runs before `fusion`, so a block tail such as add + relu joins the
 * convolution instead of an elementwise group. Every link not taken gets an explain line. */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

#include "k_epilogue.h"

/* A chain being grown from one heavy node. */
typedef struct {
  int member[K_EPI_MAX_STEPS + 1];   /* node positions, ascending */
  int n;
  int extra[4 * K_EPI_MAX_STEPS];    /* the tail's inputs, after the heavy node's */
  int nextra;
  k_epilogue epi;
  int value;                         /* the tensor the chain computes so far */
  int stats;                         /* train: the row sums it gathers for a batch_norm, or -1 */
  int stats_reader;                  /* that batch_norm's position */
  int pro[2], npro;                  /* a prologue's members: the batch_norm, then a relu (or none) */
  int pro_data;                      /* the batch_norm's data, the fused node's data instead */
} pass_echain;

typedef struct {
  ir_graph *g;
  pass_ctx *cx;
  int *nreaders;       /* per tensor: top-level nodes that read it */
  int *group;          /* per node: the chain it joined (its heavy node's position), or -1 */
} pass_epi;

/* A matmul writing its output swapped (pass_simplify.c) runs its tail row by row of each
 * product (kernels/k_gemm.c): the steps index the output as stored, as the unfused ops do. */
static bool pass_epi_heavy(const ir_node *n) {
  return n->kind == IR_N_OP && n->nout == 1 && ir_node_req(n, 0) != kAddTo && ir_node_req(n, 0) != kNullOp &&
         (n->op == IR_OP_convolution || n->op == IR_OP_fully_connected || n->op == IR_OP_matmul);
}

static bool pass_epi_is_result(const ir_graph *g, int t) {
  for (int i = 0; i < g->outputs.len; i++)
    if (IR_VEC_AT(g->outputs, int, i) == t) return true;
  return t == g->loss;
}

/* The first node after `from` that reads t, or -1. */
static int pass_epi_next_reader(const pass_epi *pe, int t, int from) {
  for (int i = from + 1; i < ir_nnodes(pe->g); i++) {
    const ir_node *n = ir_node_at(pe->g, i);
    for (int j = 0; j < n->nin; j++)
      if (n->in[j] == t) return i;
  }
  return -1;
}

/* "k1 is read by 2 nodes (n1, _backward_n1), so it must be stored" */
static const char *pass_epi_shared(const pass_epi *pe, int t, int from, char *buf, size_t len) {
  int at = snprintf(buf, len, "%s is read by %d nodes (", ir_tensor_at(pe->g, t)->name, pe->nreaders[t]);
  for (int i = pass_epi_next_reader(pe, t, from), k = 0; i >= 0 && at < (int)len; i = pass_epi_next_reader(pe, t, i), k++)
    at += snprintf(buf + at, len - (size_t)at, "%s%s", k ? ", " : "", ir_node_at(pe->g, i)->name);
  if (at < (int)len) snprintf(buf + at, len - (size_t)at, "), so it must be stored");
  return buf;
}

/* The one node that reads t, or -1 (with why set when some node does). */
static int pass_epi_reader(const pass_epi *pe, int t, int from, const char **why, char *buf, size_t len) {
  *why = NULL;
  if (pass_epi_is_result(pe->g, t))
    return snprintf(buf, len, "%s is an output of the entry point", ir_tensor_at(pe->g, t)->name), *why = buf, -1;
  if (pe->nreaders[t] > 1) return *why = pass_epi_shared(pe, t, from, buf, len), -1;
  return pass_epi_next_reader(pe, t, from);
}

/* ---- which consumer may join, as which step ---- */

/* Hidden outputs (batch_norm's saved statistics) nobody reads are not computed by the chain. */
static const char *pass_epi_hidden(const pass_epi *pe, const ir_node *c, char *buf, size_t len) {
  for (int j = 1; j < c->nout; j++) {
    int t = c->out[j];
    if (t >= 0 && ir_node_req(c, j) != kNullOp && (pe->nreaders[t] || pass_epi_is_result(pe->g, t)))
      return snprintf(buf, len, "its output %s is read", ir_tensor_at(pe->g, t)->name), buf;
  }
  return NULL;
}

static const char *pass_epi_affine(pass_epi *pe, pass_echain *ch, const ir_node *c, k_epi_step *s, char *buf, size_t len) {
  const k_batch_norm_param *p = c->param;
  if (pe->g->mode != IR_MODE_PREDICT) return "batch_norm in training normalises by statistics of the whole output";
  if (c->in[0] != ch->value || c->nin != 5) return "the chain's value is not batch_norm's data";
  const char *why = pass_epi_hidden(pe, c, buf, len);
  if (why) return why;
  const k_shape *sh = &ir_tensor_at(pe->g, ch->value)->shape;
  *s = (k_epi_step){.kind = K_EPI_AFFINE, .slot = ch->nextra, .eps = p->eps, .channels = sh->d[p->axis], .inner = 1};
  for (int d = p->axis + 1; d < sh->rank; d++) s->inner *= sh->d[d];
  for (int k = 1; k < 5; k++) ch->extra[ch->nextra++] = c->in[k];
  return NULL;
}

static const char *pass_epi_unary(const ir_node *c, k_epi_step *s) {
  size_t ps = ir_ops[c->op].param_size;
  if (ps > K_EPI_PARAM_BYTES) return "its parameters do not fit an epilogue step";
  if (c->param && ps) memcpy(s->param, c->param, ps), s->has_param = 1;
  s->kind = K_EPI_UNARY;
  return NULL;
}

/* The period of operand o broadcast over value v's leading axes (v's last o->rank axes, o's
 * leading 1s aside, are o's), or 0. Only where it carries across extents and where the
 * kernels index the output as stored: o a weight or constant (fixed by the model, so a bounded
 * dim's probes agree), the heavy op a matmul or fully_connected (never a blocked layout). */
static int64_t pass_epi_period(const pass_epi *pe, const pass_echain *ch, const ir_tensor *o, const ir_tensor *v) {
  int op = ir_node_at(pe->g, ch->member[0])->op, r = o->shape.rank, lead = 0;
  if ((op != IR_OP_matmul && op != IR_OP_fully_connected) || r > v->shape.rank ||
      (o->kind != IR_T_PARAM && o->kind != IR_T_AUX && o->kind != IR_T_CONST))
    return 0;
  while (lead < r && o->shape.d[lead] == 1) lead++;
  for (int d = lead; d < r; d++)
    if (o->shape.d[d] != v->shape.d[v->shape.rank - r + d]) return 0;
  return ir_tensor_numel(o);
}

static const char *pass_epi_binary(pass_epi *pe, pass_echain *ch, const ir_node *c, k_epi_step *s, char *buf, size_t len) {
  int mine = c->in[0] == ch->value ? 0 : 1, other = c->in[1 - mine];
  const ir_tensor *o = ir_tensor_at(pe->g, other), *v = ir_tensor_at(pe->g, ch->value);
  if (other == ch->value) return "it reads the chain's value twice";
  bool scalar = ir_tensor_numel(o) == 1 && o->shape.rank <= v->shape.rank, same = ir_shape_eq(&o->shape, &v->shape);
  int64_t period = scalar || same ? 0 : pass_epi_period(pe, ch, o, v);
  if (o->dtype != K_F32 || (!scalar && !same && !period)) {
    char a[64];
    ir_type_str(o->dtype, &o->shape, a, sizeof a);
    return snprintf(buf, len, "its other operand %s %s is neither the output's shape, one value, nor a weight over "
                    "its last axes", o->name, a), buf;
  }
  int fn = s->fn;
  *s = (k_epi_step){.kind = K_EPI_BINARY, .fn = fn, .slot = ch->nextra, .swap = mine, .scalar = scalar, .period = period};
  ch->extra[ch->nextra++] = other;
  return NULL;
}

/* Whether consumer c can be the chain's next step; fills s (slots relative to the extras). */
static const char *pass_epi_fit(pass_epi *pe, pass_echain *ch, const ir_node *c, k_epi_step *s, char *buf, size_t len) {
  if (c->kind != IR_N_OP) return snprintf(buf, len, "%s is not a forward op", ir_node_kind_name(c)), buf;
  if (ch->n > K_EPI_MAX_STEPS) return "the epilogue has no room for another step";
  if (ir_node_req(c, 0) == kAddTo || c->out[0] < 0) return "it accumulates its output";
  memset(s, 0, sizeof *s);
  s->fn = k_epi_fn_lookup(ir_ops[c->op].name);
  if (c->op != IR_OP_batch_norm && (ir_ops[c->op].fusion == IR_FUSE_NONE || s->fn < 0))
    return snprintf(buf, len, "%s is neither elementwise nor batch_norm", ir_ops[c->op].name), buf;
  const ir_tensor *out = ir_tensor_at(pe->g, c->out[0]), *v = ir_tensor_at(pe->g, ch->value);
  if (out->dtype != K_F32 || !ir_shape_eq(&out->shape, &v->shape)) return "it broadcasts the value to a larger shape";
  if (c->op == IR_OP_batch_norm) return pass_epi_affine(pe, ch, c, s, buf, len);
  int nargs = ir_op_nargs(&ir_ops[c->op]);
  return nargs == 1 ? pass_epi_unary(c, s) : pass_epi_binary(pe, ch, c, s, buf, len);
}

/* Whether node q is one of the chain's: its heavy node and tail, or its prologue. */
static bool pass_epi_member(const pass_echain *ch, int q) {
  for (int k = 0; k < ch->n; k++)
    if (ch->member[k] == q) return true;
  for (int k = 0; k < ch->npro; k++)
    if (ch->pro[k] == q) return true;
  return false;
}

/* Nodes movers[0 .. n) of chain ch move down to position `to`: each must commute with the
 * nodes not the chain's it passes. Why not, or NULL. */
static const char *pass_epi_movable(const pass_epi *pe, const pass_echain *ch, const int *movers, int n, int to,
                                    char *buf, size_t len) {
  for (int k = 0; k < n; k++)
    for (int q = movers[k] + 1; q < to; q++) {
      if (pass_epi_member(ch, q)) continue;
      bool q_writes;
      const ir_node *m = ir_node_at(pe->g, movers[k]), *qn = ir_node_at(pe->g, q);
      int t = pass_node_conflict(pe->g, m, qn, &q_writes);
      if (t >= 0)
        return snprintf(buf, len, "the group would run %s after %s, which %s %s", m->name, qn->name,
                        q_writes ? "writes" : "reads", ir_tensor_at(pe->g, t)->name), buf;
    }
  return NULL;
}

static void pass_epi_say(pass_epi *pe, int p, int c, const char *why) {
  char pk[96];
  snprintf(pk, sizeof pk, "%s", ir_node_kind_name(ir_node_at(pe->g, p)));
  pass_explain(pe->cx, "%s (%s) -> %s (%s): %s", ir_node_at(pe->g, p)->name, pk, ir_node_at(pe->g, c)->name,
               ir_node_kind_name(ir_node_at(pe->g, c)), why);
}

/* Grows the chain of the heavy node at position h as far as it goes. */
static void pass_epi_grow(pass_epi *pe, int h, pass_echain *ch) {
  char buf[320];
  *ch = (pass_echain){.member = {h}, .n = 1, .value = ir_node_at(pe->g, h)->out[0], .stats = -1, .stats_reader = -1,
                      .pro_data = -1};
  for (;;) {
    const char *why;
    int last = ch->member[ch->n - 1], c = pass_epi_reader(pe, ch->value, last, &why, buf, sizeof buf);
    if (c < 0) {
      if (why) pass_explain(pe->cx, "%s (%s): %s", ir_node_at(pe->g, last)->name, ir_node_kind_name(ir_node_at(pe->g, last)), why);
      return;
    }
    pass_echain next = *ch;
    k_epi_step s;
    if (pe->group[c] >= 0) why = "it is already in an epilogue";
    if (!why) why = pass_epi_fit(pe, &next, ir_node_at(pe->g, c), &s, buf, sizeof buf);
    if (!why) why = pass_epi_movable(pe, ch, ch->member, ch->n, c, buf, sizeof buf);
    if (why) return pass_epi_say(pe, last, c, why);
    next.epi.step[next.epi.nsteps++] = s;
    next.member[next.n++] = c;
    next.value = ir_node_at(pe->g, c)->out[0];
    *ch = next;
  }
}

/* ---- a training batch_norm's statistics ---- */

/* The first training batch_norm after `from` that normalises t over axis 1 of a value of rank
 * 3 or more (a convolution's channels), as its data, and has no gathered statistics yet; -1
 * when none does. */
static int pass_epi_bn_reader(const pass_epi *pe, int t, int from) {
  const ir_tensor *v = ir_tensor_at(pe->g, t);
  if (v->shape.rank < 3 || v->dtype != K_F32) return -1;
  for (int i = pass_epi_next_reader(pe, t, from); i >= 0; i = pass_epi_next_reader(pe, t, i)) {
    const ir_node *b = ir_node_at(pe->g, i);
    if (b->kind == IR_N_OP && b->op == IR_OP_batch_norm && b->nin == K_BN_STATS_SLOT && b->in[0] == t &&
        ((const k_batch_norm_param *)b->param)->axis == 1)
      return i;
  }
  return -1;
}

/* In training a batch_norm normalises by statistics of its whole input, so it cannot join the
 * chain; but when a convolution's chain computes that input, the chain can gather its row
 * sums (kernels.h's k_bn_row_sums, per sample and channel) while each block is in cache, as a
 * last K_EPI_STATS step writing a new value <value>@stats of [N, C, K_BN_STATS_FLOATS]
 * floats, which the batch_norm then reads (input slot K_BN_STATS_SLOT) instead of summing
 * its data again. The same sums in the same order: the same bits as without the pass. */
static void pass_epi_stats(pass_epi *pe, pass_echain *ch) {
  const ir_graph *g = pe->g;
  const ir_node *h = ir_node_at(g, ch->member[0]);
  if (g->mode != IR_MODE_TRAIN || h->op != IR_OP_convolution) return;
  int b = pass_epi_bn_reader(pe, ch->value, ch->member[ch->n - 1]);
  if (b < 0) return;
  if (ch->epi.nsteps >= K_EPI_MAX_STEPS)
    return pass_explain(pe->cx, "%s (%s): its epilogue has no room to gather %s's statistics", h->name,
                        ir_node_kind_name(h), ir_node_at(g, b)->name);
  const ir_tensor *v = ir_tensor_at(g, ch->value);
  k_epi_step *s = &ch->epi.step[ch->epi.nsteps++];
  *s = (k_epi_step){.kind = K_EPI_STATS, .slot = 1, .inner = 1};
  for (int d = 2; d < v->shape.rank; d++) s->inner *= v->shape.d[d];
  ch->stats_reader = b;
}

/* The stats value of chain ch and the batch_norm reading it: made when the chain is built. */
static void pass_epi_stats_value(pass_epi *pe, pass_echain *ch) {
  ir_graph *g = pe->g;
  const char *vname = ir_tensor_at(g, ch->value)->name;
  ch->stats = ir_graph_add_tensor(g, ir_strfmt(&g->arena, "%s@stats", vname), IR_T_VALUE, ir_tensor_at(g, ch->value)->loc);
  ir_tensor *st = ir_tensor_at(g, ch->stats), *v = ir_tensor_at(g, ch->value);
  st->shape = (k_shape){3, {v->shape.d[0], v->shape.d[1], K_BN_STATS_FLOATS}};
  ir_node *b = ir_node_at(g, ch->stats_reader);
  int *in = ir_alloc(&g->arena, sizeof(int) * (K_BN_STATS_SLOT + 1));
  memcpy(in, b->in, sizeof(int) * K_BN_STATS_SLOT);
  in[K_BN_STATS_SLOT] = ch->stats;
  b->in = in, b->nin = K_BN_STATS_SLOT + 1;
}

/* ---- a prologue: batch_norm, then relu, of a convolution's data ---- */

/* The node writing t, when it is a forward op of kind `op` whose one output t only the node at
 * `reader` reads (no result, not an epilogue's member yet); -1 otherwise. */
static int pass_epi_pro_source(const pass_epi *pe, int t, int op, int reader) {
  const ir_tensor *x = ir_tensor_at(pe->g, t);
  if (x->producer < 0 || pe->nreaders[t] != 1 || pass_epi_is_result(pe->g, t) || pass_epi_next_reader(pe, t, x->producer) != reader)
    return -1;
  const ir_node *n = ir_node_at(pe->g, x->producer);
  return n->kind == IR_N_OP && n->op == op && pe->group[x->producer] < 0 && n->out[0] == t && ir_node_req(n, 0) != kAddTo
             ? x->producer : -1;
}

/* In predict, a convolution whose data is relu(batch_norm(x)) (or batch_norm(x)), each value
 * read by the next node alone, can apply both as its kernel packs x (k_conv_prologue_ok says
 * which layers can): DenseNet's layers read their concat that way, and batch_norm and relu
 * then run as no pass over memory of their own. The same arithmetic as the two kernels, so the
 * same bits. A batch_norm another chain took as its epilogue stays there. */
static void pass_epi_prologue(pass_epi *pe, pass_echain *ch) {
  ir_graph *g = pe->g;
  int h = ch->member[0];
  const ir_node *hn = ir_node_at(g, h);
  if (g->mode != IR_MODE_PREDICT || hn->op != IR_OP_convolution || hn->nin < 2 || hn->in[0] < 0) return;
  int r = pass_epi_pro_source(pe, hn->in[0], IR_OP_relu, h);
  int b = pass_epi_pro_source(pe, r >= 0 ? ir_node_at(g, r)->in[0] : hn->in[0], IR_OP_batch_norm, r >= 0 ? r : h);
  if (b < 0) return;
  const ir_node *bn = ir_node_at(g, b);
  char buf[320];
  const k_shape *x = &ir_tensor_at(g, bn->in[0])->shape;
  if (bn->nin != 5 || ((const k_batch_norm_param *)bn->param)->axis != 1 || pass_epi_hidden(pe, bn, buf, sizeof buf) ||
      !k_conv_prologue_ok(x, &ir_tensor_at(g, hn->in[1])->shape, hn->param))
    return;
  pass_echain next = *ch;
  next.pro[0] = b, next.pro[1] = r, next.npro = r >= 0 ? 2 : 1, next.pro_data = bn->in[0];
  const char *why = pass_epi_movable(pe, &next, next.pro, next.npro, ch->member[ch->n - 1], buf, sizeof buf);
  if (why) return pass_explain(pe->cx, "%s (batch_norm) -> %s (convolution): no prologue: %s", bn->name, hn->name, why);
  *ch = next;
}

/* ---- building the fused node ---- */

static void pass_epi_say_group(pass_epi *pe, const pass_echain *ch, const ir_node *fn) {
  char *s = NULL;
  size_t len = 0;
  FILE *o = open_memstream(&s, &len);
  if (!o) KILN_ICE("out of memory");
  fprintf(o, "epilogue %s: %s %s", fn->name, ir_ops[fn->op].name, fn->sub[0].name);
  for (int k = 0; k < ch->npro; k++)
    fprintf(o, "%s%s (%s)", k ? ", " : " with the prologue ", fn->sub[ch->n + k].name, ir_node_kind_name(&fn->sub[ch->n + k]));
  fprintf(o, "%s", ch->n > 1 || ch->stats >= 0 ? ", then" : "");
  for (int k = 1; k < ch->n; k++)
    fprintf(o, "%s%s (%s%s)", k > 1 ? ", " : " ", fn->sub[k].name, ir_node_kind_name(&fn->sub[k]),
            fn->epi->step[k - 1].kind == K_EPI_AFFINE ? ": per-channel affine" : "");
  if (ch->stats >= 0)
    fprintf(o, "%s the statistics of %s (batch_norm in training)", ch->n > 1 ? "," : "", ir_node_at(pe->g, ch->stats_reader)->name);
  fprintf(o, "; in:");
  for (int k = 0; k < fn->nin; k++) fprintf(o, " %s", ir_tensor_at(pe->g, fn->in[k])->name);
  fprintf(o, "; out:");
  for (int k = 0; k < fn->nout; k++) fprintf(o, " %s", ir_tensor_at(pe->g, fn->out[k])->name);
  fclose(o);
  pass_explain(pe->cx, "%s", s);
  free(s);
}

static ir_node pass_epi_make(pass_epi *pe, pass_echain *ch, int number) {
  ir_arena *a = &pe->g->arena;
  const ir_node *h = ir_node_at(pe->g, ch->member[0]), *last = ir_node_at(pe->g, ch->member[ch->n - 1]);
  for (int k = 0; k < ch->epi.nsteps; k++)
    if (ch->epi.step[k].kind == K_EPI_AFFINE || ch->epi.step[k].kind == K_EPI_BINARY) ch->epi.step[k].slot += h->nin;
  ir_node fn = {.kind = IR_N_FUSED, .op = h->op, .name = ir_strfmt(a, "epilogue%d", number),
                .nin = h->nin + ch->nextra + (ch->npro ? 4 : 0), .nout = ch->stats >= 0 ? 2 : 1, .param = h->param,
                .loc = last->loc, .nsub = ch->n + ch->npro};
  int *in = ir_alloc(a, sizeof(int) * (size_t)fn.nin), *out = ir_alloc(a, sizeof(int) * 2), *ip = ir_alloc(a, sizeof(int) * 2);
  k_req *req = ir_alloc(a, sizeof(k_req) * 2);
  memcpy(in, h->in, sizeof(int) * (size_t)h->nin);
  memcpy(in + h->nin, ch->extra, sizeof(int) * (size_t)ch->nextra);
  if (ch->npro) {   /* the batch_norm's data in the data slot; its gamma, beta, mean, var last */
    const ir_node *b = ir_node_at(pe->g, ch->pro[0]);
    k_conv_param *p = memcpy(ir_alloc(a, sizeof *p), h->param, sizeof *p);
    p->pro_slot = h->nin + ch->nextra, p->pro_relu = ch->npro == 2, p->pro_eps = ((const k_batch_norm_param *)b->param)->eps;
    memcpy(in + p->pro_slot, b->in + 1, sizeof(int) * 4);
    in[0] = ch->pro_data;
    fn.param = p;
  }
  out[0] = ch->value, out[1] = ch->stats;
  ip[0] = ip[1] = -1, req[0] = req[1] = kWriteTo;    /* the heavy op cannot write over an input */
  fn.in = in, fn.out = out, fn.inplace = ip, fn.req = req;
  fn.epi = memcpy(ir_alloc(a, sizeof ch->epi), &ch->epi, sizeof ch->epi);
  fn.sub = ir_alloc(a, sizeof(ir_node) * (size_t)fn.nsub);   /* the heavy node, its tail, then the prologue */
  for (int k = 0; k < fn.nsub; k++) {
    fn.sub[k] = *ir_node_at(pe->g, k < ch->n ? ch->member[k] : ch->pro[k - ch->n]);
    fn.flops = ir_sat_add(fn.flops, fn.sub[k].flops);
  }
  fn.sub[0].param = fn.param;   /* its workspace is the prologue's (pass_plan asks sub[0]) */
  return fn;
}

/* The new node list: each group at its last member's position, the other members dropped. */
static int pass_epi_rebuild(pass_epi *pe, pass_echain *chains) {
  ir_vec nodes = {.elem = sizeof(ir_node)};
  int groups = 0;
  for (int i = 0; i < ir_nnodes(pe->g); i++) {
    int G = pe->group[i];
    if (G < 0) *(ir_node *)ir_vec_push(&nodes) = *ir_node_at(pe->g, i);
    else if (chains[G].member[chains[G].n - 1] == i) {
      if (chains[G].stats_reader >= 0) pass_epi_stats_value(pe, &chains[G]);
      ir_node fn = pass_epi_make(pe, &chains[G], groups++);
      pass_epi_say_group(pe, &chains[G], &fn);
      *(ir_node *)ir_vec_push(&nodes) = fn;
    }
  }
  ir_graph_set_nodes(pe->g, &nodes);
  return groups;
}

static void pass_epi_count_readers(pass_epi *pe) {
  for (int i = 0; i < ir_nnodes(pe->g); i++) {
    const ir_node *n = ir_node_at(pe->g, i);
    for (int j = 0; j < n->nin; j++) {
      bool dup = false;
      for (int k = 0; k < j; k++) dup |= n->in[k] == n->in[j];
      if (n->in[j] >= 0 && !dup) pe->nreaders[n->in[j]]++;
    }
  }
}

int pass_epilogue(ir_graph *g, pass_ctx *cx) {
  int nn = ir_nnodes(g);
  pass_epi pe = {g, cx, calloc((size_t)ir_ntensors(g) + 1, sizeof(int)), malloc(sizeof(int) * ((size_t)nn + 1))};
  pass_echain *chains = malloc(sizeof *chains * ((size_t)nn + 1));
  if (!pe.nreaders || !pe.group || !chains) KILN_ICE("out of memory fusing epilogues of %s", g->name);
  pass_epi_count_readers(&pe);
  for (int i = 0; i < nn; i++) pe.group[i] = -1;
  for (int i = 0; i < nn; i++) {
    if (pe.group[i] >= 0 || !pass_epi_heavy(ir_node_at(g, i))) continue;
    pass_epi_grow(&pe, i, &chains[i]);
    pass_epi_stats(&pe, &chains[i]);
    pass_epi_prologue(&pe, &chains[i]);
    bool fused = chains[i].epi.nsteps > 0 || chains[i].npro > 0;
    for (int k = 0; fused && k < chains[i].n; k++) pe.group[chains[i].member[k]] = i;
    for (int k = 0; fused && k < chains[i].npro; k++) pe.group[chains[i].pro[k]] = i;
  }
  cx->stats[PASS_epilogue].fused_groups = pass_epi_rebuild(&pe, chains);
  free(pe.nreaders), free(pe.group), free(chains);
  return 0;
}
