/* test_data_parallel.c — data-parallel training through libkiln_mpi, run under
 * `mpirun -np N` (tests/mpi/CMakeLists.txt): the MLP, LeNet, the transformer, a small
 * convolutional net with batch_norm(sync=true) (tests/mpi/bn_sync.kiln: the job's batch
 * statistics, moving averages and gradient means, as SyncBatchNorm) and the ResNet with its
 * batch_norm made sync=true, each rank on
 * its b rows of a global batch of N * b, five train steps, against one process training a
 * model compiled for batch N * b on all the rows (rank 0 runs it). Every rank starts from its
 * own seed, so equal weights after the steps also show that set_comm gave every rank rank 0's.
 *
 * What must hold: each step's loss (train_step returns the mean over the ranks) and every
 * weight after five steps equal the lone process's within RTOL of the tensor's magnitude.
 * Why not bit for bit: a rank's gradient is the mean over its b rows, and the ranks' sum
 * divided by N is the mean over N * b rows added in another order, which differs in the last
 * bits (about 1e-7 relative per step); five steps of SGD with momentum, or of Adam, keep that
 * below 1e-5 of the weights here, and RTOL is ten times that. A tensor that stays near zero
 * is measured against 1e-3 instead of its magnitude: the attention's key bias, whose gradient
 * is zero but for rounding (a constant added to a row of scores leaves its softmax as it was).
 * The transformer trains with SGD here, not its Adam: Adam divides each gradient by its own
 * running size, so an element whose gradient is rounding noise (that key bias) moves by a
 * whole lr in a direction the summation order decides, on any two runs that add differently.
 * Also: a kiln_comm whose rank is not below its size is refused.
 *
 * `test_data_parallel ROOT fault` (2 ranks): rank 1's second step fails on a bad label, before
 * any allreduce; rank 0's train_step must fail well within its 3 s timeout, naming rank 1 and
 * its message (libkiln_mpi passes it on), and both ranks keep the weights of the first step.
 * `test_data_parallel ROOT kill` (2 ranks, under mpirun --enable-recovery, which lets the job
 * outlive a dead process): rank 1 kills itself after the first step; rank 0's second step
 * fails at its 3 s timeout saying it waited and that rank 1 did not answer its ping, with the
 * first step's weights. The job then ends by MPI_Abort
 * with the failures as its code (rank 0 holds an allreduce that never completes, which
 * MPI_Finalize would wait for). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln.h"
#include "kiln_mpi.h"
#include "runtime.h"

#define RTOL 1e-4
#define STEPS 5

static int dp_failed, dp_rank, dp_size;

static void dp_check(int ok, const char *fmt, const char *a, const char *b) {
  if (ok) return;
  dp_failed++;
  printf("FAIL (rank %d): ", dp_rank);
  printf(fmt, a, b);
  printf("\n");
}

typedef struct {
  const char *file;
  const char *optimizer;    /* replaces the file's own, when not NULL (the transformer's Adam) */
  const char *from, *to;    /* a text the copy replaces (the ResNet's batch_norm made sync) */
  int ndims;
  const char *dims[2];
  int64_t rows;             /* b: one rank's batch */
  int64_t seq;              /* the second dim's value (the transformer's seq) */
  int32_t label_range, token_range;
  double rtol;              /* the weights' tolerance, when not RTOL (0) */
} dp_model;

static const dp_model dp_models[] = {
  {"examples/mlp.kiln", NULL, NULL, NULL, 1, {"batch"}, 4, 0, 10, 0, 0},
  {"examples/lenet.kiln", NULL, NULL, NULL, 1, {"batch"}, 3, 0, 10, 0, 0},
  {"examples/transformer.kiln", "sgd(lr=0.05, momentum=0.9)", NULL, NULL, 2, {"batch", "seq"}, 2, 16, 2, 1000, 0},
  {"tests/mpi/bn_sync.kiln", NULL, NULL, NULL, 1, {"batch"}, 3, 0, 4, 0, 0},   /* batch_norm(sync=true) */
  /* The ResNet at 2 rows a rank, its lr lowered so five steps stay stable at so small a batch,
   * and the weights' tolerance 2e-3: its batch_norm betas start at 0 and move by about 2e-3
   * in five steps, and their gradient (a sum of dY over the rows) cancels, so the job's other
   * order of summation shows in them at about 1e-6 absolute (4e-4 of such a beta; one step:
   * 1.5e-6 of every weight). Per-rank statistics (sync=false) miss by 1.2 of the magnitude. */
  {"examples/resnet.kiln", "sgd(lr=0.01, momentum=0.9)", "batch_norm(c)", "batch_norm(c, sync=true)", 1, {"batch"}, 2, 0, 10, 0,
   2e-3},
};

