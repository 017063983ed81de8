/* fe.h — the front end: the AST of a .kiln file, the parser that builds it, and lowering
 * from AST to the graph IR (defs inlined, parameters created and named, dims bound).
 *   fe_parse.c + lexer.l + parser.y : text -> fe_file (errors through ir_diag)
 *   fe_lower.c                      : fe_file -> ir_graph per model
 *   fe_eval.c                       : attribute and dim arithmetic (compile-time values)
 *   fe_bound.c                      : a .kiln model's bounded dims, lowered at other extents
 *   fe_dims.c                       : bounded dims of either front end: probe graphs and the
 *                                     check of every extent of the ranges */
#ifndef KILN_FE_H
#define KILN_FE_H

#include "ops.h"

typedef enum { FE_NUM, FE_STR, FE_BOOL, FE_NAME, FE_CALL, FE_BINOP, FE_NEG, FE_TUPLE, FE_INDEX, FE_SLICE } fe_expr_kind;

typedef struct fe_expr fe_expr;
typedef struct fe_arg {      /* a call argument or tuple item; key != NULL for keyword args */
  const char *key;
  fe_expr *value;
  ir_loc loc;
  struct fe_arg *next;
} fe_arg;

struct fe_expr {              /* fields ordered for size: a file may hold millions */
  fe_expr_kind kind;
  int depth;                 /* BINOP: operators in its longest chain (lowering recurses on it) */
  ir_loc loc;
  double num;                /* NUM, BOOL */
  const char *str;           /* NAME, STR, CALL's callee */
  fe_expr *l, *r;            /* BINOP; NEG and INDEX (the tensor) use l; SLICE: begin, end
                                (NULL: from the start, to the end) */
  fe_arg *args;              /* CALL, TUPLE; INDEX: one item an axis (an expr, or a SLICE);
                                SLICE: its step, or NULL */
  char op;                   /* BINOP: + - * / @, and '^' for ** */
  bool is_int;
};

typedef struct fe_name { const char *name; ir_loc loc; struct fe_name *next; } fe_name;

typedef struct {             /* f32[batch, 10] */
  const char *dtype;         /* as written; checked in lowering */
  fe_arg *dims;              /* each value is a NUM or NAME */
  ir_loc loc;
} fe_ttype;

typedef enum { FE_S_ASSIGN, FE_S_INPUT, FE_S_PARAM, FE_S_CONST, FE_S_OUTPUT, FE_S_TRAIN } fe_stmt_kind;
typedef struct fe_stmt {
  fe_stmt_kind kind;
  ir_loc loc;
  fe_name *names;            /* ASSIGN targets; INPUT/PARAM/CONST/TRAIN: one; OUTPUT: the list */
  fe_expr *expr;             /* ASSIGN rhs; PARAM, CONST initializer; TRAIN optimizer call */
  fe_expr *sched;            /* TRAIN: the schedule's call, or NULL */
  fe_expr *clip;             /* TRAIN: clip_norm's value, or NULL */
  fe_name *wdx;              /* TRAIN: wd_exclude's kinds (bias, norm), or NULL */
  bool has_type;
  fe_ttype type;             /* INPUT, PARAM, CONST */
  struct fe_stmt *next;
} fe_stmt;

typedef struct fe_dparam {   /* a def parameter: a tensor, or a typed attribute */
  const char *name;
  const char *atype;         /* NULL for a tensor */
  fe_expr *dflt;
  ir_loc loc;
  struct fe_dparam *next;
} fe_dparam;

typedef struct fe_def {
  const char *name;
  fe_dparam *params;
  fe_stmt *body;
  fe_arg *rets;
  ir_loc loc;
  struct fe_def *next;
} fe_def;

/* `dim batch = 64`, or bounded, `dim batch = 1..64`: lo..value (lo == value when fixed). */
typedef struct fe_dim { const char *name; int64_t lo, value; ir_loc loc; struct fe_dim *next; } fe_dim;

typedef struct fe_model { const char *name; fe_stmt *items; ir_loc loc; struct fe_model *next; } fe_model;

typedef struct {
  ir_arena arena;
  const char *path;
  char *text;                /* the whole source and two NULs after it (owned; the lexer
                                scans it in place) */
  size_t len;
  fe_dim *dims;
  fe_def *defs;
  fe_model *models;
  struct fe_file_index *index;   /* dims and defs by name (fe_eval.c), built on first use */
} fe_file;

/* Limits that keep a file cheap to refuse (docs/language.md, "Limits"). Lowering one model
 * builds at most FE_MAX_NODES nodes (fe_lower.h, fe_too_big). The parser refuses a model or
 * def of more statements than that, and a file whose syntax tree passes FE_MAX_SYNTAX items
 * (statements, expressions, arguments, names, parameters, dims...), and stops reading
 * there: memory stays a small multiple of the input, whatever its shape. */
#define FE_MAX_NODES 300000
#define FE_MAX_SYNTAX (6 * FE_MAX_NODES)

/* ---- fe_parse.c ---- */
/* Reads and parses path (or, when text != NULL, that text under the name path). Syntax
 * errors go to d; the parser recovers at the next line and keeps going. Returns NULL only
 * when the file cannot be read; check d->errors for the rest. */
