//! The value tables behind the one-byte codes of two messages, shared by
//! the compressors that write the codes and the decoders that read them
//! (a leaf, so [`message`](crate::message) and [`codec`](crate::codec)
//! need not import the compressors):
//! - natural compression's signed powers of two (ALGORITHMS.md §9.4);
//! - 8-bit quantization's dynamic tree data type (§9.5).

use std::sync::OnceLock;

/// The code of 2^e is `e + EXPONENT_BIAS`, in 1..=127 (0 is zero).
pub const EXPONENT_BIAS: i32 = 109;
/// The smallest and largest exponents a code holds.
pub const MIN_EXPONENT: i32 = 1 - EXPONENT_BIAS;
pub const MAX_EXPONENT: i32 = 127 - EXPONENT_BIAS;
/// The sign bit of a code.
pub const NEGATIVE: u8 = 0x80;

/// The value of a natural code (`code & 0x7f == 0` is zero; the encoder
/// never writes `0x80`, and decoders reject it).
pub fn natural_value(code: u8) -> f32 {
    let k = i32::from(code & 0x7f);
    if k == 0 {
        return 0.0;
    }
    // 2^(k − 109) as an f32 built from its exponent field (all normal).
    let v = f32::from_bits(((k - EXPONENT_BIAS + 127) as u32) << 23);
    if code & NEGATIVE != 0 {
        -v
    } else {
        v
    }
}

/// The dynamic tree data type's 256 values, ascending: for each exponent
/// i in 0..7, the midpoints of 2^i + 1 points spaced evenly over [0.1, 1]
/// scaled by 10^(i − 6), with both signs, then 0 and 1. The fraction points
/// are computed in f32 as `torch.linspace` computes them (from the nearer
/// end), so the values match bitsandbytes' `create_dynamic_map` exactly.
pub fn dynamic_codebook() -> &'static [f32; 256] {
    static CODEBOOK: OnceLock<[f32; 256]> = OnceLock::new();
    CODEBOOK.get_or_init(|| {
        let mut values = vec![0.0f32, 1.0];
        for i in 0..7i32 {
            let n = (1usize << i) + 1;
            let step = (1.0f32 - 0.1f32) / (n - 1) as f32;
            // torch's CPU linspace: fused multiply-adds from the nearer end.
            let point = |j: usize| {
                if j < n / 2 {
                    step.mul_add(j as f32, 0.1)
                } else {
                    (-step).mul_add((n - 1 - j) as f32, 1.0)
                }
            };
            for j in 0..n - 1 {
                let mean = (point(j) + point(j + 1)) / 2.0;
                // bitsandbytes multiplies the f32 means by the Python float
                // 10^(i−6), which torch rounds to f32 first.
                let v = [1e-6f64, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0][i as usize] as f32 * mean;
                values.extend([v, -v]);
            }
        }
        values.sort_by(f32::total_cmp);
        values.try_into().expect("2·127 + 2 values")
    })
}

/// The 255 midpoints between neighbouring codebook values, `(c[i] + c[i+1])/2`
/// in f32: the decision boundaries of [`nearest_code`].
pub fn dynamic_midpoints() -> &'static [f32; 255] {
    static MIDPOINTS: OnceLock<[f32; 255]> = OnceLock::new();
    MIDPOINTS.get_or_init(|| {
        let c = dynamic_codebook();
        std::array::from_fn(|i| (c[i] + c[i + 1]) / 2.0)
    })
}

/// The code of the codebook value nearest to `v` (in [−1, 1]): the number
/// of midpoints below `v`, so a value on a midpoint takes the lower code.
/// This is bitsandbytes' reference rounding (`torch.bucketize` on the
/// midpoints); it differs from comparing the two distances only within a
/// rounding of a midpoint.
pub fn nearest_code(v: f32) -> u8 {
    dynamic_midpoints().partition_point(|&b| b < v) as u8
}

