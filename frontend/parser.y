/* parser.y — the .kiln grammar (SPEC section 1) as a bison LALR(1) parser.
 *
 * How it works: the lexer hands over tokens with their line and column; the rules build the
 * AST of fe.h directly, prepending to lists and reversing each list once it is complete.
 * Expressions use one grammar for tensors and attributes (numbers, strings, booleans,
 * tuples, calls, arithmetic); lowering decides what each position accepts and says so.
 *
 * Error recovery is by line: the language has no statement separator, but a statement
 * nearly always sits on its own line. On a syntax error the lexer drops the rest of the
 * line (fe_lex_emit), the `error` rules of top-level items, def bodies and model items
 * swallow the broken statement, and parsing resumes at the next line, so every broken
 * statement in a file is reported once. The parser stack is capped (YYMAXDEPTH) so that
 * absurd nesting is an error, never a stack overflow further down the pipeline. */
%define api.pure full
%define api.prefix {fe_yy}
%define parse.error custom
%define parse.lac full   /* expected tokens from the real stack: "')' or ','", not only "')'" */
%locations
%parse-param {fe_parser *p}
%lex-param {void *scanner}

%code requires {
#include "fe.h"
}

%code {
#include <string.h>
#define scanner (p->scanner)
#define YYMAXDEPTH 3000
int fe_yylex(FE_YYSTYPE *lval, FE_YYLTYPE *lloc, void *scan);
static void fe_yyerror(FE_YYLTYPE *loc, fe_parser *p, const char *msg);
static ir_loc L(fe_parser *p, FE_YYLTYPE l) { return (ir_loc){p->file->path, l.first_line, l.first_column}; }
/* Every syntax-tree item comes from here, so that a file past FE_MAX_SYNTAX items stops
 * being read (p->stop: the lexer ends the input) instead of growing without bound. */
static void *fe_new(fe_parser *p, size_t n) {
  if (++p->syntax_items == FE_MAX_SYNTAX + 1) {
    ir_error(p->diag, (ir_loc){p->file->path, p->line, p->col},
             "the file holds more than %d syntax items (names, numbers, operators, calls, statements...), 6 for each "
             "of the %d nodes a model may have; reading stops here", FE_MAX_SYNTAX, FE_MAX_NODES);
    p->stop = true;
  }
  return ir_alloc(&p->file->arena, n);
}
/* The model or def whose statements fe_stmt_new counts. */
static void fe_block_open(fe_parser *p, const char *kind, const char *name) {
  p->block_kind = kind, p->block_name = name, p->block_stmts = 0;
}
static fe_expr *fe_expr_new(fe_parser *p, fe_expr_kind k, FE_YYLTYPE l) {
  fe_expr *e = fe_new(p, sizeof *e);
  e->kind = k;
  e->loc = L(p, l);
  return e;
}
/* Lowering recurses on the AST. Parentheses and calls nest it only as deep as the parser
 * stack (YYMAXDEPTH), but left-associative chains (x + x + ... + x) nest it without growing
 * the stack, so every expression records its depth and one deeper than FE_MAX_DEPTH is an
 * error (reported once, where the limit is crossed). */
#define FE_MAX_DEPTH 1000
static fe_expr *fe_deepen(fe_parser *p, fe_expr *e) {
  int d = 0;
  if (e->l && e->l->depth > d) d = e->l->depth;
  if (e->r && e->r->depth > d) d = e->r->depth;
  for (const fe_arg *a = e->args; a; a = a->next)
    if (a->value->depth > d) d = a->value->depth;
  e->depth = d + 1;
  if (e->depth == FE_MAX_DEPTH + 1) {
    ir_error(p->diag, e->loc, "expression is nested more than %d levels deep; split it over several statements", FE_MAX_DEPTH);
    p->stop = true;
  }
  return e;
}
static fe_expr *fe_binop(fe_parser *p, char op, fe_expr *a, fe_expr *b, FE_YYLTYPE l) {
  fe_expr *e = fe_expr_new(p, FE_BINOP, l);
  e->op = op, e->l = a, e->r = b;
  return fe_deepen(p, e);
}
static fe_arg *fe_arg_new(fe_parser *p, const char *key, fe_expr *v, FE_YYLTYPE l, fe_arg *next) {
  fe_arg *a = fe_new(p, sizeof *a);
  a->key = key, a->value = v, a->loc = L(p, l), a->next = next;
  return a;
}
static fe_name *fe_name_new(fe_parser *p, const char *s, FE_YYLTYPE l, fe_name *next) {
  fe_name *n = fe_new(p, sizeof *n);
  n->name = s, n->loc = L(p, l), n->next = next;
  return n;
}
/* A model or def of more than FE_MAX_NODES statements is refused as soon as it has one more
 * (most statements make a node, and lowering makes at most FE_MAX_NODES), and reading stops. */
static fe_stmt *fe_stmt_new(fe_parser *p, fe_stmt_kind k, FE_YYLTYPE l) {
  if (++p->block_stmts == FE_MAX_NODES + 1 && !p->stop) {
    ir_error(p->diag, L(p, l), "%s '%s' has more than %d statements; lowering one model creates at most %d nodes "
             "(FE_MAX_NODES); reading stops here", p->block_kind, p->block_name, FE_MAX_NODES, FE_MAX_NODES);
    p->stop = true;
  }
  fe_stmt *s = fe_new(p, sizeof *s);
  s->kind = k, s->loc = L(p, l);
  return s;
}
static void fe_dim_new(fe_parser *p, const char *name, FE_YYLTYPE l, double lo, double hi) {
  fe_dim *d = fe_new(p, sizeof *d);
  d->name = name, d->lo = (int64_t)lo, d->value = (int64_t)hi, d->loc = L(p, l), d->next = p->file->dims;
  p->file->dims = d;
}
/* Lists are built backwards (O(1) per item) and turned around once complete. */
#define FE_REVERSE(T, fn) static T *fn(T *h) { T *r = NULL; while (h) { T *n = h->next; h->next = r; r = h; h = n; } return r; }
FE_REVERSE(fe_arg, fe_rev_args)
FE_REVERSE(fe_name, fe_rev_names)
FE_REVERSE(fe_stmt, fe_rev_stmts)
FE_REVERSE(fe_dparam, fe_rev_dparams)
FE_REVERSE(fe_def, fe_rev_defs)
FE_REVERSE(fe_model, fe_rev_models)
FE_REVERSE(fe_dim, fe_rev_dims)
/* After an `error` rule: keep the lookahead if it starts a line (a fresh statement), drop
 * it otherwise, and let the lexer drop the rest of its line. A lookahead that was kept and
 * failed again at once ('model' inside a model, a stray '}' at top level, the end of file
 * inside a block) is dropped instead, or at the end of file ends the parse; otherwise
 * recovery would loop on it forever. */
#define FE_RECOVER() do { \
    if (p->stop || (p->err_again && yychar == FE_YYEOF)) YYABORT; \
    if (!p->err_again && (p->tok_at_bol || yychar == '}' || yychar == FE_YYEOF)) p->skipping = false; \
    else yyclearin; \
    p->err_again = false; \
    yyerrok; \
  } while (0)
}

