/* MPI_IN_PLACE is a macro whose value depends on the MPI library (Open MPI:
 * (void *) 1, MPICH: (void *) -1); this exports it to Rust (src/mpi.rs,
 * module in_place). Compiled by build.rs against the same mpi.h as rsmpi. */
#include <mpi.h>

void *const gradcomp_mpi_in_place = MPI_IN_PLACE;