/// The value table a blockwise message's codes index: every element is
/// `table[code] · absmax` of its block (ALGORITHMS.md §9.5, §9.7). Written in
/// the header's flags, so a receiver reads the table from the message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BlockCodebook {
    /// Dettmers' dynamic tree data type, 8 bits ([`dynamic_codebook`]).
    #[default]
    Dynamic = 0,
    /// OCP's FP4 E2M1 (sign, 2 exponent bits, 1 mantissa bit: magnitudes
    /// 0, 0.5, 1, 1.5, 2, 3, 4, 6), scaled so that 6 is the block's maximum.
    E2m1 = 1,
    /// FP4 E3M0 (sign, 3 exponent bits, no mantissa: magnitudes 0 and
    /// 2^−6 … 2^0), the block's maximum at 2^0.
    E3m0 = 2,
}

impl BlockCodebook {
    pub fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            0 => Self::Dynamic,
            1 => Self::E2m1,
            2 => Self::E3m0,
            _ => return None,
        })
    }

    /// Bits per code: 8, or 4 (two codes per byte on the wire, the first in
    /// the low nibble).
    pub fn bits(self) -> u32 {
        match self {
            Self::Dynamic => 8,
            Self::E2m1 | Self::E3m0 => 4,
        }
    }

    /// The value of every code, indexed by code (a 4-bit table has 16).
    pub fn values(self) -> &'static [f32] {
        match self {
            Self::Dynamic => dynamic_codebook(),
            Self::E2m1 => &fp4_tables()[0].by_code,
            Self::E3m0 => &fp4_tables()[1].by_code,
        }
    }

    /// Whether a receiver accepts `code`: every 8-bit code; a 4-bit code
    /// below 16 other than the negative zero `0b1000`, which the encoder
    /// never writes (so every value has one encoding).
    pub fn valid(self, code: u8) -> bool {
        match self {
            Self::Dynamic => true,
            Self::E2m1 | Self::E3m0 => code < 16 && code != FP4_NEGATIVE_ZERO,
        }
    }

    /// The code nearest to `v` (in [−1, 1]): the number of midpoints
    /// between neighbouring values below `v`, so a value on a midpoint takes
    /// the lower one (bitsandbytes' rule for the dynamic type), mapped to
    /// its code. The device kernels search the same midpoints.
    pub fn nearest(self, v: f32) -> u8 {
        let (midpoints, codes) = self.search();
        let i = midpoints.partition_point(|&b| b < v);
        codes.map_or(i as u8, |c| c[i])
    }

    /// The midpoints between the ascending values, and the code of each
    /// ascending value (`None`: the codes ascend, as the dynamic type's).
    pub fn search(self) -> (&'static [f32], Option<&'static [u8]>) {
        match self {
            Self::Dynamic => (dynamic_midpoints(), None),
            Self::E2m1 => (&fp4_tables()[0].midpoints, Some(&fp4_tables()[0].codes)),
            Self::E3m0 => (&fp4_tables()[1].midpoints, Some(&fp4_tables()[1].codes)),
        }
    }

    /// The code for `v` (in [−1, 1]) rounded stochastically between the two
    /// table values around it, up with probability (v − lo)/(hi − lo), so
    /// that the expected value is `v`; `u` is uniform in [0, 1).
    pub fn stochastic(self, v: f32, u: f32) -> u8 {
        match self {
            Self::Dynamic => nearest_code(v),
            Self::E2m1 => fp4_tables()[0].stochastic(v, u),
            Self::E3m0 => fp4_tables()[1].stochastic(v, u),
        }
    }
}

/// The 4-bit code of −0 (sign bit set, magnitude zero): never written.
pub const FP4_NEGATIVE_ZERO: u8 = 0b1000;

