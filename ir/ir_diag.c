/* ir_diag.c — the user-error channel: "file:line:col: error: message", the source line and
 * a caret under the column; "did you mean" suggestions by edit distance; and KILN_ICE, the
 * internal-error channel for bugs in Kiln itself. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

void ir_diag_init(ir_diag *d, FILE *out) {
  memset(d, 0, sizeof *d);
  d->out = out ? out : stderr;
  d->max_errors = 100;
}

void ir_diag_add_source(ir_diag *d, const char *name, const char *text, size_t len) {
  ir_source *s = calloc(1, sizeof *s);
  if (!s) return;                 /* caret lines are a nicety; errors still print */
  s->name = name;
  s->text = text;
  s->len = len;
  s->next = d->sources;
  d->sources = s;
}

void ir_diag_free(ir_diag *d) {
  for (ir_source *s = d->sources, *n; s; s = n) {
    n = s->next;
    free(s);
  }
  d->sources = NULL;
}

static const ir_source *ir_diag_source(const ir_diag *d, const char *file) {
  for (const ir_source *s = d->sources; s; s = s->next)
    if (file && s->name && strcmp(s->name, file) == 0) return s;
  return NULL;
}

int ir_utf8_len(const unsigned char *s, long n) {
  int len = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
  if (len == 0 || len > n) return 0;
  for (int i = 1; i < len; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  return len;
}

/* Prints the source line (at most 200 bytes around the caret, so a 1 MB line stays
 * readable) and a caret under the column. Valid UTF-8 prints as is and takes one column;
 * control bytes and other non-ASCII bytes print as '?', so binary junk cannot garble the
 * terminal or shift the caret. */
static void ir_diag_caret(const ir_diag *d, ir_loc loc) {
  const ir_source *s = ir_diag_source(d, loc.file);
  if (!s || loc.line <= 0) return;
  const char *p = s->text, *end = s->text + s->len;
  for (int l = 1; l < loc.line && p < end; p++)
    if (*p == '\n') l++;
  const char *eol = memchr(p, '\n', (size_t)(end - p));
  if (!eol) eol = end;
  long col = loc.col > 0 ? loc.col - 1 : 0, from = col > 150 ? col - 100 : 0;
  long len = eol - p;
  if (from > len) from = len;
  long to = len - from > 200 ? from + 200 : len;
  const unsigned char *u = (const unsigned char *)p;
  fputs("  ", d->out);
  for (long i = from; i < to; i++) {
    int n = u[i] >= 0x80 ? ir_utf8_len(u + i, to - i) : 0;
    if (n == 3 && memcmp(u + i, "\xef\xbb\xbf", 3) == 0) fputc(' ', d->out), i += 2;   /* byte order mark */
    else if (n) fwrite(u + i, 1, (size_t)n, d->out), i += n - 1;
    else fputc(u[i] == '\t' ? ' ' : (u[i] < 32 || u[i] >= 127) ? '?' : u[i], d->out);
  }
  fputs("\n  ", d->out);
  for (long i = from; i < col && i < to; i++) {
    int n = u[i] >= 0x80 ? ir_utf8_len(u + i, to - i) : 0;
    fputc(' ', d->out);
    if (n) i += n - 1;
  }
  fputs("^\n", d->out);
}

static void ir_diag_emit(ir_diag *d, ir_loc loc, const char *kind, const char *fmt, va_list ap) {
  if (loc.file && loc.line > 0)
    fprintf(d->out, "%s:%d:%d: %s: ", loc.file, loc.line, loc.col, kind);
  else if (loc.file)
    fprintf(d->out, "%s: %s: ", loc.file, kind);
  else
    fprintf(d->out, "kiln: %s: ", kind);
  vfprintf(d->out, fmt, ap);
  fputc('\n', d->out);
  ir_diag_caret(d, loc);
}

/* FNV-1a over the location and the message. */
static uint64_t ir_diag_hash(ir_loc loc, const char *msg) {
  uint64_t h = 14695981039346656037ull;
  char pos[64];
  snprintf(pos, sizeof pos, ":%d:%d:", loc.line, loc.col);
  for (const char *parts[] = {loc.file ? loc.file : "", pos, msg}, **q = parts; q < parts + 3; q++)
    for (const char *c = *q; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  return h;
}

/* The same error at the same place again (a def inlined at several call sites) is one
 * error: it is neither printed nor counted a second time. */
static bool ir_diag_repeat(ir_diag *d, ir_loc loc, const char *fmt, va_list ap) {
  char msg[512];
  va_list aq;
  va_copy(aq, ap);
  vsnprintf(msg, sizeof msg, fmt, aq);
  va_end(aq);
  uint64_t h = ir_diag_hash(loc, msg);
  for (int i = 0; i < d->nseen; i++)
    if (d->seen[i] == h) return true;
  if (d->nseen < (int)(sizeof d->seen / sizeof *d->seen)) d->seen[d->nseen++] = h;
  return false;
}

void ir_verror(ir_diag *d, ir_loc loc, const char *fmt, va_list ap) {
  d->failed++;   /* even a repeat means the step that reported it failed (a def's second call) */
  d->dropped = loc.line > 0 && ir_diag_repeat(d, loc, fmt, ap);
  if (d->dropped) return;
  d->errors++;
  if (d->errors > d->max_errors) return;
  if (d->errors == d->max_errors) {
    fprintf(d->out, "kiln: too many errors; stopping after %d\n", d->max_errors);
    return;
  }
  ir_diag_emit(d, loc, "error", fmt, ap);
}

void ir_error(ir_diag *d, ir_loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ir_verror(d, loc, fmt, ap);
  va_end(ap);
}

/* Printed like an error but not counted: the model still compiles. */
void ir_warning(ir_diag *d, ir_loc loc, const char *fmt, ...) {
  if (d->errors >= d->max_errors) return;
  va_list ap;
  va_start(ap, fmt);
  ir_diag_emit(d, loc, "warning", fmt, ap);
  va_end(ap);
}

void ir_note(ir_diag *d, ir_loc loc, const char *fmt, ...) {
  if (d->errors >= d->max_errors || d->dropped) return;
  va_list ap;
  va_start(ap, fmt);
  ir_diag_emit(d, loc, "note", fmt, ap);
  va_end(ap);
}

void ir_note_expansion(ir_diag *d, const ir_expansion *e) {
  for (; e; e = e->up) ir_note(d, e->call, "in the expansion of def '%s' called here", e->def);
}

/* Levenshtein distance, capped: names longer than 64 are never suggested. */
static int ir_edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 64 || lb > 64) return 1000;
  int row[65];
  for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diag = up;
      row[j] = best;
    }
  }
  return row[lb];
}

const char *ir_suggest(const char *name, const char *const *cands, int n) {
  const char *best = NULL;
  int best_d = 1000, limit = (int)strlen(name) / 3 + 1;
  if (limit > 3) limit = 3;
  for (int i = 0; i < n; i++) {
    if (!cands[i]) continue;
    int dist = ir_edit_distance(name, cands[i]);
    if (dist < best_d) best_d = dist, best = cands[i];
  }
  return best_d <= limit ? best : NULL;
}

_Noreturn void ir_ice(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "kiln: internal compiler error at %s:%d: ", file, line);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nThis is a bug in Kiln, not in your model; please report it.\n");
  va_end(ap);
  exit(3);
}
