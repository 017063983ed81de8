/* fe_dims.c — the check of bounded dims, for both front ends (docs/language.md, "Bounded
 * dims"). The front end lowers the model at the bounds and hands over a function that lowers
 * it at other extents (fe.h, fe_ranges): a .kiln model through fe_lower_at (fe_bound.c), an
 * ONNX one by importing it again (onnx/onnx_dims.c). Here the model is lowered at the probe
 * extents ir_dims.c names, from which each size (a tensor's axis, an item of an int
 * attribute) is fitted as a * prod(dims) + b (kernels/k_dims.h). Then it is lowered again at
 * every extent of each range, the other dims at their bounds, and once with every dim at its
 * lower bound: each of those graphs must have the bound's structure, exactly the sizes the fit
 * predicts and the bound's weights. So a size that does not follow its dims that simply (a
 * stride-2 window over a bounded side) is refused at compile time, naming an extent where it
 * fails, instead of running wrong there. The probe and check lowerings report into
 * diagnostics of their own: the model's warnings print once, and an error that holds at 63
 * extents is reported at the first. */
#define _GNU_SOURCE   /* open_memstream, fmemopen */
#include "fe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each extent of a range is one more lowering of the model (a few microseconds per node and
 * tensor): ranges of more extents than this in all, or that would lower more nodes and
 * tensors than FE_MAX_CHECK_WORK in all, are refused rather than checked for minutes. */
#define FE_MAX_CHECKS 16384
#define FE_MAX_CHECK_WORK (1 << 23)

/* ---- the check's state ---- */

typedef struct {
  const fe_ranges *s;          /* the dims, and how to lower the model at other extents */
  ir_diag *d;
  ir_graph *g;                 /* lowered at the bounds */
  int nb;                      /* g->nbdims */
  int nsizes;                  /* sizes per graph (fe_sizes) */
  int64_t *sizes[K_MAX_BDIMS + 2];   /* the bound's, then each probe's */
  int64_t *checked;            /* the sizes of the graph being checked */
  k_dimval *fit;               /* each size as the dims give it */
  ir_graph *last;              /* the last check's graph, and what its lowering built besides */
  ir_arena last_arena;
} fe_bcx;

/* "batch=3, seq=64": the extents of the dims in mask (every dim when mask is 0). */
static void fe_ext_str(const fe_bcx *c, const int64_t *ext, uint32_t mask, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (int d = 0; d < c->nb && k < n; d++)
    if (!mask || mask >> d & 1)
      k += (size_t)snprintf(buf + k, n - k, "%s%s=%lld", k ? ", " : "", c->g->bdims[d].name, (long long)ext[d]);
}

/* "dim batch = 1..64" or "-D batch=1..64", for dim d of g. */
static int fe_range_str(const fe_bcx *c, int d, char *buf, size_t n) {
  const fe_range *r = &c->s->r[d];
  return snprintf(buf, n, r->by_define ? "-D %s=%lld..%lld" : "dim %s = %lld..%lld", r->name, (long long)r->lo,
                  (long long)r->hi);
}

/* "a * batch + b", "a * batch * seq + b" over the dims of mask. */
static void fe_form_str(const fe_bcx *c, uint32_t mask, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "a");
  for (int d = 0; d < c->nb && k < n; d++)
    if (mask >> d & 1) k += (size_t)snprintf(buf + k, n - k, " * %s", c->g->bdims[d].name);
  if (k < n) snprintf(buf + k, n - k, " + b");
}

/* The dims whose extent in ext is not their bound. */
static uint32_t fe_moved(const fe_bcx *c, const int64_t *ext) {
  uint32_t m = 0;
  for (int d = 0; d < c->nb; d++) m |= (uint32_t)(ext[d] != c->g->bdims[d].hi) << d;
  return m;
}

static void fe_bound_ext(const fe_bcx *c, int64_t *ext) { ir_dims_probe_extents(c->g, -1, ext); }

