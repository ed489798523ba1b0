//! `gradcomp bench compress`: how fast each compressor, its wire encoding and
//! its decode-and-aggregate run on one thread, against the cost floor of
//! reading the buffer once (a vectorized sum, measured in the same run).
//!
//! Throughput is in GB/s of dense f32 input (4 bytes per element) for every
//! operation, so ratios to the read pass compare like with like.

use std::hint::black_box;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args as ClapArgs;
use gradcomp_compress::{
    codec, compress_as_sole_worker, reduce, CompressorConfig, Message, RngKey, UnitContext, UnitRng,
};

use super::compress_cases::{config_for, density_cases, emit, Row};
use super::compress_model;
use super::timing::median_seconds;

/// The compressors measured: every configuration name but `dense` (nothing
/// to select or quantize) and `esgd` (it needs the loss its importance
/// weighs, which a benchmark on random data does not have).
fn compressors() -> Vec<&'static str> {
    CompressorConfig::NAMES.into_iter().filter(|n| !matches!(*n, "dense" | "esgd")).collect()
}
const SIZES: [usize; 4] = [1 << 10, 1 << 16, 1 << 20, 25_000_000];
const DENSITIES: [f64; 2] = [0.001, 0.01];

#[derive(ClapArgs)]
pub struct Args {
    /// Only this tensor size (elements).
    #[arg(long)]
    elements: Option<usize>,
    /// Only this density (sparsifiers; quantizers run once per size regardless).
    #[arg(long)]
    density: Option<f64>,
    /// Only these compressors (comma-separated configuration names).
    #[arg(long, value_delimiter = ',')]
    compressors: Vec<String>,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    /// Minimum measuring time per case, in seconds.
    #[arg(long, default_value_t = 0.5)]
    min_time: f64,
    /// Seed of the N(0, 1) input.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the compressors run: `cpu` (one thread), or `wgpu` / `cuda` /
    /// `cuda:N` for the device kernels (builds with `--features wgpu|cuda`).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Instead of flat buffers, one step over this model's layers
    /// (`lenet5`, `cnn`, `resnet18`): memory, every round, decode.
    #[arg(long)]
    model: Option<String>,
    /// With --model: print its parameter shapes as JSON and exit.
    #[arg(long, requires = "model")]
    print_shapes: bool,
}

