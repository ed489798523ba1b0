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
