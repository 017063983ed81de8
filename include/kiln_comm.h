/* kiln_comm.h — the communication hook of data-parallel training (SPEC section 10).
 *
 * A model's train_step runs in one process. Given a kiln_comm (NAME_set_comm, or the C API's
 * kiln_model_set_comm), it trains as one rank of `size`: every rank runs the forward and
 * backward passes on its own rows, the gradients are summed across the ranks by the hook's
 * allreduce and divided by `size`, and each rank's optimizer takes the same step, the step of
 * one process on the rows of every rank together (as PyTorch's DistributedDataParallel). The
 * loss train_step returns is the mean over the ranks. The generated code never links a
 * transport: libkiln_mpi (kiln_mpi.h) fills a kiln_comm from an MPI communicator, and any
 * other transport can fill one too.
 *
 * The hook is a pair of calls on float buffers, so that a transport may run several at once:
 * train_step starts the allreduce of each bucket of gradients (about bucket_bytes each) and
 * waits for them before the first update reads one. A batch_norm(sync=true) step also sums
 * its statistics through it, started and waited for inside the step. */
#ifndef KILN_COMM_H
#define KILN_COMM_H

#include <stddef.h>
#include <stdint.h>

typedef struct kiln_comm {
  int rank;                  /* this process's, in [0, size) */
  int size;                  /* how many processes train together, at least 1 */
  void *ctx;                 /* the calls' own state */
  /* Starts an in-place sum of buf[0, n) over every rank (each rank calls it with its own
   * buffer of the same n, in the same order); *req names it for wait. 0 on success, else
   * nonzero with a message in err. */
  int (*start)(void *ctx, float *buf, int64_t n, void **req, char *err, size_t errn);
  /* Returns when the sum started as req is in buf: 0, or nonzero with a message in err (a rank
   * failed or did not answer in time). */
  int (*wait)(void *ctx, void *req, char *err, size_t errn);
  int64_t bucket_bytes;      /* gradients per allreduce; 0: 25 MiB */
  /* Optional (NULL: none): called after each step of the backward pass while allreduces are
   * in flight, for a transport that moves data only when called (MPI without a progress
   * thread). */
  void (*progress)(void *ctx);
  /* Optional (NULL: none): called when this rank's train_step fails for a reason of its own
   * (bad data, an error: not a failed allreduce), with its message, so that the transport can
   * tell the other ranks, whose waits then fail naming this rank instead of timing out. */
  void (*failed)(void *ctx, const char *message);
} kiln_comm;

#endif
