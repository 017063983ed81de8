/* pass_inplace.c — applies the ops' in-place options (ForwardInplaceOption for IR_N_OP
 * nodes, BackwardInplaceOption for IR_N_BACKWARD nodes): output 0 reuses the buffer of an
 * input that nobody reads afterwards, so memory planning gives the pair one buffer. */
#include "passes.h"

#include <stdlib.h>

typedef struct {
  ir_graph *g;
  ir_plan *live;   /* liveness only: each tensor's last read or write (outputs: the end) */
  bool *reused;    /* per tensor: some output already reuses its buffer */
} pass_ip;

/* Whether tensor t appears in an input slot of n other than `slot`. */
static bool pass_ip_read_elsewhere(const ir_node *n, int slot, int t) {
  for (int j = 0; j < n->nin; j++)
    if (j != slot && n->in[j] == t) return true;
  return false;
}

/* Whether a broadcasting binary op's backward also writes a gradient of another shape than
 * input k's: a broadcast operand's, each element a sum over many positions of the out_grad. A gradient written over
 * that out_grad would race with those sums on the GPU, where both run in one kernel with no
 * barrier between them (the emulation saw d * s's scale gradient halved: summed over og * s
 * instead of og). */
static bool pass_ip_reduces(const ir_graph *g, const ir_node *n, int k) {
  if (n->kind != IR_N_BACKWARD || ir_ops[n->op].fusion != IR_FUSE_BROADCAST) return false;
  for (int j = 1; j < n->nout; j++)
    if (n->out[j] >= 0 && !ir_shape_eq(&ir_tensor_at(g, n->out[j])->shape, &ir_tensor_at(g, n->in[k])->shape)) return true;
  return false;
}

/* Whether another output of n accumulates into output 0 (the backward of mul(y, y) adds both
 * operands' terms into y@grad): the term added second reads the out_grad after the first was
 * written, so output 0 written over the out_grad gave y + y*y for 2y. */
static bool pass_ip_accumulated(const ir_node *n) {
  for (int j = 1; j < n->nout; j++)
    if (n->out[j] == n->out[0]) return true;
  return false;
}

/* Output 0 of node i (at position i) may take input slot k's buffer. */
static bool pass_ip_legal(const pass_ip *s, int i, int k) {
  const ir_node *n = ir_node_at(s->g, i);
  if (k >= n->nin || n->nout < 1 || n->out[0] < 0 || n->in[k] < 0) return false;
  if (ir_node_req(n, 0) != kWriteTo) return false;        /* kAddTo accumulates; kNullOp writes nothing */
  int t = n->in[k];
  const ir_tensor *x = ir_tensor_at(s->g, t), *o = ir_tensor_at(s->g, n->out[0]);
  if (x->kind != IR_T_VALUE || s->reused[t] || s->live->buf[t].last != i || t == n->out[0]) return false;
  if (pass_ip_accumulated(n)) return false;
  /* Same shape; or, for an op that only copies (reshape, flatten, expand_dims, squeeze: no
   * fusion class), the same element count: the bytes are the same, so the copy vanishes. */
  bool same = ir_shape_eq(&x->shape, &o->shape) ||
              (ir_ops[n->op].fusion == IR_FUSE_NONE && ir_tensor_numel(x) == ir_tensor_numel(o));
  if (x->dtype != o->dtype || !same || pass_ip_reduces(s->g, n, k)) return false;
  /* An elementwise kernel reads each element before it writes it, whatever slot aliases it;
   * other kernels are only promised that slot k aliases the output. */
  return ir_ops[n->op].fusion != IR_FUSE_NONE || !pass_ip_read_elsewhere(n, k, t);
}

static uint32_t pass_ip_options(const ir_node *n) {
  if (n->kind == IR_N_OP) return ir_ops[n->op].fwd_inplace;
  if (n->kind == IR_N_BACKWARD) return ir_ops[n->op].bwd_inplace;
  return 0;
}

static void pass_ip_apply(pass_ip *s, int i, int k) {
  ir_node *n = ir_node_at(s->g, i);
  if (!n->inplace) {
    n->inplace = ir_alloc(&s->g->arena, sizeof(int) * (size_t)n->nout);
    for (int j = 0; j < n->nout; j++) n->inplace[j] = -1;
  }
  if (!n->req) {
    n->req = ir_alloc(&s->g->arena, sizeof(k_req) * (size_t)n->nout);
    for (int j = 0; j < n->nout; j++) n->req[j] = kWriteTo;
  }
  n->inplace[0] = k;
  n->req[0] = kWriteInplace;
  s->reused[n->in[k]] = true;
}

/* Options are tried lowest slot first; the first legal one wins. */
int pass_inplace(ir_graph *g, pass_ctx *cx) {
  int nt = ir_ntensors(g), pairs = 0;
  pass_ip s = {g, pass_plan_new(g), calloc((size_t)nt + 1, sizeof(bool))};
  if (!s.reused) KILN_ICE("out of memory in the in-place pass");
  pass_plan_liveness(g, s.live);
  for (int i = 0; i < ir_nnodes(g); i++) {
    uint32_t opts = pass_ip_options(ir_node_at(g, i));
    for (int k = 0; k < 32 && opts >> k; k++)
      if ((opts >> k & 1) && pass_ip_legal(&s, i, k)) {
        pass_ip_apply(&s, i, k);
        pairs++;
        break;
      }
  }
  ir_plan_free(s.live);
  free(s.reused);
  cx->stats[PASS_inplace].inplace_pairs = pairs;
  return 0;
}