/* "dim batch = 1..64, -D seq=1..256" for the dims in mask. */
static void fe_ranges_str(const fe_bcx *c, uint32_t mask, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (int d = 0; d < c->nb && k < n; d++) {
    if (!(mask >> d & 1)) continue;
    k += (size_t)snprintf(buf + k, n - k, "%s", k ? ", " : "");
    if (k < n) k += (size_t)fe_range_str(c, d, buf + k, n - k);
  }
}

/* "note: at batch=3 (dim batch = 1..64)", where the first dim that moved is given. */
static void fe_note_extents(fe_bcx *c, const int64_t *ext) {
  char where[256], ranges[512];
  uint32_t moved = fe_moved(c, ext);
  bool beyond = false;
  for (int d = 0; d < c->nb; d++) beyond |= ext[d] > c->g->bdims[d].hi;
  fe_ranges_str(c, moved, ranges, sizeof ranges);
  fe_ext_str(c, ext, moved, where, sizeof where);
  ir_note(c->d, c->s->r[moved ? __builtin_ctz(moved) : 0].loc, "at %s (%s)%s", where, ranges,
          beyond ? ", one past the bound: the model is lowered there too, to learn how its sizes follow the dim" : "");
}

/* ---- lowering at other extents ---- */

/* Where in line the first of ": error: ", ": note: ", ": warning: " starts; NULL if none. */
static char *fe_diag_kind_at(char *line) {
  static const char *const kinds[] = {": error: ", ": note: ", ": warning: "};
  char *first = NULL;
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
    char *p = strstr(line, kinds[i]);
    if (p && (!first || p < first)) first = p;
  }
  return first;
}

/* "FILE:L:C" (a .kiln position), "FILE" (line 0: an ONNX node names itself as its file) or
 * "kiln" (no location) back into a location; FILE stays in the text. */
static ir_loc fe_diag_loc(char *where) {
  if (strcmp(where, "kiln") == 0) return (ir_loc){0};
  char *c2 = strrchr(where, ':'), *c1 = NULL;
  if (c2) *c2 = 0, c1 = strrchr(where, ':'), *c2 = ':';
  int line, col, end = 0;
  if (c1 && sscanf(c1, ":%d:%d%n", &line, &col, &end) == 2 && c1[end] == 0 && line > 0) {
    *c1 = 0;
    return (ir_loc){where, line, col};
  }
  return (ir_loc){where, 0, 0};
}

/* One line of a quiet lowering's diagnostics ("FILE:L:C: error: msg", "kiln: note: msg")
 * parsed back: its location, kind and message. False for any other line. */
static bool fe_diag_line(char *line, ir_loc *loc, const char **kind, const char **msg) {
  char *at = fe_diag_kind_at(line);
  if (!at) return false;
  *at = 0;
  char *k = at + 2, *colon = strchr(k, ':');
  *colon = 0;
  *loc = fe_diag_loc(line), *kind = k, *msg = colon + 2;
  return true;
}

/* Reports in c->d the first error of a quiet lowering's diagnostics (text), with the notes
 * after it; they have no sources, so no caret lines to skip. 1 when there was one. */
static int fe_forward_error(fe_bcx *c, char *text) {
  int errors = 0;
  for (char *line = text, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    ir_loc loc;
    const char *kind, *msg;
    if (!fe_diag_line(line, &loc, &kind, &msg)) continue;
    if (strcmp(kind, "error") == 0 && errors++) break;
    if (strcmp(kind, "error") == 0) ir_error(c->d, loc, "%s", msg);
    else if (strcmp(kind, "note") == 0 && errors) ir_note(c->d, loc, "%s", msg);
  }
  return errors > 0;
}

/* The model lowered quietly with g's dims at ext, what it builds besides the graph in arena.
 * NULL when it fails, after reporting its first error and the extents when `report`. */