%union {
  double num;
  const char *str;
  fe_expr *expr;
  fe_arg *arg;
  fe_name *name;
  fe_stmt *stmt;
  fe_dparam *dparam;
  fe_ttype ttype;
}

%token T_DIM "'dim'" T_DEF "'def'" T_RETURN "'return'" T_MODEL "'model'" T_INPUT "'input'"
%token T_PARAM "'param'" T_CONST "'const'" T_OUTPUT "'output'" T_TRAIN "'train'" T_WITH "'with'"
%token T_SCHEDULE "'schedule'" T_CLIP_NORM "'clip_norm'" T_WD_EXCLUDE "'wd_exclude'"
%token T_TRUE "'true'" T_FALSE "'false'" T_POW "'**'" T_DOTDOT "'..'"
%token <str> T_NAME "name" T_STRING "string"
%token <num> T_INT "integer" T_FLOAT "number"

%type <expr> expr primary call
%type <arg> args args_opt arg expr_list tuple_rest dims dims_opt rets index_list
%type <expr> index bound
%type <name> name_list wdx_opt
%type <stmt> assign decl items body
%type <dparam> dparam dparams dparams_opt
%type <ttype> ttype
%type <expr> param_init sched_opt clip_opt

%left '+' '-'
%left '*' '/' '@'
%precedence UMINUS
%right T_POW

%%
file: %empty
    | file top
    ;

top: dim_decl
   | def
   | model
   | error                           { FE_RECOVER(); }
   ;

