//! Deterministic randomness for stochastic compressors.
//!
//! Every stochastic choice in gradcomp draws from a stream keyed by
//! `(run seed, rank, step, unit)` (ALGORITHMS.md §6.7): runs are reproducible,
//! workers are independent, and a unit's draws do not depend on how many
//! draws another unit made. The generator is xoshiro256++ seeded through
//! SplitMix64; both are written out here so the streams never change under a
//! dependency upgrade.

/// The identity of one stream of random numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RngKey {
    pub seed: u64,
    pub rank: u32,
    pub step: u64,
    pub unit: u32,
}

impl RngKey {
    pub fn new(seed: u64, rank: u32, step: u64, unit: u32) -> Self {
        Self { seed, rank, step, unit }
    }

    /// This worker's own stream.
    pub fn rng(&self) -> UnitRng {
        UnitRng::from_parts(&[self.seed, u64::from(self.rank), self.step, u64::from(self.unit)])
    }

    /// A stream that every worker derives identically (no rank): used when the
    /// workers must make the same choice without talking, e.g. Rand-k `same_seed`.
    pub fn shared_rng(&self) -> UnitRng {
        UnitRng::from_parts(&[self.seed, u64::MAX, self.step, u64::from(self.unit)])
    }
}

/// xoshiro256++ (Blackman & Vigna): fast, 256 bits of state, passes BigCrush.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitRng {
    s: [u64; 4],
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl UnitRng {
    /// Seeds from a list of words; each word is folded through SplitMix64 so
    /// that nearby keys (step 7 vs 8) give unrelated streams.
    pub fn from_parts(parts: &[u64]) -> Self {
        let mut h = 0x6A09_E667_F3BC_C908u64;
        for &p in parts {
            let mut t = h ^ p;
            h = splitmix64(&mut t);
        }
        let mut st = h;
        let s = [splitmix64(&mut st), splitmix64(&mut st), splitmix64(&mut st), splitmix64(&mut st)];
        Self { s }
    }

    /// The full generator state, for checkpoints.
    pub fn state(&self) -> [u64; 4] {
        self.s
    }

    /// Restores a state saved by [`UnitRng::state`]. An all-zero state is a
    /// fixed point of xoshiro and is replaced by a seeded one.
    pub fn from_state(s: [u64; 4]) -> Self {
        if s == [0; 4] {
            return Self::from_parts(&[0]);
        }
        Self { s }
    }

    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 24 bits of resolution (every f32 in the grid is exact).
    #[inline(always)]
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / 16_777_216.0)
    }

    /// Uniform in [0, 1) with 53 bits of resolution.
    #[inline(always)]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }

    /// A standard normal draw (Box–Muller; one of the pair is discarded, which
    /// keeps the generator stateless beyond xoshiro's words).
    pub fn next_gaussian(&mut self) -> f64 {
        // 1 − u is in (0, 1], so the log is finite.
        let u1 = 1.0 - self.next_f64();
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Uniform integer in `0..n` (Lemire's multiply-shift with rejection, unbiased). `n > 0`.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let mut m = u128::from(self.next_u64()) * u128::from(n);
        let mut lo = m as u64;
        if lo < n {
            let threshold = n.wrapping_neg() % n;
            while lo < threshold {
                m = u128::from(self.next_u64()) * u128::from(n);
                lo = m as u64;
            }
        }
        (m >> 64) as u64
    }
}

/// Lanes of [`LaneRng`].
pub const LANES: usize = 16;

/// Sixteen independent xoshiro128++ streams advanced in lockstep, so that one
/// call yields 16 uniform u32 with lane-wise arithmetic the compiler turns
/// into SIMD. Used where every element needs its own draw (TernGrad, QSGD):
/// a scalar generator there costs more than the rest of the kernel.
#[derive(Clone, Debug)]
pub struct LaneRng {
    s: [[u32; LANES]; 4],
}

