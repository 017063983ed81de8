/* api_walk.c — the recorded graph behind arrays, as .kiln text. A walk collects, in
 * dependency order, the op arrays that some roots need, stopping at leaves: for evaluation
 * the arrays that hold a value (or wait for a gradient), for gradients and export the
 * sources (arrays made from data, which no op produced). Leaves are named a0, a1... and op
 * arrays t0, t1... by the walk alone, so the text of the same structure, shapes and
 * attributes is the same: the compile cache's key. */
#include "api.h"

#include <stdlib.h>
#include <string.h>

static bool api_is_leaf(const api_walk *w, const kiln_array *a) {
  return w->to_sources ? a->op == NULL : a->data != NULL || a->op == NULL;
}

static void api_walk_push(api_walk *w, bool leaf, kiln_array *a) {
  kiln_array ***list = leaf ? &w->leaves : &w->nodes;
  int *n = leaf ? &w->nleaves : &w->nnodes, *cap = leaf ? &w->cap_leaves : &w->cap_nodes;
  if (*n == *cap && !w->oom) {
    int c = *cap ? *cap * 2 : 16;
    kiln_array **l = realloc(*list, sizeof *l * (size_t)c);
    if (l) *list = l, *cap = c;
    else w->oom = true;
  }
  if (w->oom) return;
  a->leaf = leaf, a->mark = *n;
  (*list)[(*n)++] = a;
}

/* Post-order, iteratively (a long chain must not overflow the stack). mark: -1 unvisited,
 * -2 entered, then the array's number in its list. */
void api_walk_from(api_walk *w, kiln_array *root) {
  kiln_array **stack = NULL;
  int *next = NULL, top = 0, cap = 0;
  if (root->mark != -1) return;
  for (kiln_array *a = root; a;) {
    if (api_is_leaf(w, a)) api_walk_push(w, true, a);
    else {
      if (top == cap) {
        cap = cap ? cap * 2 : 32;
        kiln_array **s = realloc(stack, sizeof *s * (size_t)cap);
        int *nx = s ? realloc(next, sizeof *nx * (size_t)cap) : NULL;
        if (s) stack = s;
        if (!nx) { w->oom = true; break; }
        next = nx;
      }
      stack[top] = a, next[top++] = 0, a->mark = -2;
    }
    a = NULL;
    while (top && !a) {
      kiln_array *t = stack[top - 1];
      while (next[top - 1] < t->nin && t->in[next[top - 1]]->mark != -1) next[top - 1]++;
      if (next[top - 1] < t->nin) { a = t->in[next[top - 1]++]; break; }
      api_walk_push(w, false, t);
      top--;
    }
  }
  free(stack), free(next);
}

void api_walk_free(api_walk *w) {
  for (int i = 0; i < w->nleaves; i++) w->leaves[i]->mark = -1;
  for (int i = 0; i < w->nnodes; i++) w->nodes[i]->mark = -1;
  free(w->leaves), free(w->nodes);
  *w = (api_walk){0};
}

/* A constant, where the text is a model of its own (not a cache key shared across values). */
static bool api_walk_inline(const api_walk *w, const kiln_array *a) { return w->to_sources && a->constant; }

void api_walk_name(const api_walk *w, api_buf *b, const kiln_array *a) {
  if (api_walk_inline(w, a)) {
    char num[32];
    snprintf(num, sizeof num, "%.9g", (double)*(const float *)a->data);
    api_buf_printf(b, "%s%s", num, strpbrk(num, ".en") ? "" : ".0");   /* a float literal */
    return;
  }
  const char *n = w->name ? w->name(w->name_ctx, a) : NULL;
  if (n) api_buf_printf(b, "%s", n);
  else api_buf_printf(b, "%c%d", a->leaf ? 'a' : 't', a->mark);
}

/* `input a0 : f32[2, 3]`, or with kind "param" for the arrays gradients are taken of. */
void api_walk_leaf_decl(const api_walk *w, api_buf *b, const kiln_array *a, const char *kind) {
  if (api_walk_inline(w, a)) return;
  api_buf_printf(b, "  %s ", kind);
  api_walk_name(w, b, a);
  api_buf_printf(b, " : ");
  api_type_text(b, a->dtype, &a->shape);
  api_buf_printf(b, "\n");
}

void api_walk_nodes_text(const api_walk *w, api_buf *b) {
  for (int i = 0; i < w->nnodes; i++) {
    const kiln_array *a = w->nodes[i];
    api_buf_printf(b, "  ");
    api_walk_name(w, b, a);
    api_buf_printf(b, " = %s(", a->op);
    for (int j = 0; j < a->nin; j++) api_buf_printf(b, "%s", j ? ", " : ""), api_walk_name(w, b, a->in[j]);
    api_buf_printf(b, "%s%s)\n", a->nin && *a->attrs ? ", " : "", a->attrs);
  }
}

bool api_walk_aux_leaf(const api_walk *w, int i) {
  for (int k = 0; k < w->nnodes; k++)
    for (int j = 0; j < w->nodes[k]->nin; j++)
      if (w->nodes[k]->in[j] == w->leaves[i] && api_is_aux_slot(w->nodes[k]->op, j)) return true;
  return false;
}

/* The model evaluation compiles: leaves as inputs (aux states as params, made inputs once
 * lowered: api_eval.c), each wanted op array once as an output. */
void api_walk_text(const api_walk *w, kiln_array *const *want, int n, api_buf *b) {
  api_buf_printf(b, "model deferred {\n");
  for (int i = 0; i < w->nleaves; i++) api_walk_leaf_decl(w, b, w->leaves[i], api_walk_aux_leaf(w, i) ? "param" : "input");
  api_walk_nodes_text(w, b);
  api_buf_printf(b, "  output ");
  int k = 0;
  for (int i = 0; i < n; i++) {
    bool dup = false;
    for (int j = 0; j < i; j++) dup |= want[j] == want[i];
    if (!want[i]->leaf && want[i]->mark >= 0 && !dup) api_buf_printf(b, "%s", k++ ? ", " : ""), api_walk_name(w, b, want[i]);
  }
  api_buf_printf(b, "\n}\n");
}

int api_pending_text(kiln_session *s, kiln_array *a, api_buf *out) {
  (void)s;
  api_walk w = {0};
  if (a->data) return api_buf_printf(out, "# computed: nothing pending\n"), KILN_OK;
  api_walk_from(&w, a);
  if (!w.oom) api_walk_text(&w, &a, 1, out);
  bool oom = w.oom || out->oom;
  api_walk_free(&w);
  return oom ? api_fail("out of memory") : KILN_OK;
}
