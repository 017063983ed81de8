/* kiln.c — the command line. Each command is a row in kiln_commands: its name, a one-line
 * summary, its usage text and the function that runs it. Exit codes: 0 success, 1 an error
 * in the user's model or data, 2 a usage error. */
#include <stdlib.h>
#include <string.h>

#include "fe.h"

typedef struct {
  const char *name;
  const char *summary;
  const char *usage;
  int (*run)(int argc, char **argv);
} kiln_command;

static int kiln_check_main(int argc, char **argv);
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

typedef struct {
  const char *file, *model;
  fe_define defs[64];
  int ndefs;
  bool print;
} kiln_check_opts;

static int kiln_check_args(int argc, char **argv, kiln_check_opts *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-D") == 0 || strncmp(a, "-D", 2) == 0) {
      const char *v = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
      if (!v) return fprintf(stderr, "kiln check: -D needs NAME=N\n"), 2;
      if (o->ndefs == 64 || !kiln_parse_define(v, &o->defs[o->ndefs])) return 2;
      o->ndefs++;
    } else if (strcmp(a, "--model") == 0 && i + 1 < argc) {
      o->model = argv[++i];
    } else if (strcmp(a, "--print") == 0) {
      o->print = true;
    } else if (a[0] == '-' && a[1]) {
      return fprintf(stderr, "kiln check: unknown option '%s' (see kiln check --help)\n", a), 2;
    } else if (o->file) {
      return fprintf(stderr, "kiln check: one FILE at a time ('%s' and '%s' given)\n", o->file, a), 2;
    } else {
      o->file = a;
    }
  }
  if (!o->file) return fprintf(stderr, "kiln check: no FILE given (see kiln check --help)\n"), 2;
  return 0;
}

static int kiln_check_models(fe_file *f, const kiln_check_opts *o, ir_diag *d) {
  bool found = false;
  for (fe_model *m = f->models; m; m = m->next) {
    if (o->model && strcmp(o->model, m->name) != 0) continue;
    found = true;
    ir_graph *g = fe_lower_model(f, m, o->defs, o->ndefs, d);
    if (!g) continue;
    if (o->print) ir_print(g, stdout);
    else ir_print_summary(g, stdout);
    if (m->next && !o->model) putchar('\n');
    ir_graph_free(g);
  }
  if (!found && o->model) ir_error(d, (ir_loc){0}, "%s has no model named '%s'", f->path, o->model);
  return d->errors ? 1 : 0;
}

static int kiln_check_main(int argc, char **argv) {
  kiln_check_opts o = {0};
  int rc = kiln_check_args(argc, argv, &o);
  if (rc) return rc;
  ir_diag d;
  ir_diag_init(&d, stderr);
  fe_file *f = fe_parse_file(o.file, &d);
  if (f && !d.errors && !fe_check_file(f, o.defs, o.ndefs, &d)) rc = kiln_check_models(f, &o, &d);
  rc = d.errors ? 1 : rc;
  if (d.errors) fprintf(stderr, "%d error%s\n", d.errors, d.errors == 1 ? "" : "s");
  fe_file_free(f);
  ir_diag_free(&d);
  for (int i = 0; i < o.ndefs; i++) free((char *)o.defs[i].name);
  return rc;
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
