//! The `gradcomp` command.

mod bench;
mod data;
mod launch;
mod model;
mod plan;
mod project;
mod report;
mod train;
mod user_error;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use user_error::UserError;

#[derive(Parser)]
#[command(
    name = "gradcomp",
    version,
    about = "Communication-efficient distributed training: gradient compression, measured"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a model with N workers and a compression method.
    Train(train::TrainArgs),
    /// Train under mpirun across the hosts of a file, going on without lost
    /// hosts and taking back returning ones (from the latest checkpoint).
    Launch(launch::LaunchArgs),
    /// Evaluate a run's latest checkpoint on the test set.
    Eval(train::EvalArgs),
    /// Measure the speed of gradcomp's parts on this machine.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// A Markdown report with figures from run directories.
    Report(report::Args),
    /// Predicted throughput and speedup of every method for N workers and link speeds.
    Model(model::Args),
    /// One outer round's bytes and wire seconds per worker at worker counts
    /// past any run (16 to 1024), from the network model alone.
    Project(project::Args),
    /// Inspect a configuration's data, or write a generated IDX image set.
    #[command(subcommand)]
    Data(data::DataCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Train(a) => train::run(&a),
        Command::Launch(a) => launch::run(&a),
        Command::Eval(a) => train::eval(&a),
        Command::Bench(b) => bench::run(b),
        Command::Report(a) => report::run(&a),
        Command::Model(a) => model::run(&a),
        Command::Project(a) => project::run(&a),
        Command::Data(c) => data::run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The chain, without causes whose text the outer message already includes.
            let mut msg = e.to_string();
            for cause in e.chain().skip(1) {
                let c = cause.to_string();
                if !msg.contains(&c) {
                    msg = format!("{msg}: {c}");
                }
            }
            eprintln!("error: {msg}");
            if e.downcast_ref::<UserError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}