static ir_graph *fe_lower_ext(fe_bcx *c, const int64_t *ext, ir_arena *arena, bool report) {
  char *text = NULL;
  size_t len = 0;
  FILE *log = open_memstream(&text, &len);
  if (!log) KILN_ICE("out of memory");
  ir_diag q;
  ir_diag_init(&q, log);
  q.max_errors = 2;            /* the first error prints; lowering gives up at the second */
  ir_graph *h = c->s->lower(c->s->ctx, ext, arena, &q);
  ir_diag_free(&q);
  fclose(log);
  if (!h && report) {
    if (!fe_forward_error(c, text)) ir_error(c->d, c->s->model_loc, "model '%s' does not lower here", c->g->name);
    fe_note_extents(c, ext);
  }
  free(text);
  return h;
}

/* ---- sizes: every integer of a graph that may follow the dims ---- */

static bool fe_is_int_attr(const ir_attr_def *a) { return a->type == IR_AT_INT || a->type == IR_AT_INTS; }

static const ir_attr_def *fe_node_attrs(const ir_node *n) { return n->param ? ir_ops[n->op].attrs : NULL; }

/* The sizes of g in their order: each tensor's axes, then each node's int attributes item
 * by item; into out unless NULL. Returns the count. Graphs of the same form (fe_same_form)
 * hold the same size at the same position. */
static int fe_sizes(const ir_graph *g, int64_t *out) {
  int k = 0;
  for (int t = 0; t < ir_ntensors(g); t++)
    for (int a = 0; a < ir_tensor_at(g, t)->shape.rank; a++, k++)
      if (out) out[k] = ir_tensor_at(g, t)->shape.d[a];
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    for (const ir_attr_def *a = fe_node_attrs(n); a && a->name; a++)
      for (int j = 0; j < ir_attr_int_count(a, n->param); j++, k++)
        if (out) out[k] = ir_attr_int_item(a, n->param, j);
  }
  return k;
}

/* What holds a size: a tensor, or a node's attribute. */
typedef struct { int tensor, node; const ir_attr_def *attr; } fe_owner;

static fe_owner fe_size_owner(const ir_graph *g, int k) {
  for (int t = 0; t < ir_ntensors(g); t++)
    if ((k -= ir_tensor_at(g, t)->shape.rank) < 0) return (fe_owner){t, -1, NULL};
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    for (const ir_attr_def *a = fe_node_attrs(n); a && a->name; a++)
      if ((k -= ir_attr_int_count(a, n->param)) < 0) return (fe_owner){-1, i, a};
  }
  KILN_ICE("size %d is past the graph's sizes", k);
}

/* ---- reports ---- */

/* "f32[32, 16]" for a tensor, "shape=(64, 16)" for an attribute, as o holds it in h. */
static void fe_owner_value(fe_owner o, const ir_graph *h, char *buf, size_t n) {
  if (o.tensor >= 0) {
    const ir_tensor *t = ir_tensor_at(h, o.tensor);
    ir_type_str(t->dtype, &t->shape, buf, n);
    return;
  }
  ir_attr_def one[2] = {*o.attr, {0}};
  FILE *f = fmemopen(buf, n, "w");
  if (!f) return (void)snprintf(buf, n, "?");
  ir_attr_print(one, ir_node_at(h, o.node)->param, f);
  fclose(f);
}

/* "tensor 'h' has shape f32[32, 16] at batch=64 but f32[17, 16] at batch=33: WHY", over the
 * graphs hs at the extents exts (the bound's first), with the def calls that built it. */
static void fe_report_owner(fe_bcx *c, fe_owner o, const ir_graph *const *hs, int64_t (*exts)[K_MAX_BDIMS], int n,
                            const char *why) {
  char msg[2048], v[512], e[256];
  uint32_t moved = 0;
  for (int i = 0; i < n; i++) moved |= fe_moved(c, exts[i]);
  const ir_node *node = o.tensor >= 0 ? NULL : ir_node_at(c->g, o.node);
  const ir_tensor *t = o.tensor >= 0 ? ir_tensor_at(c->g, o.tensor) : NULL;
  size_t k = t ? (size_t)snprintf(msg, sizeof msg, "tensor '%s' has shape", t->name)
               : (size_t)snprintf(msg, sizeof msg, "node '%s' (%s) has", node->name, ir_ops[node->op].name);
  for (int i = 0; i < n && k < sizeof msg; i++) {
    fe_owner_value(o, hs[i], v, sizeof v);
    fe_ext_str(c, exts[i], moved, e, sizeof e);
    k += (size_t)snprintf(msg + k, sizeof msg - k, "%s %s at %s", i == 0 ? "" : i == 1 ? " but" : " and", v, e);
  }
  if (!node && t->producer >= 0) node = ir_node_at(c->g, t->producer);
  ir_error(c->d, t ? t->loc : node->loc, "%s: %s", msg, why);
  if (node) ir_note_expansion(c->d, node->from);
}