dim_decl: T_DIM T_NAME '=' T_INT       { fe_dim_new(p, $2, @2, $4, $4); }
    | T_DIM T_NAME '=' T_INT T_DOTDOT T_INT { fe_dim_new(p, $2, @2, $4, $6); }   /* bounded: fe_check.c checks the range */
    | T_DIM T_NAME '=' '-' T_INT dim_hi {   /* said as what it is, not as a syntax error; a literal too
                                        large to read is the lexer's error alone */
      if (p->big_int_line != @5.first_line || p->big_int_col != @5.first_column)
        ir_error(p->diag, L(p, @2), "dim '%s' must be positive (got -%.0f)", $2, $5);
    }
    ;

dim_hi: %empty
    | T_DOTDOT T_INT
    ;

def: T_DEF T_NAME '(' dparams_opt ')' def_open body '}' {
      if (p->diag->errors == p->def_errors)   /* not after an error in the body: it may have eaten the return */
        ir_error(p->diag, L(p, @8), "def '%s' has no 'return' (a def ends with 'return' and its values)", $2);
    }
    | T_DEF T_NAME '(' dparams_opt ')' def_open body T_RETURN rets '}' {
      fe_def *d = fe_new(p, sizeof *d);
      d->name = $2, d->params = fe_rev_dparams($4), d->body = fe_rev_stmts($7);
      d->rets = fe_rev_args($9), d->loc = L(p, @2), d->next = p->file->defs;
      p->file->defs = d;
    }
    ;

def_open: '{'                        { p->def_errors = p->diag->errors; fe_block_open(p, "def", $<str>-3); }  /* -3: the def's name */
    ;

rets: expr                           { $$ = fe_arg_new(p, NULL, $1, @1, NULL); }
    | rets ',' expr                  { $$ = fe_arg_new(p, NULL, $3, @3, $1); }
    ;

dparams_opt: %empty                  { $$ = NULL; }
    | dparams
    ;

dparams: dparam
    | dparams ',' dparam             { $3->next = $1; $$ = $3; }
    ;

dparam: T_NAME                       { $$ = fe_new(p, sizeof(fe_dparam)); $$->name = $1; $$->loc = L(p, @1); }
    | T_NAME ':' T_NAME              { $$ = fe_new(p, sizeof(fe_dparam)); $$->name = $1; $$->atype = $3; $$->loc = L(p, @1); }
    | T_NAME ':' T_NAME '=' expr     { $$ = fe_new(p, sizeof(fe_dparam)); $$->name = $1; $$->atype = $3; $$->dflt = $5; $$->loc = L(p, @1); }
    ;

body: %empty                         { $$ = NULL; }
    | body assign                    { $2->next = $1; $$ = $2; }
    | body error                     { FE_RECOVER(); $$ = $1; }
    ;

model: T_MODEL T_NAME '{' { fe_block_open(p, "model", $2); } items '}' {
      fe_model *m = fe_new(p, sizeof *m);
      m->name = $2, m->items = fe_rev_stmts($5), m->loc = L(p, @2), m->next = p->file->models;
      p->file->models = m;
    }
    ;

items: %empty                        { $$ = NULL; }
    | items assign                   { $2->next = $1; $$ = $2; }
    | items decl                     { $2->next = $1; $$ = $2; }
    | items error                    { FE_RECOVER(); $$ = $1; }
    ;

decl: T_INPUT T_NAME ':' ttype       { $$ = fe_stmt_new(p, FE_S_INPUT, @2); $$->names = fe_name_new(p, $2, @2, NULL); $$->type = $4; $$->has_type = true; }
    | T_PARAM T_NAME param_init      { $$ = fe_stmt_new(p, FE_S_PARAM, @2); $$->names = fe_name_new(p, $2, @2, NULL); $$->expr = $3; }
    | T_PARAM T_NAME ':' ttype param_init {
                                       $$ = fe_stmt_new(p, FE_S_PARAM, @2); $$->names = fe_name_new(p, $2, @2, NULL);
                                       $$->type = $4; $$->has_type = true; $$->expr = $5; }
    | T_CONST T_NAME ':' ttype param_init {
                                       $$ = fe_stmt_new(p, FE_S_CONST, @2); $$->names = fe_name_new(p, $2, @2, NULL);
                                       $$->type = $4; $$->has_type = true; $$->expr = $5; }
    | T_CONST T_NAME param_init      { $$ = fe_stmt_new(p, FE_S_CONST, @2); $$->names = fe_name_new(p, $2, @2, NULL); $$->expr = $3; }
    | T_OUTPUT name_list             { $$ = fe_stmt_new(p, FE_S_OUTPUT, @1); $$->names = fe_rev_names($2); }
    | T_TRAIN T_NAME T_WITH call sched_opt clip_opt wdx_opt {
                                       $$ = fe_stmt_new(p, FE_S_TRAIN, @2); $$->names = fe_name_new(p, $2, @2, NULL);
                                       $$->expr = $4; $$->sched = $5; $$->clip = $6; $$->wdx = $7; }
    ;

