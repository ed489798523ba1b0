//! `MPI_IN_PLACE`, which rsmpi's safe API does not offer: without it every
//! allreduce copied its buffer into a send buffer first.

use std::ffi::c_void;

use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;

extern "C" {
    /// The MPI library's `MPI_IN_PLACE` (a macro in `mpi.h`, so its
    /// value differs between Open MPI and MPICH), exported by
    /// `src/mpi_in_place.c`, which build.rs compiles against the same
    /// `mpi.h` as rsmpi.
    static gradcomp_mpi_in_place: *mut c_void;
    /// The commutative sum of half-precision values over MPI_UINT16_T.
    fn gradcomp_mpi_f16_sum() -> mpi::ffi::MPI_Op;
}

/// `MPI_Allreduce(MPI_IN_PLACE, buf, len, datatype, op, comm)`; the MPI
/// return code. `datatype` must describe exactly one `T` (a predefined
/// type of `T`'s size and layout).
pub(super) fn allreduce<T>(
    comm: &SimpleCommunicator,
    buf: &mut [T],
    datatype: mpi::ffi::MPI_Datatype,
    op: mpi::ffi::MPI_Op,
) -> i32 {
    let Ok(count) = i32::try_from(buf.len()) else {
        return mpi::ffi::MPI_ERR_COUNT as i32;
    };
    // SAFETY: `buf` is a live, exclusively borrowed slice of `count`
    // elements of `T`, and `datatype` describes exactly one `T` (the
    // callers pass `T::equivalent_datatype()`, or MPI_UINT16_T for
    // half values), so MPI reads and writes only inside it; with
    // MPI_IN_PLACE as the send buffer MPI takes this rank's input from
    // `buf` and writes the result over it, touching no other memory.
    // The handles (datatype, operation, communicator) are valid for the
    // call: `comm` is borrowed, the others are predefined or created
    // once and never freed. The call is blocking, so nothing refers to
    // `buf` once it returns, and MPI is initialized at least Serialized
    // with calls serialized by the owning `MpiCollective` (see its
    // `Send` impl).
    unsafe {
        mpi::ffi::MPI_Allreduce(
            gradcomp_mpi_in_place,
            buf.as_mut_ptr().cast(),
            count,
            datatype,
            op,
            comm.as_raw(),
        )
    }
}

/// The half-precision sum (`src/mpi_in_place.c`), created at first use.
pub(super) fn f16_sum() -> mpi::ffi::MPI_Op {
    // SAFETY: called only from an initialized MPI (a live
    // `MpiCollective`), serialized by its owner; the C function creates
    // the operation once and returns the same handle afterwards.
    unsafe { gradcomp_mpi_f16_sum() }
}
