/* kiln_mpi.c — a kiln_comm over MPI (kiln_mpi.h): start is MPI_Iallreduce in place, wait polls
 * MPI_Test until the sum is in or the timeout passes. Polling, not MPI_Wait, is what lets a
 * wait give up: MPI has no timed wait, and an allreduce a dead rank never joins never ends. */
#include "kiln_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A rank whose step fails on its own sends its message to every other rank with this tag
 * (kiln_mpi_failed); a waiting rank probes for it, so it fails naming that rank at once. The
 * collectives on the communicator use no tags a program can see, so they never meet it. */
enum { KILN_MPI_FAILED_TAG = 7317, KILN_MPI_PING_TAG = 7318, KILN_MPI_MSG = 400 };

/* How long a rank that timed out waits for the others to answer its ping (kiln_mpi_missing). */
#define KILN_MPI_PING_S 2.0

typedef struct {
  MPI_Comm comm;        /* a duplicate: its error handler returns */
  double timeout_s;
  char failed[KILN_MPI_MSG];   /* the message kiln_mpi_failed sends: it must outlive the sends */
} kiln_mpi_ctx;

static void kiln_mpi_msg(int code, const char *what, char *err, size_t errn) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", code);
  snprintf(err, errn, "%s: %s", what, text);
}

static int kiln_mpi_start(void *ctx, float *buf, int64_t n, void **req, char *err, size_t errn) {
  kiln_mpi_ctx *k = ctx;
  if (n < 0 || n > 0x7fffffff) return snprintf(err, errn, "MPI_Iallreduce: %lld floats is more than one call takes", (long long)n), 1;
  MPI_Request *r = malloc(sizeof *r);
  if (!r) return snprintf(err, errn, "out of memory"), 1;
  int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, k->comm, r);
  if (rc != MPI_SUCCESS) return free(r), kiln_mpi_msg(rc, "MPI_Iallreduce", err, errn), 1;
  *req = r;
  return 0;
}

static double kiln_mpi_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Another rank's failure message, when one has come: 1 with it in err. */
static int kiln_mpi_heard_failure(kiln_mpi_ctx *k, char *err, size_t errn) {
  int flag = 0;
  MPI_Status st;
  if (MPI_Iprobe(MPI_ANY_SOURCE, KILN_MPI_FAILED_TAG, k->comm, &flag, &st) != MPI_SUCCESS || !flag) return 0;
  char msg[KILN_MPI_MSG] = "";
  MPI_Recv(msg, KILN_MPI_MSG, MPI_CHAR, st.MPI_SOURCE, KILN_MPI_FAILED_TAG, k->comm, MPI_STATUS_IGNORE);
  msg[KILN_MPI_MSG - 1] = 0;
  snprintf(err, errn, "rank %d failed: %s", st.MPI_SOURCE, msg);
  return 1;
}

static void kiln_mpi_failed(void *ctx, const char *message) {
  kiln_mpi_ctx *k = ctx;
  int rank = 0, size = 1;
  MPI_Comm_rank(k->comm, &rank);
  MPI_Comm_size(k->comm, &size);
  snprintf(k->failed, sizeof k->failed, "%s", message ? message : "no message");
  for (int r = 0; r < size; r++) {   /* nobody need be receiving yet: the sends complete on their own */
    if (r == rank) continue;
    MPI_Request q;
    if (MPI_Isend(k->failed, (int)strlen(k->failed) + 1, MPI_CHAR, r, KILN_MPI_FAILED_TAG, k->comm, &q) == MPI_SUCCESS)
      MPI_Request_free(&q);
  }
}

/* Receives the pings other ranks sent (kiln_mpi_missing): a rank that polls answers them, so
 * only a dead or stuck one leaves a ping unmatched. */
static void kiln_mpi_answer_pings(kiln_mpi_ctx *k) {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, KILN_MPI_PING_TAG, k->comm, &flag, &st) != MPI_SUCCESS || !flag) return;
    char b;
    MPI_Recv(&b, 1, MPI_CHAR, st.MPI_SOURCE, KILN_MPI_PING_TAG, k->comm, MPI_STATUS_IGNORE);
  }
}

/* After a timeout: which ranks do not answer. A synchronous send to each other rank completes
 * only when that rank receives it, which every rank still running does in its waits and
 * between its backward steps; those that have not within KILN_MPI_PING_S are written to out
 * ("1, 3"), the others' pings answered meanwhile. The pings left unmatched are abandoned, as
 * the allreduce is. 0 when every rank answered. */
