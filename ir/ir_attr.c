/* ir_attr.c — attribute values from the source into an op's param struct, by the op's
 * schema (MXNet's dmlc::Parameter in C), and back out as source text for the printer. */
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *ir_atype_name(ir_atype t) {
  static const char *const names[] = {"int", "float", "bool", "ints", "string"};
  return names[t];
}

const ir_attr_def *ir_attr_find(const ir_attr_def *attrs, const char *name) {
  for (const ir_attr_def *a = attrs; a && a->name; a++)
    if (strcmp(a->name, name) == 0) return a;
  return NULL;
}

static void ir_attr_put_int(const ir_attr_def *a, void *param, int64_t v) {
  char *f = (char *)param + a->offset;
  if (a->size == sizeof(int32_t)) {
    int32_t x = (int32_t)v;
    memcpy(f, &x, sizeof x);
  } else {
    memcpy(f, &v, sizeof v);
  }
}

static void ir_attr_put_float(const ir_attr_def *a, void *param, double v) {
  char *f = (char *)param + a->offset;
  if (a->size == sizeof(float)) {
    float x = (float)v;
    memcpy(f, &x, sizeof x);
  } else {
    memcpy(f, &v, sizeof v);
  }
}

void ir_attr_defaults(const ir_attr_def *attrs, void *param) {
  for (const ir_attr_def *a = attrs; a && a->name; a++) {
    if (a->type == IR_AT_FLOAT) ir_attr_put_float(a, param, a->dflt);
    else if (a->type != IR_AT_INTS) ir_attr_put_int(a, param, (int64_t)a->dflt);
  }
}

static bool ir_aval_is_int(const ir_aval *v) {
  return v->kind == IR_AV_NUM && v->is_int && fabs(v->num) < 9.0e15;
}

/* An INTS field is a k_ints or a k_pads: the same layout, {n, v[]}, with room for as many
 * values as its size leaves. */
_Static_assert(offsetof(k_pads, n) == offsetof(k_ints, n) && offsetof(k_pads, v) == offsetof(k_ints, v),
               "k_pads extends k_ints");
static int ir_ints_room(const ir_attr_def *a) {
  return (int)((a->size - offsetof(k_ints, v)) / sizeof(int64_t));
}

static int ir_attr_set_ints(const ir_attr_def *a, void *param, const ir_aval *v, char *msg, size_t n) {
  k_pads t = {0};
  int room = ir_ints_room(a);
  if (ir_aval_is_int(v)) {
    t.n = 1;
    t.v[0] = (int64_t)v->num;
  } else if (v->kind == IR_AV_TUPLE && v->n <= room) {
    for (int i = 0; i < v->n; i++) {
      if (!ir_aval_is_int(&v->items[i]))
        return snprintf(msg, n, "attribute '%s' expects a tuple of ints; item %d is not an int", a->name, i + 1), 1;
      t.v[t.n++] = (int64_t)v->items[i].num;
    }
  } else if (v->kind == IR_AV_TUPLE) {
    return snprintf(msg, n, "attribute '%s' has %d items; at most %d are allowed", a->name, v->n, room), 1;
  } else {
    return snprintf(msg, n, "attribute '%s' expects an int or a tuple of ints", a->name), 1;
  }
  memcpy((char *)param + a->offset, &t, a->size);
  return 0;
}

static int ir_attr_set_enum(const ir_attr_def *a, void *param, const ir_aval *v, char *msg, size_t n) {
  int count = 0;
  while (a->choices[count]) count++;
  if (v->kind != IR_AV_STR)
    return snprintf(msg, n, "attribute '%s' expects a string (\"%s\"...)", a->name, a->choices[0]), 1;
  for (int i = 0; i < count; i++)
    if (strcmp(v->str, a->choices[i]) == 0) return ir_attr_put_int(a, param, i), 0;
  const char *s = ir_suggest(v->str, a->choices, count);
  /* The value is quoted up to 40 bytes, and w never passes n: a long string once wrote past
   * msg (found by tests/fuzz/fuzz_frontend). */
  int w = snprintf(msg, n, "attribute '%s' cannot be \"%.40s%s\"", a->name, v->str, strlen(v->str) > 40 ? "..." : "");
  if (w < 0 || (size_t)w >= n) return 1;
  if (s) return snprintf(msg + w, n - (size_t)w, "; did you mean \"%s\"?", s), 1;
  w += snprintf(msg + w, n - (size_t)w, "; it is one of");
  for (int i = 0; i < count && (size_t)w < n; i++) w += snprintf(msg + w, n - (size_t)w, " \"%s\"", a->choices[i]);
  return 1;
}

