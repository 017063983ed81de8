/* kiln_repl_print.c — a value as NumPy prints it (print(a) with NumPy's default options): the
 * type line (f32[2, 3]), then the values in nested brackets, aligned in columns, rows wrapped
 * at 75 characters, summarised with "..." past 1,000 elements. tests/repl/numpy_print.py compares
 * the two on arrays that exercise every rule below. */
#include "kiln_repl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* NumPy's threshold, edgeitems, linewidth and precision. */
enum { REPL_SUMMARY = 1000, REPL_EDGE = 3, REPL_WIDTH = 75, REPL_PREC = 8 };

typedef struct {
  const kiln_array *a;
  const void *data;
  bool summary;      /* past REPL_SUMMARY elements: REPL_EDGE at each end of every axis */
  bool sci;          /* scientific, or positional */
  int prec;          /* scientific: every value's mantissa digits; positional: the longest fraction */
  int width;         /* of every value: the widest, right-aligned (NumPy's pad_left/pad_right) */
} repl_pr;

static bool repl_skip(const repl_pr *p, int64_t i, int64_t n) {
  return p->summary && n > 2 * REPL_EDGE && i >= REPL_EDGE && i < n - REPL_EDGE;
}

/* Whether flat index i is printed: the format is chosen from the printed values alone. */
static bool repl_shown(const repl_pr *p, int64_t i) {
  const k_shape *s = &p->a->shape;
  for (int k = s->rank - 1; k >= 0; k--) {
    if (repl_skip(p, i % s->d[k], s->d[k])) return false;
    i /= s->d[k];
  }
  return true;
}

/* The fewest digits (after the point, or after a mantissa's first) with which v reads back as
 * the same float32, at most 8: NumPy's "unique" digits at precision 8 (a float32 printed with
 * the digits of its exact binary value would show noise: 1.00383735 for NumPy's 1.0038373). */
static int repl_unique_digits(float v, bool sci) {
  char buf[64];
  for (int d = 0; d < REPL_PREC; d++) {
    snprintf(buf, sizeof buf, sci ? "%.*e" : "%.*f", d, (double)v);
    if (strtof(buf, NULL) == v) return d;
  }
  /* cut at 8 digits, the zeros the cut leaves at the end are dropped (0.003198, not 0.00319800) */
  snprintf(buf, sizeof buf, sci ? "%.*e" : "%.*f", REPL_PREC, (double)v);
  int d = REPL_PREC, last = (int)(sci ? strchr(buf, 'e') - buf : (long)strlen(buf)) - 1;
  while (d > 0 && buf[last--] == '0') d--;
  return d;
}

/* The most digits (repl_unique_digits) any shown finite value of a float array needs. */
static int repl_most_digits(const repl_pr *p, int64_t n, bool sci) {
  const float *v = p->data;
  int most = 0;
  for (int64_t i = 0; i < n && p->a->dtype == K_F32; i++) {
    if (!repl_shown(p, i) || !isfinite(v[i])) continue;
    int d = repl_unique_digits(v[i], sci);
    if (d > most) most = d;
  }
  return most;
}

/* NumPy's choice: scientific when the printed nonzero magnitudes reach 1e8, go below 1e-4, or
 * span more than a factor of 1,000; then the mantissa digits are the most any value needs. */
static void repl_choose_format(repl_pr *p, int64_t n) {
  float lo = INFINITY, hi = 0;
  const float *v = p->data;
  for (int64_t i = 0; i < n && p->a->dtype == K_F32; i++) {
    float m = fabsf(v[i]);
    if (!repl_shown(p, i) || !isfinite(m) || m == 0) continue;
    lo = fminf(lo, m), hi = fmaxf(hi, m);
  }
  p->sci = hi > 0 && (hi >= 1e8f || lo < 1e-4f || hi / lo > 1000.0f);
  if (p->sci) p->prec = repl_most_digits(p, n, true);
}

/* Value i as NumPy writes it, before alignment: positional values with their own digits ("3."
 * for an integer) padded on the right to the longest fraction `frac` (unknown yet: -1). */
