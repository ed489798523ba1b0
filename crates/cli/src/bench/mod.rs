//! `gradcomp bench ...`: measurements that print tables (or JSON lines).

mod compress;
mod timing;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Compressor, codec and aggregation throughput against a plain read pass.
    Compress(compress::Args),
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Compress(a) => compress::run(&a),
    }
}
