//! How a chunked message's selected values travel: as f32, or as codes
//! into a small per-unit codebook that the message carries.
//!
//! - `Nbit` (1, 2, 4 or 8 bits; SparseLoCo's 2): Templar's statistical
//!   quantizer (`tplr/compress.py`, `_quantize_values`) with `B = 2^bits`
//!   bins: `shift` = the mean, `c = v − shift`, `scale = range·σ/B` with σ
//!   the sample deviation of c (`range` = 6), code `clamp(round_half_even(c/scale
//!   + B/2), 0, B−1)`; the codebook holds each bin's mean of c plus `shift`
//!   (an empty bin: `shift`), which is what the reference dequantizes to.
//! - `Sign` (1 bit; dct-topk's default): the sign, decoded to the mean of
//!   the selected values of that sign (1-bit SGD's two means), so the unit's
//!   mass survives and error feedback removes exactly what was sent.
//! - `F32`: the values themselves (DeMo's code sends f32).

use serde::{Deserialize, Serialize};

/// See the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ValueCoding {
    #[serde(rename = "1bit")]
    Bits1,
    #[serde(rename = "2bit")]
    Bits2,
    #[serde(rename = "4bit")]
    Bits4,
    #[serde(rename = "8bit")]
    Bits8,
    Sign,
    F32,
}

impl ValueCoding {
    /// Bits per value on the wire.
    pub fn bits(self) -> u32 {
        match self {
            Self::Bits1 | Self::Sign => 1,
            Self::Bits2 => 2,
            Self::Bits4 => 4,
            Self::Bits8 => 8,
            Self::F32 => 32,
        }
    }
}

/// Templar's `quantization_range`: the bins span `range` deviations.
pub const RANGE: f32 = 6.0;

/// Templar's quantizer's statistics of `v`: (`shift`, `scale`). The mean
/// and the norm are summed in f64 (torch's f32 reductions sum in another
/// order, so these two may differ from the reference's in the last bits;
/// the vectors' test reads the reference's values to check the rest exactly).
pub fn stats(v: &[f32], bins: usize) -> (f32, f32) {
    if v.is_empty() {
        return (0.0, 1.0);
    }
    let shift = (v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64) as f32;
    let ss: f64 = v.iter().map(|&x| f64::from(x - shift).powi(2)).sum();
    let norm = ss.sqrt() as f32;
    let std = norm / ((v.len() as f64 - 1.0).sqrt() as f32);
    let scale = RANGE * std / bins as f32;
    (shift, if scale == 0.0 || !scale.is_finite() { 1.0 } else { scale })
}

/// Writes `v`'s codes for `B = bins` (`codes`, one per value) and the
/// codebook (`B` values) for the statistics `shift` and `scale`. `sums`
/// and `counts` are scratch of `B` entries.
pub fn quantize_with(
    v: &[f32],
    bins: usize,
    (shift, scale): (f32, f32),
    codes: &mut Vec<u8>,
    codebook: &mut Vec<f32>,
) {
    let offset = (bins / 2) as f32;
    let top = (bins - 1) as f32;
    let mut sums = [0.0f32; 256];
    let mut counts = [0u32; 256];
    codes.reserve(v.len());
    for &x in v {
        let c = x - shift;
        let q = (c / scale + offset).round_ties_even().clamp(0.0, top);
        // NaN (a non-finite input) lands in bin 0; the trainer refuses it earlier.
        let q = if q.is_nan() { 0 } else { q as usize };
        sums[q] += c;
        counts[q] += 1;
        codes.push(q as u8);
    }
    codebook.clear();
    codebook
        .extend((0..bins).map(|b| if counts[b] == 0 { shift } else { sums[b] / counts[b] as f32 + shift }));
}

/// The sign coding of `v`: code 1 for ≥ 0, and the codebook of the two
/// signs' means (0 for a sign with no value).
pub fn sign_with_means(v: &[f32], codes: &mut Vec<u8>, codebook: &mut Vec<f32>) {
    let (mut sums, mut counts) = ([0.0f64; 2], [0u32; 2]);
    codes.reserve(v.len());
    for &x in v {
        let q = usize::from(x >= 0.0);
        sums[q] += f64::from(x);
        counts[q] += 1;
        codes.push(q as u8);
    }
    codebook.clear();
    codebook
        .extend((0..2).map(|b| if counts[b] == 0 { 0.0 } else { (sums[b] / f64::from(counts[b])) as f32 }));
}

/// Codes and codebook of `v` for `coding` (not `F32`).
pub fn quantize(v: &[f32], coding: ValueCoding, codes: &mut Vec<u8>, codebook: &mut Vec<f32>) {
    match coding {
        ValueCoding::Sign => sign_with_means(v, codes, codebook),
        ValueCoding::F32 => unreachable!("f32 values are not coded"),
        _ => {
            let bins = 1usize << coding.bits();
            quantize_with(v, bins, stats(v, bins), codes, codebook)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_bit_bins_are_templars_asymmetric_ones() {
        // shift 0, scale 1: c < −1.5 → 0, [−1.5, −0.5) → 1, [−0.5, 0.5] → 2, above → 3.
        let v = [-2.0f32, -1.0, -0.5, 0.0, 0.5, 0.6, 3.0];
        let (mut codes, mut book) = (Vec::new(), Vec::new());
        quantize_with(&v, 4, (0.0, 1.0), &mut codes, &mut book);
        assert_eq!(codes, [0, 1, 2, 2, 2, 3, 3], "ties go to even: −0.5 → 1.5 → 2, 0.5 → 2.5 → 2");
        assert_eq!(book, [-2.0, -1.0, 0.0, 1.8]);
    }

    #[test]
    fn signs_decode_to_their_means() {
        let (mut codes, mut book) = (Vec::new(), Vec::new());
        sign_with_means(&[1.0, -2.0, 3.0, 0.0], &mut codes, &mut book);
        assert_eq!(codes, [1, 0, 1, 1]);
        assert_eq!(book, [-2.0, 4.0 / 3.0]);
    }
}
