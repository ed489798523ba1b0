//! 1-bit SGD (Seide et al., 2014), ALGORITHMS.md §5: send the sign of every
//! element and two reconstruction values, the mean of the non-negative
//! elements and the mean of the negative ones. Pair it with
//! [`ErrorFeedback`](crate::memory::ErrorFeedback): `e = x − decompress(x)`.

use serde::{Deserialize, Serialize};

use crate::compressor::{Combine, Compressor, UnitContext};
use crate::memory::MemoryKind;
use crate::message::Message;
use crate::method::Method;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OneBitConfig {}

#[derive(Clone, Debug, Default)]
pub struct OneBit;

impl Compressor for OneBit {
    fn name(&self) -> &'static str {
        "onebit"
    }

    fn combine(&self) -> Combine {
        Combine::Gather
    }

    fn compress(&mut self, input: &[f32], _ctx: &UnitContext, out: &mut Message) {
        sign_message(input, out, |pos_sum, pos_n, neg_sum| {
            sign_means(pos_sum, pos_n, neg_sum, input.len() - pos_n)
        });
    }
}

/// Makes `out` the sign message of `x`, the one form every sign compressor
/// sends: its bits, and the values of a set and a clear bit that `values`
/// computes from (Σ of the non-negatives, their count, Σ of the negatives).
pub(crate) fn sign_message(x: &[f32], out: &mut Message, values: impl FnOnce(f64, usize, f64) -> (f32, f32)) {
    let m = out.sign_mut();
    m.len = x.len();
    m.bits.clear();
    m.bits.resize(x.len().div_ceil(8), 0);
    let (pos_sum, pos_n, neg_sum) = sign_bits(x, &mut m.bits);
    (m.positive, m.negative) = values(pos_sum, pos_n, neg_sum);
}

/// The two reconstruction values from the sums and counts of the
/// non-negative and negative elements (shared with the device kernel, so
/// both give the same bits). Near f32::MAX the f32 partial sums overflow;
/// the means then saturate at ±f32::MAX instead of ±inf, which keeps the
/// message decodable, and error feedback carries the difference.
pub fn sign_means(pos_sum: f64, pos_n: usize, neg_sum: f64, neg_n: usize) -> (f32, f32) {
    let mean = |sum: f64, n: usize| {
        if n == 0 {
            0.0
        } else {
            ((sum / n as f64) as f32).clamp(f32::MIN, f32::MAX)
        }
    };
    (mean(pos_sum, pos_n), mean(neg_sum, neg_n))
}

multiversion! {
/// Writes the sign bits of `x` (1 = non-negative; NaN counts as negative so
/// the pattern stays defined) and returns (Σ of non-negatives, their count,
/// Σ of negatives). Sums are kept per 8-element group in f32 and folded into
/// f64 per block of 1024.
fn sign_bits(x: &[f32], bits: &mut [u8]) -> (f64, usize, f64) {
    const BLOCK_BYTES: usize = 128;
    let (mut pos, mut neg, mut n_pos) = (0.0f64, 0.0f64, 0usize);
    for (xb, bb) in x.chunks(8 * BLOCK_BYTES).zip(bits.chunks_mut(BLOCK_BYTES)) {
        let (mut p, mut q) = ([0.0f32; 8], [0.0f32; 8]);
        let mut xs = xb.chunks_exact(8);
        for (c, byte) in (&mut xs).zip(bb.iter_mut()) {
            let c: &[f32; 8] = c.try_into().expect("chunks_exact yields 8");
            let mut b = 0u8;
            for j in 0..8 {
                let nonneg = c[j] >= 0.0;
                b |= u8::from(nonneg) << j;
                p[j] += if nonneg { c[j] } else { 0.0 };
                q[j] += if nonneg { 0.0 } else { c[j] };
            }
            n_pos += b.count_ones() as usize;
            *byte = b;
        }
        let rem = xs.remainder();
        if !rem.is_empty() {
            let mut b = 0u8;
            for (j, &v) in rem.iter().enumerate() {
                let nonneg = v >= 0.0;
                b |= u8::from(nonneg) << j;
                if nonneg {
                    p[j] += v;
                } else {
                    q[j] += v;
                }
            }
            n_pos += b.count_ones() as usize;
            *bb.last_mut().expect("a remainder has its byte") = b;
        }
        pos += p.iter().map(|&v| f64::from(v)).sum::<f64>();
        neg += q.iter().map(|&v| f64::from(v)).sum::<f64>();
    }
    (pos, n_pos, neg)
}
}

impl Method for OneBitConfig {
    fn default_memory(&self) -> MemoryKind {
        MemoryKind::ErrorFeedback
    }
    fn build(&self, _shape: &[usize]) -> Box<dyn crate::Compressor> {
        Box::new(OneBit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn means_near_the_largest_float_saturate_and_decode() {
        let x: Vec<f32> = (0..3000).map(|i| if i % 3 == 0 { -f32::MAX } else { f32::MAX * 0.9 }).collect();
        let mut msg = Message::default();
        OneBit.compress(&x, &UnitContext::default(), &mut msg);
        let Message::Sign(m) = &msg else { panic!("sign message") };
        assert_eq!((m.positive, m.negative), (f32::MAX, f32::MIN));
        let mut bytes = Vec::new();
        crate::codec::encode(&msg, 0, &mut bytes);
        let mut out = vec![0.0; x.len()];
        crate::codec::accumulate(&bytes, 1.0, &mut out).expect("its own decoder accepts it");
        assert!(out.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn reconstruction_values_are_the_two_means() {
        let g = [1.0, 3.0, -2.0, -4.0, 0.0, -6.0, 2.0, 5.0, -1.0];
        let mut msg = Message::default();
        OneBit.compress(&g, &UnitContext::default(), &mut msg);
        let Message::Sign(m) = &msg else { panic!() };
        assert_eq!(m.positive, (1.0 + 3.0 + 0.0 + 2.0 + 5.0) / 5.0);
        assert_eq!(m.negative, (-2.0 - 4.0 - 6.0 - 1.0) / 4.0);
        let mut out = [0.0; 9];
        msg.decompress_into(&mut out);
        assert_eq!(out[0], m.positive);
        assert_eq!(out[8], m.negative);
        // The decompressed sum equals the input sum: the means preserve mass.
        let s: f32 = out.iter().sum();
        assert!((s - g.iter().sum::<f32>()).abs() < 1e-5);
    }
}
