/* onnx_einsum.c — Einsum of one or two operands as Kiln's layout ops and one matmul. The
 * equation is parsed into a label per axis (ellipsis axes get labels of their own, aligned
 * from the right as NumPy broadcasts them); a label found in one operand only and not in the
 * output is summed out first; then one operand is a transpose, and two are a batched matmul:
 * each operand transposed (unless matmul's transpose flag reads it as it is) and reshaped to
 * [batch..., M, K] and [batch..., K, N], the product reshaped to [batch..., free A...,
 * free B...] and transposed to the output's order. This covers the contractions attention
 * and torch exports write ("bhid,bhjd->bhij", "bij,bjk->bik", "ij->ji"). Refused, quoting the
 * equation: three or more operands, a label repeated within one operand (a diagonal), and
 * axes of one label that differ in size (broadcasting a 1). */
#include "onnx_int.h"

#include <string.h>

#define ONNX_EIN_LABELS 256
#define ONNX_EIN_ELLIPSIS 128          /* ellipsis axes: 128 + K_MAX_RANK - count + position */

typedef struct {
  int n;                               /* operands, 1 or 2 */
  int lab[2][K_MAX_RANK], rank[2];
  int out[K_MAX_RANK], nout;
  int64_t dim[ONNX_EIN_LABELS];        /* each label's size, 0 while unseen */
  const char *eq;                      /* the equation, for messages */
} onnx_ein;

static int onnx_ein_fail(onnx_ctx *c, const onnx_ein *e, const char *why) {
  return onnx_fail(c, "Einsum '%s': %s", e->eq, why);
}

/* One term ("bhid", "...ij") into labels, its ellipsis expanded to what the rank leaves
 * (rank < 0: the output, whose ellipsis has `ell` axes). 0, or 1 after an error. */
