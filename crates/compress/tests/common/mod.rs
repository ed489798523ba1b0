//! Reading the reference vectors of `scripts/sparseloco-vectors.py` and
//! `scripts/demo-vectors.py`: tensors as f32 bit patterns in hex.

#![allow(dead_code)]

use gradcomp_compress::aggregate::{combine_unit, Scratch};
use gradcomp_compress::Combine;
use serde_json::Value;

/// The file `tests/vectors/<name>`.
pub fn load(name: &str) -> Value {
    let path = format!("{}/tests/vectors/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("a committed vector file")).expect("JSON")
}

/// Hex of f32 bit patterns, 8 digits each.
pub fn hex_f32s(hex: &str) -> Vec<f32> {
    (0..hex.len() / 8)
        .map(|i| f32::from_bits(u32::from_str_radix(&hex[8 * i..8 * i + 8], 16).unwrap()))
        .collect()
}

/// A tensor `{"shape": …, "f32": HEX}`, or a bare hex scalar.
pub fn tensor(v: &Value) -> Vec<f32> {
    match v {
        Value::String(h) => hex_f32s(h),
        _ => hex_f32s(v["f32"].as_str().expect("an f32 tensor")),
    }
}

pub fn scalar(v: &Value) -> f32 {
    tensor(v)[0]
}

pub fn ints(v: &Value) -> Vec<usize> {
    v.as_array().expect("an array").iter().map(|x| x.as_u64().unwrap() as usize).collect()
}

/// Hex bytes, 2 digits each.
pub fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect()
}

/// The largest |a − b| over `scale`, for a tolerance check.
pub fn worst(got: &[f32], want: &[f32], scale: f32) -> f32 {
    assert_eq!(got.len(), want.len(), "lengths differ");
    got.iter().zip(want).map(|(a, b)| (a - b).abs() / scale).fold(0.0, f32::max)
}

/// Per chunk, the recorded positions sorted (the reference's order is
/// torch's unsorted top-k order).
pub fn sorted_chunks(indices: &[usize], k: usize) -> Vec<Vec<usize>> {
    indices
        .chunks(k)
        .map(|c| {
            let mut c = c.to_vec();
            c.sort_unstable();
            c
        })
        .collect()
}

/// The senders' mean of the workers' encoded messages (`clip`: Templar's
/// median-norm clip first), `len` values.
pub fn senders_mean(wires: &[Vec<u8>], clip: bool, len: usize, scratch: &mut Scratch) -> Vec<f32> {
    let mut got = vec![0.0; len];
    let slices: Vec<&[u8]> = wires.iter().map(|w| &w[..]).collect();
    combine_unit(&slices, Combine::SenderMean { clip }, Some(0), &mut got, scratch)
        .expect("the workers' messages combine");
    got
}
