/* kiln_report.c — `kiln passes FILE --html report.html [--profile TRACE.json]`: the compile
 * report (passes/pass_html.c writes the page). Here what the page needs from outside the
 * compiler: graphviz's layout of the graph (`dot -Tsvg`, run with a time limit; without it the
 * page lays the graph out itself), and each node's share of a profile's time, read from the
 * Chrome trace that `kiln run --profile` or KILN_PROFILE wrote (runtime/rt_profile.c: one
 * event a line, each step's name the name of the node it runs). */
#include "kiln_tools.h"
#include "runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* dot places the examples' graphs in under a second (pass_dot.c); past these the page's own
 * layout is drawn instead, so a report never waits long. */
enum { KILN_REPORT_DOT_MAX_NODES = 3000, KILN_REPORT_DOT_SECS = 20 };

/* A whole file as a C string (rt_file_read_all, then its terminator); NULL with err set. */
static char *kiln_report_read(const char *path, char *err, size_t cap) {
  void *data;
  size_t len;
  if (rt_file_read_all(path, &data, &len, err, cap)) return NULL;
  char *text = realloc(data, len + 1);
  if (!text) KILN_ICE("out of memory reading a file");
  text[len] = 0;
  return text;
}

/* Runs `dot -Tsvg IN -o OUT`; 0 when it finished well within the time limit, else a reason. */
static const char *kiln_report_run_dot(const char *in, const char *out) {
  char *argv[] = {"dot", "-Tsvg", (char *)in, "-o", (char *)out, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawnp(&pid, "dot", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc) return "graphviz's dot was not found: apt-get install graphviz";
  double t0 = kiln_now();
  int status;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) return "dot could not be waited for";
    if (kiln_now() - t0 > KILN_REPORT_DOT_SECS) {
      kill(pid, SIGKILL), waitpid(pid, &status, 0);
      return "dot did not finish in time";
    }
    nanosleep(&(struct timespec){0, 5000000}, NULL);
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? NULL : "dot failed on the graph";
}

/* graphviz's SVG of the graph (share: each node's fill), or NULL with *why set: the page then
 * draws its own layout. */