/* What o holds in h, lowered at ext, is not what it must be (why). */
static int fe_owner_differs(fe_bcx *c, fe_owner o, const ir_graph *h, const int64_t *ext, const char *why) {
  int64_t exts[2][K_MAX_BDIMS];
  fe_bound_ext(c, exts[0]);
  memcpy(exts[1], ext, sizeof exts[1]);
  fe_report_owner(c, o, (const ir_graph *[]){c->g, h}, exts, 2, why);
  return 1;
}

/* Size k of h is not what the fit predicts at ext. */
static int fe_size_differs(fe_bcx *c, int k, const ir_graph *h, const int64_t *ext) {
  char form[256], why[300];
  fe_form_str(c, c->fit[k].mask ? c->fit[k].mask : fe_moved(c, ext), form, sizeof form);
  snprintf(why, sizeof why, "its sizes must be %s", form);
  return fe_owner_differs(c, fe_size_owner(c->g, k), h, ext, why);
}

/* ---- the form: what must not change with the extents ---- */

static bool fe_same_node(const ir_node *a, const ir_node *b) {
  return a->kind == b->kind && a->op == b->op && a->nin == b->nin && a->nout == b->nout &&
         !memcmp(a->in, b->in, sizeof(int) * (size_t)a->nin) && !memcmp(a->out, b->out, sizeof(int) * (size_t)a->nout);
}

/* The same nodes, on the same tensors. */
static int fe_same_nodes(fe_bcx *c, const ir_graph *h, const int64_t *ext) {
  const ir_graph *g = c->g;
  int differs = -1;
  for (int i = 0; differs < 0 && ir_nnodes(h) == ir_nnodes(g) && i < ir_nnodes(g); i++)
    if (!fe_same_node(ir_node_at(g, i), ir_node_at(h, i))) differs = i;
  if (differs < 0 && ir_nnodes(h) == ir_nnodes(g) && ir_ntensors(h) == ir_ntensors(g)) return 0;
  char at[256];
  fe_ext_str(c, ext, fe_moved(c, ext), at, sizeof at);
  if (differs >= 0)
    ir_error(c->d, ir_node_at(g, differs)->loc, "node '%s' is built differently at %s than at the bound", ir_node_at(g, differs)->name, at);
  else
    ir_error(c->d, c->s->model_loc, "model '%s' lowers to %d nodes and %d tensors at %s, but %d and %d at the bound", g->name,
             ir_nnodes(h), ir_ntensors(h), at, ir_nnodes(g), ir_ntensors(g));
  fe_note_extents(c, ext);
  return 1;
}

/* Each tensor of the same kind and rank; each constant of the same value. */
static int fe_same_tensors(fe_bcx *c, const ir_graph *h, const int64_t *ext) {
  for (int i = 0; i < ir_ntensors(c->g); i++) {
    const ir_tensor *a = ir_tensor_at(c->g, i), *b = ir_tensor_at(h, i);
    if (a->kind != b->kind || a->shape.rank != b->shape.rank)
      return fe_owner_differs(c, (fe_owner){i, -1, NULL}, h, ext, "its rank must be the same at every extent");
    if (a->kind != IR_T_CONST || a->value == b->value) continue;
    char at[256], bound[256];
    int64_t hi[K_MAX_BDIMS];
    fe_bound_ext(c, hi);
    fe_ext_str(c, hi, fe_moved(c, ext), bound, sizeof bound);
    fe_ext_str(c, ext, fe_moved(c, ext), at, sizeof at);
    ir_error(c->d, a->loc, "this number is %g at %s but %g at %s: a bounded dim may size tensors and set int "
             "attributes, not be a value in arithmetic", (double)a->value, bound, (double)b->value, at);
    return 1;
  }
  return 0;
}

