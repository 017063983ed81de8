/* api_attrs.c — attribute lists for kiln_graph_op and kiln_array_op. They are kept as the
 * language writes them ("num_hidden=8, kernel=(2, 2)"), so the front end's own parser and
 * ir_attr.c check and store them exactly as for a .kiln file. A value given as text is
 * parsed alone first, so that it cannot reach outside its attribute. */
#include "api.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

KILN_API int kiln_attrs_new(kiln_attrs **out) {
  if (!out) return api_fail("kiln_attrs_new: out is NULL");
  *out = calloc(1, sizeof **out);
  return *out ? api_ok() : api_fail("kiln_attrs_new: out of memory");
}

KILN_API void kiln_attrs_free(kiln_attrs *a) {
  if (!a) return;
  api_buf_free(&a->text);
  free(a);
}

static int api_attrs_begin(kiln_attrs *a, const char *name, const char *fn) {
  if (!a) return api_fail("%s: attrs is NULL", fn);
  if (!api_is_name(name, false) && !(name && fe_is_attr_keyword(name))) return api_fail("%s: '%s' is not an attribute name", fn, name ? name : "(null)");
  api_buf_printf(&a->text, "%s%s=", a->n ? ", " : "", name);
  a->n++;
  return KILN_OK;
}

static int api_attrs_end(kiln_attrs *a) {
  return a->text.oom ? api_fail("attributes: out of memory") : api_ok();
}

KILN_API int kiln_attrs_int(kiln_attrs *a, const char *name, int64_t v) {
  if (api_attrs_begin(a, name, "kiln_attrs_int")) return KILN_ERR;
  api_buf_printf(&a->text, "%lld", (long long)v);
  return api_attrs_end(a);
}

KILN_API int kiln_attrs_float(kiln_attrs *a, const char *name, double v) {
  if (!isfinite(v)) return api_fail("kiln_attrs_float: %s must be finite", name ? name : "(null)");
  if (api_attrs_begin(a, name, "kiln_attrs_float")) return KILN_ERR;
  /* a float literal even for integral values: the language reads "1" as an int */
  api_buf_printf(&a->text, "%.9g%s", v, v == floor(v) && fabs(v) < 1e15 ? ".0" : "");
  return api_attrs_end(a);
}

KILN_API int kiln_attrs_bool(kiln_attrs *a, const char *name, int v) {
  if (api_attrs_begin(a, name, "kiln_attrs_bool")) return KILN_ERR;
  api_buf_printf(&a->text, "%s", v ? "true" : "false");
  return api_attrs_end(a);
}

KILN_API int kiln_attrs_str(kiln_attrs *a, const char *name, const char *v) {
  if (!v) return api_fail("kiln_attrs_str: value is NULL");
  for (const char *p = v; *p; p++)
    if (*p == '"' || *p == '\\' || *p == '\n') return api_fail("kiln_attrs_str: %s: quotes, backslashes and newlines are not allowed in a value", name ? name : "(null)");
  if (api_attrs_begin(a, name, "kiln_attrs_str")) return KILN_ERR;
  api_buf_printf(&a->text, "\"%s\"", v);
  return api_attrs_end(a);
}

KILN_API int kiln_attrs_ints(kiln_attrs *a, const char *name, int n, const int64_t *v) {
  if (n < 0 || n > K_MAX_RANK || (n && !v)) return api_fail("kiln_attrs_ints: %d values (0 to %d, v not NULL)", n, K_MAX_RANK);
  if (api_attrs_begin(a, name, "kiln_attrs_ints")) return KILN_ERR;
  api_buf_printf(&a->text, "(");
  for (int i = 0; i < n; i++) api_buf_printf(&a->text, "%s%lld", i ? ", " : "", (long long)v[i]);
  api_buf_printf(&a->text, "%s)", n == 1 ? "," : "");
  return api_attrs_end(a);
}

/* The text is one attribute value exactly when `model p { p = f(k=TEXT) }` parses cleanly
 * to a call with a single keyword argument. */
static int api_attr_value_ok(const char *text) {
  api_buf probe = {0};
  api_buf_printf(&probe, "model p {\n p = f(k=%s)\n output p\n}\n", text);
  FILE *sink = fopen("/dev/null", "w");
  ir_diag d;
  ir_diag_init(&d, sink ? sink : stderr);
  fe_file *f = probe.oom ? NULL : fe_parse_text("<attribute>", probe.s, probe.len, &d);
  const fe_stmt *st = f && !d.errors && f->models && !f->models->next && !f->dims && !f->defs ? f->models->items : NULL;
  bool ok = st && st->kind == FE_S_ASSIGN && st->expr && st->expr->kind == FE_CALL && st->expr->args &&
            !st->expr->args->next && st->expr->args->key && strcmp(st->expr->args->key, "k") == 0 &&
            st->next && st->next->kind == FE_S_OUTPUT && !st->next->next;
  fe_file_free(f);
  ir_diag_free(&d);
  if (sink) fclose(sink);
  api_buf_free(&probe);
  return ok ? KILN_OK : KILN_ERR;
}

KILN_API int kiln_attrs_parse(kiln_attrs *a, const char *name, const char *text) {
  if (!text) return api_fail("kiln_attrs_parse: text is NULL");
  if (strchr(text, '\n') || strchr(text, '#') || api_attr_value_ok(text))
    return api_fail("kiln_attrs_parse: %s: '%s' is not one attribute value as the language writes it "
                    "(a number, a string in quotes, true/false or a tuple)", name ? name : "(null)", text);
  if (api_attrs_begin(a, name, "kiln_attrs_parse")) return KILN_ERR;
  api_buf_printf(&a->text, "%s", text);
  return api_attrs_end(a);
}