sched_opt: %empty                    { $$ = NULL; }
    | T_SCHEDULE call                { $$ = $2; }
    ;

clip_opt: %empty                     { $$ = NULL; }
    | T_CLIP_NORM '=' expr           { $$ = $3; }
    ;

wdx_opt: %empty                      { $$ = NULL; }
    | T_WD_EXCLUDE '=' name_list     { $$ = fe_rev_names($3); }
    ;

param_init: %empty                   { $$ = NULL; }
    | '=' call                       { $$ = $2; }
    ;

assign: name_list '=' expr           { $$ = fe_stmt_new(p, FE_S_ASSIGN, @1); $$->names = fe_rev_names($1); $$->expr = $3; }
    ;

name_list: T_NAME                    { $$ = fe_name_new(p, $1, @1, NULL); }
    | name_list ',' T_NAME           { $$ = fe_name_new(p, $3, @3, $1); }
    ;

ttype: T_NAME '[' dims_opt ']'       { $$.dtype = $1; $$.dims = fe_rev_args($3); $$.loc = L(p, @1); }
    ;

dims_opt: %empty                     { $$ = NULL; }
    | dims
    ;

dims: primary                        { $$ = fe_arg_new(p, NULL, $1, @1, NULL); }
    | dims ',' primary               { $$ = fe_arg_new(p, NULL, $3, @3, $1); }
    ;

expr: expr '+' expr                  { $$ = fe_binop(p, '+', $1, $3, @2); }
    | expr '-' expr                  { $$ = fe_binop(p, '-', $1, $3, @2); }
    | expr '*' expr                  { $$ = fe_binop(p, '*', $1, $3, @2); }
    | expr '/' expr                  { $$ = fe_binop(p, '/', $1, $3, @2); }
    | expr '@' expr                  { $$ = fe_binop(p, '@', $1, $3, @2); }
    | expr T_POW expr                { $$ = fe_binop(p, '^', $1, $3, @2); }
    | '-' expr %prec UMINUS          { $$ = fe_expr_new(p, FE_NEG, @1); $$->l = $2; fe_deepen(p, $$); }
    | primary
    ;

primary: T_INT                       { $$ = fe_expr_new(p, FE_NUM, @1); $$->num = $1; $$->is_int = true; }
    | T_FLOAT                        { $$ = fe_expr_new(p, FE_NUM, @1); $$->num = $1; }
    | T_STRING                       { $$ = fe_expr_new(p, FE_STR, @1); $$->str = $1; }
    | T_TRUE                         { $$ = fe_expr_new(p, FE_BOOL, @1); $$->num = 1; }
    | T_FALSE                        { $$ = fe_expr_new(p, FE_BOOL, @1); $$->num = 0; }
    | T_NAME                         { $$ = fe_expr_new(p, FE_NAME, @1); $$->str = $1; }
    | call
    | primary '[' index_list ']'     { $$ = fe_expr_new(p, FE_INDEX, @2); $$->l = $1; $$->args = fe_rev_args($3); fe_deepen(p, $$); }
    | '(' expr ')'                   { $$ = $2; }
    | '(' ')'                        { $$ = fe_expr_new(p, FE_TUPLE, @1); }
    | '(' expr ',' ')'               { $$ = fe_expr_new(p, FE_TUPLE, @1); $$->args = fe_arg_new(p, NULL, $2, @2, NULL); fe_deepen(p, $$); }
    | '(' expr ',' tuple_rest ')'    { $$ = fe_expr_new(p, FE_TUPLE, @1); $$->args = fe_arg_new(p, NULL, $2, @2, fe_rev_args($4)); fe_deepen(p, $$); }
    ;

/* x[i, a:b, ::s]: an index or a slice an axis, from the first */
index_list: index                    { $$ = fe_arg_new(p, NULL, $1, @1, NULL); }
    | index_list ',' index           { $$ = fe_arg_new(p, NULL, $3, @3, $1); }
    ;

