//! gradcomp-exchange: the framework-agnostic core of gradcomp. Everything
//! between a worker's flat gradient and the update it applies, on `&[f32]`
//! and the [`Collective`](gradcomp_comm::Collective) trait, with no deep
//! learning framework in its dependency tree: the configuration
//! ([`config`]), the plan of what travels ([`plan`]), buckets,
//! exchange rounds, the pipeline and its communication thread, host (and, with the
//! feature `device-kernels`, cubecl device) compression, the strategies on
//! flat buffers ([`strategy`]), compressor state and its checkpoint form,
//! and the performance model's methods ([`predict`]). The fronts (the burn
//! library `gradcomp-dp`, the PyTorch package `gradcomp-py`) read gradients
//! and parameters from their framework, call this crate and write back.
//!
//! # The compressed gradient exchange
//!
//! What the synchronous strategy runs every step, and CELGC runs to send
//! compressed model changes (ARCHITECTURE.md, "The path of one gradient").
//!
//! The model's flat gradient is cut into compression units (each tensor at
//! `layer` granularity, the whole buffer at `global`). Excluded units travel
//! dense. Units are grouped into buckets of about `compression.bucket_mb`
//! MiB, cut from the last layer backwards as PyTorch DDP cuts them; each
//! bucket makes at most one call of each collective:
//!
//! | messages | allreduce topology | allgather topology | parameter server |
//! |---|---|---|---|
//! | dense, excluded units, Rand-k `same_seed` values | allreduce f32 | allreduce f32 | upload |
//! | fp16 | allreduce f16 | allreduce f16 | upload |
//! | TernGrad with a shared scaler | allreduce of codes in i8 (N ≤ 127; i16, i32 beyond) | allgatherv | upload; integer sum in ⌈log2(2N+1)⌉ bits down |
//! | per-worker messages (sparse, QSGD, 1-bit, unshared TernGrad) | (rejected by config) | allgatherv | upload |
//!
//! **One pipeline** (`pipeline.rs`) runs every exchange: a whole gradient or
//! one arriving in stages, compressed on the host or on the GPU. What
//! differs by where the gradient lives (the memories' compensation, the
//! compressors, the memories' update) sits behind one trait,
//! [`gradient_side::GradientSide`], implemented by [`host`] and [`device`].
//! Before a group of buckets is compressed, its units may take part in
//! **exchange rounds**: each a small allreduce (sum or max) of values the
//! compressors contribute, whose result the next round or the compression
//! reads. TernGrad's shared scaler is one max round; a compressor with
//! several rounds (PowerSGD) runs them in order. With
//! `compression.pipeline` a communication thread ([`wire`]) moves bucket i
//! while this thread compresses bucket i+1 and then decodes bucket i−1.
//!
//! **Buckets never change a result.** A bucket holds whole units, and every
//! compressor, memory and random stream is per unit, so each unit's message
//! is the same bytes however the units are bucketed; the server aggregates
//! and the decoders add per unit. The averaged gradient is bitwise the
//! unbucketed one wherever the collective adds each element's N values in
//! an order that does not depend on the element's position or the call's
//! length: the threads backend, and MPI's recursive doubling. Open MPI's
//! ring allreduce starts each segment's sum at a different rank, so under
//! it buckets can change the last bit of a dense sum (every worker still
//! gets the same value). At `global` granularity the single unit is a
//! single bucket: cutting it would change what Top-k selects.
//!
//! Every worker adds the same numbers in the same order, so the averaged
//! gradient is bitwise identical everywhere. The result is in gradient units
//! whatever the residual form: units whose error feedback holds lr-scaled
//! residuals (`acc = e + η·g`, ALGORITHMS.md §6.1) are divided by η after
//! aggregation, so any optimizer applies the whole buffer at η.
//!
//! **Allocation.** Once the first step has sized them, the messages, bucket
//! buffers, round values and the server's buffers are reused. Each step
//! still makes a few small vectors: its statistics (one record per
//! collective call, one time per bucket), the communication thread's
//! channels when pipelining, and on the device the per-unit buffer handles.
//! None grows with the gradient.

pub mod auto_plan;
mod bucket;
pub mod checksum;
pub mod config;
pub mod custom;
#[cfg(feature = "device-kernels")]
mod device;
#[cfg(feature = "device-kernels")]
pub mod device_grad;
mod error;
mod exchange_rounds;
pub mod grad_stages;
mod gradient_exchange;
mod gradient_side;
mod group;
mod host;
pub mod layout;
mod pipeline;
pub mod plan;
pub mod predict;
mod recipe;
pub mod route;
pub mod scatter;
mod server;
pub mod spec;
mod state;
mod stats;
pub mod strategy;
#[cfg(test)]
mod tests;
mod wire;

pub use config::{DataParallelConfig, OnNonFinite, Topology};
pub use custom::CustomCompressor;
#[cfg(feature = "device-kernels")]
pub use device_grad::DeviceGrad;
pub use error::{DataParallelError, ExchangeError, NoDeviceForm};
pub use gradient_exchange::{Gradient, GradientExchange, StateBuffers, StepInput};
pub use group::run_in_process;
pub use layout::{GradientLayout, ParamSlot};
pub use plan::{bucket_bytes, cut_buckets, Unit};
pub use spec::CompressorSpec;
pub use state::{StateKey, StateKind};
pub use stats::{BucketTimes, ExchangeStats};
