//! gradcomp's signSGD, Signum, EF-SignSGD and natural compression against
//! GRACE's PyTorch compressors, and its 8-bit quantization against
//! bitsandbytes, on the vectors `scripts/grace-vectors.py` recorded
//! (tests/vectors/grace.json; versions in its `made_with`). GRACE's
//! Allgather communicator is replayed here as the exchange runs it: every
//! worker compresses (through its memory, if it has one), the messages are
//! decoded and combined by the compressor's [`Combine`].

use gradcomp_compress::aggregate::majority_vote;
use gradcomp_compress::codebook::{dynamic_codebook, natural_value};
use gradcomp_compress::memory::{ErrorFeedback, Memory, ResidualForm};
use gradcomp_compress::quantize::eightbit::EightBitConfig;
use gradcomp_compress::quantize::natural::natural_code;
use gradcomp_compress::{Combine, Compressor, CompressorConfig, Message, UnitContext};
use serde_json::Value;

fn vectors() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/grace.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().expect("an array of numbers").iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn ints(v: &Value) -> Vec<u64> {
    v.as_array().expect("an array of integers").iter().map(|x| x.as_u64().unwrap()).collect()
}

/// Replays `steps` (each worker's gradient, GRACE's aggregate) through one
/// compressor (and memory) per worker, combined as the exchange combines
/// them; returns gradcomp's combined gradient per step and GRACE's.
fn replay(config: &CompressorConfig, memory: bool, steps: &Value) -> Vec<(Vec<f32>, Vec<f32>)> {
    let steps = steps.as_array().unwrap();
    let workers = steps[0]["grads"].as_array().unwrap().len();
    let mut compressors: Vec<Box<dyn Compressor>> = (0..workers).map(|_| config.build()).collect();
    let mut memories: Vec<ErrorFeedback> =
        (0..workers).map(|_| ErrorFeedback::new(ResidualForm::Raw)).collect();
    let mut out = Vec::new();
    for step in steps {
        let want = floats(&step["aggregate"]);
        let mut combined = vec![0.0f32; want.len()];
        for (w, g) in step["grads"].as_array().unwrap().iter().enumerate() {
            let g = floats(g);
            let mut msg = Message::default();
            if memory {
                let acc = memories[w].compensate(&g, 1.0);
                compressors[w].compress(acc, &UnitContext::default(), &mut msg);
                memories[w].update(&msg);
            } else {
                compressors[w].compress(&g, &UnitContext::default(), &mut msg);
            }
            let weight = match compressors[w].combine() {
                Combine::MajorityVote => 1.0,
                _ => 1.0 / workers as f32,
            };
            msg.add_to(weight, &mut combined);
        }
        if compressors[0].combine() == Combine::MajorityVote {
            majority_vote(&mut combined);
        }
        out.push((combined, want));
    }
    out
}

/// signSGD's majority vote: GRACE's aggregate exactly, a tie going to +1
/// (two workers tie; three never do).
#[test]
fn signsgd_votes_as_grace_does() {
    let v = vectors();
    for workers in ["2", "3"] {
        for (step, (got, want)) in
            replay(&CompressorConfig::signsgd(), false, &v["signsgd"][workers]).iter().enumerate()
        {
            assert_eq!(got, want, "{workers} workers, step {step}");
        }
    }
}

/// Signum: each worker's momentum (the first step's m = g, as GRACE's) and
/// the vote, four steps, exactly.
#[test]
fn signum_follows_grace_step_after_step() {
    let v = &vectors()["signum"];
    let config = CompressorConfig::signum(v["momentum"].as_f64().unwrap() as f32);
    for (step, (got, want)) in replay(&config, false, &v["steps"]).iter().enumerate() {
        assert_eq!(got, want, "step {step}");
    }
}

/// EF-SignSGD with error feedback: GRACE sums the workers' scaled signs
/// (average=False) where gradcomp averages, so GRACE's aggregate is N times
/// gradcomp's; the residuals carried between the four steps are the same.
/// The scale ‖x‖₁/d is a sum in f32 in torch, in f64 here: equal to 10⁻⁵.
#[test]
fn efsignsgd_with_error_feedback_is_grace_averaged() {
    let v = &vectors()["efsignsgd"];
    let n = v["workers"].as_f64().unwrap() as f32;
    for (step, (got, want)) in replay(&CompressorConfig::efsignsgd(), true, &v["steps"]).iter().enumerate() {
        for (i, (&a, &b)) in got.iter().zip(want).enumerate() {
            assert!(
                (a * n - b).abs() <= 1e-5 * b.abs().max(1e-3),
                "step {step}, element {i}: {a} × {n} vs {b}"
            );
        }
    }
}

/// Natural compression given GRACE's own random draws: the same code and
/// value for every element from 2^−108 up (saturation at 2^18 included).
/// Below 2^−108 both give 0 or ±2^−108, by different rules (gradcomp's
/// unbiased, GRACE's by the mantissa). GRACE writes −0 as 0x80, which
/// gradcomp's decoders refuse as malformed; both mean zero.
#[test]
fn natural_codes_are_graces_given_its_draws() {
    let v = &vectors()["natural"];
    let (x, draws, codes, values) =
        (floats(&v["x"]), ints(&v["draws"]), ints(&v["codes"]), floats(&v["values"]));
    let mut compared = 0;
    for i in 0..x.len() {
        let ours = natural_code(x[i], draws[i] as u32, 0.5);
        if x[i].abs() >= 2f32.powi(-108) {
            assert_eq!(u64::from(ours), codes[i], "element {i} = {:e}", x[i]);
            compared += 1;
        } else {
            assert!([0.0, 2f32.powi(-108)].contains(&natural_value(ours).abs()), "element {i} = {:e}", x[i]);
        }
        if x[i].abs() >= 2f32.powi(-108) || x[i] == 0.0 {
            assert_eq!(natural_value(ours), values[i], "element {i} = {:e}", x[i]);
        }
    }
    assert!(compared > 300, "only {compared} elements in range");
}

/// 8-bit quantization: bitsandbytes' codebook value for value, and its
/// reference `quantize_blockwise` codes and block scales exactly, save one
/// difference of its own: a partial last block it scales by `x / absmax`
/// where whole blocks (and gradcomp, everywhere) take `x · (1/absmax)`; where
/// the two roundings differ, the code may differ by one.
#[test]
fn eightbit_is_bitsandbytes_quantize_blockwise() {
    let v = &vectors()["eightbit"];
    assert_eq!(&dynamic_codebook()[..], &floats(&v["codebook"])[..]);
    for case in v["cases"].as_array().unwrap() {
        let block = case["block"].as_u64().unwrap() as usize;
        let x = floats(&case["x"]);
        let mut msg = Message::default();
        CompressorConfig::Eightbit(EightBitConfig { block }).build().compress(
            &x,
            &UnitContext::default(),
            &mut msg,
        );
        let Message::Blockwise(m) = &msg else { panic!("not an 8-bit message") };
        assert_eq!(m.absmax, floats(&case["absmax"]), "block {block}: scales");
        let want = ints(&case["codes"]);
        let whole = x.len() / block * block;
        for (i, (&got, &want)) in m.codes.iter().zip(&want).enumerate() {
            let absmax = m.absmax[i / block];
            let rounded_alike = i < whole || x[i] / absmax == x[i] * (1.0 / absmax);
            if rounded_alike {
                assert_eq!(u64::from(got), want, "block {block}, element {i}");
            } else {
                assert!(u64::from(got).abs_diff(want) <= 1, "block {block}, element {i}");
            }
        }
    }
}
