/* onnx_names.c — ONNX names ("/layer1/layer1.0/conv1/Conv_output_0", "onnx::Conv_193",
 * "input.1") made .kiln names: valid under the lexer's NAME rule, unique in the graph, and not
 * a keyword (input -> input_): kiln import's text must parse back, and a .so compiled from the
 * .onnx names its tensors as the imported text does. Every renaming is recorded for --map. */
#include "onnx_int.h"

#include <ctype.h>
#include <stdint.h>
#include <string.h>

static bool onnx_word(int ch) { return isalnum(ch) || ch == '_'; }

/* torch's scope paths repeat each module's name in its child's ("/features/features.17/conv/
 * conv.1/Conv"): a segment that the next one starts with (then a '.') is dropped, leaving
 * "features.17/conv.1/Conv". */
static const char *onnx_collapse_scopes(ir_arena *a, const char *in) {
  size_t n = strlen(in), k = 0;
  char *out = ir_alloc(a, n + 1);
  for (const char *seg = in; *seg;) {
    const char *end = strchr(seg, '/'), *next = end ? end + 1 : NULL;
    size_t len = end ? (size_t)(end - seg) : strlen(seg);
    bool dropped = len && next && strncmp(next, seg, len) == 0 && next[len] == '.';
    if (!dropped) {
      memcpy(out + k, seg, len + (end ? 1 : 0));
      k += len + (end ? 1 : 0);
    }
    if (!end) break;
    seg = next;
  }
  out[k] = 0;
  return out;
}

/* Characters outside [A-Za-z0-9_] become '_', except a '.' between two parts that each start
 * with a letter or '_' (fc.weight stays as PyTorch names it; layer1.0 becomes layer1_0).
 * Exporters' prefixes that say nothing ("onnx::", leading '/', repeated scopes) and the
 * "_output_0" of a node's first output are dropped. */
static char *onnx_clean(ir_arena *a, const char *in) {
  if (strncmp(in, "onnx::", 6) == 0) in += 6;
  in = onnx_collapse_scopes(a, in);
  while (*in && !onnx_word((unsigned char)*in)) in++;
  size_t n = strlen(in);
  if (n > 9 && strcmp(in + n - 9, "_output_0") == 0) n -= 9;
  char *s = ir_alloc(a, n + 2);
  size_t k = 0;
  if (n == 0 || isdigit((unsigned char)in[0])) s[k++] = 't';
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)in[i];
    bool dot_ok = ch == '.' && k > 0 && s[k - 1] != '.' && i + 1 < n && (isalpha((unsigned char)in[i + 1]) || in[i + 1] == '_');
    s[k++] = onnx_word(ch) || dot_ok ? (char)ch : '_';
  }
  s[k] = 0;
  return s;
}

static bool onnx_name_taken(onnx_ctx *c, const char *s) { return fe_map_get(&c->kiln_names, s) != NULL; }

const char *onnx_clean_name(onnx_ctx *c, const char *onnx_name) {
  const char *base = onnx_clean(&c->g->arena, onnx_name ? onnx_name : "");
  if (fe_is_keyword(base)) base = ir_strfmt(&c->g->arena, "%s_", base);   /* input -> input_ */
  return base;
}

const char *onnx_kiln_name(onnx_ctx *c, const char *onnx_name) {
  ir_arena *a = &c->g->arena;
  const char *base = onnx_clean_name(c, onnx_name), *s = base;
  for (intptr_t i = (intptr_t)fe_map_get(&c->suffix, base) + 1; onnx_name_taken(c, s); i++) {
    s = ir_strfmt(a, "%s_%ld", base, (long)i);
    if (!onnx_name_taken(c, s)) fe_map_set(&c->suffix, a, base, (void *)i);
  }
  fe_map_put(&c->kiln_names, a, s, (void *)1);
  if (c->map && onnx_name && strcmp(s, onnx_name) != 0)
    *(onnx_name_pair *)ir_vec_push(c->map) = (onnx_name_pair){ir_strdup(a, onnx_name), s};
  return s;
}
