//! QSGD (Alistarh et al., 2017), ALGORITHMS.md §5: per block of `b`
//! elements with norm `n`, `ℓ = floor(s|v|/n)`, level `ℓ+1` with probability
//! `s|v|/n − ℓ` else `ℓ`; `Q(v) = n · sign(v) · level / s`. Unbiased.

use serde::{Deserialize, Serialize};

use crate::compressor::{Combine, Compressor, UnitContext};
use crate::memory::MemoryKind;
use crate::message::Message;
use crate::method::{check, Method};
use crate::reduce;
use crate::rng::{LaneRng, LANES};

/// Largest supported level count: signed levels are held in i16.
pub const MAX_LEVELS: u32 = i16::MAX as u32;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QsgdConfig {
    /// Quantization levels s (1..=32767). A signed level takes
    /// `ceil(log2(2s+1))` bits on the wire: s = 127 → 8 bits, s = 256 → 10.
    pub levels: u32,
    /// Block size b: one norm per b elements (`bucket` before the fifth
    /// round, still read).
    #[serde(alias = "bucket")]
    pub block: usize,
}

impl Default for QsgdConfig {
    fn default() -> Self {
        Self { levels: 256, block: 512 }
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
        let block = self.config.block.max(1);
        let m = out.qsgd_mut();
        m.levels = levels;
        m.block = block as u32;
        m.norms.clear();
        m.codes.clear();
        m.codes.resize(input.len(), 0);
        let mut lanes = LaneRng::from_rng(&mut ctx.key.rng());
        for (v, codes) in input.chunks(block).zip(m.codes.chunks_mut(block)) {
            let norm = reduce::sum_of_squares(v).sqrt() as f32;
            let norm = if norm.is_finite() { norm } else { 0.0 };
            m.norms.push(norm);
            if norm > 0.0 {
                let (pre, scale) = super::ratio_factors(levels as f32, norm);
                quantize_block(v, pre, scale, levels as i16, &mut lanes, codes);
            }
        }
    }
}

multiversion! {
/// Stochastic rounding of `|v|·scale` to an integer level, signed, with one
/// 24-bit uniform draw per element from the lanes.
fn quantize_block(v: &[f32], pre: f32, scale: f32, max: i16, lanes: &mut LaneRng, codes: &mut [i16]) {
    #[inline(always)]
    fn levels(x: &[f32; LANES], u: &[u32; LANES], pre: f32, scale: f32, max: i16, out: &mut [i16; LANES]) {
        for l in 0..LANES {
            // |x|·levels/norm, finite for any norm (`ratio_factors`).
            let r = (x[l].abs() * pre) * scale;
            let floor = r.floor();
            let draw = ((u[l] >> 8) as i32) as f32 * (1.0 / 16_777_216.0);
            let level = (floor as i32 + i32::from(draw < r - floor)).min(i32::from(max)) as i16;
            out[l] = if x[l].is_sign_negative() { -level } else { level };
        }
    }
    let mut xs = v.chunks_exact(LANES);
    let mut cs = codes.chunks_exact_mut(LANES);
    for (x, c) in (&mut xs).zip(&mut cs) {
        let x: &[f32; LANES] = x.try_into().expect("chunks_exact yields LANES");
        let c: &mut [i16; LANES] = c.try_into().expect("chunks_exact yields LANES");
        levels(x, &lanes.next_u32s(), pre, scale, max, c);
    }
    let (x, c) = (xs.remainder(), cs.into_remainder());
    if !x.is_empty() {
        let mut padded = [0.0f32; LANES];
        padded[..x.len()].copy_from_slice(x);
        let mut out = [0i16; LANES];
        levels(&padded, &lanes.next_u32s(), pre, scale, max, &mut out);
        c.copy_from_slice(&out[..c.len()]);
    }
}
}

impl Method for QsgdConfig {
    fn draws_random(&self) -> bool {
        true
    }
    fn validate(&self) -> Result<(), crate::method::InvalidOption> {
        check((1..=MAX_LEVELS).contains(&self.levels), "levels", || {
            format!("{} is not in 1..={}", self.levels, MAX_LEVELS)
        })?;
        check(self.block >= 1 && self.block <= u32::MAX as usize, "block", || {
            format!("{} must be at least 1", self.block)
        })
    }
    fn default_memory(&self) -> MemoryKind {
        MemoryKind::None
    }
    fn build(&self, _shape: &[usize]) -> Box<dyn crate::Compressor> {
        Box::new(Qsgd::new(self.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::RngKey;

    #[test]
    fn levels_are_bounded_and_buckets_have_norms() {
        let g: Vec<f32> = (0..1100).map(|i| ((i * 37) % 101) as f32 - 50.0).collect();
        let mut q = Qsgd::new(QsgdConfig { levels: 4, block: 512 });
        let mut msg = Message::default();
        let ctx = UnitContext { key: RngKey::new(0, 0, 0, 0), ..Default::default() };
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
        // A block with a single nonzero: |v|/n = 1 exactly, level = s.
        let g = [0.0, -3.0, 0.0];
        let mut msg = Message::default();
        Qsgd::new(QsgdConfig { levels: 8, block: 4 }).compress(&g, &UnitContext::default(), &mut msg);
        let Message::Qsgd(m) = &msg else { panic!() };
        assert_eq!(m.codes, [0, -8, 0]);
    }

    #[test]
    fn the_old_option_name_bucket_still_reads() {
        let old: QsgdConfig = serde_json::from_str(r#"{"levels": 8, "bucket": 64}"#).unwrap();
        assert_eq!(old, QsgdConfig { levels: 8, block: 64 });
        assert_eq!(serde_json::to_string(&old).unwrap(), r#"{"levels":8,"block":64}"#);
    }
}
