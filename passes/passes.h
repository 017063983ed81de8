/* passes.h — the optimisation pipeline: one table of passes (pass_table), run in order by
 * pass_compile on a copy of the lowered graph, for predict or for train. Each pass is one
 * file, `ir_graph -> ir_graph` in place (rewriting the node list or annotating it), and
 * reports what it did in its pass_stats. `kiln passes` reads the table.
 *   pass_manager.c  the table, the pipeline, --print-after, timing, the verifier after each pass
 *   pass_select.c   keep the nodes the entry point needs (outputs for predict, loss for train)
 *   pass_simplify.c rewrites that do less work (head transposes read in place by matmul; predict: an activation after max pooling)
 *   pass_samples.c  predict at batch N > 1: the first layers, whose values are large, one sample at a time
 *   pass_backward.c _backward_<op> nodes, head gradient 1, kAddTo accumulation
 *   pass_prune.c    backward-dependency pruning (DeclareBackwardDependency)
 *   pass_optimizer.c optimizer update nodes and their state
 *   pass_inplace.c  forward/backward in-place options where legal
 *   pass_epilogue.c conv / fully_connected / matmul with the elementwise tail they feed, as one node
 *   pass_fusion.c   elementwise groups into fused nodes, with the reasons for every non-fusion
 *   pass_layout.c   activations kept channel-blocked between direct-path convolutions
 *   pass_plan.c     liveness, arena packing, the plan validator
 *   pass_dot.c      the graph as graphviz DOT */
#ifndef KILN_PASSES_H
#define KILN_PASSES_H

#include "ops.h"

#define PASS_LIST(X) X(infer) X(select) X(simplify) X(samples) X(backward) X(prune) X(optimizer) X(inplace) X(epilogue) X(fusion) X(layout) X(plan)
#define PASS_ENUM(n) PASS_##n,
enum { PASS_LIST(PASS_ENUM) PASS_COUNT };
#undef PASS_ENUM
/* Not a pass: a bit of pass_ctx.disabled for a target whose executor runs every node as one
 * call (the GPU's), so the plan places no concat piece that would need a node run per sample
 * (ir_plan.samples). */
#define PASS_NO_SPLIT (1u << 31)

typedef struct {
  bool ran;
  int nodes;                 /* after the pass */
  int fused_groups;
  int inplace_pairs;
  int64_t bytes_freed;       /* pruning: forward bytes no backward node keeps alive */
  int blocked;               /* layout: values kept channel-blocked between convolutions */
  double ms;
} pass_stats;

typedef struct pass_ctx {
  ir_mode mode;
  uint32_t disabled;         /* bit PASS_x: switched off (for differential tests, --disable) */
  ir_diag *diag;
  FILE *print_out;           /* where --print-after writes (NULL: nowhere) */
  int print_after;           /* a pass id, PASS_COUNT for all, -1 for none */
  pass_stats stats[PASS_COUNT];
  ir_vec explain;            /* char*: fusion decisions, one line each (malloc'd) */
} pass_ctx;

typedef struct {
  const char *name;
  const char *summary;
  bool train_only;           /* runs only for train_step (backward, prune, optimizer) */
  bool optional;             /* may be switched off; the others are needed to run at all */
  int (*run)(ir_graph *g, pass_ctx *cx);
  int (*run_off)(ir_graph *g, pass_ctx *cx);   /* what "switched off" does; NULL: nothing */
} pass_def;

#define PASS_DECLARE(n) int pass_##n(ir_graph *g, pass_ctx *cx);
PASS_LIST(PASS_DECLARE)
#undef PASS_DECLARE
extern const pass_def pass_table[PASS_COUNT];

void pass_ctx_init(pass_ctx *cx, ir_mode mode, ir_diag *d);
void pass_ctx_free(pass_ctx *cx);
int pass_lookup(const char *name);                      /* -1 if no pass has that name */
/* A copy of `lowered` run through every pass for cx->mode; NULL after reporting errors. */
ir_graph *pass_compile(const ir_graph *lowered, pass_ctx *cx);
void pass_explain(pass_ctx *cx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* pass_fusion.c: a tensor that node m and node k cannot both touch if m moves past k (one
 * writes what the other reads or writes), or -1; *k_writes says whether k is the writer. */
int pass_node_conflict(const ir_graph *g, const ir_node *m, const ir_node *k, bool *k_writes);

/* ---- pass_plan.c: the memory plan ---- */
/* An empty plan for g (buffers and workspaces zeroed); fatal without memory. */
ir_plan *pass_plan_new(const ir_graph *g);
/* Which storage each tensor needs and its lifetime (first write, last read) in node order. */
void pass_plan_liveness(const ir_graph *g, ir_plan *p);
/* Every ARENA tensor and workspace in its own buffer: the baseline and the oracle. */
ir_plan *pass_plan_naive(const ir_graph *g);
/* No two tensors live at once overlap; in-place pairs are legal; every read follows its
 * write. Returns 0, or prints the first violation to `out` and returns 1. */
int pass_plan_validate(const ir_graph *g, const ir_plan *p, FILE *out);
int pass_plan_off(ir_graph *g, pass_ctx *cx);           /* the plan pass switched off: naive */
/* The workspace a node's kernel asks for (its temp-space resource request). */
size_t pass_node_temp_bytes(const ir_graph *g, const ir_node *n);

/* ---- pass_dot.c ---- */
/* full: every member of a fused group as its own node (default: one node per group); share:
 * each node's part of a profile's time, filled white to red by it (NULL: no profile). */
void pass_write_dot(const ir_graph *g, bool full, const double *share, FILE *out);
/* "#rrggbb" for a node that took `share` of a profile's time, the largest share being `top`:
 * white to red. */
void pass_heat_color(double share, double top, char rgb[8]);
/* "in: f32[64, 3, 32, 32], f32[16, 3, 3, 3]\nout: f32[64, 16, 32, 32]" (and "\n12.5% of the
 * time" when share >= 0): what a node's tooltip says, in DOT and in the report alike. */
void pass_node_io_text(const ir_graph *g, const ir_node *n, double share, char *buf, size_t cap);
/* ---- pass_html.c: `kiln passes --html`, the compile report ---- */
typedef struct {
  const char *graph_svg;     /* graphviz's SVG of pass_write_dot's text, or NULL: the page's own layout */
  const char *graph_note;    /* one sentence: how the graph was laid out */
  const double *share;       /* per node: its share of a profile's time, or NULL */
  const char *profile_note;  /* one sentence: where the profile came from */
} pass_html_in;
/* One self-contained HTML page: the pass table, the graph, the memory plan's timeline and,
 * with a profile, the costliest nodes. */
void pass_write_html(const ir_graph *g, const pass_ctx *cx, const pass_html_in *in, FILE *out);
/* ---- stats ---- */
void pass_print_stats(const ir_graph *g, const pass_ctx *cx, FILE *out);
void pass_print_bytes(FILE *out, int64_t b);   /* "1.50 MiB", "3.0 KiB", "12 B" */

#endif
