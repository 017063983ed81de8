/* kiln_data.h — kiln train's examples: named arrays whose first axis runs over examples,
 * each feeding the model input of its name. They come from .npy files (memory-mapped: only
 * the rows a batch takes are read), .npz archives (stored entries mapped in place, deflated
 * ones inflated once through zlib), or kiln_data_column_own for data read some other way (the
 * MNIST-layout IDX files kiln_idx.c reads). */
#ifndef KILN_DATA_H
#define KILN_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime.h"

enum { KILN_MAX_COLUMNS = 32 };

typedef struct {
  char name[128];               /* the model input it feeds */
  char source[4200];            /* "PATH" or "PATH:KEY", for messages */
  rt_npy_head head;             /* dtype as read, shape [examples, ...], stored 8 bytes wide */
  const unsigned char *data;    /* the first example's stored bytes */
  int64_t row_elems;            /* values per example */
  size_t row_bytes;             /* stored bytes per example */
  void *map;                    /* a mapped file (map_len bytes), unmapped by kiln_data_free */
  size_t map_len;
  void *owned;                  /* memory the column owns (inflated entries, IDX data) */
} kiln_column;

typedef struct {
  kiln_column col[KILN_MAX_COLUMNS];
  int n;
  long rows;                    /* examples: the first axis every column shares */
} kiln_data;

/* "NAME=X.npy,NAME=Y.npz:KEY,Z.npz" (a bare .npz gives each of its arrays under its own name;
 * NAME=Y.npz takes its entry NAME): every array opened, its header checked, 8-byte values
 * scanned once for ones that do not fit 4 bytes, and every column's length compared. 0, or 1
 * after a message (kiln_train_error; `flag` names the option in it). */
int kiln_data_open(const char *spec, const char *flag, kiln_data *d);
/* A column over memory the caller hands over (freed with free()): rows examples of `shape`
 * (the first axis is rows) in dtype t, 4-byte values. 0, or 1 when d is full. */
int kiln_data_column_own(kiln_data *d, const char *name, const char *source, k_dtype t, const k_shape *shape,
                         void *data);
void kiln_data_free(kiln_data *d);
int kiln_data_find(const kiln_data *d, const char *name);     /* the column's index, or -1 */
/* Examples idx[0..k) of column c, in that order, into dst as the column's 4-byte dtype. */
void kiln_data_gather(const kiln_column *c, const long *idx, long k, void *dst);

/* "kiln train: " and the message on stderr, or the message to the sink set (the REPL's
 * :load keeps it as its error); returns 1 (kiln_train.c). */
int kiln_train_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void kiln_train_error_sink(void (*sink)(const char *msg));   /* NULL: stderr again */

/* ---- kiln_idx.c: an MNIST-layout IDX data set ---- */
/* One split: n images of rows*cols floats each (standardised) and their labels. */
typedef struct {
  float *x;
  int32_t *y;
  long n;
} kiln_idx_split;

typedef struct {
  kiln_idx_split train, test;
  int rows, cols;
} kiln_idx_set;

/* DIR's train-* and t10k-* files (plain or .gz), the first `limit` of each (0: all); 0, or 1
 * after a message. kiln_idx_free frees what was read, whether or not it succeeded. */
int kiln_idx_load(const char *dir, long limit, kiln_idx_set *ds);
void kiln_idx_free(kiln_idx_set *ds);

#endif
