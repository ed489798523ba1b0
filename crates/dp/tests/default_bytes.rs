//! Defaults keep their promise: for every compressor, the default
//! configuration (`DataParallelConfig::new(compressor)`, the topology and
//! granularity the compressor needs) sends fewer bytes per step than dense,
//! at N = 2, 4 and 16 workers, and at most the fraction of dense's bytes that
//! docs/ALGORITHMS.md's table "Default bytes" states for it. The table is
//! read from the document, so the document cannot drift from the code.

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::SgdConfig;
use burn::tensor::Device;
use gradcomp_comm::InProcessGroup;
use gradcomp_compress::{CompressorConfig, UnitRng};
use gradcomp_dp::{params, DataParallelConfig, InitDataParallel};

/// The reference model: an MLP of 784×256, 256, 256×10 and 10 parameters.
#[derive(Module, Debug)]
struct Reference {
    hidden: Linear,
    out: Linear,
}

fn reference(device: &Device) -> Reference {
    Reference {
        hidden: LinearConfig::new(784, 256).init(device),
        out: LinearConfig::new(256, 10).init(device),
    }
}

/// Bytes worker 0 sends in each of two steps with `cfg` among `n` workers,
/// each worker's gradient drawn from N(0, 10⁻⁶) (a typical gradient's scale),
/// from the first step the compressor compresses.
fn bytes_per_step(cfg: &DataParallelConfig, n: usize) -> Vec<u64> {
    let device = gradcomp_dp::default_device();
    device.seed(1);
    let model = reference(&device);
    let per_worker = InProcessGroup::new(n)
        .run(|c| {
            let rank = gradcomp_comm::Collective::rank(&c);
            let (mut dp, mut model) = cfg.clone().with_checksum_every(0).init(c, model.clone()).unwrap();
            let mut state = dp.state().unwrap();
            state.step = cfg.compressor.first_compressed_step();
            dp.restore(&state).unwrap();
            let mut optim = SgdConfig::new().init();
            let mut rng = UnitRng::from_parts(&[rank as u64, 7]);
            let mut sent = Vec::new();
            for _ in 0..2 {
                let flat: Vec<f32> =
                    (0..dp.layout().total()).map(|_| rng.next_gaussian() as f32 * 1e-3).collect();
                let grads = params::grads_params(&model, &flat);
                model = dp.step(model, (grads, 1.0), &mut optim, 0.01).unwrap();
                sent.push(dp.last_step().bytes.sent());
            }
            sent
        })
        .unwrap();
    per_worker.into_iter().next().unwrap().unwrap()
}

/// The stated ratios: the rows of the table under `<!-- default-bytes -->`
/// in docs/ALGORITHMS.md, as (compressor, at most this × dense's bytes).
fn stated() -> Vec<(String, f64)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/ALGORITHMS.md");
    let text = std::fs::read_to_string(path).unwrap();
    let table =
        text.split("<!-- default-bytes -->").nth(1).expect("the default-bytes table in ALGORITHMS.md");
    table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            let ratio: f64 = cells.get(4)?.trim_start_matches("≤ ").parse().ok()?;
            Some((name.to_string(), ratio))
        })
        .collect()
}

#[test]
fn every_default_configuration_sends_less_than_dense_by_the_stated_ratio() {
    let stated = stated();
    let mut report = String::new();
    let mut failures = Vec::new();
    for n in [2, 4, 16] {
        let dense = bytes_per_step(&DataParallelConfig::new(CompressorConfig::dense()), n);
        for name in CompressorConfig::NAMES.iter().filter(|&&c| c != "dense") {
            let cfg = DataParallelConfig::new(CompressorConfig::named(name).unwrap());
            let bytes = bytes_per_step(&cfg, n);
            let ratio = bytes.iter().max().copied().unwrap() as f64 / dense[0] as f64;
            let bound = stated.iter().find(|(s, _)| s == name).map(|s| s.1);
            report += &format!("N={n} {name}: {bytes:?} bytes against dense's {}: {ratio:.4}\n", dense[0]);
            match bound {
                None => failures.push(format!("{name}: no row in ALGORITHMS.md's default-bytes table")),
                Some(b) if !(ratio <= b && ratio < 1.0) => {
                    failures.push(format!("N={n} {name}: {ratio:.4} of dense's bytes, stated at most {b}"))
                }
                Some(_) => {}
            }
        }
    }
    println!("{report}");
    assert!(failures.is_empty(), "{}\n{report}", failures.join("\n"));
}

/// The compressors of issue #24 send exactly the bytes ALGORITHMS.md §7
/// states, per unit of the reference model (784×256, 256, 256×10, 10), at
/// N = 4: a 12-byte header per message, then their payload.
#[test]
fn the_newer_compressors_send_exactly_their_formula() {
    let units: [usize; 4] = [784 * 256, 256, 256 * 10, 10];
    let sign: usize = units.iter().map(|d| 12 + 8 + d.div_ceil(8)).sum();
    let natural: usize = units.iter().map(|d| 12 + d).sum();
    let eightbit: usize = units.iter().map(|d| 12 + 4 + 4 * d.div_ceil(4096) + d).sum();
    let fp4: usize = units.iter().map(|d| 12 + 4 + 4 * d.div_ceil(32) + d.div_ceil(2)).sum();
    // PowerSGD at rank 1: P and Q of both matrices, the biases dense.
    let powersgd = 4 * ((784 + 256) + (256 + 10)) + 4 * (256 + 10);
    // Chunked top-k: 12 + 24 + 4·2^b + ⌈E·p/8⌉ + ⌈E·b/8⌉ per unit, E = tiles · min(k, tile
    // size) entries of p-bit positions and b-bit values. Per unit (tiles, tile size, p): the
    // 784×256 weight in 56×64 tiles (784 = 14·56); the bias of 256 in runs of 64; the 256×10
    // weight in 64×10 tiles; the bias of 10 in one run.
    let tiles = [(14 * 4, 56 * 64, 12), (4, 64, 6), (4, 64 * 10, 10), (1, 10, 4)];
    let chunked = |k: usize, b: usize| -> usize {
        tiles
            .iter()
            .map(|&(n, size, p)| {
                let e = n * k.min(size);
                12 + 24 + 4 * (1 << b) + (e * p).div_ceil(8) + (e * b).div_ceil(8)
            })
            .sum()
    };
    let (sparseloco, dct_topk) = (chunked(64, 2), chunked(32, 1));
    for (name, want) in [
        ("signsgd", sign),
        ("signum", sign),
        ("efsignsgd", sign),
        ("natural", natural),
        ("eightbit", eightbit),
        ("fp4", fp4),
        ("sparseloco", sparseloco),
        ("dct-topk", dct_topk),
        ("powersgd", powersgd),
    ] {
        let cfg = DataParallelConfig::new(CompressorConfig::named(name).unwrap());
        assert_eq!(bytes_per_step(&cfg, 4), [want as u64; 2], "{name}");
    }
}
