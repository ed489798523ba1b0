//! TernGrad (Wen et al., NIPS 2017): stochastic ternary gradients
//! `t_k = s · sign(g_k) · b_k`, `b_k ~ Bernoulli(min(1, |g_k|/s))`
//! (ALGORITHMS.md §1.1), with the scaler shared across workers by a max-reduce
//! (§1.2) and c·σ clipping.

use serde::{Deserialize, Serialize};

use crate::compressor::{Combine, Compressor, ReduceOp, UnitContext};
use crate::memory::MemoryKind;
use crate::message::{Message, TernaryPacking};
use crate::method::{check, Method};
use crate::reduce;
use crate::rng::{LaneRng, UnitRng, LANES};

/// TernGrad's options; defaults are the authors' code (§1.1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TernGradConfig {
    /// `s_i = c·σ_i` (population std) when true, `s_i = max|g_i|` when false.
    pub clipping: bool,
    /// The clipping factor c.
    pub c: f32,
    /// Max-reduce the scaler across workers before quantizing (scalar sharing).
    /// Without it every worker uses its own scaler and messages are gathered.
    pub share_scaler: bool,
    /// Wire packing of the codes.
    pub packing: TernaryPacking,
}

impl Default for TernGradConfig {
    fn default() -> Self {
        Self { clipping: true, c: 2.5, share_scaler: true, packing: TernaryPacking::TwoBit }
    }
}

/// The TernGrad quantizer. With `share_scaler` it has one exchange round:
/// each worker contributes its scaler, max-reduced (ALGORITHMS.md §1.2), and
/// compresses under the result.
#[derive(Clone, Debug, Default)]
pub struct TernGrad {
    pub config: TernGradConfig,
    /// The scaler agreed in this step's round, taken by the next `compress`.
    shared: Option<f32>,
}

impl TernGrad {
    pub fn new(config: TernGradConfig) -> Self {
        Self { config, shared: None }
    }

    /// This worker's scaler `s_i` for `g`.
    pub fn scaler(&self, g: &[f32]) -> f32 {
        if self.config.clipping {
            self.config.c * reduce::moments(g).population_std() as f32
        } else {
            reduce::max_abs(g)
        }
    }
}

impl Compressor for TernGrad {
    fn name(&self) -> &'static str {
        "terngrad"
    }

    fn combine(&self) -> Combine {
        if self.config.share_scaler {
            Combine::TernarySum
        } else {
            Combine::Gather
        }
    }

    fn rounds(&self) -> usize {
        usize::from(self.config.share_scaler)
    }

    /// Round 0: this worker's scaler, max-reduced into the shared one.
    fn round_contribution(
        &mut self,
        round: usize,
        input: &[f32],
        _ctx: &UnitContext,
        out: &mut Vec<f32>,
    ) -> Option<ReduceOp> {
        self.shared = None;
        (self.config.share_scaler && round == 0).then(|| {
            out.push(self.scaler(input));
            ReduceOp::Max
        })
    }

    fn round_result(&mut self, _round: usize, combined: &[f32], _workers: usize) {
        self.shared = combined.first().copied();
    }

    /// Quantizes under the agreed scaler, or this worker's own when no round
    /// ran (a sole worker, or `share_scaler` off).
    fn compress(&mut self, input: &[f32], ctx: &UnitContext, out: &mut Message) {
        let s = self.shared.take().unwrap_or_else(|| self.scaler(input));
        let m = out.ternary_mut();
        m.len = input.len();
        m.packing = self.config.packing;
        m.scale = if s.is_finite() && s > 0.0 { s } else { 0.0 };
        pack_ternary(input, m.scale, &mut ctx.key.rng(), &mut m.packed);
    }
}

multiversion! {
/// Draws the stochastic ternary codes of `g` for scaler `s` into `out`
/// (2 bits per element, see [`crate::message::TernaryPacking`]).
///
/// `b_k = 1` iff a uniform draw `u` on the 2^-24 grid of [0, 1) is below
/// `|g_k|/s`, so `P(b_k = 1) = min(1, |g_k|/s)` to within 2^-24 (the
/// precision of the f32 ratio itself); elements with `|g_k| ≥ s` are always
/// kept, which is the clipping. `s = 0` gives all-zero codes. Draws come 16 at
/// a time from a [`LaneRng`] so the loop vectorizes.
pub fn pack_ternary(g: &[f32], s: f32, rng: &mut UnitRng, out: &mut Vec<u8>) {
    out.clear();
    out.resize(g.len().div_ceil(4), 0);
    if s <= 0.0 {
        return;
    }
    let (pre, inv_s) = super::ratio_factors(1.0, s);
    let mut lanes = LaneRng::from_rng(rng);
    let chunks = g.chunks_exact(LANES);
    let tail = chunks.remainder();
    let (body, last) = out.split_at_mut(chunks.len() * LANES / 4);
    for (bytes, c) in body.chunks_exact_mut(LANES / 4).zip(chunks) {
        let c: &[f32; LANES] = c.try_into().expect("chunks_exact yields LANES");
        let word = ternary_word(c, &lanes.next_u32s(), pre, inv_s);
        bytes.copy_from_slice(&word.to_le_bytes());
    }
    if !tail.is_empty() {
        // Zero padding draws code 0, so the padding bits stay zero.
        let mut padded = [0.0f32; LANES];
        padded[..tail.len()].copy_from_slice(tail);
        let word = ternary_word(&padded, &lanes.next_u32s(), pre, inv_s).to_le_bytes();
        last.copy_from_slice(&word[..last.len()]);
    }
}
}

