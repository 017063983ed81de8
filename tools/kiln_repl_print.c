/* kiln_repl_print.c — a value as NumPy prints it: the type line (f32[2, 3]), then the values
 * in nested brackets, aligned in columns, summarised with "..." past 1,000 elements. */
#include "kiln_repl.h"

#include <math.h>
#include <string.h>

enum { REPL_SUMMARY = 1000, REPL_EDGE = 3 };

/* How floats print, as NumPy's default: integers as "3.", scientific when magnitudes are far
 * from 1, otherwise fixed with at most 8 decimals, padded on the right to the longest. */
typedef enum { REPL_INTS, REPL_FIXED, REPL_SCI } repl_style;

static int repl_decimals(float v) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.8f", (double)v);
  int n = (int)strlen(buf);
  while (buf[n - 1] == '0') n--;
  return (int)(n - 1 - (strchr(buf, '.') - buf));
}

static void repl_fmt(const kiln_array *a, const void *data, int64_t i, repl_style st, int dec, char *buf, size_t n) {
  float v = a->dtype == K_F32 ? ((const float *)data)[i] : 0;
  if (a->dtype == K_I32) { snprintf(buf, n, "%d", ((const int32_t *)data)[i]); return; }
  if (!isfinite(v)) { snprintf(buf, n, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"); return; }
  if (st == REPL_INTS) { snprintf(buf, n, "%.0f.", (double)v); return; }
  if (st == REPL_SCI) { snprintf(buf, n, "%.8e", (double)v); return; }
  int d = repl_decimals(v);
  snprintf(buf, n, d ? "%.*f%*s" : "%.*f.%*s", d, (double)v, dec - d, "");
}

static repl_style repl_style_of(const kiln_array *a, const void *data, int64_t n, int *dec) {
  bool ints = true, sci = false;
  *dec = 0;
  for (int64_t i = 0; i < n && a->dtype == K_F32; i++) {
    float v = ((const float *)data)[i], m = fabsf(v);
    if (!isfinite(v)) continue;
    ints &= v == floorf(v) && m < 1e16f;
    sci |= m >= 1e8f || (m > 0 && m < 1e-4f);
    if (repl_decimals(v) > *dec) *dec = repl_decimals(v);
  }
  return ints ? REPL_INTS : sci ? REPL_SCI : REPL_FIXED;
}

typedef struct { const kiln_array *a; const void *data; repl_style st; int dec; bool summary; int width; FILE *out; } repl_pr;

static bool repl_skip(const repl_pr *p, int64_t i, int64_t n) {
  return p->summary && n > 2 * REPL_EDGE && i >= REPL_EDGE && i < n - REPL_EDGE;
}

/* One axis of the nested brackets; base is the flat index of this sub-array's first value. */
static void repl_print_axis(const repl_pr *p, int axis, int64_t base, int64_t stride) {
  const k_shape *s = &p->a->shape;
  int64_t n = s->d[axis], inner = stride / n;
  fputc('[', p->out);
  for (int64_t i = 0; i < n; i++) {
    if (repl_skip(p, i, n)) {
      fprintf(p->out, axis == s->rank - 1 ? " ..." : "...");
      if (axis < s->rank - 1) fprintf(p->out, "\n%*s", axis + 1, "");
      i = n - REPL_EDGE - 1;
      continue;
    }
    if (axis == s->rank - 1) {
      char buf[64];
      repl_fmt(p->a, p->data, base + i, p->st, p->dec, buf, sizeof buf);
      fprintf(p->out, "%s%*s", i ? " " : "", p->width, buf);
    } else {
      repl_print_axis(p, axis + 1, base + i * inner, inner);
      if (i < n - 1) fprintf(p->out, "%.*s%*s", (int)(s->rank - axis - 1), "\n\n\n\n\n\n", axis + 1, "");
    }
  }
  fputc(']', p->out);
}

void repl_print_value(const kiln_array *a, const void *data, FILE *out) {
  char type[200], buf[64];
  int64_t n = k_shape_numel(&a->shape);
  ir_type_str(a->dtype, &a->shape, type, sizeof type);
  fprintf(out, "%s\n", type);
  repl_pr p = {a, data, REPL_INTS, 0, n > REPL_SUMMARY, 1, out};
  p.st = repl_style_of(a, data, n, &p.dec);
  for (int64_t i = 0; i < n; i++) {
    repl_fmt(a, data, i, p.st, p.dec, buf, sizeof buf);
    if ((int)strlen(buf) > p.width) p.width = (int)strlen(buf);
  }
  if (a->shape.rank == 0) {
    repl_fmt(a, data, 0, p.st, p.dec, buf, sizeof buf);
    fprintf(out, "%s\n", buf);
    return;
  }
  repl_print_axis(&p, 0, 0, n);
  fputc('\n', out);
}

