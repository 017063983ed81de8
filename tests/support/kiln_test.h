/* kiln_test.h — what the C tests of the front end, the passes and the code generators share:
 * models lowered from text or files with their diagnostics kept, the small dims the examples
 * run with, the source tree's models in a stable order, compiling a lowered graph, random
 * input batches, and the CHECK counting of the tests that print "file:line: FAIL: ..." (ts_). */
#ifndef KILN_TEST_H
#define KILN_TEST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "fe.h"
#include "passes.h"

/* ---- lowering ---- */

/* The front end's state behind lowered graphs: a graph's locations point into the file, so
 * free the graphs before ts_front_free. Zero it, set the two options, then ts_load. */
typedef struct {
  bool capture;                /* diagnostics kept in memory (ts_diags) instead of printed */
  bool small;                  /* add the small dims the file declares; explicit defines win */
  fe_file *file;               /* NULL when the source could not be read */
  ir_diag diag;
  fe_define defs[16];          /* the -D values every model is lowered with */
  int ndefs;
  FILE *mem;
  char *msg;
  size_t len;
} ts_front;

/* Where printed diagnostics go (and ts_compile's): stderr unless a test chooses otherwise. */
void ts_diag_to(FILE *out);
/* Parses `src` (NULL: reads the file `name`) and runs fe_check_file with the defines; true
 * when both are clean. The models of fr->file can then be lowered with ts_lower. */
bool ts_load(ts_front *fr, const char *name, const char *src, const fe_define *defs, int ndefs);
/* One model of fr->file with fr's defines; NULL after reporting errors. The caller frees it. */
ir_graph *ts_lower(ts_front *fr, fe_model *m);
/* ts_load, then the file's first model lowered (NULL if anything failed). */
ir_graph *ts_lower_text(ts_front *fr, const char *name, const char *src, const fe_define *defs, int ndefs);
ir_graph *ts_lower_file(ts_front *fr, const char *path, const fe_define *defs, int ndefs);
/* The captured diagnostics so far ("" when none, or when not capturing). */
const char *ts_diags(ts_front *fr);
void ts_front_free(ts_front *fr);

/* The small dims the examples are tested with (batch=4; for the transformer seq=8 vocab=50
 * d_model=16 heads=2 d_ff=32), those the parsed file declares, in its order. Returns the count. */
int ts_small_defines(const fe_file *f, fe_define *out, int max);

/* ---- the source tree ---- */

/* The source root with a trailing '/', from this file's path (CMake compiles by absolute path). */
const char *ts_root(void);
/* fn(path, ctx) for each *.kiln in `dir` (relative to ts_root() unless absolute), sorted by
 * name. Returns how many there were, or -1 when the folder cannot be read. */
int ts_each_model(const char *dir, void (*fn)(const char *path, void *ctx), void *ctx);

/* ---- compiling ---- */

/* pass_ctx_init(cx, mode, d) with the passes in `disabled` (bits 1u << PASS_x) switched off,
 * then pass_compile when lowered is not NULL. cx is always initialised: pass_ctx_free it. */
ir_graph *ts_compile_cx(const ir_graph *lowered, ir_mode mode, uint32_t disabled, pass_ctx *cx, ir_diag *d);
/* The same with a context and diagnostics of its own. */
ir_graph *ts_compile(const ir_graph *lowered, ir_mode mode, uint32_t disabled);
/* A compiled graph with its plan, which ir_graph_free does not know about. */
void ts_graph_free(ir_graph *g);

/* A model from text (src) or the file `name`, lowered and compiled for `mode`, its context
 * kept for the pass statistics and explain lines. g is NULL when anything failed. */
typedef struct {
  ts_front fr;
  ir_graph *lowered, *g;
  pass_ctx cx;
} ts_run;
ts_run *ts_run_new(const char *name, const char *src, ir_mode mode, uint32_t disabled);
void ts_run_free(ts_run *r);

/* ---- random inputs ---- */

#define TS_RNG_SEED 88172645463325252ull
/* xorshift64: the next 32 random bits of *rng. */
uint32_t ts_next(uint64_t *rng);
/* One buffer for every INPUT tensor of the lowered graph (NULL for the others), drawn from
 * *rng: f32 in [-1, 1]; i32 below the class count of the losses and the input_dim of the
 * embeddings that read it. */
void **ts_batch(const ir_graph *g, uint64_t *rng);
void ts_batch_free(const ir_graph *g, void **b);

/* ---- checks ---- */

extern int ts_passed, ts_failed;
/* Counts a check; a failure prints "FILE:LINE: FAIL: message" (FILE without its folders). */
bool ts_check(bool ok, const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
#define CHECK(cond, ...) ts_check((cond), __FILE__, __LINE__, __VA_ARGS__)
/* Prints "<suite>: N passed, N failed"; returns the exit status (nonzero on a failure). */
int ts_summary(const char *suite);

#endif
