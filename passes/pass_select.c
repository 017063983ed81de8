/* pass_select.c — keeps the nodes an entry point needs: those the outputs depend on for
 * predict, those the loss depends on for train (train_step returns only the loss). What
 * remains decides which inputs each entry point takes. */
#include "passes.h"

#include <stdlib.h>

int pass_select(ir_graph *g, pass_ctx *cx) {
  bool *need_t = calloc((size_t)ir_ntensors(g) + 1, sizeof(bool));
  if (!need_t) KILN_ICE("out of memory");
  if (cx->mode == IR_MODE_TRAIN && g->loss >= 0) need_t[g->loss] = true;
  if (cx->mode != IR_MODE_TRAIN)
    for (int i = 0; i < g->outputs.len; i++) need_t[IR_VEC_AT(g->outputs, int, i)] = true;
  ir_graph_mark_needed(g, need_t);
  ir_vec kept = {.elem = sizeof(ir_node)};
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    bool need = false;
    for (int j = 0; j < n->nout; j++) need |= n->out[j] >= 0 && need_t[n->out[j]];
    if (need) *(ir_node *)ir_vec_push(&kept) = *n;
  }
  free(need_t);
  ir_graph_set_nodes(g, &kept);
  return 0;
}
