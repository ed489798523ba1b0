//! gradcomp-comm: moving bytes between workers, counting them, and pricing
//! them on a network that is not this one.
//!
//! - [`Collective`]: what a worker sees: its rank, the world size and the
//!   operations. [`InProcessCollective`] runs N workers as threads of one
//!   process (the default); `MpiCollective` (feature `mpi`) runs one worker
//!   per MPI rank. Both implement the same trait, and the trainer cannot tell
//!   them apart.
//! - [`Metered`]: any collective with a [`ByteMeter`] around it: exact
//!   bytes per rank, per operation kind, per step.
//! - [`Flagged`]: any collective whose first operation also carries one
//!   flag per worker (a non-finite gradient), so agreeing costs no round.
//! - [`NetworkModel`]: α–β costs of ring and recursive-doubling allreduce,
//!   allgatherv, broadcast and the parameter server, for N workers at
//!   bandwidth B, and their calibration by measurement.
//!
//! This crate knows nothing of gradients or compressors: messages are bytes
//! or numbers. `gradcomp-train` joins it with `gradcomp-compress`.

mod collective;
pub mod conformance;
mod flags;
pub mod heartbeat;
mod in_process;
pub mod meter;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod netmodel;
mod op;

pub use collective::{Aggregate, Collective, CommError, Gathered, ServerPlacement};
pub use flags::Flagged;
pub use half::f16;
pub use in_process::{InProcessCollective, InProcessGroup, WorkerPanic};
pub use meter::{ByteMeter, Metered, OpBytes, StepBytes};
pub use netmodel::{AllgathervAlgorithm, AllreduceAlgorithm, Calibration, CalibrationError, NetworkModel};
pub use op::{CollectiveCall, OpKind, Reduction};
