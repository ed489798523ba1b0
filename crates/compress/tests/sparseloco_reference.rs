//! gradcomp's `sparseloco` against Templar's SparseLoCo (`tplr/compress.py`
//! and `neurons.py` at v2.1.3), on the vectors `scripts/sparseloco-vectors.py`
//! recorded: three workers, three rounds, a 70×13 matrix and a 100-vector
//! (production options) and a 28×30 matrix and a 130-vector (k = 6 of
//! 16-wide chunks). Per worker and round: the error-compensated input
//! (decay, then add), the kept positions of every chunk, the codes and
//! the dequantized values, and the memory after; per round, the aggregate
//! (median-norm clip, senders' mean).
//!
//! Exact (bit for bit) everywhere but two reductions: torch sums the mean
//! (`shift`) and the norm behind `scale` in its own vectorized order, and
//! the workers' value norms behind the clip likewise, so gradcomp's own
//! figures for those differ in the last bits. The test checks them to a
//! few parts in 10⁷, then feeds the reference's `shift` and `scale` to the
//! quantizer and its lookup order to the bins' means, and from there
//! requires equality: codes, dequantized values, memories; the aggregate is
//! exact wherever the clip factor is 1 and within 1e-6 elsewhere.

mod common;

use common::{ints, load, scalar, sorted_chunks, tensor, worst};
use gradcomp_compress::aggregate::Scratch;
use gradcomp_compress::chunked::values::quantize_with;
use gradcomp_compress::chunked::{values, SparseLocoConfig, ValueCoding};
use gradcomp_compress::codec;
use gradcomp_compress::memory::{ErrorFeedback, Memory, ResidualForm};
use gradcomp_compress::message::ChunkedMessage;
use gradcomp_compress::method::Method;
use gradcomp_compress::{Message, UnitContext};
use serde_json::Value;

/// One parameter's state on one worker: its memory.
struct Worker {
    memory: ErrorFeedback,
}

fn config(file: &Value) -> SparseLocoConfig {
    let o = &file["options"];
    SparseLocoConfig {
        k: file["chunking"]["mat"]["k_effective"].as_u64().unwrap() as usize,
        chunk: o["target_chunk"].as_u64().unwrap() as usize,
        vector_chunk: o["target_chunk"].as_u64().unwrap() as usize,
        values: ValueCoding::Bits2,
        decay: o["momentum_decay"].as_f64().unwrap() as f32,
        clip: true,
    }
}

/// Checks one worker's message of one parameter against the reference's and
/// returns gradcomp's message made exact: its positions, with the codes and
/// codebook of the reference's statistics and lookup order.
fn check_message(what: &str, acc: &[f32], got: &Message, want: &Value) -> ChunkedMessage {
    let Message::Chunked(m) = got else { panic!("{what}: not a chunked message") };
    let xshape = ints(&want["xshape"]);
    let (th, tw) = if xshape.len() == 4 { (xshape[2], xshape[3]) } else { (1, xshape[1]) };
    assert_eq!((m.tiles.tile_rows, m.tiles.tile_cols), (th, tw), "{what}: tile shape");
    let k = *ints(&want["indices_shape"]).last().unwrap();
    let recorded = ints(&want["indices"]);
    let mine: Vec<usize> = m.positions.iter().map(|&p| usize::from(p)).collect();
    assert_eq!(sorted_chunks(&mine, k), sorted_chunks(&recorded, k), "{what}: kept positions per chunk");

    // The values in the reference's order, from gradcomp's compensated input.
    let flat = |t: usize, p: usize| {
        let (r0, c0, _, w) = m.tiles.tile(t);
        m.tiles.flat((r0, c0, w), p)
    };
    let v: Vec<f32> = recorded.iter().enumerate().map(|(e, &p)| acc[flat(e / k, p)]).collect();
    let (shift, scale) = (scalar(&want["shift"]), scalar(&want["scale"]));
    let (my_shift, my_scale) = values::stats(&v, 4);
    assert!((my_shift - shift).abs() <= 4e-7 * scale, "{what}: shift {my_shift} vs {shift}");
    assert!((my_scale / scale - 1.0).abs() <= 4e-7, "{what}: scale {my_scale} vs {scale}");
    let (mut codes, mut book) = (Vec::new(), Vec::new());
    quantize_with(&v, 4, (shift, scale), &mut codes, &mut book);
    assert_eq!(codes, common::hex_bytes(want["codes"].as_str().unwrap()), "{what}: codes");
    let dequantized: Vec<f32> = codes.iter().map(|&c| book[usize::from(c)]).collect();
    assert_eq!(dequantized, tensor(&want["dequantized"]), "{what}: dequantized values");

    // gradcomp's message with these codes, in its own (ascending) order.
    let mut exact = m.clone();
    exact.codebook = book;
    let code_at: std::collections::HashMap<(usize, usize), u8> =
        recorded.iter().enumerate().map(|(e, &p)| ((e / k, p), codes[e])).collect();
    let mut e = 0;
    for t in 0..m.tiles.count() {
        for _ in 0..m.tiles.k_of(t, m.k as usize) {
            exact.codes[e] = code_at[&(t, usize::from(m.positions[e]))];
            e += 1;
        }
    }
    exact
}

