/* kiln.c — the command line. Each command is a row in kiln_commands: its name, a one-line
 * summary, its usage text and the function that runs it. Exit codes: 0 success, 1 an error
 * in the user's model or data, 2 a usage error. */
#include <stdlib.h>
#include <string.h>

#include "fe.h"
#include "passes.h"

typedef struct {
  const char *name;
  const char *summary;
  const char *usage;
  int (*run)(int argc, char **argv);
} kiln_command;

static int kiln_check_main(int argc, char **argv);
static int kiln_passes_main(int argc, char **argv);
static int kiln_help_main(int argc, char **argv);

static const kiln_command kiln_commands[] = {
  {"check", "parse a model, infer shapes, print each node's op, shapes, parameters and FLOPs",
   "usage: kiln check FILE [-D dim=N]... [--model NAME] [--print]\n"
   "\n"
   "Parses FILE, lowers every model in it (or only --model NAME) to the graph IR, infers all\n"
   "shapes, parameters included, and prints a table: node, op, output shape, the parameters\n"
   "it introduces with their sizes, and its FLOPs, then totals. Exits 1 on any error.\n"
   "\n"
   "  -D dim=N       rebind a dim declared in FILE (repeatable), e.g. -D batch=1\n"
   "  --model NAME   check only this model\n"
   "  --print        print the lowered graph as .kiln text instead of the table\n"
   "                 (every parameter declared, every attribute explicit; it parses back\n"
   "                 to the same graph)\n",
   kiln_check_main},
  {"passes", "run the optimisation passes; print the graph after any pass, stats, DOT, fusion decisions",
   "usage: kiln passes FILE [-D dim=N]... [--model NAME] [--mode predict|train]\n"
   "                   [--print-after PASS|all] [--dot OUT.dot] [--stats] [--explain] [--disable PASS]...\n"
   "\n"
   "Compiles the model's predict or train_step graph (default: train_step when the model has a\n"
   "train statement) through the pass pipeline and shows what each pass did.\n"
   "\n"
   "  --print-after P  print the graph after pass P (or after every pass: all)\n"
   "  --stats          per pass: nodes, fused groups, in-place pairs, bytes freed by pruning, time;\n"
   "                   then naive bytes, planned arena bytes, their ratio, and every buffer's\n"
   "                   offset, size and lifetime\n"
   "  --dot OUT.dot    write the final graph for graphviz (fused groups as clusters, the\n"
   "                   backward graph apart): dot -Tsvg OUT.dot -o graph.svg\n"
   "  --explain        list the fusion decisions and their reasons\n"
   "  --disable P      switch an optional pass off (prune, inplace, fusion, plan)\n"
   "\n"
   "passes, in order: infer select backward prune optimizer inplace fusion plan\n",
   kiln_passes_main},
  {"help", "show help for a command", "usage: kiln help [COMMAND]\n", kiln_help_main},
};
enum { KILN_NCOMMANDS = sizeof kiln_commands / sizeof *kiln_commands };

static void kiln_usage(FILE *out) {
  fprintf(out, "usage: kiln COMMAND [ARGS]\n\nKiln compiles neural-network models written in the .kiln language.\n\ncommands:\n");
  for (int i = 0; i < KILN_NCOMMANDS; i++) fprintf(out, "  %-8s %s\n", kiln_commands[i].name, kiln_commands[i].summary);
  fprintf(out, "\n'kiln COMMAND --help' describes a command. The language, the operators and the\n"
               "generated C ABI are documented in docs/ of the Kiln source tree.\n");
}

static const kiln_command *kiln_find_command(const char *name) {
  for (int i = 0; i < KILN_NCOMMANDS; i++)
    if (strcmp(kiln_commands[i].name, name) == 0) return &kiln_commands[i];
  return NULL;
}

static int kiln_help_main(int argc, char **argv) {
  const kiln_command *c = argc > 1 ? kiln_find_command(argv[1]) : NULL;
  if (argc > 1 && !c) return fprintf(stderr, "kiln help: unknown command '%s'\n", argv[1]), 2;
  if (c) fputs(c->usage, stdout);
  else kiln_usage(stdout);
  return 0;
}

static bool kiln_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return true;
  return false;
}