fe_file *fe_parse_file(const char *path, ir_diag *d);
fe_file *fe_parse_text(const char *name, const char *text, size_t len, ir_diag *d);
void fe_file_free(fe_file *f);
/* Whether s is one of lexer.l's keywords (dim, param, const, ...), which no name may be:
 * writers of .kiln text (kiln import, the REPL's export) rename such names. */
bool fe_is_keyword(const char *s);
/* Whether keyword s may still name an op's argument, as in concat(a, b, dim=0). */
bool fe_is_attr_keyword(const char *s);

/* ---- fe_lower.c ---- */
/* -D name=N (lo 0: fixed at value), or -D name=LO..N (lo > 0: bounded to [lo, value]). A
 * fixed value fixes a dim the file declares bounded; a range bounds a dim declared fixed. */
typedef struct { const char *name; int64_t value, lo; } fe_define;
/* Lowers one model to a graph with shapes inferred; NULL if any error was reported. When the
 * model reads bounded dims, the graph is lowered at their bounds and carries them (nbdims,
 * bdims, probes: ir.h), and every extent of their ranges has been checked to lower to the
 * sizes the bound and the probes predict (fe_bound.c). */
ir_graph *fe_lower_model(fe_file *f, fe_model *m, const fe_define *defs, int ndefs, ir_diag *d);
/* File-level checks before lowering: duplicate dims, defs and models; defs that hide an op;
 * def parameter types; every -D naming a dim. Reports and returns the error count. */
int fe_check_file(fe_file *f, const fe_define *defs, int ndefs, ir_diag *d);
/* A -D's value or range: positive, LO not above HI. Reports and returns the error count (the
 * ONNX front end checks the -D that name its inputs' symbolic dimensions with it too). */
int fe_check_define(const fe_define *x, ir_diag *d);
/* A train statement's optimizer and options as the language writes them after `with`
 * ("adamw(lr=1e-3) schedule cosine(total=100) clip_norm=1.0 wd_exclude=bias,norm"), checked
 * as a .kiln train statement is, into *out: for front ends that add a train statement of
 * their own (kiln import --train). Errors go to d (under the source name `name`, the clause
 * shown on line 4 of a model around it); returns their count. */
int fe_train_clause(const char *name, const char *clause, ir_optimizer *out, ir_diag *d);

/* ---- fe_dims.c: bounded dims, for the .kiln and ONNX front ends alike ---- */
/* A bounded dim of a model as its source gives it: its range, whether -D gave it (messages
 * then say "-D batch=1..64", else "dim batch = 1..64"), and where notes about it point. */
typedef struct { const char *name; int64_t lo, hi; bool by_define; ir_loc loc; } fe_range;
/* A model's bounded dims (at most K_MAX_BDIMS, in the order its ABI takes them) and how to
 * lower it at other extents: lower(ctx, ext, arena, d) builds the model with dim i at extent
 * ext[i] as the bound's graph was built, quietly (no warnings), reporting errors to d; what it
 * builds besides the graph that the graph's nodes point at goes into arena (the front end may
 * keep its own memory instead: an ONNX import builds all in its graph's arena). NULL after an
 * error. */
typedef struct {
  ir_graph *(*lower)(void *ctx, const int64_t *ext, ir_arena *arena, ir_diag *d);
  void *ctx;
  ir_arena *keep;              /* the arena of the probes' lowerings: it must live as long as
                                  the bound's graph (a check's lowering gets a scratch one) */
  ir_loc model_loc;            /* where an error about the model as a whole points */
  int n;
  fe_range r[K_MAX_BDIMS];
} fe_ranges;
/* g, lowered at the ranges' upper bounds, with them recorded as its bounded dims (nbdims,
 * bdims), its probes lowered (ir.h) and every extent of the ranges checked to lower to the
 * bound's graph but for the sizes the bound and the probes predict, with the bound's weights'
 * values. g unchanged when there are no ranges; NULL (g freed) after reporting an error. */
ir_graph *fe_dims_check(ir_graph *g, const fe_ranges *s, ir_diag *d);

/* ---- parser internals shared by lexer.l and parser.y ---- */
typedef struct fe_parser {
  fe_file *file;
  ir_diag *diag;
  void *scanner;             /* flex's yyscan_t */
  int line, col;             /* position of the next byte */
  bool tok_at_bol;           /* the last token was the first on its line */
  int last_tok_line;         /* line of the last token returned */
  int last_tok_end;          /* the column just after it */
  int prev_end_line, prev_end_col;   /* the same for the token before it */
  char last_text[44];        /* the last token's first 40 bytes, for syntax errors */
  bool skipping;             /* after a syntax error: drop tokens to the next line */
  int skip_braces;           /* '{' dropped while skipping, whose '}' must be dropped too */
  int err_line, err_col;     /* where the last syntax error was reported */
  int lex_err_line;          /* the last line with a lexical error: no syntax errors there */
  int big_int_line, big_int_col;   /* the last integer literal too large to read (it reads as 1) */
  int def_errors;            /* the error count where the current def's body began */
  bool stop;                 /* the file is refused already (an expression too deep, too many
                                errors): the lexer ends the input, so nothing more is built */
  bool err_again;            /* the last error was at that same token: recovery made no progress */
  const char *block_kind, *block_name;   /* the model or def being read ("model", "m") */
  int block_stmts;           /* its statements so far */
  int syntax_items;          /* the file's syntax-tree items so far (fe_new) */
} fe_parser;

#endif
