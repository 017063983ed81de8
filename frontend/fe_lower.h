/* fe_lower.h — what the lowering files share: scopes, bindings and the statement context.
 * Private to the front end (fe_lower.c, fe_eval.c, fe_call.c). */
#ifndef KILN_FE_LOWER_H
#define KILN_FE_LOWER_H

#include "fe.h"

/* fe_map.c — string-keyed hash table in arena memory; values are never NULL */
typedef struct { const char **keys; void **vals; int cap, len; } fe_map;
void *fe_map_get(const fe_map *m, const char *key);          /* NULL if absent */
void fe_map_put(fe_map *m, ir_arena *a, const char *key, void *val);  /* keeps an existing value */
void fe_map_set(fe_map *m, ir_arena *a, const char *key, void *val);  /* replaces it */
void fe_map_reserve(fe_map *m, ir_arena *a, int n);   /* room for n keys without growing */

/* A file's dims and defs by name; the first declaration of a name is the one found (fe_check.c
 * reports the others). */
typedef struct fe_file_index { fe_map dims, defs; } fe_file_index;

/* The file's bounded dims in one fe_lower_model call (its declarations with the -D given):
 * every dim whose range holds more than one extent, in declaration order (fe_bound.c). */
typedef struct {
  const fe_dim *dim;
  int64_t lo, hi;
  bool by_define;              /* the range is -D's, not the declaration's */
} fe_bound;
typedef struct {
  int n;
  fe_bound *b;
  fe_map slot;                 /* name -> index in b + 1 */
} fe_bounds;

/* What fe_lower_model was asked; each lowering it makes (the bound's, the probes', the
 * checks') starts from it. */
typedef struct {
  fe_file *file;
  fe_model *model;
  const fe_define *defines;
  int ndefines;
  fe_bounds bounds;
} fe_job;

/* How one lowering of a fe_job differs from the bound's (fe_bound.c lowers the model at
 * other extents too). */
typedef struct {
  const int64_t *at;           /* the extent of each bounded dim (one per fe_bounds entry); NULL: the bounds */
  bool *used;                  /* NULL, or set for each bounded dim the lowering reads */
  bool quiet;                  /* a probe or check lowering: no warnings */
  ir_arena *arena;             /* what the lowering builds besides its graph (scopes, maps, def
                                  expansions, which the graph's nodes point at): the file's, or
                                  one freed with a graph checked and dropped at once */
} fe_at;

typedef enum { FE_B_TENSOR, FE_B_ATTR } fe_bkind;
typedef struct fe_binding {
  const char *name;
  fe_bkind kind;
  int tensor;                  /* TENSOR */
  ir_aval val;                 /* ATTR: a def's attribute parameter */
  ir_loc loc;
  struct fe_binding *next;
} fe_binding;

typedef struct fe_scope {
  fe_binding *vars;            /* newest first, for suggestions */
  fe_map index;                /* name -> binding */
  const char *prefix;          /* call-site prefix inside a def ("b1"); "" in the model */
  const fe_def *def;           /* NULL in the model */
  const ir_expansion *expansion;   /* the def calls that led here (NULL in the model): the
                                  nodes built in this scope carry it for later errors */
  struct fe_scope *caller;
  int depth;
} fe_scope;

typedef struct {               /* the statement being lowered */
  fe_name *targets;
  const char *pfx;             /* parameter prefix: "b1.c", or "b1" in a def's return */
  ir_loc creator;              /* the first call of the statement that created parameters */
  const char *creator_what;
  bool created;
} fe_stmt_ctx;

typedef struct {
  fe_file *file;
  ir_graph *g;
  ir_diag *d;
  const fe_define *defines;
  int ndefines;
  const fe_bounds *bounds;     /* NULL: no dim is bounded (fe_check.c) */
  fe_at x;                     /* the extents it lowers at, and where its memory comes from */
  int nconst;
  int depth;                   /* fe_tensor recursion, bounded */
  fe_map tensors;              /* tensor name -> index + 1, for the first `indexed` tensors */
  int indexed;
  fe_map suffix;               /* fe_unique: base name -> the last suffix it handed out */
  fe_map outputs;              /* names of the tensors already declared outputs */
  int nparams, params_counted; /* PARAM and AUX tensors among the first params_counted */
  int ncalls;                  /* def calls inlined */
  bool too_big;                /* a budget of fe_too_big is spent: lowering stops building */
} fe_lower;

