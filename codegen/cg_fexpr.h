/* cg_fexpr.h — the fused expression: what one IR_N_FUSED group computes at each element of its
 * index space, built from the IR with no LLVM in it, so that every back end lowers the same
 * thing. cg_fused.c lowers it to an LLVM loop nest; a CUDA C printer would walk it the same
 * way (one thread per element, each node a `float vN = ...;` line, CALL nodes naming the
 * k_scalar.h functions it pastes as __device__ code, stores at the end). */
#ifndef KILN_CG_FEXPR_H
#define KILN_CG_FEXPR_H

#include "ir.h"

typedef enum {
  CG_FX_LOAD,        /* input slot `slot` at the element (stride 0 on its broadcast axes) */
  CG_FX_LOAD_OUT,    /* output slot `slot`'s old value: the base of a kAddTo */
  CG_FX_FCONST,      /* float constant f: a param field, or 0 for an undeclared backward slot */
  CG_FX_ICONST,      /* int constant i: an enum/int/bool param field (activation's act_type) */
  CG_FX_CALL,        /* fn(arg...): a k_scalar.h function */
  CG_FX_ADD          /* arg[0] + arg[1]: kAddTo, as the kernels' `out += v` */
} cg_fx_kind;

#define CG_FX_MAXARG 8

typedef struct {
  cg_fx_kind kind;
  int slot;                    /* LOAD, LOAD_OUT */
  float f;                     /* FCONST */
  int i;                       /* ICONST */
  char fn[64];                 /* CALL: "k_sf_<stem>", "k_sf_<stem>_grad", "..._grad_a" */
  int narg, arg[CG_FX_MAXARG]; /* CALL, ADD: indices of earlier nodes */
} cg_fx;

/* A group: nodes in evaluation order (each argument precedes its user), one final node per
 * external output, and the loop space with dimensions of extent 1 dropped and contiguous
 * runs merged, so the innermost dimension is as long as the broadcasts allow. */
typedef struct {
  int nin, nout;
  int rank;                    /* 0: a single element */
  int64_t numel;               /* 0: nothing to do */
  int64_t dim[K_MAX_RANK];     /* outermost first */
  int64_t (*ist)[K_MAX_RANK];  /* per input: element stride per dimension, 0 where broadcast */
  int64_t ost[K_MAX_RANK];     /* outputs are contiguous in the group's shape */
  cg_fx *x;
  int nx, capx;
  int *store;                  /* per output: the node holding its final value */
  int *alias;                  /* per output: the input it may share in place (same strides), or -1 */
  bool parallel;               /* no output shares an input's buffer but at the same strides, so
                                  no element written by one index is touched by another */
  /* Bounded dims (cg_fexpr_dims): each extent and stride above as it follows the dims; the
   * values above are the bound's. A back end reads the run's extents from the pointer after
   * the tensors' (rt_model.h) and evaluates these where `dynamic` is set. */
  bool dynamic;
  k_dimval vdim[K_MAX_RANK], vost[K_MAX_RANK];
  k_dimval (*vist)[K_MAX_RANK];
  /* The space is the output's own shape, no axis dropped or merged (cg_fexpr_build_as): each
   * extent is a tensor axis, which follows the dims as a k_dimval even where a merged run of
   * them would not (an attention score's seq * seq). Only vdim is fitted then; a back end
   * derives the strides from the extents at run time (outputs contiguous, an input's stride
   * 0 on the axes where it broadcasts, ist 0 at the bound). */
  bool flat;
} cg_fexpr;

/* Element strides of shape s read at the index space of shape out (NumPy broadcasting: 0 on
 * the axes where s is 1 or missing), or 1 when s does not broadcast to out. */
int cg_fexpr_bcast_strides(const k_shape *s, const k_shape *out, int64_t *st);
/* The k_scalar.h stem of an elementwise op's functions: k_sf_<stem>, k_sf_<stem>_grad... */
const char *cg_fexpr_stem(const ir_node *m);

/* A float constant input (IR_T_CONST: every element holds `value`, which nothing writes) is
 * its value in the expression, never a load: the group's code does not read its pointer, so
 * the descriptor leaves that slot absent (cg_desc.c). */
static inline bool cg_fexpr_folds(const ir_tensor *x) { return x->kind == IR_T_CONST && x->dtype == K_F32; }

/* The expression of fused node fn of graph g; 0, or 1 with a message naming the group. */
int cg_fexpr_build(const ir_graph *g, const ir_node *fn, cg_fexpr *fx, char *err, size_t n);
/* The same, over the output's own axes when `flat` (cg_fexpr.flat). */
int cg_fexpr_build_as(const ir_graph *g, const ir_node *fn, bool flat, cg_fexpr *fx, char *err, size_t n);
/* Bounded dims: fx is the bound's expression of a group, probe[p] the same group's in probe
 * graph p (ir_dims.c) of the lowered graph `lowered`. Fits every extent and stride (vdim,
 * vist, vost) and sets `dynamic` when one follows the dims; 0, or 1 with a message when the
 * probes' loop structure differs or a size fits no form. */
int cg_fexpr_dims(cg_fexpr *fx, const ir_graph *lowered, const cg_fexpr *probe, char *err, size_t n);
/* cg_fexpr_dims for node i of the predict (or train) graph, its probes' the same node of each
 * probe graph of pr (cg.h), each made by `build` (NULL: node i must be a fused group there,
 * built by cg_fexpr_build_as) as flat as fx is; 0, or 1 with a message. */
struct cg_probes;
typedef int (*cg_fexpr_builder)(const ir_graph *g, int i, bool flat, cg_fexpr *fx, char *err, size_t n);
int cg_fexpr_probe(const struct cg_probes *pr, bool train, int i, cg_fexpr *fx, cg_fexpr_builder build, char *err, size_t n);
void cg_fexpr_free(cg_fexpr *fx);
/* The level at which input slot s varies: 1 + its innermost dimension with a nonzero stride,
 * 0 when it is one value for the whole group (a scalar constant). Loads are placed there. */
int cg_fexpr_load_level(const cg_fexpr *fx, int s);
/* Everything the lowered loop depends on, as canonical bytes (malloc'd, *len set; NULL when
 * out of memory): two groups with equal keys compute the same function of their pointers, so
 * a back end emits the first and points the second at it. Deep models repeat their blocks,
 * and each repeat would otherwise cost a compile of its own. */
unsigned char *cg_fexpr_key(const cg_fexpr *fx, size_t *len);
/* The text form, one node a line, for debugging (KILN_DEBUG) and tests. */
void cg_fexpr_print(const cg_fexpr *fx, FILE *out);

#endif
