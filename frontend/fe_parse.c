/* fe_parse.c — reads a source file and runs the flex/bison parser over it. The source text
 * is registered with the diagnostics so errors can quote the line under a caret. */
#include "fe.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "parser.h"
#include "lexer.h"

int fe_yyparse(fe_parser *p);

/* Reads the whole file; refuses directories and files over 64 MiB with a message. */
static char *fe_read_file(const char *path, size_t *len, ir_diag *d) {
  FILE *f = fopen(path, "rb");
  ir_loc none = {0};
  if (!f) return ir_error(d, none, "cannot open '%s': %s", path, strerror(errno)), NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap + 2);       /* two NULs after the text: the lexer scans it in place */
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap && cap >= (64u << 20)) break;
    if (n == cap) {
      char *nb = realloc(buf, (cap *= 2) + 2);
      if (!nb) free(buf);
      buf = nb;
    }
  }
  int err = errno;                   /* EISDIR for a directory */
  bool bad = ferror(f) || n >= (64u << 20);
  fclose(f);
  if (!buf || bad) {
    ir_error(d, none, "cannot read '%s': %s", path, !buf ? "out of memory" : n >= (64u << 20) ? "larger than 64 MiB" : strerror(err));
    free(buf);
    return NULL;
  }
  buf[n] = buf[n + 1] = 0;
  *len = n;
  return buf;
}

/* The parser prepends each dim, def and model; put them back in source order. */
#define FE_REVERSE_LIST(T, head) do { T *r_ = NULL; while (head) { T *n_ = head->next; head->next = r_; r_ = head; head = n_; } head = r_; } while (0)
static void fe_file_in_source_order(fe_file *f) {
  FE_REVERSE_LIST(fe_dim, f->dims);
  FE_REVERSE_LIST(fe_def, f->defs);
  FE_REVERSE_LIST(fe_model, f->models);
}

static fe_file *fe_parse_owned(const char *path, char *text, size_t len, ir_diag *d) {
  fe_file *f = calloc(1, sizeof *f);
  if (!f) return free(text), NULL;
  f->path = ir_strdup(&f->arena, path);
  f->text = text;
  f->len = len;
  ir_diag_add_source(d, f->path, text, len);
  fe_parser p = {.file = f, .diag = d, .line = 1, .col = 1};
  if (fe_yylex_init_extra(&p, (yyscan_t *)&p.scanner)) return fe_file_free(f), NULL;
  YY_BUFFER_STATE buf = fe_yy_scan_buffer(text, len + 2, p.scanner);   /* in place: lexer.l says how */
  if (!buf) KILN_ICE("the source text lacks its two closing NULs");
  fe_yyparse(&p);
  fe_yy_delete_buffer(buf, p.scanner);
  fe_yylex_destroy(p.scanner);
  fe_file_in_source_order(f);
  return f;
}

fe_file *fe_parse_file(const char *path, ir_diag *d) {
  size_t len = 0;
  char *text = fe_read_file(path, &len, d);
  return text ? fe_parse_owned(path, text, len, d) : NULL;
}

fe_file *fe_parse_text(const char *name, const char *text, size_t len, ir_diag *d) {
  char *copy = malloc(len + 2);
  if (!copy) return NULL;
  memcpy(copy, text, len);
  copy[len] = copy[len + 1] = 0;
  return fe_parse_owned(name, copy, len, d);
}

void fe_file_free(fe_file *f) {
  if (!f) return;
  ir_arena_free(&f->arena);
  free(f->text);
  free(f);
}

/* The keywords of lexer.l, in its order; a keyword added there is added here. */
static const char *const fe_keywords[] = {"dim", "def", "return", "model", "input", "param", "const", "output",
                                          "train", "with", "schedule", "clip_norm", "wd_exclude", "true",
                                          "false"};

bool fe_is_keyword(const char *s) {
  for (size_t i = 0; i < sizeof fe_keywords / sizeof *fe_keywords; i++)
    if (strcmp(s, fe_keywords[i]) == 0) return true;
  return false;
}

/* The keywords parser.y also takes as an argument's name (its `T_DIM '=' expr`). */
static const char *const fe_attr_keywords[] = {"dim"};

bool fe_is_attr_keyword(const char *s) {
  for (size_t i = 0; i < sizeof fe_attr_keywords / sizeof *fe_attr_keywords; i++)
    if (strcmp(s, fe_attr_keywords[i]) == 0) return true;
  return false;
}