/* Each attribute the same, but for the items of int attributes (fe_sizes): their counts too. */
static int fe_same_attrs(fe_bcx *c, const ir_graph *h, const int64_t *ext) {
  for (int i = 0; i < ir_nnodes(c->g); i++) {
    const ir_node *a = ir_node_at(c->g, i), *b = ir_node_at(h, i);
    for (const ir_attr_def *x = fe_node_attrs(a); x && x->name; x++) {
      bool same = fe_is_int_attr(x) ? ir_attr_int_count(x, a->param) == ir_attr_int_count(x, b->param)
                                    : !memcmp((const char *)a->param + x->offset, (const char *)b->param + x->offset, x->size);
      if (!same)
        return fe_owner_differs(c, (fe_owner){-1, i, x}, h, ext,
                                fe_is_int_attr(x) ? "its length must be the same at every extent"
                                                  : "only sizes and int attributes may follow a bounded dim");
    }
  }
  return 0;
}

/* h, lowered at ext, is g but for its sizes; 1 after reporting where not. */
static int fe_same_form(fe_bcx *c, const ir_graph *h, const int64_t *ext) {
  return fe_same_nodes(c, h, ext) || fe_same_tensors(c, h, ext) || fe_same_attrs(c, h, ext);
}

/* Each weight that carries its values (an ONNX initializer, or one computed at import) holds
 * the bound's: the compiled model stores the bound's, and one whose size follows the dims is
 * used as its first elements (codegen/cg_dims.c allows only its first axis to follow them).
 * The imports share an initializer's memory, so most compare by their pointer. */
static int fe_same_data(fe_bcx *c, const ir_graph *h, const int64_t *ext) {
  for (int i = 0; i < ir_ntensors(c->g); i++) {
    const ir_tensor *a = ir_tensor_at(c->g, i), *b = ir_tensor_at(h, i);
    if (a->data == b->data) continue;
    int64_t na = k_shape_numel(&a->shape), nb = k_shape_numel(&b->shape);
    size_t bytes = (size_t)(na < nb ? na : nb) * sizeof(float);   /* f32 and i32 alike */
    if (a->data && b->data && a->dtype == b->dtype && !memcmp(a->data, b->data, bytes)) continue;
    char at[256];
    fe_ext_str(c, ext, fe_moved(c, ext), at, sizeof at);
    ir_error(c->d, a->loc, "weight '%s' holds other values at %s than at the bound: a bounded dim may size a weight, "
             "not set its values", a->name, at);
    fe_note_extents(c, ext);
    return 1;
  }
  return 0;
}

/* ---- probes and fits ---- */

/* The ranges, into g's bounded dims in their order. */
static void fe_graph_dims(fe_bcx *c) {
  ir_graph *g = c->g;
  for (int d = 0; d < c->s->n; d++) {
    int64_t lo = c->s->r[d].lo, hi = c->s->r[d].hi;
    /* hi - 1 is in the range; hi + 1 where that is below 2 (extent 1 broadcasts) or lo. */
    g->bdims[d] = (ir_bdim){ir_strdup(&g->arena, c->s->r[d].name), lo, hi, hi - 1 >= 2 && hi - 1 >= lo ? hi - 1 : hi + 1};
  }
  c->nb = g->nbdims = c->s->n;
}

/* Each extent of a range is one more lowering: refuse ranges past FE_MAX_CHECKS or
 * FE_MAX_CHECK_WORK in all. */