int ir_attr_set(const ir_attr_def *a, void *param, const ir_aval *v, char *msg, size_t n) {
  switch (a->type) {
  case IR_AT_INT:
    if (!ir_aval_is_int(v)) return snprintf(msg, n, "attribute '%s' expects an int", a->name), 1;
    if (a->size == sizeof(int32_t) && fabs(v->num) > 2147483647.0)
      return snprintf(msg, n, "attribute '%s' is out of range", a->name), 1;
    ir_attr_put_int(a, param, (int64_t)v->num);
    return 0;
  case IR_AT_FLOAT:
    if (v->kind != IR_AV_NUM) return snprintf(msg, n, "attribute '%s' expects a number", a->name), 1;
    if (!isfinite(v->num) || fabs(v->num) >= IR_F32_OVERFLOW) return snprintf(msg, n, "attribute '%s' is not a finite float", a->name), 1;
    ir_attr_put_float(a, param, v->num);
    return 0;
  case IR_AT_BOOL:
    if (v->kind == IR_AV_BOOL || (ir_aval_is_int(v) && (v->num == 0 || v->num == 1)))
      return ir_attr_put_int(a, param, v->num != 0), 0;
    return snprintf(msg, n, "attribute '%s' expects true or false", a->name), 1;
  case IR_AT_INTS:
    return ir_attr_set_ints(a, param, v, msg, n);
  case IR_AT_ENUM:
    return ir_attr_set_enum(a, param, v, msg, n);
  }
  return 1;
}

static int64_t ir_attr_get_int(const ir_attr_def *a, const void *param) {
  const char *f = (const char *)param + a->offset;
  if (a->size == sizeof(int32_t)) {
    int32_t x;
    memcpy(&x, f, sizeof x);
    return x;
  }
  int64_t x;
  memcpy(&x, f, sizeof x);
  return x;
}

/* The shortest decimal that reads back as the same float, so printing round-trips. */
void ir_print_float(FILE *out, double v) {
  char buf[64];
  for (int prec = 6; prec <= 9; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if ((float)strtod(buf, NULL) == (float)v) break;
  }
  if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
  fputs(buf, out);
}

int ir_attr_int_count(const ir_attr_def *a, const void *param) {
  if (a->type == IR_AT_INT) return 1;
  if (a->type != IR_AT_INTS) return 0;
  int32_t n;
  memcpy(&n, (const char *)param + a->offset + offsetof(k_ints, n), sizeof n);
  return n;
}

int64_t ir_attr_int_item(const ir_attr_def *a, const void *param, int i) {
  if (a->type == IR_AT_INT) return ir_attr_get_int(a, param);
  int64_t x;
  memcpy(&x, (const char *)param + a->offset + offsetof(k_ints, v) + sizeof x * (size_t)i, sizeof x);
  return x;
}

/* Item i of an int attribute: the number, or what the caller's hook writes for it. */
static void ir_attr_print_item(const ir_attr_def *a, const void *param, int i, FILE *out, ir_attr_item_fn *item,
                               void *ctx) {
  if (item) item(ctx, a, i, out);
  else fprintf(out, "%lld", (long long)ir_attr_int_item(a, param, i));
}

static void ir_attr_print_one(const ir_attr_def *a, const void *param, FILE *out, ir_attr_item_fn *item, void *ctx) {
  const char *f = (const char *)param + a->offset;
  if (a->type == IR_AT_FLOAT) {
    float x;
    memcpy(&x, f, sizeof x);
    ir_print_float(out, x);
  } else if (a->type == IR_AT_BOOL) {
    fputs(ir_attr_get_int(a, param) ? "true" : "false", out);
  } else if (a->type == IR_AT_ENUM) {
    fprintf(out, "\"%s\"", a->choices[ir_attr_get_int(a, param)]);
  } else if (a->type == IR_AT_INT) {
    ir_attr_print_item(a, param, 0, out, item, ctx);
  } else {
    int n = ir_attr_int_count(a, param);
    fputc('(', out);
    for (int i = 0; i < n; i++) {
      if (i) fputs(", ", out);
      ir_attr_print_item(a, param, i, out, item, ctx);
    }
    fputs(n == 1 ? ",)" : ")", out);
  }
}

void ir_attr_print_with(const ir_attr_def *attrs, const void *param, FILE *out, ir_attr_item_fn *item, void *ctx) {
  for (const ir_attr_def *a = attrs; a && a->name; a++) {
    fprintf(out, "%s%s=", a == attrs ? "" : ", ", a->name);
    ir_attr_print_one(a, param, out, item, ctx);
  }
}

void ir_attr_print(const ir_attr_def *attrs, const void *param, FILE *out) { ir_attr_print_with(attrs, param, out, NULL, NULL); }
