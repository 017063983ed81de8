/* kiln_repl.h — private to `kiln repl`: the session (named arrays over a kiln_session, the
 * dims and defs typed so far, the loaded model) and what its files share:
 *   kiln_repl.c        input, statements, commands, the main loop
 *   kiln_repl_print.c  values printed as NumPy prints them
 *   kiln_repl_model.c  :model / :weights, and predict(...) / train_step(...) on arrays */
#ifndef KILN_REPL_H
#define KILN_REPL_H

#include "api.h"
#include "kiln_tools.h"

typedef struct { char *name; kiln_array *a; } repl_var;
typedef struct repl_model repl_model;
/* The statement number of each line of the dims or defs kept as text (a def spans lines). */
typedef struct { int *stmt; int n, cap; } repl_lines;
typedef struct {
  kiln_session *s;
  repl_var *vars;
  int nvars, cap;
  api_buf dims, defs;          /* dim and def statements so far, in order */
  repl_lines dim_lines, def_lines;
  int stmt;                    /* the statement number the prompt shows */
  bool failed;
  bool timing;
  repl_model *model;           /* :model's, or NULL */
} repl;

/* ---- kiln_repl.c ---- */
repl_var *repl_find(repl *r, const char *name);
/* Binds name to a, replacing (and releasing) an earlier value; nonzero without memory. */
int repl_bind(repl *r, const char *name, kiln_array *a);
int repl_show(repl *r, kiln_array *a);     /* computes and prints a */

/* ---- kiln_repl_print.c ---- */
void repl_print_value(const kiln_array *a, const void *data, FILE *out);

/* ---- kiln_repl_model.c ---- */
int repl_cmd_model(repl *r, char **arg, int n);
int repl_cmd_weights(repl *r, char **arg, int n);
int repl_cmd_state(repl *r, char **arg, int n, bool save);   /* :save_state, :load_state */
/* `targets = predict(args)` / `train_step(args)` (ntargets 0: show the values); returns -1
 * when text is no such call, else KILN_OK or KILN_ERR. */
int repl_model_call(repl *r, const char *text, char **targets, int ntargets);
void repl_model_free(repl *r);

#endif
