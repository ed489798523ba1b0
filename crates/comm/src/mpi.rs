//! MPI backend (in progress).
