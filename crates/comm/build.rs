//! With feature `mpi`: compiles `src/mpi_in_place.c`, which exports the MPI
//! library's `MPI_IN_PLACE` (a macro rsmpi does not bind), against the
//! `mpi.h` that rsmpi's own build found. Without it there is nothing to do
//! (and `cc` and `build-probe-mpi` are not built).

fn main() {
    println!("cargo:rerun-if-changed=src/mpi_in_place.c");
    #[cfg(feature = "mpi")]
    compile_in_place_export();
}

#[cfg(feature = "mpi")]
fn compile_in_place_export() {
    let lib = build_probe_mpi::probe().unwrap_or_else(|errors| {
        panic!("feature `mpi` needs an MPI library (Debian: libopenmpi-dev openmpi-bin): {errors:?}")
    });
    let mut c = cc::Build::new();
    c.file("src/mpi_in_place.c");
    for dir in &lib.include_paths {
        c.include(dir);
    }
    c.compile("gradcomp_mpi_in_place");
}
