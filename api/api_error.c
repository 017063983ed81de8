/* api_error.c — the failure channel of the public API (a message per thread, read with
 * kiln_last_error) and the small string helpers the other api files share. */
#include "api.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Long enough for a front-end diagnostic with its source line and caret, several of them. */
enum { API_ERR_MAX = 8192 };
static _Thread_local char api_err[API_ERR_MAX];

int api_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(api_err, sizeof api_err, fmt, ap);
  va_end(ap);
  return KILN_ERR;
}

int api_ok(void) {
  api_err[0] = 0;
  return KILN_OK;
}

KILN_API const char *kiln_last_error(void) { return api_err; }
KILN_API const char *kiln_version(void) { return rt_version(); }
KILN_API void kiln_free(void *p) { free(p); }

char *api_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  return p ? memcpy(p, s, n) : NULL;
}

void api_buf_printf(api_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int need = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (need < 0 || b->oom) return;
  if (b->len + (size_t)need + 1 > b->cap) {
    size_t cap = (b->cap ? b->cap * 2 : 256) + (size_t)need;
    char *s = realloc(b->s, cap);
    if (!s) { b->oom = true; return; }
    b->s = s, b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, (size_t)need + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)need;
}

void api_buf_truncate(api_buf *b, size_t len) {
  if (b->s && len <= b->len) b->len = len, b->s[len] = 0;
}

void api_buf_free(api_buf *b) {
  free(b->s);
  *b = (api_buf){0};
}

bool api_is_name(const char *s, bool dotted) {
  if (!s || !(isalpha((unsigned char)*s) || *s == '_') || fe_is_keyword(s)) return false;
  for (const char *p = s + 1; *p; p++) {
    if (*p == '.' && dotted && p[-1] != '.' && p[1]) continue;
    if (!isalnum((unsigned char)*p) && *p != '_') return false;
  }
  return true;
}

int api_check_shape(const char *what, int rank, const int64_t *dims, k_shape *out) {
  if (rank < 0 || rank > KILN_MAX_RANK) return api_fail("%s: rank %d is not between 0 and %d", what, rank, KILN_MAX_RANK);
  if (rank > 0 && !dims) return api_fail("%s: dims is NULL", what);
  *out = (k_shape){.rank = rank};
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 1 || dims[i] > IR_MAX_DIM)
      return api_fail("%s: dimension %d is %lld; dimensions are between 1 and 2^40", what, i, (long long)dims[i]);
    out->d[i] = dims[i];
  }
  return KILN_OK;
}

/* ---- diagnostics of the front end and the passes, captured as the last error ---- */

int api_diags_open(api_diags *x) {
  *x = (api_diags){0};
  if (!(x->mem = open_memstream(&x->msg, &x->len))) return api_fail("out of memory");
  ir_diag_init(&x->d, x->mem);
  return KILN_OK;
}

int api_diags_close(api_diags *x, bool fail, const char *fallback) {
  ir_diag_free(&x->d);
  fclose(x->mem);
  size_t n = x->msg ? strlen(x->msg) : 0;
  while (n && x->msg[n - 1] == '\n') x->msg[--n] = 0;
  int rc = fail ? api_fail("%s", n ? x->msg : fallback) : KILN_OK;
  free(x->msg);
  return rc;
}

void api_type_text(api_buf *b, k_dtype t, const k_shape *s) {
  char buf[200];
  ir_type_str(t, s, buf, sizeof buf);
  api_buf_printf(b, "%s", buf);
}

_Static_assert((int)KILN_F32 == (int)K_F32 && (int)KILN_I32 == (int)K_I32, "kiln_dtype follows k_dtype");
_Static_assert(KILN_MAX_RANK == K_MAX_RANK, "KILN_MAX_RANK follows K_MAX_RANK");
