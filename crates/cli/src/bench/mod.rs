//! `gradcomp bench ...`: measurements that print tables (or JSON lines).

mod comm;
pub(crate) mod compress;
pub(crate) mod compress_cases;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod compress_device;
mod compress_model;
mod compute;
mod fuzz;
mod output;
mod pipeline;
mod round;
pub(crate) mod timing;
mod train;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Compressor, codec and aggregation throughput against a plain read pass.
    Compress(compress::Args),
    /// Collective operations: measured time beside the network model's prediction.
    Comm(comm::Args),
    /// A configuration's model, forward and backward alone, on burn's CPU backends.
    Compute(compute::Args),
    /// A training step with the exchange's buckets pipelined against one
    /// after another, against the target max(compute + compress, wire) + 15%.
    Pipeline(pipeline::Args),
    /// One outer round's exchange of a model's change per compressor and
    /// topology (allgather, reduce-scatter): time, bytes, and the model's
    /// prediction; the wire alone, no training.
    Round(round::Args),
    /// The trainer's overhead against a plain burn loop, compression overhead, peak memory.
    Train(train::Args),
    /// Every parser of outside input (wire, data files, checkpoints, configs,
    /// records) fed mutated and arbitrary bytes; fails on any panic.
    Fuzz(fuzz::Args),
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Compress(a) => compress::run(&a),
        BenchCommand::Comm(a) => comm::run(&a),
        BenchCommand::Compute(a) => compute::run(&a),
        BenchCommand::Train(a) => train::run(&a),
        BenchCommand::Pipeline(a) => pipeline::run(&a),
        BenchCommand::Round(a) => round::run(&a),
        BenchCommand::Fuzz(a) => fuzz::run(&a),
    }
}