/* "-D batch=1" or "-Dbatch=1" into defs; false (with a message) when malformed. */
static bool kiln_parse_define(const char *arg, fe_define *out) {
  const char *eq = strchr(arg, '=');
  char *end = NULL;
  if (!eq || eq == arg) return fprintf(stderr, "kiln: -D expects NAME=N, got '%s'\n", arg), false;
  long long v = strtoll(eq + 1, &end, 10);
  if (!*(eq + 1) || *end) return fprintf(stderr, "kiln: -D %s: '%s' is not an integer\n", arg, eq + 1), false;
  char *name = malloc((size_t)(eq - arg) + 1);
  if (!name) return false;
  memcpy(name, arg, (size_t)(eq - arg));
  name[eq - arg] = 0;
  *out = (fe_define){name, v};
  return true;
}

/* Options of the commands that read a model; each command accepts its own subset. */
typedef struct {
  const char *cmd;                 /* "check" or "passes", for messages */
  const char *file, *model;
  fe_define defs[64];
  int ndefs;
  bool print;                      /* check --print */
  ir_mode mode;                    /* passes --mode (NONE: train if the model trains) */
  int print_after;                 /* passes --print-after: pass id, PASS_COUNT = all, -1 */
  const char *dot;
  bool stats, explain;
  uint32_t disabled;
} kiln_opts;

static int kiln_opt_define(kiln_opts *o, const char *v) {
  if (!v) return fprintf(stderr, "kiln %s: -D needs NAME=N\n", o->cmd), 2;
  if (o->ndefs == 64 || !kiln_parse_define(v, &o->defs[o->ndefs])) return 2;
  o->ndefs++;
  return 0;
}

static int kiln_opt_pass(const kiln_opts *o, const char *flag, const char *v, bool allow_all, bool optional_only) {
  if (!v) return fprintf(stderr, "kiln %s: %s needs a pass name\n", o->cmd, flag), -2;
  if (allow_all && strcmp(v, "all") == 0) return PASS_COUNT;
  int id = pass_lookup(v);
  if (id >= 0 && (!optional_only || pass_table[id].optional)) return id;
  fprintf(stderr, "kiln %s: %s: '%s' is not %s pass; the passes are", o->cmd, flag, v, optional_only ? "an optional" : "a");
  for (int i = 0; i < PASS_COUNT; i++)
    if (!optional_only || pass_table[i].optional) fprintf(stderr, " %s", pass_table[i].name);
  fputc('\n', stderr);
  return -2;
}

/* The options only `kiln passes` takes; returns 1 when `a` was one of them, 2 on error. */
static int kiln_passes_flag(kiln_opts *o, int argc, char **argv, int *i) {
  const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
  int id;
  if (strcmp(a, "--stats") == 0) return o->stats = true, 1;
  if (strcmp(a, "--explain") == 0) return o->explain = true, 1;
  if (strcmp(a, "--dot") == 0 && v) return o->dot = argv[++*i], 1;
  if (strcmp(a, "--mode") == 0 && v && (!strcmp(v, "predict") || !strcmp(v, "train")))
    return o->mode = !strcmp(argv[++*i], "train") ? IR_MODE_TRAIN : IR_MODE_PREDICT, 1;
  if (strcmp(a, "--mode") == 0) return fprintf(stderr, "kiln passes: --mode is predict or train\n"), 2;
  if (strcmp(a, "--print-after") == 0) {
    if ((id = kiln_opt_pass(o, a, v, true, false)) < -1) return 2;
    return o->print_after = id, ++*i, 1;
  }
  if (strcmp(a, "--disable") == 0) {
    if ((id = kiln_opt_pass(o, a, v, false, true)) < -1) return 2;
    return o->disabled |= 1u << id, ++*i, 1;
  }
  return 0;
}

static int kiln_args(int argc, char **argv, kiln_opts *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int r = strcmp(o->cmd, "passes") == 0 ? kiln_passes_flag(o, argc, argv, &i) : 0;
    if (r == 2) return 2;
    if (r == 1) continue;
    if (strncmp(a, "-D", 2) == 0) {
      if (kiln_opt_define(o, a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL))) return 2;
    } else if (strcmp(a, "--model") == 0 && i + 1 < argc) {
      o->model = argv[++i];
    } else if (strcmp(a, "--print") == 0 && strcmp(o->cmd, "check") == 0) {
      o->print = true;
    } else if (a[0] == '-' && a[1]) {
      return fprintf(stderr, "kiln %s: unknown option '%s' (see kiln %s --help)\n", o->cmd, a, o->cmd), 2;
    } else if (o->file) {
      return fprintf(stderr, "kiln %s: one FILE at a time ('%s' and '%s' given)\n", o->cmd, o->file, a), 2;
    } else {
      o->file = a;
    }
  }
  if (!o->file) return fprintf(stderr, "kiln %s: no FILE given (see kiln %s --help)\n", o->cmd, o->cmd), 2;
  return 0;
}

