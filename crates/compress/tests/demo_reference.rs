//! gradcomp's `dct-topk` (with f32 values, as `demo.py` sends) against
//! DeMo's optimizer (`bloc97/DeMo` `demo.py`), on the vectors
//! `scripts/demo-vectors.py` recorded in three gloo processes: a 70×13
//! matrix and a 60-vector with the paper's options (chunk 64, top 32,
//! decay 0.999), and a 28×30 matrix and a 130-vector (chunk 16, top 5,
//! decay 0.9), three steps each. Per worker and step: the kept coefficients
//! of every chunk, their values, the memory after; per step, the senders'
//! mean decoded (before DeMo's sign) and its sign.
//!
//! DeMo folds its learning rate into the memory (`δ ← β·δ + lr·g`), so the
//! gradient enters as `lr·g`. Its DCT matrices come from an f32 FFT and its
//! products from BLAS, so values agree to a tolerance (2e-6 of the largest
//! magnitude; observed 3.5e-7), the kept positions exactly, and the
//! aggregate's signs exactly wherever the aggregate is not within that
//! tolerance of zero. The basis itself is checked against DeMo's matrices.

mod common;

use common::{ints, load, sorted_chunks, tensor, worst};
use gradcomp_compress::aggregate::Scratch;
use gradcomp_compress::chunked::{dct, DctTopKConfig, ValueCoding};
use gradcomp_compress::codec;
use gradcomp_compress::memory::{ErrorFeedback, Memory, ResidualForm};
use gradcomp_compress::method::Method;
use gradcomp_compress::{Message, UnitContext};

const TOLERANCE: f32 = 2e-6;

fn largest(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |a, v| a.max(v.abs())).max(f32::MIN_POSITIVE)
}

fn run(name: &str) {
    let file = load(name);
    let o = &file["options"];
    let lr = o["lr"].as_f64().unwrap() as f32;
    let cfg = DctTopKConfig {
        k: o["compression_topk"].as_u64().unwrap() as usize,
        chunk: o["compression_chunk"].as_u64().unwrap() as usize,
        vector_chunk: o["compression_chunk"].as_u64().unwrap() as usize,
        values: ValueCoding::F32,
        decay: o["compression_decay"].as_f64().unwrap() as f32,
    };
    cfg.validate().unwrap();
    let params = ["mat", "vec"];
    let shapes: Vec<Vec<usize>> = params.iter().map(|p| ints(&file["shapes"][p])).collect();
    let workers = file["workers"].as_u64().unwrap() as usize;
    let mut memories: Vec<Vec<ErrorFeedback>> = (0..workers)
        .map(|_| params.iter().map(|_| ErrorFeedback::with_decay(ResidualForm::Raw, cfg.decay)).collect())
        .collect();
    let mut scratch = Scratch::default();
    for (r, round) in file["rounds"].as_array().unwrap().iter().enumerate() {
        for (pi, param) in params.iter().enumerate() {
            let mut wires = Vec::new();
            for (w, memory) in memories.iter_mut().enumerate() {
                let what = format!("{name} step {r} worker {w} {param}");
                let rec = &round["workers"][w];
                let grad: Vec<f32> = tensor(&rec["grad"][param]).iter().map(|g| lr * g).collect();
                let acc = memory[pi].compensate(&grad, 1.0).to_vec();
                let mut msg = Message::default();
                cfg.build(&shapes[pi]).compress(&acc, &UnitContext::default(), &mut msg);
                let Message::Chunked(m) = &msg else { panic!("{what}: not a chunked message") };
                let want = &rec["message"][param];
                let k = *ints(&want["idx_shape"]).last().unwrap();
                let recorded = ints(&want["idx"]);
                let mine: Vec<usize> = m.positions.iter().map(|&p| usize::from(p)).collect();
                assert_eq!(sorted_chunks(&mine, k), sorted_chunks(&recorded, k), "{what}: kept coefficients");
                // Values: the reference's in its order, gradcomp's looked up by (chunk, position).
                let want_vals = tensor(&want["val"]);
                let at = |chunk: usize, p: usize| {
                    let e = (chunk * k..chunk * k + k).find(|&e| usize::from(m.positions[e]) == p).unwrap();
                    m.values[e]
                };
                let got_vals: Vec<f32> = recorded.iter().enumerate().map(|(e, &p)| at(e / k, p)).collect();
                let off = worst(&got_vals, &want_vals, largest(&want_vals));
                assert!(off <= TOLERANCE, "{what}: coefficients off by {off}");
                memory[pi].update(&msg);
                let want_delta = tensor(&rec["delta_after"][param]);
                let off = worst(memory[pi].residual(), &want_delta, largest(&acc));
                assert!(off <= TOLERANCE, "{what}: memory off by {off}");
                let mut bytes = Vec::new();
                codec::encode(&msg, 0, &mut bytes);
                wires.push(bytes);
            }
            let want = tensor(&round["aggregate"][param]);
            let got = common::senders_mean(&wires, false, want.len(), &mut scratch);
            let scale = largest(&want);
            let off = worst(&got, &want, scale);
            assert!(off <= TOLERANCE, "{name} step {r} {param}: aggregate off by {off}");
            let signs = tensor(&round["sign_aggregate"][param]);
            for ((g, s), a) in got.iter().zip(&signs).zip(&want) {
                if a.abs() > TOLERANCE * scale {
                    assert_eq!(g.signum(), *s, "{name} step {r} {param}: sign of {a}");
                }
            }
        }
    }
}

#[test]
fn papers_options_match_demo() {
    run("demo-prod.json");
}

#[test]
fn small_chunks_with_weight_decay_match_demo() {
    run("demo-small.json");
}

/// gradcomp's DCT-II matrices (from the cosine formula, in f64) against the
/// ones DeMo builds through an f32 FFT.
#[test]
fn the_dct_basis_matches_demos() {
    let file = load("demo-dct-basis.json");
    let bases = file["basis"].as_object().unwrap();
    let mut checked = 0;
    for (n, v) in bases.iter().filter_map(|(k, v)| k.parse::<usize>().ok().map(|n| (n, v))) {
        let f = tensor(&v["f"]);
        // DeMo's f[j][q] is frequency q of e_j: gradcomp's C_n transposed.
        let ct = &dct::basis(n).t;
        assert!(worst(ct, &f, 1.0) <= 1e-7, "{n}: basis off by {}", worst(ct, &f, 1.0));
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} sizes in the basis file");
}