static uint64_t dp_next(uint64_t *s) {   /* splitmix64: the same stream on every rank */
  uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* One model's train inputs at `batch` rows: count, dtypes, each row's element count and an
 * i32 input's range (labels, or token ids). */
typedef struct {
  int n;
  kiln_dtype dtype[4];
  int64_t row[4];
  int32_t range[4];
} dp_inputs;

static int dp_inputs_of(const dp_model *x, kiln_model *m, int64_t batch, dp_inputs *in) {
  int nout;
  if (kiln_model_count(m, 1, &in->n, &nout) || in->n > 4) return 1;
  for (int k = 0; k < in->n; k++) {
    int rank;
    int64_t dims[KILN_MAX_RANK], numel = 1;
    const char *name;
    if (kiln_model_tensor(m, 1, 0, k, &name, &in->dtype[k], &rank, dims)) return 1;
    for (int j = 0; j < rank; j++) numel *= dims[j];
    in->row[k] = numel / batch;
    in->range[k] = strcmp(name, "label") == 0 ? x->label_range : x->token_range;
  }
  return 0;
}

/* Step s's global batch (rows * size rows) for input k, the same on every rank. */
static void *dp_global(const dp_inputs *in, int k, int step, int64_t grows) {
  uint64_t s = (uint64_t)step * 1000 + (uint64_t)k;
  int64_t n = grows * in->row[k];
  if (in->dtype[k] == KILN_F32) {
    float *v = malloc((size_t)n * 4);
    for (int64_t i = 0; v && i < n; i++) v[i] = (float)((double)(dp_next(&s) >> 11) / 9007199254740992.0 * 2 - 1);
    return v;
  }
  int32_t *v = malloc((size_t)n * 4);
  for (int64_t i = 0; v && i < n; i++) v[i] = (int32_t)(dp_next(&s) % (uint64_t)in->range[k]);
  return v;
}

/* The model file, or a copy of it in /tmp whose train statement uses x->optimizer. */
static void dp_model_path(const dp_model *x, const char *root, char *path, size_t n) {
  snprintf(path, n, "%s/%s", root, x->file);
  if (!x->optimizer && !x->from) return;
  FILE *f = fopen(path, "r");
  snprintf(path, n, "/tmp/kiln-dp-%d-%d.kiln", (int)getpid(), dp_rank);
  FILE *o = f ? fopen(path, "w") : NULL;
  char line[1024];
  while (o && fgets(line, sizeof line, f)) {
    char *with = strstr(line, " with ");
    char *at = x->from ? strstr(line, x->from) : NULL;
    if (x->optimizer && strstr(line, "  train ") == line && with) sprintf(with, " with %s\n", x->optimizer);
    if (at) fprintf(o, "%.*s%s%s", (int)(at - line), line, x->to, at + strlen(x->from));
    else fputs(line, o);
  }
  if (f) fclose(f);
  if (o) fclose(o);
}

static kiln_model *dp_model_at(const dp_model *x, const char *root, int64_t batch, uint64_t seed) {
  char path[4096];
  dp_model_path(x, root, path, sizeof path);
  int64_t values[2] = {batch, x->seq};
  kiln_graph *g = NULL;
  kiln_model *m = NULL;
  if (kiln_graph_load_dims(path, NULL, x->ndims, x->dims, values, &g) || kiln_graph_jit(g, seed, &m))
    printf("FAIL (rank %d): %s: %s\n", dp_rank, x->file, kiln_last_error()), dp_failed++;
  kiln_graph_free(g);
  if (x->optimizer || x->from) unlink(path);
  return m;
}

/* Five steps on rows [first, first + rows) of each step's global batch; the losses into loss. */
static int dp_train(kiln_model *m, const dp_model *x, const dp_inputs *in, int64_t first, float *loss) {
  int64_t grows = x->rows * dp_size;
  for (int step = 0; step < STEPS; step++) {
    void *global[4];
    const void *mine[4];
    for (int k = 0; k < in->n; k++) {
      global[k] = dp_global(in, k, step, grows);
      mine[k] = (const char *)global[k] + first * in->row[k] * 4;
    }
    int rc = kiln_model_train_step(m, mine, &loss[step]);
    for (int k = 0; k < in->n; k++) free(global[k]);
    if (rc) return printf("FAIL (rank %d): %s: train_step %d: %s\n", dp_rank, x->file, step, kiln_last_error()), dp_failed++, 1;
  }
  return 0;
}

/* Every tensor of the two weight files within RTOL of the larger's magnitude. */
static void dp_same_weights(const char *file, const char *a, const char *b, double rtol) {
  rt_st_file fa, fb;
  char err[512];
  if (rt_st_open(a, &fa, err, sizeof err) || rt_st_open(b, &fb, err, sizeof err)) {
    printf("FAIL: %s: %s\n", file, err), dp_failed++;
    return;
  }
  double worst = 0;
  for (int i = 0; i < fa.n && i < fb.n; i++) {
    const float *x = fa.entries[i].data, *y = fb.entries[i].data;
    int64_t n = k_shape_numel(&fa.entries[i].shape);
    double scale = 1e-3, diff = 0;
    for (int64_t j = 0; j < n; j++) scale = fmax(scale, fabs(y[j])), diff = fmax(diff, fabs((double)x[j] - y[j]));
    worst = fmax(worst, diff / scale);
    dp_check(strcmp(fa.entries[i].name, fb.entries[i].name) == 0 && diff <= rtol * scale,
             "%s: %s differs from the lone process's beyond the tolerance", file, fa.entries[i].name);
  }
  dp_check(fa.n == fb.n, "%s: %s", file, "the two weight files hold different tensors");
  printf("%s: weights after %d steps on %d ranks vs one process: worst difference %.2g of the magnitude\n", file, STEPS,
         dp_size, worst);
  rt_st_close(&fa), rt_st_close(&fb);
}

static void dp_run(const dp_model *x, const char *root, kiln_comm *c) {
  kiln_model *m = dp_model_at(x, root, x->rows, 1 + (uint64_t)dp_rank);   /* each rank its own seed */
  if (!m) return;
  dp_inputs in;
  float loss[STEPS], lone[STEPS];
  char mine[256], alone[256];
  snprintf(mine, sizeof mine, "/tmp/kiln-dp-%d-%d.safetensors", (int)getpid(), dp_rank);
  if (dp_inputs_of(x, m, x->rows, &in) || kiln_model_set_comm(m, c)) {
    printf("FAIL (rank %d): %s: set_comm: %s\n", dp_rank, x->file, kiln_last_error()), dp_failed++;
    kiln_model_free(m);
    return;
  }
  int rc = dp_train(m, x, &in, x->rows * dp_rank, loss) || kiln_model_save(m, mine);
  kiln_model_free(m);
  if (rc || dp_rank != 0) {   /* rank 0 compares its own file only */
    unlink(mine);
    return;
  }
  kiln_model *one = dp_model_at(x, root, x->rows * dp_size, 1);
  snprintf(alone, sizeof alone, "/tmp/kiln-dp-%d-alone.safetensors", (int)getpid());
  if (one && !dp_train(one, x, &in, 0, lone) && !kiln_model_save(one, alone)) {
    for (int s = 0; s < STEPS; s++) {
      char what[64];
      snprintf(what, sizeof what, "step %d", s);
      dp_check(fabs(loss[s] - lone[s]) <= RTOL * fmax(1.0, fabs(lone[s])), "%s: %s: the mean loss over the ranks differs", x->file, what);
    }
    printf("%s: losses %g .. %g, the lone process's %g .. %g\n", x->file, loss[0], loss[STEPS - 1], lone[0], lone[STEPS - 1]);
    dp_same_weights(x->file, mine, alone, x->rtol > 0 ? x->rtol : RTOL);
  }
  kiln_model_free(one);
  unlink(mine), unlink(alone);
}

static int dp_same_file(const char *a, const char *b) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  int same = fa && fb;
  for (int ca = 0; same && ca != EOF;) same = (ca = fgetc(fa)) == fgetc(fb);
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return same;
}

