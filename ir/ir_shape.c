/* ir_shape.c — shapes and dtypes as users read them, and NumPy broadcasting. */
#include "ir.h"

const char *ir_dtype_name(k_dtype t) { return t == K_I32 ? "i32" : "f32"; }

int ir_shape_str(const k_shape *s, char *buf, size_t n) {
  int w = snprintf(buf, n, "[");
  for (int i = 0; i < s->rank && (size_t)w < n; i++)
    w += snprintf(buf + w, n - (size_t)w, i ? ", %lld" : "%lld", (long long)s->d[i]);
  if ((size_t)w < n) w += snprintf(buf + w, n - (size_t)w, "]");
  return w;
}

int ir_type_str(k_dtype t, const k_shape *s, char *buf, size_t n) {
  int w = snprintf(buf, n, "%s", ir_dtype_name(t));
  return w + ir_shape_str(s, buf + w, n - (size_t)w);
}

bool ir_shape_eq(const k_shape *a, const k_shape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->d[i] != b->d[i]) return false;
  return true;
}

bool ir_shape_broadcast(const k_shape *a, const k_shape *b, k_shape *out) {
  k_shape r = {0};
  r.rank = a->rank > b->rank ? a->rank : b->rank;
  for (int i = 0; i < r.rank; i++) {
    int ia = a->rank - r.rank + i, ib = b->rank - r.rank + i;
    int64_t da = ia >= 0 ? a->d[ia] : 1, db = ib >= 0 ? b->d[ib] : 1;
    if (da != db && da != 1 && db != 1) return false;
    r.d[i] = da == 1 ? db : da;
  }
  *out = r;
  return true;
}

int64_t ir_shape_numel_sat(const k_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) n = ir_sat_mul(n, s->d[i]);
  return n;
}

int ir_shape_check(const k_shape *s, char *why, size_t n) {
  for (int i = 0; i < s->rank; i++)
    if (s->d[i] > IR_MAX_DIM) return snprintf(why, n, "dimension %lld is larger than 2^40", (long long)s->d[i]), 1;
  if (ir_shape_numel_sat(s) <= IR_MAX_NUMEL) return 0;
  double numel = 1;                  /* for the message: a saturated count would say too little */
  for (int i = 0; i < s->rank; i++) numel *= (double)s->d[i];
  return snprintf(why, n, "%.3g elements, more than 2^40", numel), 1;
}