static void kiln_check_graph(ir_graph *g, const kiln_opts *o, ir_diag *d) {
  (void)d;
  if (o->print) ir_print(g, stdout);
  else ir_print_summary(g, stdout);
}

static int kiln_write_dot(const ir_graph *g, const char *path, ir_diag *d) {
  FILE *f = fopen(path, "w");
  if (!f) return ir_error(d, (ir_loc){0}, "cannot write '%s'", path), 1;
  pass_write_dot(g, f);
  if (fclose(f)) return ir_error(d, (ir_loc){0}, "cannot write '%s'", path), 1;
  return 0;
}

static void kiln_passes_graph(ir_graph *lowered, const kiln_opts *o, ir_diag *d) {
  pass_ctx cx;
  ir_mode mode = o->mode ? o->mode : lowered->has_train ? IR_MODE_TRAIN : IR_MODE_PREDICT;
  pass_ctx_init(&cx, mode, d);
  cx.disabled = o->disabled;
  cx.print_after = o->print_after;
  cx.print_out = stdout;
  ir_graph *g = pass_compile(lowered, &cx);
  if (g && o->stats) pass_print_stats(g, &cx, stdout);
  for (int i = 0; g && o->explain && i < cx.explain.len; i++) printf("%s\n", IR_VEC_AT(cx.explain, char *, i));
  if (g && o->dot) kiln_write_dot(g, o->dot, d);
  if (g && o->print_after < 0 && !o->stats && !o->explain && !o->dot) ir_print(g, stdout);
  if (g) {
    pass_plan_free(g->plan);
    ir_graph_free(g);
  }
  pass_ctx_free(&cx);
}

/* Lowers each chosen model of FILE and hands its graph to `each`. */
static int kiln_for_models(const kiln_opts *o, void (*each)(ir_graph *, const kiln_opts *, ir_diag *)) {
  ir_diag d;
  ir_diag_init(&d, stderr);
  fe_file *f = fe_parse_file(o->file, &d);
  bool found = false;
  if (f && !d.errors && !fe_check_file(f, o->defs, o->ndefs, &d)) {
    for (fe_model *m = f->models; m; m = m->next) {
      if (o->model && strcmp(o->model, m->name) != 0) continue;
      found = true;
      ir_graph *g = fe_lower_model(f, m, o->defs, o->ndefs, &d);
      if (g) each(g, o, &d);
      if (g && m->next && !o->model) putchar('\n');
      ir_graph_free(g);
    }
    if (!found && o->model) ir_error(&d, (ir_loc){0}, "%s has no model named '%s'", f->path, o->model);
  }
  int rc = d.errors ? 1 : 0;
  if (d.errors) fprintf(stderr, "%d error%s\n", d.errors, d.errors == 1 ? "" : "s");
  fe_file_free(f);
  ir_diag_free(&d);
  for (int i = 0; i < o->ndefs; i++) free((char *)o->defs[i].name);
  return rc;
}

static int kiln_check_main(int argc, char **argv) {
  kiln_opts o = {.cmd = "check", .print_after = -1};
  int rc = kiln_args(argc, argv, &o);
  return rc ? rc : kiln_for_models(&o, kiln_check_graph);
}

static int kiln_passes_main(int argc, char **argv) {
  kiln_opts o = {.cmd = "passes", .print_after = -1};
  int rc = kiln_args(argc, argv, &o);
  return rc ? rc : kiln_for_models(&o, kiln_passes_graph);
}

int main(int argc, char **argv) {
  if (argc < 2) return kiln_usage(stderr), 2;
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) return kiln_usage(stdout), 0;
  const kiln_command *c = kiln_find_command(argv[1]);
  if (!c) {
    const char *names[KILN_NCOMMANDS];
    for (int i = 0; i < KILN_NCOMMANDS; i++) names[i] = kiln_commands[i].name;
    const char *sug = ir_suggest(argv[1], names, KILN_NCOMMANDS);
    fprintf(stderr, "kiln: unknown command '%s'%s%s%s (see kiln --help)\n", argv[1], sug ? "; did you mean '" : "",
            sug ? sug : "", sug ? "'?" : "");
    return 2;
  }
  if (kiln_wants_help(argc - 1, argv + 1)) return fputs(c->usage, stdout), 0;
  return c->run(argc - 1, argv + 1);
}