static char *kiln_report_svg(const ir_graph *g, const double *share, const char **why, double *secs) {
  if (ir_nnodes(g) > KILN_REPORT_DOT_MAX_NODES) return *why = "the graph has more nodes than dot places quickly", NULL;
  const char *tmpdir = getenv("TMPDIR");
  char dir[4096], in[4200], out[4200];
  snprintf(dir, sizeof dir, "%s/kiln-report-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
  if (!mkdtemp(dir)) return *why = "no temporary folder for dot", NULL;
  snprintf(in, sizeof in, "%s/graph.dot", dir);
  snprintf(out, sizeof out, "%s/graph.svg", dir);
  char *svg = NULL;
  FILE *f = fopen(in, "w");
  if (!f) *why = "no temporary file for dot";
  else {
    pass_write_dot(g, false, share, f);
    double t0 = kiln_now();
    *why = fclose(f) ? "no temporary file for dot" : kiln_report_run_dot(in, out);
    *secs = kiln_now() - t0;
    char err[RT_ERR_LEN];
    if (!*why && !(svg = kiln_report_read(out, err, sizeof err))) *why = "dot's SVG could not be read";
  }
  unlink(in), unlink(out), rmdir(dir);
  return svg;
}

/* ---- the profile ---- */

/* The node named `name`, or -1: names are unique in a compiled graph; a sorted index. */
typedef struct {
  const char *name;
  int node;
} kiln_report_name;

static int kiln_report_by_name(const void *a, const void *b) {
  return strcmp(((const kiln_report_name *)a)->name, ((const kiln_report_name *)b)->name);
}

/* The JSON string starting at p (after its opening quote) into buf, escapes undone for the
 * quote and backslash (node names hold no others); the end of the string, or NULL. */
static const char *kiln_report_jstr(const char *p, char *buf, size_t cap) {
  size_t n = 0;
  for (; *p && *p != '"'; p++) {
    if (*p == '\\' && p[1]) p++;
    if (n + 1 < cap) buf[n++] = *p;
  }
  buf[n] = 0;
  return *p == '"' ? p + 1 : NULL;
}

/* One trace line: a step's event of `program` ({"name":..., "dur":..., "args":{"program":...}),
 * its name and duration; false for any other line. */
static bool kiln_report_event(const char *line, const char *program, char *name, size_t cap, double *dur) {
  const char *p = strstr(line, "{\"name\":\"");
  if (!p || !(p = kiln_report_jstr(p + 9, name, cap))) return false;
  char want[64];
  snprintf(want, sizeof want, "\"program\":\"%s\"", program);
  const char *d = strstr(p, "\"dur\":");
  if (!d || !strstr(p, want) || strstr(p, "\"ph\":\"X\"") == NULL) return false;
  char *end;
  *dur = strtod(d + 6, &end);
  return end != d + 6 && *dur >= 0;
}

/* Each node's share of the time the trace's steps of this graph's program took, summed over
 * every call; NULL after reporting why. */
static double *kiln_report_share(const ir_graph *g, const char *path, char *note, size_t cap, ir_diag *d) {
  const char *program = g->mode == IR_MODE_TRAIN ? "train_step" : "predict";
  const char *other = g->mode == IR_MODE_TRAIN ? "predict" : "train_step";
  char err[RT_ERR_LEN], *text = kiln_report_read(path, err, sizeof err);
  if (!text) return ir_error(d, (ir_loc){0}, "--profile: cannot read the trace: %s", err), NULL;
  int nn = ir_nnodes(g);
  kiln_report_name *idx = malloc(sizeof *idx * ((size_t)nn + 1));
  double *share = calloc((size_t)nn + 1, sizeof *share), total = 0;
  if (!idx || !share) KILN_ICE("out of memory reading the profile");
  for (int i = 0; i < nn; i++) idx[i] = (kiln_report_name){ir_node_at(g, i)->name, i};
  qsort(idx, (size_t)nn, sizeof *idx, kiln_report_by_name);
  long events = 0, matched = 0, others = 0;
  char name[512];
  double dur;
  for (char *line = text, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    if (kiln_report_event(line, other, name, sizeof name, &dur)) others++;
    if (!kiln_report_event(line, program, name, sizeof name, &dur)) continue;
    events++;
    kiln_report_name key = {name, 0}, *hit = bsearch(&key, idx, (size_t)nn, sizeof *idx, kiln_report_by_name);
    if (hit) share[hit->node] += dur, total += dur, matched++;
  }
  free(text), free(idx);
  if (!matched) {
    free(share);
    if (!events && others)
      return ir_error(d, (ir_loc){0}, "--profile: '%s' times %s, not %s: give --mode %s", path, other, program, other), NULL;
    return ir_error(d, (ir_loc){0}, "--profile: no step of '%s' is a node of this graph (%ld %s steps read; was it profiled "
                                    "from this model, with the same -D and --disable?)", path, events, program), NULL;
  }
  for (int i = 0; i < nn; i++) share[i] = total > 0 ? share[i] / total : 0;
  snprintf(note, cap, "%s: %ld %s step events, %ld of them nodes of this graph, %.3f ms in all.", path, events, program, matched,
           total / 1e3);
  return share;
}

char *kiln_report_html(const ir_graph *g, const pass_ctx *cx, const char *profile, ir_diag *d) {
  char pnote[4400] = "", gnote[300];
  double *share = NULL, secs = 0;
  if (profile && !(share = kiln_report_share(g, profile, pnote, sizeof pnote, d))) return NULL;
  const char *why = NULL;
  char *svg = kiln_report_svg(g, share, &why, &secs);
  if (svg) snprintf(gnote, sizeof gnote, "Laid out by graphviz (dot, %.1f s).", secs);
  else snprintf(gnote, sizeof gnote, "Laid out by Kiln in layers: %s.", why);
  pass_html_in in = {svg, gnote, share, profile ? pnote : NULL};
  char *html = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&html, &len);
  if (!f) KILN_ICE("out of memory writing the report");
  pass_write_html(g, cx, &in, f);
  if (fclose(f)) KILN_ICE("out of memory writing the report");
  free(svg), free(share);
  return html;
}
