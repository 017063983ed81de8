/* kiln_mpi.h — libkiln_mpi: a kiln_comm (kiln_comm.h) over an MPI communicator, so that a
 * Kiln model trains data-parallel under mpirun: one rank per process, each on its own rows,
 * the gradients summed by MPI_Iallreduce. A model's .so never links MPI; the program that
 * drives it links this library (pkg-config kiln-mpi, or -lkiln_mpi with mpicc).
 *
 *   MPI_Init(&argc, &argv);
 *   kiln_comm c;
 *   if (kiln_mpi_comm_init(&c, MPI_COMM_WORLD, 0)) ...;      // c.rank, c.size from the communicator
 *   net *m = net_create(seed);
 *   net_set_comm(m, &c);                                     // every rank now holds rank 0's weights
 *   ... net_train_step(m, my_rows, &loss) ...                // loss: the mean over the ranks
 *   net_set_comm(m, NULL), kiln_mpi_comm_free(&c);
 *   MPI_Finalize();
 *
 * Errors on the communicator return (MPI_ERRORS_RETURN on a duplicate of it) instead of
 * aborting the job; a rank whose step fails on its own sends its message to the others, whose
 * waits then fail naming it; and a wait gives up after timeout_s, so a killed rank makes the
 * others' train_step fail with a message rather than hang. Debian's Open MPI is not
 * CUDA-aware: the buffers are host memory. */
#ifndef KILN_MPI_H
#define KILN_MPI_H

#include <mpi.h>

#include "kiln_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills *c for a duplicate of comm (the caller's communicator is left as it is); timeout_s
 * bounds each wait (0: 60 s). MPI must be initialised. 0 on success; nonzero, with a message
 * on stderr, otherwise. */
int kiln_mpi_comm_init(kiln_comm *c, MPI_Comm comm, double timeout_s);
void kiln_mpi_comm_free(kiln_comm *c);
/* For a program that does not call MPI itself (kiln train --distributed opens this library
 * with dlopen): MPI_Init when no one has, then kiln_mpi_comm_init on MPI_COMM_WORLD; and
 * kiln_mpi_comm_free, then MPI_Finalize when kiln_mpi_world initialised MPI. */
int kiln_mpi_world(kiln_comm *c, double timeout_s);
void kiln_mpi_world_end(kiln_comm *c);
/* MPI_Abort of MPI_COMM_WORLD: every rank of the job stopped with exit code `code`. */
void kiln_mpi_abort(int code);

#ifdef __cplusplus
}
#endif

#endif