/* fe_eval.c — compile-time values: dims, attribute arithmetic, type checks of def params */
/* The value of dim `name` in this lowering (a bounded dim's at L->x.at, which counts as read);
 * false when no dim has that name. fe_is_dim only says whether one has. */
bool fe_dim_value(fe_lower *L, const char *name, int64_t *out);
bool fe_is_dim(const fe_lower *L, const char *name);
int fe_eval_attr(fe_lower *L, const fe_scope *s, const fe_expr *e, ir_aval *out);
int fe_check_atype(fe_lower *L, const char *atype, const ir_aval *v, const char *what, ir_loc loc);
int fe_check_atype_name(fe_lower *L, const char *atype, ir_loc loc);
const fe_def *fe_find_def(fe_file *f, const char *name);
void fe_error_unknown_name(fe_lower *L, const fe_scope *s, const char *name, ir_loc loc);

/* fe_lower.c */
/* Lowering one model creates at most FE_MAX_NODES nodes and as many constants, and inlines
 * at most FE_MAX_CALLS def calls (defs that call each other several times grow exponentially
 * with their depth; a tree of calls has about twice as many calls as leaves). Checked before each expression and def call, each of which builds at most one of
 * them itself, and once at the end: past a budget the model is refused once, where it was
 * crossed, naming the def calls that led there, and 1 is returned from then on, so building
 * stops. */
#define FE_MAX_CALLS (4 * FE_MAX_NODES)
int fe_too_big(fe_lower *L, const fe_scope *s, const fe_def *callee, ir_loc loc);   /* callee: a def about to be inlined */
fe_binding *fe_lookup(const fe_scope *s, const char *name);
bool fe_bind(fe_lower *L, fe_scope *s, const char *name, fe_bkind kind, int tensor, const ir_aval *v, ir_loc loc);
int fe_const(fe_lower *L, double value, ir_loc loc);
const char *fe_join(fe_lower *L, const char *a, const char *b);
int fe_find_tensor(fe_lower *L, const char *name);          /* ir_graph_find_tensor, hashed */
const char *fe_unique(fe_lower *L, const char *base);
/* Evaluates e in tensor position; top = the statement's root (its node takes the target's
 * name). Returns a tensor index or -1 after reporting. */
int fe_tensor(fe_lower *L, fe_scope *s, fe_stmt_ctx *st, const fe_expr *e, const char *node_name);
void fe_lower_stmts(fe_lower *L, fe_scope *s, const fe_stmt *body);
/* One lowering of j's model, as x says; NULL after reporting errors to d. */
ir_graph *fe_lower_at(const fe_job *j, fe_at x, ir_diag *d);

/* fe_bound.c — bounded dims */
/* The dims j's file and defines bound, into j->bounds. */
void fe_bounds_init(fe_job *j);
/* g, lowered at the bounds, with the bounded dims it read (used) recorded, its probes lowered
 * and every extent of the ranges checked (fe_dims_check); g unchanged when it read none. NULL
 * (g freed) after reporting an error. */
ir_graph *fe_bound_graph(fe_job *j, ir_graph *g, const bool *used, ir_diag *d);

/* fe_call.c — op calls (parameters auto-created) and def inlining */
int fe_call_op(fe_lower *L, fe_scope *s, fe_stmt_ctx *st, const fe_expr *e, int op, const char *node_name);
/* Inlines def at a call site: parameters inside are prefixed by `callsite`; the return
 * values' nodes are named ret_name (made unique), or by st's targets when ret_name is NULL.
 * Returns the number of values or -1. */
int fe_call_def(fe_lower *L, fe_scope *s, fe_stmt_ctx *st, const fe_expr *e, const fe_def *def,
                const char *callsite, const char *ret_name, int *out, int max);

#endif