index: expr
    | bound ':' bound                { $$ = fe_expr_new(p, FE_SLICE, @2); $$->l = $1; $$->r = $3; fe_deepen(p, $$); }
    | bound ':' bound ':' bound      { $$ = fe_expr_new(p, FE_SLICE, @2); $$->l = $1; $$->r = $3;
                                       $$->args = $5 ? fe_arg_new(p, NULL, $5, @5, NULL) : NULL; fe_deepen(p, $$); }
    ;

bound: %empty                        { $$ = NULL; }
    | expr
    ;

tuple_rest: expr_list
    | expr_list ','
    ;

expr_list: expr                      { $$ = fe_arg_new(p, NULL, $1, @1, NULL); }
    | expr_list ',' expr             { $$ = fe_arg_new(p, NULL, $3, @3, $1); }
    ;

call: T_NAME '(' args_opt ')'        { $$ = fe_expr_new(p, FE_CALL, @1); $$->str = $1; $$->args = fe_rev_args($3); fe_deepen(p, $$); }
    ;

args_opt: %empty                     { $$ = NULL; }
    | args
    ;

args: arg
    | args ',' arg                   { $3->next = $1; $$ = $3; }
    ;

arg: expr                            { $$ = fe_arg_new(p, NULL, $1, @1, NULL); }
    | T_NAME '=' expr                { $$ = fe_arg_new(p, $1, $3, @1, NULL); }
    | T_DIM '=' expr                 { $$ = fe_arg_new(p, "dim", $3, @1, NULL); }  /* concat(..., dim=0) */
    ;
%%

static bool fe_starts_expr(yysymbol_kind_t k) {
  return k == YYSYMBOL_T_NAME || k == YYSYMBOL_T_INT || k == YYSYMBOL_T_FLOAT || k == YYSYMBOL_T_STRING ||
         k == YYSYMBOL_T_TRUE || k == YYSYMBOL_T_FALSE || strcmp(yysymbol_name(k), "'('") == 0 ||
         strcmp(yysymbol_name(k), "'-'") == 0;
}

/* The operators that continue an expression. When all six are expected the value just read
 * could go on, which a message need not say: "expected ')' or ','" is the useful part. */
static bool fe_continues_expr(yysymbol_kind_t k) {
  const char *s = yysymbol_name(k);
  return k == YYSYMBOL_T_POW || !strcmp(s, "'+'") || !strcmp(s, "'-'") || !strcmp(s, "'*'") || !strcmp(s, "'/'") ||
         !strcmp(s, "'@'");
}

/* Keywords cannot be names; say where each one belongs. */
static const char *fe_keyword_hint(yysymbol_kind_t k) {
  switch (k) {
  case YYSYMBOL_T_DIM: case YYSYMBOL_T_DEF: case YYSYMBOL_T_MODEL:
    return " (a keyword: 'dim', 'def' and 'model' begin items at the top level of a file)";
  case YYSYMBOL_T_RETURN: return " (a keyword: 'return' ends a def)";
  case YYSYMBOL_T_INPUT: case YYSYMBOL_T_PARAM: case YYSYMBOL_T_CONST: case YYSYMBOL_T_OUTPUT: case YYSYMBOL_T_TRAIN:
    return " (a keyword: 'input', 'param', 'const', 'output' and 'train' declare things in a model)";
  case YYSYMBOL_T_WITH: return " (a keyword: 'with' follows 'train NAME')";
  case YYSYMBOL_T_SCHEDULE: return " (a keyword: 'schedule' follows the optimizer of 'train NAME with')";
  case YYSYMBOL_T_CLIP_NORM: return " (a keyword: 'clip_norm=X' ends a train statement)";
  case YYSYMBOL_T_WD_EXCLUDE: return " (a keyword: 'wd_exclude=bias,norm' ends a train statement)";
  default: return "";
  }
}

/* A closer or '=' missing at the end of a line shows as an error at the next line's first
 * token; report it at the end of the line instead: "expected ')' at the end of the line". */
