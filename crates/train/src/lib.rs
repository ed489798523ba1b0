//! gradcomp-train: the built-in trainer and its datasets and models, on the
//! `gradcomp-dp` library.
//!
//! - [`trainer`]: the built-in trainer (`gradcomp train`), the library's
//!   first user: launch, step loop, records, checkpoints, evaluation.
//! - [`config`]: the training configuration (TOML + overrides), whose
//!   compression sections are the library's own types.
//! - [`data`], [`models`]: datasets (IDX images of any shape, text corpora)
//!   and the built-in models, which take their input shape from the data.
//! - [`records`]: the typed run records that `gradcomp report` reads;
//!   [`sections`]: the checksummed section files checkpoints are made of.
//! - [`machine`]: facts about the machine (memory, CPU).
//! - [`device`], [`optim`], [`schedule`]: where the workers compute, the
//!   burn optimizer a configuration names, the learning-rate schedule.

pub mod config;
pub mod data;
pub mod device;
pub mod machine;
pub mod models;
pub mod optim;
pub mod records;
pub mod schedule;
pub mod sections;
pub mod trainer;

pub use gradcomp_dp::default_device;
