/* dist_bench.c — train_step throughput of one rank of a data-parallel job (bench/dist/run.sh):
 *
 *   mpirun -np N dist_bench MODEL.kiln BATCH SECS
 *
 * Every rank JIT-compiles MODEL at its BATCH (a dim named batch), joins the job through
 * libkiln_mpi when N > 1, and trains on fixed random rows; after two warm-up steps it times
 * as many steps as rank 0 finds fill SECS. Rank 0 prints one line: the ranks, the batch, the
 * steps per second, the job's samples per second, and the share of a step this rank spent
 * blocked in the allreduce's wait (measured by wrapping libkiln_mpi's wait).
 *
 * With DIST_BUCKET_BYTES=N and one rank, a hook of one rank that moves nothing takes the
 * gradients in buckets of N bytes: under KILN_PROFILE the trace's allreduce track then says
 * when each bucket's gradients are ready in the backward pass (bench/dist/cost_model.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln.h"
#include "kiln_mpi.h"

static kiln_comm db_mpi;     /* libkiln_mpi's */
static double db_waited;     /* seconds inside its wait */

static double db_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int db_start(void *ctx, float *buf, int64_t n, void **req, char *err, size_t errn) {
  (void)ctx;
  return db_mpi.start(db_mpi.ctx, buf, n, req, err, errn);
}

static int db_wait(void *ctx, void *req, char *err, size_t errn) {
  (void)ctx;
  double t0 = db_now();
  int rc = db_mpi.wait(db_mpi.ctx, req, err, errn);
  db_waited += db_now() - t0;
  return rc;
}

static int db_nothing(void *ctx, float *buf, int64_t n, void **req, char *err, size_t errn) {
  (void)ctx, (void)n, (void)err, (void)errn;
  *req = buf;
  return 0;
}

static int db_done(void *ctx, void *req, char *err, size_t errn) {
  (void)ctx, (void)req, (void)err, (void)errn;
  return 0;
}

static void *db_input(kiln_model *m, int k) {
  const char *name;
  kiln_dtype dt;
  int rank;
  int64_t dims[KILN_MAX_RANK], n = 1;
  if (kiln_model_tensor(m, 1, 0, k, &name, &dt, &rank, dims)) return NULL;
  for (int j = 0; j < rank; j++) n *= dims[j];
  void *v = calloc((size_t)n, 4);
  for (int64_t i = 0; v && i < n; i++) {
    if (dt == KILN_F32) ((float *)v)[i] = (float)((i * 7919) % 2001) / 1000.0f - 1.0f;
    else ((int32_t *)v)[i] = (int32_t)((i * 31) % 2);   /* labels and token ids: 0 and 1 fit every example */
  }
  return v;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 4) {
    if (rank == 0) fprintf(stderr, "usage: mpirun -np N dist_bench MODEL.kiln BATCH SECS\n");
    MPI_Finalize();
    return 2;
  }
  const char *names[] = {"batch"};
  int64_t batch = atoll(argv[2]);
  double secs = atof(argv[3]);
  kiln_graph *g = NULL;
  kiln_model *m = NULL;
  if (kiln_graph_load_dims(argv[1], NULL, 1, names, &batch, &g) || kiln_graph_jit(g, 1, &m)) {
    fprintf(stderr, "rank %d: %s\n", rank, kiln_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  kiln_comm c = {0};
  const char *bb = getenv("DIST_BUCKET_BYTES");
  if (size == 1 && bb) {
    c = (kiln_comm){0, 1, NULL, db_nothing, db_done, atoll(bb), NULL, NULL};
    if (kiln_model_set_comm(m, &c)) fprintf(stderr, "%s\n", kiln_last_error()), MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (size > 1) {
    if (kiln_mpi_comm_init(&db_mpi, MPI_COMM_WORLD, 120)) MPI_Abort(MPI_COMM_WORLD, 1);
    c = db_mpi, c.start = db_start, c.wait = db_wait;   /* progress stays libkiln_mpi's, on its own ctx */
    if (kiln_model_set_comm(m, &c)) fprintf(stderr, "rank %d: %s\n", rank, kiln_last_error()), MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int nin = 0, nout;
  kiln_model_count(m, 1, &nin, &nout);
  const void *in[8] = {0};
  for (int k = 0; k < nin && k < 8; k++) in[k] = db_input(m, k);
  float loss;
  for (int s = 0; s < 2; s++)
    if (kiln_model_train_step(m, in, &loss)) fprintf(stderr, "rank %d: %s\n", rank, kiln_last_error()), MPI_Abort(MPI_COMM_WORLD, 1);
  double t0 = db_now();   /* rank 0 decides how many steps fill secs; every rank runs that many */
  kiln_model_train_step(m, in, &loss);
  int steps = (int)(secs / (db_now() - t0 > 1e-6 ? db_now() - t0 : 1e-6)) + 1;
  MPI_Bcast(&steps, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  db_waited = 0;
  t0 = db_now();
  for (int s = 0; s < steps; s++) kiln_model_train_step(m, in, &loss);
  double t = db_now() - t0;
  if (rank == 0)
    printf("ranks %d batch %lld steps %d: %.2f steps/s, %.1f samples/s in all, waiting %.1f%% of the step\n", size,
           (long long)batch, steps, steps / t, steps * (double)batch * size / t, 100.0 * db_waited / t);
  if (size > 1) kiln_model_set_comm(m, NULL), kiln_mpi_comm_free(&db_mpi);
  kiln_model_free(m);
  kiln_graph_free(g);
  MPI_Finalize();
  return 0;
}
