//! The value tables behind the one-byte codes of two messages, shared by
//! the compressors that write the codes and the decoders that read them
//! (a leaf, so [`message`](crate::message) and [`codec`](crate::codec)
//! need not import the compressors):
//! - natural compression's signed powers of two (ALGORITHMS.md §9.4);
//! - 8-bit quantization's dynamic tree data type (§9.5).

use std::sync::OnceLock;

/// The code of 2^e is `e + EXPONENT_BIAS`, in 1..=127 (0 is zero).
pub const EXPONENT_BIAS: i32 = 111;
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
    // 2^(k − 111) as an f32 built from its exponent field (all normal).
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
            let point = |j: usize| {
                if j < n / 2 {
                    0.1f32 + step * j as f32
                } else {
                    1.0f32 - step * (n - 1 - j) as f32
                }
            };
            for j in 0..n - 1 {
                let mean = (point(j) + point(j + 1)) / 2.0;
                let v = (10f64.powi(i - 6) * f64::from(mean)) as f32;
                values.extend([v, -v]);
            }
        }
        values.sort_by(f32::total_cmp);
        values.try_into().expect("2·127 + 2 values")
    })
}

/// The index of the codebook value nearest to `v` (in [−1, 1]); a tie goes
/// to the lower index, as `argmin` does.
pub fn nearest_code(codebook: &[f32; 256], v: f32) -> u8 {
    let i = codebook.partition_point(|&c| c < v);
    if i == 0 {
        return 0;
    }
    if i == 256 {
        return 255;
    }
    if v - codebook[i - 1] <= codebook[i] - v {
        (i - 1) as u8
    } else {
        i as u8
    }
}
