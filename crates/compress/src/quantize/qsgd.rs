//! QSGD (Alistarh et al., 2017), ALGORITHMS.md §5: per bucket of `b`
//! elements with norm `n`, `ℓ = floor(s|v|/n)`, level `ℓ+1` with probability
//! `s|v|/n − ℓ` else `ℓ`; `Q(v) = n · sign(v) · level / s`. Unbiased.

use serde::{Deserialize, Serialize};

use super::two_u32;
use crate::compressor::{Combine, Compressor, UnitContext};
use crate::message::Message;
use crate::reduce;
use crate::rng::UnitRng;

/// Largest supported level count: signed levels are held in i16.
pub const MAX_LEVELS: u32 = i16::MAX as u32;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QsgdConfig {
    /// Quantization levels s (1..=32767). A signed level takes
    /// `ceil(log2(2s+1))` bits on the wire: s = 127 → 8 bits, s = 256 → 10.
    pub levels: u32,
    /// Bucket size b: one norm per b elements.
    pub bucket: usize,
}

impl Default for QsgdConfig {
    fn default() -> Self {
        Self {
            levels: 256,
            bucket: 512,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Qsgd {
    pub config: QsgdConfig,
}

impl Qsgd {
    pub fn new(config: QsgdConfig) -> Self {
        Self { config }
    }
}

impl Compressor for Qsgd {
    fn name(&self) -> &'static str {
        "qsgd"
    }

    fn combine(&self) -> Combine {
        Combine::Gather
    }

    fn compress(&mut self, input: &[f32], ctx: &UnitContext, out: &mut Message) {
        let levels = self.config.levels.clamp(1, MAX_LEVELS);
        let bucket = self.config.bucket.max(1);
        let m = out.qsgd_mut();
        m.levels = levels;
        m.bucket = bucket as u32;
        m.norms.clear();
        m.codes.clear();
        m.codes.resize(input.len(), 0);
        let mut rng = ctx.key.rng();
        for (v, codes) in input.chunks(bucket).zip(m.codes.chunks_mut(bucket)) {
            let norm = reduce::sum_of_squares(v).sqrt() as f32;
            let norm = if norm.is_finite() { norm } else { 0.0 };
            m.norms.push(norm);
            if norm > 0.0 {
                quantize_bucket(v, levels as f32 / norm, levels as i16, &mut rng, codes);
            }
        }
    }
}

/// Stochastic rounding of `|v|·scale` to an integer level, signed.
fn quantize_bucket(v: &[f32], scale: f32, max: i16, rng: &mut UnitRng, codes: &mut [i16]) {
    const TWO_32: f32 = 4_294_967_296.0;
    let level = |x: f32, u: u32| -> i16 {
        let r = x.abs() * scale;
        let floor = r.floor();
        let up = u64::from(u) < ((r - floor) * TWO_32) as u64;
        let l = (floor as i16 + i16::from(up)).min(max);
        if x.is_sign_negative() {
            -l
        } else {
            l
        }
    };
    let mut pairs_v = v.chunks_exact(2);
    let mut pairs_c = codes.chunks_exact_mut(2);
    for (x, c) in (&mut pairs_v).zip(&mut pairs_c) {
        let [u0, u1] = two_u32(rng.next_u64());
        c[0] = level(x[0], u0);
        c[1] = level(x[1], u1);
    }
    if let ([x], [c]) = (pairs_v.remainder(), pairs_c.into_remainder()) {
        *c = level(*x, rng.next_u64() as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::RngKey;

    #[test]
    fn levels_are_bounded_and_buckets_have_norms() {
        let g: Vec<f32> = (0..1100).map(|i| ((i * 37) % 101) as f32 - 50.0).collect();
        let mut q = Qsgd::new(QsgdConfig {
            levels: 4,
            bucket: 512,
        });
        let mut msg = Message::default();
        let ctx = UnitContext {
            key: RngKey::new(0, 0, 0, 0),
            shared_scalar: None,
        };
        q.compress(&g, &ctx, &mut msg);
        let Message::Qsgd(m) = &msg else { panic!() };
        assert_eq!(m.norms.len(), 3);
        assert_eq!(m.codes.len(), 1100);
        assert!(m.codes.iter().all(|c| c.abs() <= 4));
        for (c, x) in m.codes.iter().zip(&g) {
            assert!(*c == 0 || (c.signum() as f32) == x.signum());
        }
    }

    #[test]
    fn one_level_per_element_max_never_exceeded() {
        // A bucket with a single nonzero: |v|/n = 1 exactly, level = s.
        let g = [0.0, -3.0, 0.0];
        let mut msg = Message::default();
        Qsgd::new(QsgdConfig { levels: 8, bucket: 4 }).compress(&g, &UnitContext::default(), &mut msg);
        let Message::Qsgd(m) = &msg else { panic!() };
        assert_eq!(m.codes, [0, -8, 0]);
    }
}