impl LaneRng {
    /// Seeds the lanes from `rng` (each lane's four words drawn in turn).
    pub fn from_rng(rng: &mut UnitRng) -> Self {
        let mut s = [[0u32; LANES]; 4];
        for lane in 0..LANES {
            let a = rng.next_u64();
            let b = rng.next_u64() | 1; // never all-zero
            s[0][lane] = a as u32;
            s[1][lane] = (a >> 32) as u32;
            s[2][lane] = b as u32;
            s[3][lane] = (b >> 32) as u32;
        }
        Self { s }
    }

    /// The next 16 draws, one per lane.
    #[inline(always)]
    pub fn next_u32s(&mut self) -> [u32; LANES] {
        let [s0, s1, s2, s3] = &mut self.s;
        let mut out = [0u32; LANES];
        for l in 0..LANES {
            out[l] = s0[l].wrapping_add(s3[l]).rotate_left(7).wrapping_add(s0[l]);
            let t = s1[l] << 9;
            s2[l] ^= s0[l];
            s3[l] ^= s1[l];
            s1[l] ^= s2[l];
            s0[l] ^= s3[l];
            s2[l] ^= t;
            s3[l] = s3[l].rotate_left(11);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_give_distinct_reproducible_streams() {
        let a = RngKey::new(1, 0, 5, 2).rng().next_u64();
        assert_eq!(a, RngKey::new(1, 0, 5, 2).rng().next_u64());
        assert_ne!(a, RngKey::new(1, 1, 5, 2).rng().next_u64());
        assert_ne!(a, RngKey::new(1, 0, 6, 2).rng().next_u64());
        assert_ne!(a, RngKey::new(1, 0, 5, 3).rng().next_u64());
        assert_ne!(a, RngKey::new(2, 0, 5, 2).rng().next_u64());
    }

    #[test]
    fn shared_stream_ignores_rank() {
        let a = RngKey::new(9, 0, 3, 1).shared_rng().next_u64();
        assert_eq!(a, RngKey::new(9, 7, 3, 1).shared_rng().next_u64());
        assert_ne!(a, RngKey::new(9, 0, 3, 1).rng().next_u64());
    }

    #[test]
    fn uniform_draws_are_in_range_and_centered() {
        let mut r = UnitRng::from_parts(&[42]);
        let n = 200_000;
        let mut sum = 0.0f64;
        for _ in 0..n {
            let x = r.next_f32();
            assert!((0.0..1.0).contains(&x));
            sum += f64::from(x);
        }
        assert!((sum / n as f64 - 0.5).abs() < 0.005);
    }

    #[test]
    fn gaussian_draws_have_unit_variance() {
        let mut r = UnitRng::from_parts(&[11]);
        let n = 100_000;
        let (mut s, mut q) = (0.0, 0.0);
        for _ in 0..n {
            let x = r.next_gaussian();
            s += x;
            q += x * x;
        }
        let mean = s / n as f64;
        assert!(mean.abs() < 0.02 && (q / n as f64 - 1.0).abs() < 0.02);
    }

    #[test]
    fn below_is_uniform_over_small_range() {
        let mut r = UnitRng::from_parts(&[7]);
        let mut counts = [0u32; 6];
        for _ in 0..60_000 {
            counts[r.below(6) as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn lanes_are_uniform_and_distinct() {
        let mut r = LaneRng::from_rng(&mut UnitRng::from_parts(&[5]));
        let first = r.next_u32s();
        assert!(first.iter().collect::<std::collections::HashSet<_>>().len() == LANES);
        let mut buckets = [0u32; 8];
        for _ in 0..10_000 {
            for u in r.next_u32s() {
                buckets[(u >> 29) as usize] += 1;
            }
        }
        for b in buckets {
            assert!((19_000..21_000).contains(&b), "{buckets:?}");
        }
    }

    #[test]
    fn state_round_trips() {
        let mut r = UnitRng::from_parts(&[3, 4]);
        r.next_u64();
        let mut q = UnitRng::from_state(r.state());
        assert_eq!(r.next_u64(), q.next_u64());
    }
}