static int kiln_mpi_missing(kiln_mpi_ctx *k, char *out, size_t outn) {
  int rank = 0, size = 1, n = 0;
  MPI_Comm_rank(k->comm, &rank);
  MPI_Comm_size(k->comm, &size);
  MPI_Request *q = calloc((size_t)size, sizeof *q);
  if (!q) return 0;
  static const char ping = 1;
  for (int r = 0; r < size; r++)
    if (r == rank || MPI_Issend(&ping, 1, MPI_CHAR, r, KILN_MPI_PING_TAG, k->comm, &q[r]) != MPI_SUCCESS) q[r] = MPI_REQUEST_NULL;
  double until = kiln_mpi_now() + KILN_MPI_PING_S;
  int open = 1;
  while (open && kiln_mpi_now() < until) {
    kiln_mpi_answer_pings(k);
    open = 0;
    for (int r = 0; r < size; r++) {
      int done = 1;
      if (q[r] != MPI_REQUEST_NULL && MPI_Test(&q[r], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 0;
      open |= !done;
    }
    if (open) nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  size_t w = 0;
  out[0] = 0;
  for (int r = 0; r < size; r++)
    if (q[r] != MPI_REQUEST_NULL) {   /* still open: not answered (the list cut at outn) */
      if (w < outn) w += (size_t)snprintf(out + w, outn - w, "%s%d", n ? ", " : "", r);
      n++;
    }
  free(q);
  return n;
}

static int kiln_mpi_wait(void *ctx, void *req, char *err, size_t errn) {
  kiln_mpi_ctx *k = ctx;
  MPI_Request *r = req;
  if (!r) return snprintf(err, errn, "no allreduce to wait for"), 1;
  double deadline = kiln_mpi_now() + k->timeout_s;
  for (unsigned spins = 0;; spins++) {
    int done = 0, rc = MPI_Test(r, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return kiln_mpi_msg(rc, "MPI_Test", err, errn), 1;   /* r stays: MPI owns it now */
    if (done) return free(r), 0;
    if ((spins & 63) == 63 && kiln_mpi_heard_failure(k, err, errn)) return 1;   /* r is abandoned, as on a timeout */
    if ((spins & 63) == 63) kiln_mpi_answer_pings(k);
    if ((spins & 255) == 255 && kiln_mpi_now() > deadline) {
      int rank = -1;
      char who[256];
      MPI_Comm_rank(k->comm, &rank);
      int n = kiln_mpi_missing(k, who, sizeof who);
      if (n)
        return snprintf(err, errn, "rank %d waited %.0f s for the other ranks' part of the sum: rank%s %s did not answer "
                        "(killed or stopped)", rank, k->timeout_s, n > 1 ? "s" : "", who), 1;
      return snprintf(err, errn, "rank %d waited %.0f s for the other ranks' part of the sum: every rank answers, but "
                      "the sum did not complete (a rank stuck in a step?)", rank, k->timeout_s), 1;
    }   /* r is abandoned: an allreduce cannot be cancelled */
    if (spins > 4096) nanosleep(&(struct timespec){0, 20000}, NULL);   /* a long wait: yield the core */
  }
}

/* Open MPI moves a nonblocking collective along only inside MPI calls (no progress thread by
 * default): a probe between the backward steps is such a call, and costs little. */
static void kiln_mpi_progress(void *ctx) {
  kiln_mpi_ctx *k = ctx;
  int flag = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, k->comm, &flag, MPI_STATUS_IGNORE);
  if (flag) kiln_mpi_answer_pings(k);
}

int kiln_mpi_comm_init(kiln_comm *c, MPI_Comm comm, double timeout_s) {
  int inited = 0;
  if (!c) return fprintf(stderr, "kiln_mpi_comm_init: c is NULL\n"), 1;
  *c = (kiln_comm){0};
  if (MPI_Initialized(&inited) != MPI_SUCCESS || !inited) return fprintf(stderr, "kiln_mpi_comm_init: MPI_Init has not been called\n"), 1;
  kiln_mpi_ctx *k = calloc(1, sizeof *k);
  if (!k) return fprintf(stderr, "kiln_mpi_comm_init: out of memory\n"), 1;
  if (comm == MPI_COMM_NULL) comm = MPI_COMM_WORLD;
  if (MPI_Comm_dup(comm, &k->comm) != MPI_SUCCESS) return free(k), fprintf(stderr, "kiln_mpi_comm_init: MPI_Comm_dup failed\n"), 1;
  MPI_Comm_set_errhandler(k->comm, MPI_ERRORS_RETURN);
  k->timeout_s = timeout_s > 0 ? timeout_s : 60;
  MPI_Comm_rank(k->comm, &c->rank);
  MPI_Comm_size(k->comm, &c->size);
  c->ctx = k, c->start = kiln_mpi_start, c->wait = kiln_mpi_wait, c->progress = kiln_mpi_progress;
  c->failed = kiln_mpi_failed;
  return 0;
}

static int kiln_mpi_inited_here;

int kiln_mpi_world(kiln_comm *c, double timeout_s) {
  int inited = 0;
  if (MPI_Initialized(&inited) != MPI_SUCCESS) return fprintf(stderr, "kiln_mpi_world: MPI_Initialized failed\n"), 1;
  if (!inited) {
    if (MPI_Init(NULL, NULL) != MPI_SUCCESS) return fprintf(stderr, "kiln_mpi_world: MPI_Init failed\n"), 1;
    kiln_mpi_inited_here = 1;
  }
  return kiln_mpi_comm_init(c, MPI_COMM_WORLD, timeout_s);
}

void kiln_mpi_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code ? code : 1); }

void kiln_mpi_world_end(kiln_comm *c) {
  kiln_mpi_comm_free(c);
  if (kiln_mpi_inited_here) MPI_Finalize(), kiln_mpi_inited_here = 0;
}

void kiln_mpi_comm_free(kiln_comm *c) {
  if (!c || !c->ctx) return;
  kiln_mpi_ctx *k = c->ctx;
  MPI_Comm_free(&k->comm);
  free(k);
  *c = (kiln_comm){0};
}
