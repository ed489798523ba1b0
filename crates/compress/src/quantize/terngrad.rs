//! TernGrad (Wen et al., NIPS 2017): stochastic ternary gradients
//! `t_k = s · sign(g_k) · b_k`, `b_k ~ Bernoulli(min(1, |g_k|/s))`
//! (ALGORITHMS.md §1.1), with the scaler shared across workers by a max-reduce
//! (§1.2) and c·σ clipping.

use serde::{Deserialize, Serialize};

use super::two_u32;
use crate::compressor::{Combine, Compressor, UnitContext};
use crate::message::{Message, TernaryPacking};
use crate::reduce;
use crate::rng::UnitRng;

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
        Self {
            clipping: true,
            c: 2.5,
            share_scaler: true,
            packing: TernaryPacking::TwoBit,
        }
    }
}

/// The TernGrad quantizer.
#[derive(Clone, Debug, Default)]
pub struct TernGrad {
    pub config: TernGradConfig,
}

impl TernGrad {
    pub fn new(config: TernGradConfig) -> Self {
        Self { config }
    }

    /// This worker's scaler `s_i` for `g`.
    pub fn scaler(&self, g: &[f32]) -> f32 {
        if self.config.clipping {
            let (_, sigma) = reduce::mean_and_population_std(g);
            self.config.c * sigma as f32
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

    fn local_scalar(&self, input: &[f32]) -> Option<f32> {
        self.config.share_scaler.then(|| self.scaler(input))
    }

    fn compress(&mut self, input: &[f32], ctx: &UnitContext, out: &mut Message) {
        let s = ctx.shared_scalar.unwrap_or_else(|| self.scaler(input));
        let m = out.ternary_mut();
        m.len = input.len();
        m.packing = self.config.packing;
        m.scale = if s.is_finite() && s > 0.0 { s } else { 0.0 };
        pack_ternary(input, m.scale, &mut ctx.key.rng(), &mut m.packed);
    }
}

/// Draws the stochastic ternary codes of `g` for scaler `s` into `out`
/// (2 bits per element, see [`crate::message::TernaryPacking`]).
///
/// `b_k = 1` iff a uniform 32-bit draw is below `|g_k|/s · 2^32`, so
/// `P(b_k = 1) = min(1, |g_k|/s)` to within 2^-32 (plus f32 rounding of the
/// ratio); elements with `|g_k| ≥ s` are always kept, which is the clipping.
/// `s = 0` gives all-zero codes.
pub fn pack_ternary(g: &[f32], s: f32, rng: &mut UnitRng, out: &mut Vec<u8>) {
    out.clear();
    out.resize(g.len().div_ceil(4), 0);
    if s <= 0.0 {
        return;
    }
    let to_threshold = 4_294_967_296.0f32 / s;
    // One element's 2-bit code: 0b01 = +1, 0b10 = −1, 0 = dropped.
    #[inline(always)]
    fn code(x: f32, u: u32, to_threshold: f32) -> u8 {
        let keep = u64::from(u) < (x.abs() * to_threshold) as u64;
        u8::from(keep) << u8::from(x.is_sign_negative())
    }
    let chunks = g.chunks_exact(4);
    let tail = chunks.remainder();
    for (byte, c) in out.iter_mut().zip(chunks) {
        let [u0, u1] = two_u32(rng.next_u64());
        let [u2, u3] = two_u32(rng.next_u64());
        *byte = code(c[0], u0, to_threshold)
            | code(c[1], u1, to_threshold) << 2
            | code(c[2], u2, to_threshold) << 4
            | code(c[3], u3, to_threshold) << 6;
    }
    if !tail.is_empty() {
        let mut b = 0u8;
        for (j, &x) in tail.iter().enumerate() {
            b |= code(x, rng.next_u64() as u32, to_threshold) << (2 * j);
        }
        *out.last_mut().expect("tail implies a last byte") = b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::RngKey;

    fn ctx(step: u64) -> UnitContext {
        UnitContext {
            key: RngKey::new(1, 0, step, 0),
            shared_scalar: None,
        }
    }

    #[test]
    fn codes_are_ternary_multiples_of_the_scaler() {
        let g: Vec<f32> = (0..101).map(|i| (i as f32 - 50.0) / 10.0).collect();
        let mut t = TernGrad::new(TernGradConfig {
            clipping: false,
            ..Default::default()
        });
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
        let (_, sigma) = reduce::mean_and_population_std(&g);
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
    fn shared_scalar_overrides_local_one() {
        let g = vec![1.0f32; 8];
        let mut t = TernGrad::default();
        assert_eq!(t.combine(), Combine::TernarySum);
        let mut msg = Message::default();
        let c = UnitContext {
            shared_scalar: Some(4.0),
            ..ctx(0)
        };
        t.compress(&g, &c, &mut msg);
        match &msg {
            Message::Ternary(m) => assert_eq!(m.scale, 4.0),
            _ => panic!("not ternary"),
        }
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
