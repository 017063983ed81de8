/* ex_int.h — what the executor's files share and nobody else sees: the model's storage
 * (entries found by name through an open-addressing table) and the state of one run. */
#ifndef KILN_EX_INT_H
#define KILN_EX_INT_H

#include "exec.h"

typedef struct {
  char *name;
  float *data;                /* n elements of 4 bytes, 64-byte aligned */
  int64_t n;
  ir_tensor_kind kind;        /* PARAM, AUX or STATE */
} ex_entry;

struct ex_model {
  uint64_t seed;
  int64_t step;
  float lr;                     /* the base lr of the schedule */
  int64_t lr_from;              /* the step lr was set at: the schedule counts from it */
  ex_entry *ent;
  int nent, cap;
  int nweights;               /* entries [0, nweights) are the PARAM and AUX tensors */
  int *slot;                  /* hash table: entry index + 1, 0 when empty */
  int nslot;                  /* a power of two, at least twice nent */
  void *arena, *scratch, *backup;   /* grow-only buffers reused across calls */
  int64_t arena_cap, scratch_cap, backup_cap;
};

/* One call of an entry point. */
typedef struct {
  ex_model *m;
  const ir_graph *g;
  void **ptr;                 /* per tensor: its bound buffer, NULL when it has none */
  int64_t *scr;               /* per tensor: offset into m->scratch, or -1 */
  k_tensor *tin, *tout;       /* argument arrays for one kernel call, cap entries each */
  k_req *req;
  int cap;
  int node;                   /* the position of the node running (its plan entries) */
  int is_train;
  char *err;
  size_t errn;
} ex_run;

/* ex_model.c */
ex_entry *ex_model_find(const ex_model *m, const char *name);
/* The optimizer state `name` of n elements, created zeroed on first use; NULL if out of
 * memory or an entry of that name has another size. */
ex_entry *ex_model_state(ex_model *m, const char *name, int64_t n);
/* Makes *buf (capacity *cap bytes) hold at least `bytes`, 64-byte aligned, new memory
 * zeroed; returns the buffer or NULL when out of memory. */
void *ex_grow(void **buf, int64_t *cap, int64_t bytes);

/* ex_node.c */
int ex_node_run(ex_run *r, const ir_node *nd, void *temp, size_t temp_bytes);

#endif