pub fn run(args: &Args) -> Result<()> {
    let sizes: Vec<usize> = match args.elements {
        Some(0) => bail!("--elements must be at least 1"),
        Some(n) => vec![n],
        None => SIZES.to_vec(),
    };
    let densities: Vec<f64> = match args.density {
        Some(r) if !(r > 0.0 && r <= 1.0) => bail!("--density {r} is not in (0, 1]"),
        Some(r) => vec![r],
        None => DENSITIES.to_vec(),
    };
    for c in &args.compressors {
        if !compressors().contains(&c.as_str()) {
            bail!("unknown compressor '{c}'; choose from {}", compressors().join(", "));
        }
    }
    let names: Vec<&str> = compressors()
        .iter()
        .copied()
        .filter(|n| args.compressors.is_empty() || args.compressors.iter().any(|c| c == n))
        .collect();
    let min_time = Duration::from_secs_f64(args.min_time.max(0.0));
    if let Some(model) = &args.model {
        if args.device != "cpu" {
            bail!("--model measures the CPU compressors; leave out --device {}", args.device);
        }
        if args.print_shapes {
            return compress_model::print_shapes(model);
        }
        return compress_model::run(model, &names, args.seed, min_time, args.json);
    }
    if args.device != "cpu" {
        return on_device(args, &sizes, &densities, &names, min_time);
    }
    if !args.json {
        println!(
            "gradcomp bench compress: one thread, f32 input ~ N(0,1), GB/s of dense input (4 B/element)"
        );
        println!(
            "{:<10} {:<17} {:>10} {:>8} {:>9} {:>8} {:>10} {:>11}",
            "compressor", "op", "elements", "density", "GB/s", "x read", "selected", "wire bytes"
        );
    }
    let mut summary = Summary::default();
    for &n in &sizes {
        let mut rng = UnitRng::from_parts(&[args.seed, n as u64]);
        let x: Vec<f32> = (0..n).map(|_| rng.next_gaussian() as f32).collect();
        let read = median_seconds(min_time, 3, || {
            black_box(reduce::sum(black_box(&x)));
        });
        let gbps = |secs: f64| 4.0 * n as f64 / secs / 1e9;
        emit(
            args.json,
            &Row {
                compressor: "read_pass".into(),
                op: "sum".into(),
                elements: n,
                density: None,
                seconds: read,
                gbytes_per_s: gbps(read),
                ratio_to_read_pass: 1.0,
                selected: n,
                wire_bytes: 4 * n,
            },
        );
        for &name in &names {
            for density in density_cases(name, &densities) {
                let cfg = config_for(name, density);
                for row in measure(&cfg, &x, density, read, min_time) {
                    summary.note(&row);
                    emit(args.json, &row);
                }
            }
        }
    }
    if !args.json {
        summary.print();
    }
    Ok(())
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn on_device(
    args: &Args,
    sizes: &[usize],
    densities: &[f64],
    names: &[&str],
    min_time: Duration,
) -> Result<()> {
    super::compress_device::run(&args.device, sizes, densities, names, args.seed, min_time, args.json)
}

#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
fn on_device(args: &Args, _: &[usize], _: &[f64], _: &[&str], _: Duration) -> Result<()> {
    bail!(
        "--device {}: this gradcomp was built without device kernels; rebuild with `cargo build --release -p gradcomp-cli --features wgpu` (or `cuda`, after scripts/install-gpu-deps.sh)",
        args.device
    )
}

fn measure(
    cfg: &CompressorConfig,
    x: &[f32],
    density: Option<f64>,
    read: f64,
    min_time: Duration,
) -> Vec<Row> {
    // PowerSGD sees the buffer as the squarest matrix; every compressor runs
    // its rounds (TernGrad's scaler, PowerSGD's two products) as the sole worker.
    let mut c = cfg.build_for(&compress_model::matrix_shape(x.len()));
    let mut msg = Message::default();
    let mut step = cfg.first_compressed_step();
    let mut compress = |msg: &mut Message| {
        let ctx = UnitContext { key: RngKey::new(7, 0, step, 0), ..Default::default() };
        step += 1;
        compress_as_sole_worker(c.as_mut(), black_box(x), &ctx, msg);
    };
    let t_compress = median_seconds(min_time, 3, || compress(&mut msg));
    let mut bytes = Vec::with_capacity(codec::encoded_len(&msg));
    let t_encode = median_seconds(min_time, 3, || {
        bytes.clear();
        codec::encode(&msg, 0, &mut bytes);
        black_box(&bytes);
    });
    let mut out = vec![0.0f32; x.len()];
    let t_decode = median_seconds(min_time, 3, || {
        codec::accumulate(black_box(&bytes), 0.25, &mut out).expect("own encoding decodes");
    });
    let row = |op: &str, secs: f64| Row {
        compressor: cfg.name().into(),
        op: op.into(),
        elements: x.len(),
        density,
        seconds: secs,
        gbytes_per_s: 4.0 * x.len() as f64 / secs / 1e9,
        ratio_to_read_pass: read / secs,
        selected: msg.selected(),
        wire_bytes: bytes.len(),
    };
    vec![row("compress", t_compress), row("encode", t_encode), row("decode_aggregate", t_decode)]
}

/// The targets, read off the largest size measured.
#[derive(Default)]
struct Summary {
    elements: usize,
    /// (compressor op [density], seconds, ratio to the read pass)
    rows: Vec<(String, f64, f64)>,
}

impl Summary {
    fn note(&mut self, r: &Row) {
        if r.elements > self.elements {
            self.elements = r.elements;
            self.rows.clear();
        }
        if r.elements == self.elements {
            let density = r.density.map_or(String::new(), |d| format!(" {d}"));
            let key = format!("{} {}{density}", r.compressor, r.op);
            self.rows.push((key, r.seconds, r.ratio_to_read_pass));
        }
    }

    fn get(&self, key: &str) -> Option<(f64, f64)> {
        self.rows.iter().find(|(k, ..)| k == key).map(|&(_, s, r)| (s, r))
    }

    fn print(&self) {
        println!("\ntargets at {} elements:", self.elements);
        let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
        for (what, key, min) in [
            ("TernGrad compress+pack", "terngrad compress", 0.15),
            ("Gaussian-k selection, rho=0.001", "gaussiank compress 0.001", 0.30),
            ("sparse decode+aggregate (Top-k, rho=0.001)", "topk decode_aggregate 0.001", 0.30),
            ("ternary decode+aggregate", "terngrad decode_aggregate", 0.30),
        ] {
            if let Some((_, ratio)) = self.get(key) {
                println!(
                    "  {what:<44} {ratio:>6.3} x read pass (target >= {min:.2}): {}",
                    verdict(ratio >= min)
                );
            }
        }
        if let (Some((g, _)), Some((t, _))) =
            (self.get("gaussiank compress 0.001"), self.get("topk compress 0.001"))
        {
            let speedup = t / g;
            println!(
                "  {:<44} {speedup:>6.1} x faster    (target >= 10): {}",
                "Gaussian-k vs exact Top-k, rho=0.001",
                verdict(speedup >= 10.0)
            );
        }
        // Issue #13: the refined selector keeps Gaussian-k's one-pass speed.
        for rho in ["0.001", "0.01"] {
            if let (Some((r, _)), Some((g, _))) = (
                self.get(&format!("gaussiank-refined compress {rho}")),
                self.get(&format!("gaussiank compress {rho}")),
            ) {
                println!(
                    "  {:<44} {:>6.2} x its time  (target <= 1.5): {}",
                    format!("Gaussian-k refined vs Gaussian-k, rho={rho}"),
                    r / g,
                    verdict(r / g <= 1.5)
                );
            }
        }
    }
}
