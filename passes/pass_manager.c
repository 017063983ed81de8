/* pass_manager.c — the pass table and the straight-line pipeline: copy the lowered graph,
 * run each pass the mode needs in table order, time it, verify the graph after it (debug
 * builds) and print it when --print-after asks. */
#define _GNU_SOURCE   /* vasprintf */
#include "passes.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

const pass_def pass_table[PASS_COUNT] = {
  [PASS_infer] = {"infer", "shape and type inference (parameters included)", false, false, pass_infer},
  [PASS_select] = {"select", "keep the nodes the entry point needs: outputs (predict) or the loss (train)", false, false, pass_select},
  [PASS_simplify] = {"simplify", "a matmul reads and writes the head split of attention in place of its transposes; predict: a monotone activation read only by a max pooling runs after it", false, true, pass_simplify},
  [PASS_samples] = {"samples", "predict at batch N > 1: the first layers, whose values hold the most bytes a sample, run one sample at a time (depth first)", false, true, pass_samples},
  [PASS_backward] = {"backward", "derive _backward_<op> nodes; head gradient 1; kAddTo where gradients meet", true, false, pass_backward},
  [PASS_prune] = {"prune", "backward-dependency pruning: backward nodes read only what the op declares", true, true, pass_prune},
  [PASS_optimizer] = {"optimizer", "optimizer update nodes that step parameters and state in place", true, false, pass_optimizer},
  [PASS_inplace] = {"inplace", "apply the ops' in-place options where the input has no later reader", false, true, pass_inplace},
  [PASS_epilogue] = {"epilogue", "convolution / fully_connected / matmul with the elementwise tail they feed, run per output block", false, true, pass_epilogue},
  [PASS_fusion] = {"fusion", "group chains of elementwise ops into fused nodes", false, true, pass_fusion},
  [PASS_layout] = {"layout", "keep values channel-blocked between direct-path convolutions and poolings (conversions only at the boundaries)", false, true, pass_layout},
  [PASS_plan] = {"plan", "liveness and arena packing (switched off: every tensor its own buffer)", false, true, pass_plan,
                 pass_plan_off},
};

void pass_ctx_init(pass_ctx *cx, ir_mode mode, ir_diag *d) {
  memset(cx, 0, sizeof *cx);
  cx->mode = mode;
  cx->diag = d;
  cx->print_after = -1;
  cx->explain.elem = sizeof(char *);
}

void pass_ctx_free(pass_ctx *cx) {
  for (int i = 0; i < cx->explain.len; i++) free(IR_VEC_AT(cx->explain, char *, i));
  ir_vec_free(&cx->explain);
}

int pass_lookup(const char *name) {
  for (int i = 0; i < PASS_COUNT; i++)
    if (strcmp(pass_table[i].name, name) == 0) return i;
  return -1;
}

void pass_explain(pass_ctx *cx, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *line = NULL;
  if (vasprintf(&line, fmt, ap) < 0) line = NULL;
  va_end(ap);
  if (line) *(char **)ir_vec_push(&cx->explain) = line;
}

int pass_infer(ir_graph *g, pass_ctx *cx) { return ir_infer_shapes(g, cx->diag); }

static double pass_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void pass_maybe_print(const ir_graph *g, const pass_ctx *cx, int id) {
  if (!cx->print_out || (cx->print_after != id && cx->print_after != PASS_COUNT)) return;
  fprintf(cx->print_out, "# after pass %s (%s)\n", pass_table[id].name, cx->mode == IR_MODE_TRAIN ? "train" : "predict");
  ir_print(g, cx->print_out);
}

static int pass_run_one(ir_graph *g, pass_ctx *cx, int id) {
  const pass_def *p = &pass_table[id];
  double t0 = pass_now_ms();
  bool off = p->optional && (cx->disabled >> id & 1);
  if (off && !p->run_off) return 0;
  int errors = off ? p->run_off(g, cx) : p->run(g, cx);
  cx->stats[id].ran = true;
  cx->stats[id].ms = pass_now_ms() - t0;
  cx->stats[id].nodes = ir_nnodes(g);
#ifdef KILN_DEBUG
  if (!errors && ir_verify(g)) KILN_ICE("the graph is invalid after pass '%s'", p->name);
#endif
  if (!errors) pass_maybe_print(g, cx, id);
  return errors;
}

ir_graph *pass_compile(const ir_graph *lowered, pass_ctx *cx) {
  if (cx->mode == IR_MODE_TRAIN && !lowered->has_train) {
    ir_error(cx->diag, (ir_loc){0}, "model '%s' has no train statement, so it has no train_step", lowered->name);
    return NULL;
  }
  ir_graph *g = ir_graph_clone(lowered);
  g->mode = cx->mode;
  for (int id = 0; id < PASS_COUNT; id++) {
    if (pass_table[id].train_only && cx->mode != IR_MODE_TRAIN) continue;
    if (pass_run_one(g, cx, id)) {
      ir_graph_free(g);
      return NULL;
    }
  }
  return g;
}