static int fe_too_many_checks(fe_bcx *c) {
  int64_t n = c->nb >= 2, size = ir_nnodes(c->g) + ir_ntensors(c->g);
  for (int d = 0; d < c->nb; d++) n += c->g->bdims[d].hi - c->g->bdims[d].lo;
  if (n <= FE_MAX_CHECKS && n * size <= FE_MAX_CHECK_WORK) return 0;
  char r[512];
  fe_ranges_str(c, (1u << c->nb) - 1, r, sizeof r);
  ir_loc at = c->s->r[0].loc;
  if (n > FE_MAX_CHECKS)
    ir_error(c->d, at, "the bounded dims of model '%s' (%s) span %lld extents; each is lowered to check the model, and "
             "at most %d are: narrow the range", c->g->name, r, (long long)n, FE_MAX_CHECKS);
  else
    ir_error(c->d, at, "the bounded dims of model '%s' (%s) span %lld extents, each lowered to check the model's %lld nodes "
             "and tensors, and at most %d are lowered in all: narrow the range", c->g->name, r, (long long)n,
             (long long)size, FE_MAX_CHECK_WORK);
  return 1;
}

static int fe_check_dim(fe_bcx *c, int d, int64_t from, int64_t to, bool sizes);

/* Lowers probe p. One that fails to lower within the range is reported at the first extent
 * of its dim that fails. */
static int fe_probe(fe_bcx *c, int p) {
  ir_graph *g = c->g;
  int64_t ext[K_MAX_BDIMS];
  ir_dims_probe_extents(g, p, ext);
  bool in_range = p < c->nb && g->bdims[p].probe < g->bdims[p].hi;
  ir_graph *h = fe_lower_ext(c, ext, c->s->keep, !in_range);   /* kept: its nodes point into it */
  if (!h && in_range && !fe_check_dim(c, p, g->bdims[p].lo, ext[p], false))
    KILN_ICE("probe %d failed to lower, but not when lowered again", p);
  if (h && (fe_same_form(c, h, ext) || fe_same_data(c, h, ext))) h = (ir_graph_free(h), NULL);
  if (!h) return 1;
  g->probes[p] = h;
  c->sizes[p + 1] = malloc(sizeof(int64_t) * (size_t)c->nsizes + 1);
  if (!c->sizes[p + 1]) KILN_ICE("out of memory");
  fe_sizes(h, c->sizes[p + 1]);
  return 0;
}

/* Size k as a * prod(dims) + b from the bound and the probes; reported where none fits. */
static int fe_fit(fe_bcx *c, int k) {
  int np = ir_dims_nprobes(c->nb);
  int64_t vp[K_MAX_BDIMS + 1], exts[K_MAX_BDIMS + 2][K_MAX_BDIMS];
  for (int p = 0; p < np; p++) vp[p] = c->sizes[p + 1][k];
  bool fits = !ir_dims_fit(c->g, c->sizes[0][k], vp, &c->fit[k]);
  /* A tensor's axis that shrinks as a dim grows would be larger below the bound than the
   * plan made at the bound holds (the runtime refuses such a descriptor too). */
  bool shrinks = fits && c->fit[k].a < 0 && fe_size_owner(c->g, k).tensor >= 0;
  if (fits && !shrinks) return 0;
  const ir_graph *hs[K_MAX_BDIMS + 2] = {c->g};
  uint32_t mask = 0;
  for (int p = -1; p < np; p++) ir_dims_probe_extents(c->g, p, exts[p + 1]);
  for (int p = 0; p < np; p++) hs[p + 1] = c->g->probes[p], mask |= (uint32_t)(p < c->nb && vp[p] != c->sizes[0][k]) << p;
  char form[256], why[300];
  fe_form_str(c, mask ? mask : (1u << c->nb) - 1, form, sizeof form);
  if (shrinks) snprintf(why, sizeof why, "its size must grow with the bounded dims, not shrink (the plan is made at the bound)");
  else snprintf(why, sizeof why, "its sizes must be %s", form);
  fe_report_owner(c, fe_size_owner(c->g, k), hs, exts, np + 1, why);
  return 1;
}