/// A 4-bit float table: values by code (sign in bit 3, magnitude index in
/// bits 0..3), and the 15 distinct values ascending with their codes and
/// the 14 midpoints between them, `(a[i] + a[i+1])/2` in f32.
pub struct Fp4Table {
    by_code: [f32; 16],
    ascending: [f32; 15],
    codes: [u8; 15],
    midpoints: [f32; 14],
}

impl Fp4Table {
    /// The table for the eight magnitudes `m` (ascending from 0), scaled so
    /// that the largest is 1.
    fn new(m: [f32; 8]) -> Self {
        let top = m[7];
        let mut by_code = [0.0f32; 16];
        for (i, &v) in m.iter().enumerate() {
            by_code[i] = v / top;
            by_code[i | 8] = -(v / top);
        }
        let mut ascending = [0.0f32; 15];
        let mut codes = [0u8; 15];
        for i in 0..7 {
            ascending[i] = by_code[15 - i];
            codes[i] = 15 - i as u8;
        }
        for i in 0..8 {
            ascending[7 + i] = by_code[i];
            codes[7 + i] = i as u8;
        }
        let midpoints = std::array::from_fn(|i| (ascending[i] + ascending[i + 1]) / 2.0);
        Fp4Table { by_code, ascending, codes, midpoints }
    }

    /// Index into `ascending` of the last value ≤ `v` (0 below the first).
    fn floor(&self, v: f32) -> usize {
        self.ascending.partition_point(|&a| a <= v).saturating_sub(1).min(13)
    }

    fn stochastic(&self, v: f32, u: f32) -> u8 {
        let i = self.floor(v);
        let (lo, hi) = (self.ascending[i], self.ascending[i + 1]);
        let p = ((v - lo) / (hi - lo)).clamp(0.0, 1.0);
        self.codes[if u < p { i + 1 } else { i }]
    }
}

/// E2M1's and E3M0's tables.
pub fn fp4_tables() -> &'static [Fp4Table; 2] {
    static TABLES: OnceLock<[Fp4Table; 2]> = OnceLock::new();
    TABLES.get_or_init(|| {
        let e3m0 = std::array::from_fn(|i| if i == 0 { 0.0 } else { (2.0f32).powi(i as i32 - 7) });
        [Fp4Table::new([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]), Fp4Table::new(e3m0)]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp4_tables_hold_their_formats_values() {
        let e2m1 = BlockCodebook::E2m1.values();
        assert_eq!(e2m1[0b0111], 1.0);
        assert_eq!(e2m1[0b0101] * 6.0, 3.0);
        assert_eq!(e2m1[0b1001] * 6.0, -0.5);
        let e3m0 = BlockCodebook::E3m0.values();
        assert_eq!(&e3m0[..8], &[0.0, 1.0 / 64.0, 1.0 / 32.0, 1.0 / 16.0, 0.125, 0.25, 0.5, 1.0]);
        assert_eq!(e3m0[0b1111], -1.0);
    }

    #[test]
    fn fp4_rounding_picks_the_nearest_or_a_neighbour() {
        let c = BlockCodebook::E2m1;
        let v = |code: u8| c.values()[code as usize] * 6.0;
        assert_eq!(v(c.nearest(2.4 / 6.0)), 2.0);
        assert_eq!(v(c.nearest(2.6 / 6.0)), 3.0);
        assert_eq!(v(c.nearest(-5.5 / 6.0)), -6.0);
        assert_eq!(c.nearest(-0.0), 0, "zero is +0, never the negative zero");
        assert_eq!(v(c.stochastic(2.5 / 6.0, 0.49)), 3.0);
        assert_eq!(v(c.stochastic(2.5 / 6.0, 0.51)), 2.0);
        for x in [-1.0f32, 1.0, 0.0] {
            assert_eq!(c.values()[c.stochastic(x, 0.999) as usize], x);
            assert_eq!(c.values()[c.stochastic(x, 0.0) as usize], x);
        }
        assert!((0..16).all(|code| c.valid(code) == (code != 8)));
    }
}