static int dp_fault(const char *root, bool kill) {
  kiln_comm c;
  if (kiln_mpi_comm_init(&c, MPI_COMM_WORLD, 3)) return 1;
  kiln_model *m = dp_model_at(&dp_models[0], root, 4, 1);
  float x[4 * 784], loss;
  int32_t label[4] = {1, 2, 3, 4};
  for (int i = 0; i < 4 * 784; i++) x[i] = (float)((i * 13) % 17) / 8.0f - 1.0f;
  const void *in[] = {x, label};
  char before[256], after[256];
  snprintf(before, sizeof before, "/tmp/kiln-dpf-%d-%d-a.safetensors", (int)getpid(), dp_rank);
  snprintf(after, sizeof after, "/tmp/kiln-dpf-%d-%d-b.safetensors", (int)getpid(), dp_rank);
  if (!m || kiln_model_set_comm(m, &c) || kiln_model_train_step(m, in, &loss) || kiln_model_save(m, before))
    return printf("FAIL (rank %d): the first step: %s\n", dp_rank, kiln_last_error()), 1;
  if (dp_rank == 1 && kill) unlink(before), fflush(stdout), raise(SIGKILL);   /* it dies: its file goes first */
  if (dp_rank == 1) label[2] = 99;   /* 10 classes: a data error in the loss, before any allreduce */
  double t0 = MPI_Wtime();
  int rc = kiln_model_train_step(m, in, &loss);
  double secs = MPI_Wtime() - t0;
  const char *err = kiln_last_error();
  dp_check(rc != 0, "%s%s", dp_rank ? "the bad label's step " : "the step a rank never joins ", "fails");
  if (dp_rank == 0) {
    printf("rank 0: train_step failed after %.1f s: %s\n", secs, err);
    if (kill) {
      dp_check(strstr(err, "waited") && strstr(err, "rank 1 did not answer"), "rank 0 says it waited and names rank 1: %s%s",
               err, "");
      dp_check(secs < 20, "%s%s", "rank 0 gives up at its timeout ", "(3 s, and slack)");
    } else {
      dp_check(strstr(err, "rank 1 failed") && strstr(err, "label"), "rank 0 names rank 1 and its error: %s%s", err, "");
      dp_check(secs < 3, "%s%s", "rank 0 learns it before its timeout ", "(3 s)");
    }
  }
  dp_check(!kiln_model_save(m, after) && dp_same_file(before, after), "%s%s", "the weights stay at the last step ", "completed");
  unlink(before), unlink(after);
  return 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &dp_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &dp_size);
  const char *root = argc > 1 ? argv[1] : ".";
  if (argc > 2 && strcmp(argv[2], "kill") == 0) {   /* rank 1 is dead: no collective can end */
    dp_failed += dp_fault(root, true);
    printf("kill on %d ranks, rank %d: %s\n", dp_size, dp_rank, dp_failed ? "FAILED" : "passed");
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, dp_failed);
  }
  if (argc > 2 && strcmp(argv[2], "fault") == 0) {
    dp_failed += dp_fault(root, false);
    printf("fault on %d ranks, rank %d: %s\n", dp_size, dp_rank, dp_failed ? "FAILED" : "passed");
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);   /* both ranks reported; MPI_COMM_WORLD itself still works */
    int failed = dp_failed;
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Abort(MPI_COMM_WORLD, failed);
    return failed;
  }
  kiln_comm c;
  if (kiln_mpi_comm_init(&c, MPI_COMM_WORLD, 120)) return MPI_Abort(MPI_COMM_WORLD, 1), 1;
  kiln_comm bad = c;
  bad.rank = bad.size;
  kiln_model *m = dp_model_at(&dp_models[0], root, 4, 1);
  if (m) dp_check(kiln_model_set_comm(m, &bad) && strstr(kiln_last_error(), "rank"), "%s%s", "a rank not below the size ",
                  "is refused");
  kiln_model_free(m);
  for (size_t i = 0; i < sizeof dp_models / sizeof *dp_models; i++) dp_run(&dp_models[i], root, &c);
  kiln_mpi_comm_free(&c);
  int failed = dp_failed;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (dp_rank == 0) printf("data parallel on %d ranks: %s\n", dp_size, failed ? "FAILED" : "passed");
  MPI_Finalize();
  return failed ? 1 : 0;
}