static int fe_probe_all(fe_bcx *c) {
  int np = ir_dims_nprobes(c->nb);
  c->g->probes = calloc(K_MAX_BDIMS + 1, sizeof *c->g->probes);   /* room for ir_dims_nprobes(K_MAX_BDIMS) */
  c->fit = malloc(sizeof *c->fit * (size_t)c->nsizes + 1);
  if (!c->g->probes || !c->fit) KILN_ICE("out of memory");
  for (int p = 0; p < np; p++)
    if (fe_probe(c, p)) return 1;
  for (int k = 0; k < c->nsizes; k++)
    if (fe_fit(c, k)) return 1;
  return 0;
}

/* ---- the check of the ranges ---- */

/* Frees the graph the last check lowered. Each is freed once the next has been lowered:
 * freed at once, its memory lay on top of glibc's heap, went back to the system, and the next
 * lowering faulted it in again page by page (checking an ONNX encoder at seq=1..128 took 22,000
 * page faults instead of 13,000, a third of its time on a virtual machine); freed later, it
 * is a hole that the next lowering fills. */
static void fe_drop_last(fe_bcx *c) {
  ir_graph_free(c->last);
  ir_arena_free(&c->last_arena);
  c->last = NULL;
}

/* Lowers the model at ext and compares it with the bound's: its form, with `sizes` each size
 * with the fit's prediction, and its weights' values. */
static int fe_check_ext(fe_bcx *c, const int64_t *ext, bool sizes) {
  ir_arena scratch = {0};      /* dropped with h: a range of 16,384 extents costs no more memory than two */
  ir_graph *h = fe_lower_ext(c, ext, &scratch, true);
  int err = !h || fe_same_form(c, h, ext);
  if (!err && sizes) {
    fe_sizes(h, c->checked);
    for (int k = 0; k < c->nsizes && !err; k++)
      if (c->checked[k] != k_dimval_eval(c->fit[k], ext)) err = fe_size_differs(c, k, h, ext);
  }
  if (!err) err = fe_same_data(c, h, ext);
  fe_drop_last(c);
  c->last = h, c->last_arena = scratch;
  return err;
}

/* Dim d at each extent of [from, to], the others at their bounds, but at the bound and (when
 * the sizes are checked: the fit did) at its probe. */
static int fe_check_dim(fe_bcx *c, int d, int64_t from, int64_t to, bool sizes) {
  int64_t ext[K_MAX_BDIMS];
  fe_bound_ext(c, ext);
  for (int64_t e = from; e <= to; e++) {
    if (e == c->g->bdims[d].hi || (sizes && e == c->g->bdims[d].probe)) continue;
    ext[d] = e;
    if (fe_check_ext(c, ext, sizes)) return 1;
  }
  return 0;
}

/* Every extent of each range, then every dim at its lower bound. */
static int fe_check_ranges(fe_bcx *c) {
  int64_t ext[K_MAX_BDIMS];
  for (int d = 0; d < c->nb; d++) {
    if (fe_check_dim(c, d, c->g->bdims[d].lo, c->g->bdims[d].hi, true)) return 1;
    ext[d] = c->g->bdims[d].lo;
  }
  return c->nb >= 2 && fe_check_ext(c, ext, true);
}

ir_graph *fe_dims_check(ir_graph *g, const fe_ranges *s, ir_diag *d) {
  if (!s->n) return g;
  fe_bcx c = {.s = s, .d = d, .g = g};
  fe_graph_dims(&c);
  c.nsizes = fe_sizes(g, NULL);
  c.sizes[0] = malloc(sizeof(int64_t) * (size_t)c.nsizes + 1);
  c.checked = malloc(sizeof(int64_t) * (size_t)c.nsizes + 1);
  if (!c.sizes[0] || !c.checked) KILN_ICE("out of memory");
  fe_sizes(g, c.sizes[0]);
  int err = fe_too_many_checks(&c) || fe_probe_all(&c) || fe_check_ranges(&c);
  fe_drop_last(&c);
  for (int p = 0; p < K_MAX_BDIMS + 2; p++) free(c.sizes[p]);
  free(c.checked), free(c.fit);
  if (!err) return g;
  ir_graph_free(g);
  return NULL;
}
