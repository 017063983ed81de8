/* rt_json.c — a strict JSON parser for the small documents the runtime reads (safetensors
 * headers). Recursive descent over a length-bounded buffer: it never reads past `len`,
 * limits nesting, rejects floats, bad escapes, control characters, invalid UTF-8 and
 * trailing garbage, and every error names the byte offset where it was found. */
#include "runtime.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  const unsigned char *p, *end, *base;
  char *err;
  size_t err_len;
  int depth;
} jparser;

static int jfail(jparser *P, const char *what) {
  rt_errf(P->err, P->err_len, "invalid JSON at byte %zu: %s", (size_t)(P->p - P->base), what);
  return -1;
}

static void skip_ws(jparser *P) {
  while (P->p < P->end && (*P->p == ' ' || *P->p == '\t' || *P->p == '\n' || *P->p == '\r')) P->p++;
}

static int expect_word(jparser *P, const char *w) {
  size_t n = strlen(w);
  if ((size_t)(P->end - P->p) < n || memcmp(P->p, w, n) != 0) return jfail(P, "unexpected token");
  P->p += n;
  return 0;
}

/* ---- strings --------------------------------------------------------------------------- */

typedef struct { char *s; size_t n, cap; int oom; } sbuf;

static int sb_put(sbuf *b, unsigned c) {
  if (b->n + 1 >= b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 32;
    char *s = realloc(b->s, cap);
    if (!s) return b->oom = -1;
    b->s = s;
    b->cap = cap;
  }
  b->s[b->n++] = (char)c;
  return 0;
}

static int sb_put_utf8(sbuf *b, unsigned cp) {
  if (cp < 0x80) return sb_put(b, cp);
  if (cp < 0x800) return sb_put(b, 0xC0 | (cp >> 6)) | sb_put(b, 0x80 | (cp & 0x3F));
  if (cp < 0x10000)
    return sb_put(b, 0xE0 | (cp >> 12)) | sb_put(b, 0x80 | ((cp >> 6) & 0x3F)) |
           sb_put(b, 0x80 | (cp & 0x3F));
  return sb_put(b, 0xF0 | (cp >> 18)) | sb_put(b, 0x80 | ((cp >> 12) & 0x3F)) |
         sb_put(b, 0x80 | ((cp >> 6) & 0x3F)) | sb_put(b, 0x80 | (cp & 0x3F));
}

static int hex4(jparser *P, unsigned *out) {
  if (P->end - P->p < 4) return jfail(P, "truncated \\u escape");
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned c = P->p[i], d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if ((c | 32) >= 'a' && (c | 32) <= 'f') d = (c | 32) - 'a' + 10;
    else return jfail(P, "bad hex digit in \\u escape");
    v = v * 16 + d;
  }
  P->p += 4;
  *out = v;
  return 0;
}

/* \uXXXX, joining a surrogate pair; lone surrogates and U+0000 are refused. */
static int parse_u_escape(jparser *P, sbuf *b) {
  unsigned cp, lo;
  if (hex4(P, &cp)) return -1;
  if (cp >= 0xDC00 && cp <= 0xDFFF) return jfail(P, "lone low surrogate");
  if (cp >= 0xD800 && cp <= 0xDBFF) {
    if (P->end - P->p < 2 || P->p[0] != '\\' || P->p[1] != 'u') return jfail(P, "lone high surrogate");
    P->p += 2;
    if (hex4(P, &lo)) return -1;
    if (lo < 0xDC00 || lo > 0xDFFF) return jfail(P, "bad surrogate pair");
    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
  }
  if (cp == 0) return jfail(P, "\\u0000 is not allowed in names");
  return sb_put_utf8(b, cp);
}