/// The 2-bit codes of [`LANES`] elements packed into one word, element
/// `j` in bits `2j..2j+2`: `0b01` = +1, `0b10` = −1, 0 = dropped. Branch- and
/// shift-free per element so it vectorizes.
#[inline(always)]
fn ternary_word(x: &[f32; LANES], u: &[u32; LANES], pre: f32, inv_s: f32) -> u32 {
    let mut word = 0u32;
    for j in 0..LANES {
        let (bits, u) = (x[j].to_bits(), u[j]);
        // |x|/s as (|x|·pre)·(1/(s·pre)): finite for any scaler (`ratio_factors`).
        let p = (f32::from_bits(bits & 0x7fff_ffff) * pre) * inv_s;
        // u >> 8 < 2^24 fits i32, whose conversion to f32 is one SIMD instruction.
        let draw = ((u >> 8) as i32) as f32 * (1.0 / 16_777_216.0);
        // NaN compares false: dropped.
        let keep = u32::from(draw < p);
        let code = keep + (keep & (bits >> 31));
        word |= code << (2 * j);
    }
    word
}

impl Method for TernGradConfig {
    fn draws_random(&self) -> bool {
        true
    }
    fn validate(&self) -> Result<(), crate::method::InvalidOption> {
        check(self.c > 0.0 && self.c.is_finite(), "c", || {
            format!("{} must be a positive number (the paper uses 2.5)", self.c)
        })
    }
    fn default_memory(&self) -> MemoryKind {
        MemoryKind::None
    }
    fn build(&self, _shape: &[usize]) -> Box<dyn crate::Compressor> {
        Box::new(TernGrad::new(self.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::RngKey;

    fn ctx(step: u64) -> UnitContext {
        UnitContext { key: RngKey::new(1, 0, step, 0), ..Default::default() }
    }

    #[test]
    fn codes_are_ternary_multiples_of_the_scaler() {
        let g: Vec<f32> = (0..101).map(|i| (i as f32 - 50.0) / 10.0).collect();
        let mut t = TernGrad::new(TernGradConfig { clipping: false, ..Default::default() });
        let mut msg = Message::default();
        t.compress(&g, &ctx(0), &mut msg);
        let mut out = vec![0.0; g.len()];
        msg.decompress_into(&mut out);
        for (o, x) in out.iter().zip(&g) {
            assert!(*o == 0.0 || *o == 5.0 * x.signum(), "{o} for {x}");
        }
        // The element at max |g| is always kept.
        assert_eq!(out[0], -5.0);
        assert_eq!(out[100], 5.0);
    }

    #[test]
    fn clipping_scaler_is_c_sigma_and_clips_outliers() {
        let mut g = vec![0.0f32; 1000];
        g[0] = 100.0;
        let t = TernGrad::default();
        let s = t.scaler(&g);
        let sigma = reduce::moments(&g).population_std();
        assert!((s - 2.5 * sigma as f32).abs() < 1e-4);
        assert!(s < 100.0);
        let mut msg = Message::default();
        TernGrad::default().compress(&g, &ctx(3), &mut msg);
        let mut out = vec![0.0; g.len()];
        msg.decompress_into(&mut out);
        assert_eq!(out[0], s, "outlier clipped to the scaler");
        assert!(out[1..].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn the_agreed_scalar_overrides_the_local_one_for_one_step() {
        let g = vec![1.0f32; 8];
        let mut t = TernGrad::default();
        assert_eq!(t.combine(), Combine::TernarySum);
        assert_eq!(t.rounds(), 1);
        let mut mine = Vec::new();
        assert_eq!(t.round_contribution(0, &g, &ctx(0), &mut mine), Some(ReduceOp::Max));
        assert_eq!(mine, [t.scaler(&g)]);
        t.round_result(0, &[4.0], 2);
        let scale = |msg: &Message| match msg {
            Message::Ternary(m) => m.scale,
            _ => panic!("not ternary"),
        };
        let mut msg = Message::default();
        t.compress(&g, &ctx(0), &mut msg);
        assert_eq!(scale(&msg), 4.0);
        // The next step without a round quantizes under its own scaler.
        t.compress(&g, &ctx(1), &mut msg);
        assert_eq!(scale(&msg), t.scaler(&g));
        let unshared = TernGrad::new(TernGradConfig { share_scaler: false, ..Default::default() });
        assert_eq!(unshared.rounds(), 0);
    }

    #[test]
    fn zero_and_nan_inputs_give_zero_codes() {
        for g in [vec![0.0f32; 9], vec![f32::NAN; 9]] {
            let mut msg = Message::default();
            TernGrad::default().compress(&g, &ctx(0), &mut msg);
            assert_eq!(msg.selected(), 0);
        }
    }
}