static bool fe_missing_at_eol(fe_parser *p, yysymbol_kind_t got, const char *const *items, int ni) {
  if (got == YYSYMBOL_YYEOF || !p->tok_at_bol || p->prev_end_line <= 0 || ni == 0 || ni > 3) return false;
  for (int i = 0; i < ni; i++)
    if (strlen(items[i]) != 3 || !strchr(")],=", items[i][1])) return false;
  char what[64] = "";
  for (int i = 0; i < ni; i++) strcat(strcat(what, i == 0 ? "" : i == ni - 1 ? " or " : ", "), items[i]);
  ir_error(p->diag, (ir_loc){p->file->path, p->prev_end_line, p->prev_end_col},
           "expected %s at the end of the line (line %d starts with '%.40s')", what, p->last_tok_line, p->last_text);
  p->skipping = true;
  return true;
}

/* "unexpected name 'foo'; expected ')' or ','" — bison's verbose message, with the text.
 * Where any expression may come, its many first tokens read as "an expression"; a list
 * longer than five items is left out. A second error at the very token of the previous one
 * is not reported (recovery then drops that token). */
static int yyreport_syntax_error(const yypcontext_t *ctx, fe_parser *p) {
  yysymbol_kind_t expected[YYNTOKENS];
  const char *items[YYNTOKENS + 1];
  int n = yypcontext_expected_tokens(ctx, expected, YYNTOKENS), ni = 0, firsts = 0;
  yysymbol_kind_t got = yypcontext_token(ctx);
  const FE_YYLTYPE *loc = yypcontext_location(ctx);
  if (p->stop) return 0;             /* the end of input the lexer made up: said already */
  if (loc->first_line == p->err_line && loc->first_column == p->err_col) {
    p->err_again = p->skipping = true;
    return 0;
  }
  p->err_line = loc->first_line, p->err_col = loc->first_column;
  if (p->lex_err_line > 0 && (loc->first_line == p->lex_err_line || (p->tok_at_bol && p->prev_end_line == p->lex_err_line && got != YYSYMBOL_YYEOF))) {
    p->skipping = true;              /* the lexer has reported what broke this line */
    return 0;
  }
  int ops = 0;
  for (int i = 0; i < n; i++) firsts += fe_starts_expr(expected[i]), ops += fe_continues_expr(expected[i]);
  bool expr = firsts == 8;           /* every first token of an expression is expected */
  bool more = ops == 6 && !expr;     /* the expression read so far may continue */
  for (int i = 0; i < n; i++) {          /* 'dim' here is the keyword argument dim= */
    if (expr && (fe_starts_expr(expected[i]) || expected[i] == YYSYMBOL_T_DIM)) continue;
    if (more && (fe_continues_expr(expected[i]) || !strcmp(yysymbol_name(expected[i]), "'('") ||
                 !strcmp(yysymbol_name(expected[i]), "'['") ||
                 !strcmp(yysymbol_name(expected[i]), "'='")))
      continue;                          /* a name just read could also become a call or a keyword */
    items[ni++] = yysymbol_name(expected[i]);
  }
  if (expr) items[ni++] = "an expression";
  char msg[512];
  if (fe_missing_at_eol(p, got, items, ni)) return 0;
  int w = snprintf(msg, sizeof msg, "unexpected %s", yysymbol_name(got));
  if (got == YYSYMBOL_T_NAME || got == YYSYMBOL_T_STRING || got == YYSYMBOL_T_INT || got == YYSYMBOL_T_FLOAT)
    w += snprintf(msg + w, sizeof msg - (size_t)w, " '%.40s'", p->last_text);
  bool brace = false;                /* the end of file inside a block: say what closes it */
  for (int i = 0; i < n; i++) brace |= got == YYSYMBOL_YYEOF && strcmp(yysymbol_name(expected[i]), "'}'") == 0;
  if (brace) items[0] = "'}'", ni = 1;
  for (int i = 0; i < ni && ni <= 5 && w < (int)sizeof msg; i++)
    w += snprintf(msg + w, sizeof msg - (size_t)w, "%s%s", i == 0 ? "; expected " : i == ni - 1 ? " or " : ", ", items[i]);
  if (w < (int)sizeof msg) snprintf(msg + w, sizeof msg - (size_t)w, "%s", fe_keyword_hint(got));
  fe_yyerror((FE_YYLTYPE *)loc, p, msg);
  return 0;
}

static void fe_yyerror(FE_YYLTYPE *loc, fe_parser *p, const char *msg) {
  if (strcmp(msg, "memory exhausted") == 0)
    msg = "nesting is too deep (parentheses or calls nested about a thousand levels)";
  ir_error(p->diag, L(p, *loc), "%s", msg);
  p->skipping = true;
}
