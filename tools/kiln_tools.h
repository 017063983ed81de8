/* kiln_tools.h — what the files of the kiln command line share: the parsed options, the
 * option parser, the walk over a file's models and the JIT path (kiln.c), string helpers
 * (kiln_text.c), and the commands that live in their own file (kiln_train.c). */
#ifndef KILN_TOOLS_H
#define KILN_TOOLS_H

#include <stdbool.h>
#include <stdint.h>

#include "fe.h"
#include "onnx.h"
#include "passes.h"
#include "rt_model.h"

/* Options of the commands that read a model; each command accepts its own subset. */
typedef struct {
  const char *cmd;                 /* "check", "passes", ..., for messages */
  const char *file, *model;
  const char *one_model;           /* set (to a verb): FILE may hold one model unless --model names it */
  fe_define defs[64];
  int ndefs;
  bool print;                      /* check --print */
  bool map;                        /* import --map */
  const char *train;               /* --train of an .onnx model (kiln_onnx_flag) */
  onnx_weight_rule weight_rules[64];   /* --trainable / --freeze of an .onnx model, in order */
  int nweight_rules;
  ir_mode mode;                    /* passes --mode (NONE: train if the model trains) */
  int print_after;                 /* passes --print-after: pass id, PASS_COUNT = all, -1 */
  const char *dot;                 /* passes --dot / --dot-full */
  const char *html;                /* passes --html: the compile report (its --profile: profile) */
  bool dot_full;
  bool stats, explain;
  uint32_t disabled;
  /* compile and run */
  const char *out, *emit, *cpu, *features, *target, *gpu_arch, *weights;
  int opt_level;
  int jobs;                        /* compile --jobs (0: cg_options' default) */
  uint64_t seed;
  const char *inputs[64], *outputs[64];  /* NAME=PATH */
  int ninputs, noutputs;
  const char *profile;             /* run --profile: KILN_PROFILE's trace file */
  long repeat;                     /* run --repeat: predict calls (0: one) */
  /* train */
  const char *data, *save;        /* data: an IDX directory, or kiln_data_open's list */
  const char *val, *log;           /* --val's list; --log's JSON-lines file */
  const char *checkpoint, *resume; /* --checkpoint DIR, --resume DIR */
  long every;                      /* --every N: a checkpoint each N steps too (0: epochs only) */
  long max_steps;                  /* --max-steps N: stop once N steps in all are trained (0: no) */
  float val_split;                 /* --val-split: the fraction held out (0: none) */
  bool distributed;                /* --distributed: one rank of an mpirun job (kiln_train.c) */
  int epochs;                      /* default 1 */
  long limit;                      /* 0: every example */
  float lr;                        /* 0: the model's own */
} kiln_opts;

/* ---- kiln.c ---- */
int kiln_args(int argc, char **argv, kiln_opts *o);          /* 0, or 2 after a usage message */
int kiln_opt_seed(kiln_opts *o, const char *v);              /* 1, or 2 after a message */
/* Lowers each chosen model of o->file and hands its graph to `each`; 1 when any error was
 * reported, 2 when o->one_model is set and FILE holds several models but no --model says which. */
int kiln_for_models(const kiln_opts *o, void (*each)(ir_graph *, const kiln_opts *, ir_diag *));
int kiln_free_defs(kiln_opts *o, int rc);                    /* frees the -D names; returns rc */
double kiln_now(void);                                       /* monotonic seconds */
bool kiln_ends_with(const char *s, const char *suffix);   /* kiln_text.c */
/* JIT-compiles the lowered model and runs `use` on it; a nonzero return counts as an error
 * `use` has already reported. */
void kiln_jit_graph(ir_graph *lowered, const kiln_opts *o, ir_diag *d,
                    int (*use)(const rt_model_api *api, const kiln_opts *o));

/* ---- kiln_report.c ---- */
/* The HTML compile report of g (profile: a trace file to colour the nodes by, or NULL); NULL
 * after reporting an error. The caller frees it. */
char *kiln_report_html(const ir_graph *g, const pass_ctx *cx, const char *profile, ir_diag *d);

/* ---- kiln_repl.c ---- */
int kiln_repl_main(int argc, char **argv);

/* The outputs of one command appear together or not at all (kiln.c): each is written under
 * the temporary name kiln_outs_add returns, then kiln_outs_commit renames them all. */
enum { KILN_MAX_OUTS = 2 };
typedef struct {
  char dest[4096], tmp[4112], keep[4112];   /* dest + ".tmpXXXXXX" / ".oldXXXXXX" */
  bool kept, moved;
} kiln_out;
typedef struct { kiln_out o[KILN_MAX_OUTS]; int n; } kiln_outs;
const char *kiln_outs_add(kiln_outs *s, const char *dest, ir_diag *d);   /* NULL after an error */
int kiln_outs_commit(kiln_outs *s, ir_diag *d);                          /* 0, or 1 with nothing left */
void kiln_outs_discard(kiln_outs *s);

/* ---- kiln_import.c ---- */
extern const char kiln_import_usage[];
int kiln_import_main(int argc, char **argv);
int kiln_import_flag(kiln_opts *o, int argc, char **argv, int *i);   /* as kiln_train_flag */
/* --train "LOSS OPT(...)", --trainable, --freeze: how an .onnx model trains, for every command
 * that reads one (kiln_args refuses them for a .kiln file, which has its train statement). */
int kiln_onnx_flag(kiln_opts *o, int argc, char **argv, int *i);
/* kiln_for_models for a .onnx file: the one model imported and handed to `each`. */
int kiln_for_onnx(const kiln_opts *o, void (*each)(ir_graph *, const kiln_opts *, ir_diag *));

/* ---- kiln_train.c ---- */
int kiln_train_main(int argc, char **argv);
/* The options only `kiln train` takes; 1 when argv[*i] was one of them, 2 on error, else 0. */
int kiln_train_flag(kiln_opts *o, int argc, char **argv, int *i);

#endif