static int parse_escape(jparser *P, sbuf *b) {
  if (P->p >= P->end) return jfail(P, "truncated escape");
  unsigned char c = *P->p++;
  switch (c) {
  case '"': case '\\': case '/': return sb_put(b, c);
  case 'b': return sb_put(b, '\b');
  case 'f': return sb_put(b, '\f');
  case 'n': return sb_put(b, '\n');
  case 'r': return sb_put(b, '\r');
  case 't': return sb_put(b, '\t');
  case 'u': return parse_u_escape(P, b);
  default: P->p--; return jfail(P, "unknown escape");
  }
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0: overlong forms, surrogates and
 * code points past U+10FFFF are invalid. */
static int utf8_len(const unsigned char *p, const unsigned char *end) {
  unsigned c = p[0];
  int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
  if (c < 0xC2 || c > 0xF4 || end - p < n) return 0;
  for (int i = 1; i < n; i++)
    if ((p[i] & 0xC0) != 0x80) return 0;
  if (c == 0xE0 && p[1] < 0xA0) return 0;
  if (c == 0xED && p[1] >= 0xA0) return 0;
  if (c == 0xF0 && p[1] < 0x90) return 0;
  if (c == 0xF4 && p[1] >= 0x90) return 0;
  return n;
}

static int parse_string_raw(jparser *P, char **out) {
  sbuf b = {0};
  P->p++;  /* the opening quote */
  for (;;) {
    if (P->p >= P->end) { free(b.s); return jfail(P, "unterminated string"); }
    unsigned char c = *P->p;
    int r = 0;
    if (c == '"') break;
    if (c < 0x20) { free(b.s); return jfail(P, "control character in string"); }
    if (c == '\\') {
      P->p++;
      r = parse_escape(P, &b);
    } else if (c < 0x80) {
      r = sb_put(&b, c);
      P->p++;
    } else {
      int n = utf8_len(P->p, P->end);
      if (!n) { free(b.s); return jfail(P, "invalid UTF-8"); }
      for (int i = 0; i < n && !r; i++) r = sb_put(&b, P->p[i]);
      P->p += n;
    }
    if (r) { free(b.s); return b.oom ? jfail(P, "out of memory") : -1; }
  }
  P->p++;
  if (sb_put(&b, 0)) { free(b.s); return jfail(P, "out of memory"); }
  *out = b.s;
  return 0;
}

/* ---- numbers, arrays, objects ---------------------------------------------------------- */

static int parse_int(jparser *P, rt_json *v) {
  int neg = P->p < P->end && *P->p == '-';
  if (neg) P->p++;
  if (P->p >= P->end || *P->p < '0' || *P->p > '9') return jfail(P, "expected a digit");
  if (*P->p == '0' && P->end - P->p > 1 && P->p[1] >= '0' && P->p[1] <= '9')
    return jfail(P, "leading zero");
  int64_t n = 0;
  while (P->p < P->end && *P->p >= '0' && *P->p <= '9') {
    int d = *P->p++ - '0';
    /* Checked before the step, so n never wraps: 10n + d <= INT64_MAX. */
    if (n > (INT64_MAX - d) / 10) return jfail(P, "integer too large (the limit is 9223372036854775807)");
    n = n * 10 + d;
  }
  if (P->p < P->end && (*P->p == '.' || *P->p == 'e' || *P->p == 'E'))
    return jfail(P, "only integers are allowed");
  v->kind = RT_JSON_INT;
  v->num = neg ? -n : n;
  return 0;
}

static int parse_value(jparser *P, rt_json *v);

/* Appends a zeroed slot; the parent stays freeable whatever happens to the slot. */
static rt_json *grow(jparser *P, rt_json *v, int with_key) {
  if ((v->n & (v->n - 1)) == 0) {  /* capacity doubles at powers of two */
    size_t cap = v->n ? (size_t)v->n * 2 : 1;
    rt_json *items = realloc(v->items, cap * sizeof *items);
    if (items) v->items = items;
    char **keys = with_key ? realloc(v->keys, cap * sizeof *keys) : NULL;
    if (keys) v->keys = keys;
    if (!items || (with_key && !keys)) { jfail(P, "out of memory"); return NULL; }
  }
  memset(&v->items[v->n], 0, sizeof *v->items);
  if (with_key) v->keys[v->n] = NULL;
  return &v->items[v->n++];
}

static int parse_array(jparser *P, rt_json *v) {
  v->kind = RT_JSON_ARR;
  P->p++;
  skip_ws(P);
  if (P->p < P->end && *P->p == ']') { P->p++; return 0; }
  for (;;) {
    rt_json *it = grow(P, v, 0);
    if (!it || parse_value(P, it)) return -1;
    skip_ws(P);
    if (P->p >= P->end) return jfail(P, "unterminated array");
    if (*P->p == ']') { P->p++; return 0; }
    if (*P->p != ',') return jfail(P, "expected ',' or ']'");
    P->p++;
  }
}

static int parse_member(jparser *P, rt_json *v) {
  skip_ws(P);
  if (P->p >= P->end || *P->p != '"') return jfail(P, "expected a member name");
  rt_json *it = grow(P, v, 1);
  if (!it || parse_string_raw(P, &v->keys[v->n - 1])) return -1;
  skip_ws(P);
  if (P->p >= P->end || *P->p != ':') return jfail(P, "expected ':'");
  P->p++;
  return parse_value(P, it);
}

static int parse_object(jparser *P, rt_json *v) {
  v->kind = RT_JSON_OBJ;
  P->p++;
  skip_ws(P);
  if (P->p < P->end && *P->p == '}') { P->p++; return 0; }
  for (;;) {
    if (parse_member(P, v)) return -1;
    skip_ws(P);
    if (P->p >= P->end) return jfail(P, "unterminated object");
    if (*P->p == '}') { P->p++; return 0; }
    if (*P->p != ',') return jfail(P, "expected ',' or '}'");
    P->p++;
  }
}

static int parse_value(jparser *P, rt_json *v) {
  skip_ws(P);
  if (P->p >= P->end) return jfail(P, "unexpected end");
  if (++P->depth > RT_JSON_MAX_DEPTH) return jfail(P, "nested too deeply");
  int r;
  switch (*P->p) {
  case '{': r = parse_object(P, v); break;
  case '[': r = parse_array(P, v); break;
  case '"': v->kind = RT_JSON_STR; r = parse_string_raw(P, &v->str); break;
  case 't': v->kind = RT_JSON_BOOL; v->num = 1; r = expect_word(P, "true"); break;
  case 'f': v->kind = RT_JSON_BOOL; r = expect_word(P, "false"); break;
  case 'n': r = expect_word(P, "null"); break;
  default: r = parse_int(P, v); break;
  }
  P->depth--;
  return r;
}

int rt_json_parse(const char *text, size_t len, rt_json *out, char *err, size_t err_len) {
  jparser P = {(const unsigned char *)text, (const unsigned char *)text + len,
               (const unsigned char *)text, err, err_len, 0};
  memset(out, 0, sizeof *out);
  int r = parse_value(&P, out);
  if (r == 0) {
    skip_ws(&P);
    if (P.p != P.end) r = jfail(&P, "trailing characters after the document");
  }
  if (r) rt_json_free(out);
  return r;
}

void rt_json_free(rt_json *v) {
  if (!v) return;
  for (int i = 0; i < v->n; i++) {
    rt_json_free(&v->items[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  free(v->str);
  memset(v, 0, sizeof *v);
}

const rt_json *rt_json_get(const rt_json *obj, const char *key) {
  if (obj->kind != RT_JSON_OBJ) return NULL;
  for (int i = 0; i < obj->n; i++)
    if (obj->keys[i] && strcmp(obj->keys[i], key) == 0) return &obj->items[i];
  return NULL;
}