static int onnx_ein_term(onnx_ctx *c, onnx_ein *e, const char *s, size_t len, int rank, int ell, int *lab, int *nlab) {
  int letters = 0, k = 0;
  bool dots = false;
  for (size_t i = 0; i < len; i++) letters += (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z');
  int ne = rank < 0 ? ell : rank - letters;
  if (ne < 0 || letters + ne > K_MAX_RANK) return onnx_ein_fail(c, e, "a term has more labels than its operand has axes");
  for (size_t i = 0; i < len; i++) {
    if ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')) lab[k++] = (unsigned char)s[i];
    else if (s[i] == '.' && i + 2 < len && s[i + 1] == '.' && s[i + 2] == '.' && !dots) {
      for (int j = 0; j < ne; j++) lab[k++] = ONNX_EIN_ELLIPSIS + K_MAX_RANK - ne + j;
      dots = true, i += 2;
    } else return onnx_ein_fail(c, e, "the equation has a character other than letters, ',', '->' and one '...' a term");
  }
  if (!dots && ne) return onnx_ein_fail(c, e, "a term has fewer labels than its operand has axes");
  *nlab = k;
  return 0;
}

/* The output of an equation without "->": the ellipsis axes, then the letters found once, in
 * alphabetical (ASCII) order, as NumPy writes it. */
static void onnx_ein_implicit(onnx_ein *e, int ell) {
  int count[ONNX_EIN_LABELS] = {0};
  for (int i = 0; i < e->n; i++)
    for (int j = 0; j < e->rank[i]; j++) count[e->lab[i][j]]++;
  e->nout = 0;
  for (int j = 0; j < ell; j++) e->out[e->nout++] = ONNX_EIN_ELLIPSIS + K_MAX_RANK - ell + j;
  for (int l = 0; l < ONNX_EIN_ELLIPSIS && e->nout < K_MAX_RANK; l++)
    if (count[l] == 1) e->out[e->nout++] = l;
}

/* Every label of one operand distinct and of one size wherever it appears; the output's
 * labels distinct and found in an input. */
static int onnx_ein_check(onnx_ctx *c, onnx_ein *e, const k_shape *xs) {
  for (int i = 0; i < e->n; i++)
    for (int j = 0; j < e->rank[i]; j++) {
      int l = e->lab[i][j];
      for (int q = 0; q < j; q++)
        if (e->lab[i][q] == l) return onnx_ein_fail(c, e, "a label repeated within one operand (a diagonal) is not supported");
      if (e->dim[l] && e->dim[l] != xs[i].d[j])
        return onnx_ein_fail(c, e, "one label's axes differ in size; broadcasting them is not supported");
      e->dim[l] = xs[i].d[j];
    }
  for (int j = 0; j < e->nout; j++) {
    for (int q = 0; q < j; q++)
      if (e->out[q] == e->out[j]) return onnx_ein_fail(c, e, "the output repeats a label");
    if (!e->dim[e->out[j]]) return onnx_ein_fail(c, e, "the output has a label no input has");
  }
  return 0;
}

static int onnx_ein_parse(onnx_ctx *c, onnx_ein *e, const char *eq, const k_shape *xs) {
  const char *arrow = strstr(eq, "->"), *end = arrow ? arrow : eq + strlen(eq), *s = eq;
  int ell = 0;
  for (int i = 0; i < e->n; i++) {
    const char *comma = memchr(s, ',', (size_t)(end - s)), *te = comma ? comma : end;
    if ((i + 1 < e->n) != (comma != NULL)) return onnx_ein_fail(c, e, "the equation's terms and the node's inputs differ in number");
    if (onnx_ein_term(c, e, s, (size_t)(te - s), xs[i].rank, 0, e->lab[i], &e->rank[i])) return 1;
    for (int j = 0; j < e->rank[i]; j++)
      if (e->lab[i][j] >= ONNX_EIN_ELLIPSIS && K_MAX_RANK - (e->lab[i][j] - ONNX_EIN_ELLIPSIS) > ell)
        ell = K_MAX_RANK - (e->lab[i][j] - ONNX_EIN_ELLIPSIS);
    s = te + 1;
  }
  if (!arrow) onnx_ein_implicit(e, ell);
  else if (onnx_ein_term(c, e, arrow + 2, strlen(arrow + 2), -1, ell, e->out, &e->nout)) return 1;
  return onnx_ein_check(c, e, xs);
}

static int onnx_ein_find(const int *lab, int n, int l) {
  for (int i = 0; i < n; i++)
    if (lab[i] == l) return i;
  return -1;
}

/* Operand i with the labels nothing else reads (not the other operand, not the output)
 * summed out; its labels updated. */
static int onnx_ein_sum_out(onnx_ctx *c, const Onnx__NodeProto *n, onnx_ein *e, int i, int x) {
  int64_t axes[K_MAX_RANK];
  int na = 0, keep = 0;
  for (int j = 0; j < e->rank[i]; j++) {
    int l = e->lab[i][j];
    bool other = e->n == 2 && onnx_ein_find(e->lab[1 - i], e->rank[1 - i], l) >= 0;
    if (!other && onnx_ein_find(e->out, e->nout, l) < 0) axes[na++] = j;
    else e->lab[i][keep++] = l;
  }
  e->rank[i] = keep;
  return na ? onnx_b_reduce(c, n, NULL, IR_OP_sum, x, axes, na, false) : x;
}

/* x with labels `lab` transposed to the order `want` (the same labels); bound to `bind`. */
static int onnx_ein_permute(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int x, const int *lab, const int *want, int r) {
  int64_t perm[K_MAX_RANK];
  for (int j = 0; j < r; j++) perm[j] = onnx_ein_find(lab, r, want[j]);
  return onnx_b_transpose(c, n, bind, x, perm);
}

static int onnx_ein_cat(int *dst, int k, const int *src, int n) {
  memcpy(dst + k, src, (size_t)n * sizeof *src);
  return k + n;
}

static int64_t onnx_ein_prod(const onnx_ein *e, const int *lab, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= e->dim[lab[i]];
  return p;
}

/* An operand as [batch..., rows, cols] for the matmul: groups p then q after the batch
 * labels, read in place with matmul's transpose flag where it holds them as q then p. */
static int onnx_ein_operand(onnx_ctx *c, const Onnx__NodeProto *n, const onnx_ein *e, int i, int x, const int *bat, int nb,
                            const int *p, int np, const int *q, int nq, bool *trans) {
  int straight[K_MAX_RANK], swapped[K_MAX_RANK], r = e->rank[i];
  onnx_ein_cat(straight, onnx_ein_cat(straight, onnx_ein_cat(straight, 0, bat, nb), p, np), q, nq);
  onnx_ein_cat(swapped, onnx_ein_cat(swapped, onnx_ein_cat(swapped, 0, bat, nb), q, nq), p, np);
  *trans = np && nq && memcmp(e->lab[i], swapped, (size_t)r * sizeof *swapped) == 0;
  if (!*trans) x = onnx_ein_permute(c, n, NULL, x, e->lab[i], straight, r);
  k_shape s = {nb + 2, {0}};
  for (int j = 0; j < nb; j++) s.d[j] = e->dim[bat[j]];
  s.d[nb] = onnx_ein_prod(e, *trans ? q : p, *trans ? nq : np);
  s.d[nb + 1] = onnx_ein_prod(e, *trans ? p : q, *trans ? np : nq);
  return onnx_b_reshape(c, n, NULL, x, &s);
}

/* Two operands: batch labels (both and the output, in the output's order), contracted ones
 * (both, not the output, in A's order), A's free ones and B's (in their own order). */
static int onnx_ein_pair(onnx_ctx *c, const Onnx__NodeProto *n, onnx_ein *e, int a, int b) {
  int bat[K_MAX_RANK], con[K_MAX_RANK], fa[K_MAX_RANK], fb[K_MAX_RANK], res[K_MAX_RANK], nb = 0, nc = 0, na = 0, nf = 0;
  for (int j = 0; j < e->nout; j++)
    if (onnx_ein_find(e->lab[0], e->rank[0], e->out[j]) >= 0 && onnx_ein_find(e->lab[1], e->rank[1], e->out[j]) >= 0) bat[nb++] = e->out[j];
  for (int j = 0; j < e->rank[0]; j++) {
    int l = e->lab[0][j];
    if (onnx_ein_find(e->lab[1], e->rank[1], l) < 0) fa[na++] = l;
    else if (onnx_ein_find(e->out, e->nout, l) < 0) con[nc++] = l;
  }
  for (int j = 0; j < e->rank[1]; j++)
    if (onnx_ein_find(e->lab[0], e->rank[0], e->lab[1][j]) < 0) fb[nf++] = e->lab[1][j];
  if (nb + 2 > K_MAX_RANK) return onnx_ein_fail(c, e, "too many batch labels for a matmul"), -1;
  bool ta, tb;
  a = onnx_ein_operand(c, n, e, 0, a, bat, nb, fa, na, con, nc, &ta);
  b = onnx_ein_operand(c, n, e, 1, b, bat, nb, con, nc, fb, nf, &tb);
  int nr = onnx_ein_cat(res, onnx_ein_cat(res, onnx_ein_cat(res, 0, bat, nb), fa, na), fb, nf);
  k_shape s = {nr, {0}};
  for (int j = 0; j < nr; j++) s.d[j] = e->dim[res[j]];
  bool permute = memcmp(res, e->out, (size_t)nr * sizeof *res) != 0, reshape = na != 1 || nf != 1;
  int y = onnx_b_matmul(c, n, permute || reshape ? NULL : n->output[0], a, b, ta, tb);
  y = onnx_b_reshape(c, n, permute ? NULL : n->output[0], y, &s);
  return onnx_ein_permute(c, n, n->output[0], y, res, e->out, nr);
}

int onnx_einsum(onnx_ctx *c, const Onnx__NodeProto *n, int kop) {
  const Onnx__AttributeProto *at = onnx_attr(n, "equation");
  onnx_ein e = {.n = (int)n->n_input};
  k_shape xs[2];
  if (!at || !at->has_s) return onnx_fail(c, "the equation attribute is required");
  char *eq = ir_alloc(&c->g->arena, at->s.len + 1);
  size_t len = 0;
  for (size_t i = 0; i < at->s.len; i++)
    if (at->s.data[i] != ' ') eq[len++] = (char)at->s.data[i];
  eq[len] = 0;
  e.eq = eq;
  if (e.n < 1) return onnx_ein_fail(c, &e, "the node has no input");
  if (e.n > 2) return onnx_ein_fail(c, &e, "more than two operands are not supported (Kiln contracts one pair)");
  int x[2] = {-1, -1};
  for (int i = 0; i < e.n; i++) {
    onnx_value *v = onnx_input(c, n, i);
    if (!v) return onnx_fail(c, "input %d is required", i + 1);
    onnx_shape_of(c, v, &xs[i]);
  }
  if (onnx_ein_parse(c, &e, eq, xs)) return 1;
  for (int i = 0; i < e.n; i++) x[i] = onnx_ein_sum_out(c, n, &e, i, onnx_in(c, n, i, IR_T_PARAM));
  if (e.n == 1) return onnx_ein_permute(c, n, n->output[0], x[0], e.lab[0], e.out, e.nout) < 0;
  return onnx_ein_pair(c, n, &e, x[0], x[1]) < 0;
}
