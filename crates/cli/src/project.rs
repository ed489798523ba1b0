//! `gradcomp project`: what one outer round costs a worker at worker counts
//! no run here reaches, from the network model alone: bytes received per
//! worker per round and the wire's seconds, for a model given by its
//! parameter shapes, the change dense (ring allreduce), in fp4 (allgather
//! and reduce-scatter) and in SparseLoCo (allgather: its senders' mean
//! does not go through owners). Each tensor travels on its route from the
//! exchange's route table and is priced as the model prices a step
//! (`predict::sized`, `received_bytes`, `wire_seconds`); encodings are
//! measured on this CPU once per distinct shape; codec time is left out.

use std::fmt::Write as _;

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use gradcomp_comm::{AllreduceAlgorithm, NetworkModel};
use gradcomp_compress::CompressorConfig;
use gradcomp_dp::predict::{received_bytes, rounds_seconds, sized, wire_seconds};
use gradcomp_dp::Topology;

#[derive(ClapArgs)]
pub struct Args {
    /// `NAME=FILE`: a model's parameter shapes, a JSON list of lists
    /// (docs/bench/scale/shapes-*.json); repeatable.
    #[arg(long = "shapes", value_name = "NAME=FILE", required = true)]
    shapes: Vec<String>,
    /// Worker counts.
    #[arg(long, value_delimiter = ',', default_value = "16,64,256,1024")]
    workers: Vec<usize>,
    /// Link rates in bit/s.
    #[arg(long, value_delimiter = ',', default_value = "1e7,1e8")]
    links: Vec<f64>,
    /// Per-message latency α in seconds.
    #[arg(long, default_value_t = 1e-4)]
    alpha: f64,
}

/// The methods projected: a label, the topology and the compressor.
fn methods() -> Vec<(&'static str, Topology, CompressorConfig)> {
    let named = |n: &str| CompressorConfig::named(n).expect("a built-in compressor");
    vec![
        ("dense (ring allreduce)", Topology::Allreduce, named("dense")),
        ("fp4 (allgather)", Topology::Allgather, named("fp4")),
        ("fp4 (reduce-scatter)", Topology::ReduceScatter, named("fp4")),
        ("sparseloco (allgather)", Topology::Allgather, named("sparseloco")),
    ]
}

pub fn run(a: &Args) -> Result<()> {
    if a.workers.iter().any(|&n| n < 2) || a.links.iter().any(|&b| !(b > 0.0 && b.is_finite())) {
        bail!("--workers must be at least 2 each, --links positive rates in bit/s");
    }
    let mut md = String::new();
    let _ = writeln!(
        md,
        "Per worker and round: MB received on its link, and the wire's seconds (α = {} ms; codec time left out).\n",
        a.alpha * 1e3
    );
    let _ = write!(md, "| model | link | method |");
    a.workers.iter().for_each(|n| {
        let _ = write!(md, " N={n} |");
    });
    let _ = writeln!(md, "\n|---|---|---|{}", "---:|".repeat(a.workers.len()));
    for spec in &a.shapes {
        let (name, file) =
            spec.split_once('=').with_context(|| format!("--shapes {spec:?}: write NAME=FILE"))?;
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?;
        let shapes: Vec<Vec<usize>> =
            serde_json::from_str(&text).with_context(|| format!("{file}: expected a JSON list of shapes"))?;
        if shapes.is_empty() || shapes.iter().any(|s| s.iter().product::<usize>() == 0) {
            bail!("{file}: needs at least one tensor, none of them empty");
        }
        let params: usize = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
        for (label, topology, compressor) in methods() {
            let m = sized(label, compressor, topology, &shapes);
            for &link in &a.links {
                let net = NetworkModel::from_bits_per_second(link, a.alpha)
                    .with_allreduce(AllreduceAlgorithm::Ring);
                let _ =
                    write!(md, "| {name} ({:.1}M) | {} Mbit/s | {label} |", params as f64 / 1e6, link / 1e6);
                for &n in &a.workers {
                    let wire = rounds_seconds(&m, n, &net) + wire_seconds(&m.units, n, &net);
                    let _ = write!(md, " {:.1} MB, {} |", received_bytes(&m, n) as f64 / 1e6, seconds(wire));
                }
                md.push('\n');
            }
        }
    }
    println!("{md}");
    Ok(())
}

/// Seconds as a table shows them: 3 significant figures, or minutes and hours past them.
fn seconds(s: f64) -> String {
    if s >= 3600.0 {
        format!("{:.1} h", s / 3600.0)
    } else if s >= 600.0 {
        format!("{:.0} min", s / 60.0)
    } else if s >= 10.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.2} s")
    }
}