fn run(name: &str) {
    let file = load(name);
    let cfg = config(&file);
    cfg.validate().unwrap();
    let params = ["mat", "vec"];
    let shapes: Vec<Vec<usize>> = params.iter().map(|p| ints(&file["shapes"][p])).collect();
    let workers = file["workers"].as_u64().unwrap() as usize;
    let mut state: Vec<Vec<Worker>> = (0..workers)
        .map(|_| {
            params
                .iter()
                .map(|_| Worker { memory: ErrorFeedback::with_decay(ResidualForm::Raw, cfg.decay) })
                .collect()
        })
        .collect();
    let mut scratch = Scratch::default();
    for (r, round) in file["rounds"].as_array().unwrap().iter().enumerate() {
        for (pi, param) in params.iter().enumerate() {
            let mut wires = Vec::new();
            for (w, worker) in state.iter_mut().enumerate() {
                let what = format!("{name} round {r} worker {w} {param}");
                let rec = &round["workers"][w];
                let grad = tensor(&rec["grad"][param]);
                let memory = &mut worker[pi].memory;
                let acc = memory.compensate(&grad, 1.0).to_vec();
                let mut msg = Message::default();
                cfg.build(&shapes[pi]).compress(&acc, &UnitContext::default(), &mut msg);
                let exact = check_message(&what, &acc, &msg, &rec["message"][param]);
                let exact = Message::Chunked(exact);
                memory.update(&exact);
                assert_eq!(
                    memory.residual(),
                    &tensor(&rec["error_feedback_after"][param])[..],
                    "{what}: memory"
                );
                let mut bytes = Vec::new();
                codec::encode(&exact, 0, &mut bytes);
                wires.push(bytes);
            }
            let want = tensor(&round["aggregate"][param]);
            let got = common::senders_mean(&wires, true, want.len(), &mut scratch);
            let scale = want.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let off = worst(&got, &want, scale);
            assert!(off <= 1e-6, "{name} round {r} {param}: aggregate off by {off} of its largest value");
            let exact = got.iter().zip(&want).filter(|(a, b)| a.to_bits() == b.to_bits()).count();
            // The clip leaves the median worker's values (and every smaller one's) alone.
            assert!(
                exact * 3 >= want.len(),
                "{name} round {r} {param}: only {exact} of {} exact",
                want.len()
            );
        }
    }
}

#[test]
fn production_options_match_templar() {
    run("sparseloco-prod.json");
}

#[test]
fn small_k_matches_templar() {
    run("sparseloco-smallk.json");
}
