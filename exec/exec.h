/* exec.h — the reference executor: a plain interpreter that runs a planned graph by calling
 * the kernels one by one. It is the oracle of the differential tests: every pass and both
 * code generators must give the numbers it gives on the unoptimised graph.
 *   ex_model.c  weights (every PARAM and AUX tensor, by name), their initialisation,
 *               optimizer state created on first use, the step count and learning rate
 *   ex_run.c    the entry points: bind each tensor by its plan class, run the nodes, copy out
 *   ex_node.c   one node: forward, backward (shapes of pruned slots), update, fused group
 *
 * Random numbers (the contract the code generators must follow to draw the same numbers):
 *   initialisation of the tensor with index i of the lowered graph draws Philox(seed,
 *   EX_CTR_INIT(i), element); a RANDOM op (dropout) in step s draws Philox(seed,
 *   EX_CTR_OP(s, name), element), where name is the node's name, which every pass keeps, so
 *   every plan of a model draws the same mask. */
#ifndef KILN_EXEC_H
#define KILN_EXEC_H

#include "passes.h"
#include "rt_model.h"
#include "runtime.h"   /* rt_errf */

#define EX_ERR_LEN 512

/* Counters of the random draws (see above): the runtime's formulas, so a compiled model and
 * this executor draw alike by construction. */
#define EX_CTR_INIT(i) RT_CTR_INIT(i)
#define EX_CTR_OP(step, name) RT_CTR_OP(step, rt_fnv1a32(name))

typedef struct ex_model ex_model;

/* ---- ex_model.c ---- */
/* Storage for every PARAM and AUX tensor of `lowered` (shapes inferred), initialised from
 * its ir_init; lr from the train statement (0 without one); step 0. NULL with a message in
 * err when a tensor's shape is unknown or memory runs out. */
ex_model *ex_model_new(const ir_graph *lowered, uint64_t seed, char *err, size_t n);
void ex_model_free(ex_model *m);
void ex_model_set_lr(ex_model *m, float lr);
float ex_model_lr(const ex_model *m);
int64_t ex_model_step(const ex_model *m);          /* train steps taken */
/* A weight by name (PARAM, AUX or optimizer STATE): 0, or 1 when there is none. */
int ex_model_get(const ex_model *m, const char *name, const float **data, int64_t *n);
/* The i-th weight (PARAM and AUX, in tensor order of the lowered graph): 0, or 1 past the
 * end. For walking all weights in tests and savers. */
int ex_model_weight(const ex_model *m, int i, const char **name, const float **data, int64_t *n);

/* ---- ex_run.c ---- */
/* Runs g (from pass_compile for PREDICT, with g->plan) on the caller's inputs, one buffer per
 * ir_graph_inputs entry, and writes the outputs in g->outputs order. 0, or nonzero with a
 * message in err (a kernel's data error, a graph the model does not fit); never crashes. */
int ex_predict(ex_model *m, const ir_graph *g, const void *const *inputs, void *const *outputs,
               char *err, size_t n);
/* One step of g (a TRAIN graph): forward, backward, updates; the loss into *loss (may be
 * NULL). On failure the step count and aux states are as they were. */
int ex_train_step(ex_model *m, const ir_graph *g, const void *const *inputs, float *loss,
                  char *err, size_t n);

#endif