static void repl_fmt(const repl_pr *p, int64_t i, int frac, char *buf, size_t n) {
  if (p->a->dtype == K_I32) { snprintf(buf, n, "%d", ((const int32_t *)p->data)[i]); return; }
  float v = ((const float *)p->data)[i];
  if (!isfinite(v)) { snprintf(buf, n, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"); return; }
  if (p->sci) { snprintf(buf, n, "%#.*e", p->prec, (double)v); return; }
  int d = repl_unique_digits(v, false);
  snprintf(buf, n, "%#.*f%*s", d, (double)v, frac > d ? frac - d : 0, "");
}

/* buf's "[-]D.DDDe[+-]XX" (sig digits) written out positionally, the digits past them zeros
 * and at least one decimal: 5.2243886e+10 is 52243886000.0, 7e+00 is 7.0. */
static void repl_positional(char *buf, size_t n, int sig) {
  char digits[16], *e = strchr(buf, 'e');
  int exp10 = atoi(e + 1), nd = 0;
  bool neg = buf[0] == '-';
  for (char *p = buf + neg; p < e && nd < (int)sizeof digits - 1; p++)
    if (*p != '.') digits[nd++] = *p;
  digits[nd] = 0;
  api_buf b = {0};
  api_buf_printf(&b, "%s", neg ? "-" : "");
  if (exp10 < 0) api_buf_printf(&b, "0.%.*s%s", -exp10 - 1, "0000", digits);
  else if (exp10 >= sig - 1) api_buf_printf(&b, "%s%.*s.0", digits, exp10 - (sig - 1), "0000000000000000");
  else api_buf_printf(&b, "%.*s.%s", exp10 + 1, digits, digits + exp10 + 1);
  snprintf(buf, n, "%s", b.oom ? "?" : b.s);
  api_buf_free(&b);
}

/* A 0-d array prints as NumPy prints its one value (str of a float32): the shortest digits
 * that read back (up to 9), positional with at least one decimal from 1e-4 up to 1e16 ("7.0"),
 * scientific outside it ("1e-05"). */
static void repl_fmt_scalar(float v, char *buf, size_t n) {
  int sig = 1;
  if (!isfinite(v)) { snprintf(buf, n, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"); return; }
  for (; sig <= 9; sig++) {   /* 9 significant digits tell every float32 apart */
    snprintf(buf, n, "%.*e", sig - 1, (double)v);
    if (strtof(buf, NULL) == v) break;
  }
  sig = sig > 9 ? 9 : sig;
  double m = fabs((double)v);   /* compared as a double, as NumPy does: 1e-4f is below 1e-4 */
  if (m == 0 || (m >= 1e-4 && m < 1e16)) repl_positional(buf, n, sig);
}

/* The width every value is right-aligned to: the widest integer part, point and fraction. */
static void repl_choose_width(repl_pr *p, int64_t n) {
  int frac = p->sci ? 0 : repl_most_digits(p, n, false);
  for (int64_t i = 0; i < n; i++) {
    char buf[64];
    if (!repl_shown(p, i)) continue;
    repl_fmt(p, i, frac, buf, sizeof buf);
    if ((int)strlen(buf) > p->width) p->width = (int)strlen(buf);
  }
  p->prec = p->sci ? p->prec : frac;
}

/* The values of a last axis as words on lines (NumPy's _formatArray): a line begins with the
 * hanging indent, a space per level (brackets in its place on the first line, which is why
 * the first `indent` characters are not written) and takes words up to 75 - depth - 1
 * characters; a full line loses its trailing blanks. */
static void repl_print_row(const repl_pr *p, int axis, int64_t base, int64_t n, api_buf *b) {
  int indent = axis + 1, limit = REPL_WIDTH - axis - 1;
  api_buf line = {0};
  bool first = true;
  api_buf_printf(&line, "%*s", indent, "");
  for (int64_t i = 0; i < n; i++) {
    char raw[64], word[80];
    if (repl_skip(p, i, n)) snprintf(word, sizeof word, "..."), i = n - REPL_EDGE - 1;
    else repl_fmt(p, base + i, p->prec, raw, sizeof raw), snprintf(word, sizeof word, "%*s", p->width, raw);
    if (!line.oom && (int)(line.len + strlen(word)) > limit && (int)line.len > indent) {
      size_t end = line.len;
      while (end > (size_t)indent && line.s[end - 1] == ' ') end--;
      api_buf_printf(b, "%.*s\n", (int)(end - (first ? (size_t)indent : 0)), line.s + (first ? indent : 0));
      api_buf_truncate(&line, 0), api_buf_printf(&line, "%*s", indent, "");
      first = false;
    }
    api_buf_printf(&line, "%s%s", word, i < n - 1 ? " " : "");
  }
  if (line.oom) b->oom = true;
  else api_buf_printf(b, "%s", line.s + (first ? indent : 0));
  api_buf_free(&line);
}

/* One axis in brackets; base is the flat index of this sub-array's first value. Sub-arrays
 * are separated by as many newlines as axes are left below, then the hanging indent. */
static void repl_print_axis(const repl_pr *p, int axis, int64_t base, int64_t stride, api_buf *b) {
  const k_shape *s = &p->a->shape;
  int64_t n = s->d[axis], inner = stride / n;
  api_buf_printf(b, "[");
  if (axis == s->rank - 1) repl_print_row(p, axis, base, n, b);
  for (int64_t i = 0; axis < s->rank - 1 && i < n; i++) {
    if (i) api_buf_printf(b, "%.*s%*s", s->rank - axis - 1, "\n\n\n\n\n\n", axis + 1, "");
    if (repl_skip(p, i, n)) api_buf_printf(b, "..."), i = n - REPL_EDGE - 1;
    else repl_print_axis(p, axis + 1, base + i * inner, inner, b);
  }
  api_buf_printf(b, "]");
}

void repl_print_value(const kiln_array *a, const void *data, FILE *out) {
  char type[200];
  int64_t n = k_shape_numel(&a->shape);
  ir_type_str(a->dtype, &a->shape, type, sizeof type);
  fprintf(out, "%s\n", type);
  repl_pr p = {a, data, n > REPL_SUMMARY, false, 0, 1};
  repl_choose_format(&p, n);
  repl_choose_width(&p, n);
  api_buf b = {0};
  if (a->shape.rank == 0) {
    char buf[64];
    if (a->dtype == K_F32) repl_fmt_scalar(*(const float *)data, buf, sizeof buf);
    else repl_fmt(&p, 0, p.prec, buf, sizeof buf);
    api_buf_printf(&b, "%s", buf);
  } else {
    repl_print_axis(&p, 0, 0, n, &b);
  }
  fprintf(out, "%s\n", b.oom ? "(out of memory)" : b.s);
  api_buf_free(&b);
}
