//! Quantizers: every element is kept, in fewer bits (signs alone, for the
//! signSGD family).

pub mod blockwise;
pub mod efsignsgd;
pub mod eightbit;
pub mod fp16;
pub mod fp4;
pub mod natural;
pub mod onebit;
pub mod qsgd;
pub mod signsgd;
pub mod signum;
pub mod terngrad;

pub use blockwise::{Blockwise, Rounding};
pub use efsignsgd::{EfSignSgd, EfSignSgdConfig};
pub use eightbit::EightBitConfig;
pub use fp16::{Fp16, Fp16Config};
pub use fp4::{Fp4Config, Fp4Format};
pub use natural::{Natural, NaturalConfig};
pub use onebit::{OneBit, OneBitConfig};
pub use qsgd::{Qsgd, QsgdConfig};
pub use signsgd::{SignSgd, SignSgdConfig};
pub use signum::{Signum, SignumConfig};
pub use terngrad::{TernGrad, TernGradConfig};

/// Factors `(pre, factor)` with `(x·pre)·factor = x·num/den` to f32 rounding,
/// for a positive finite `den` of any size. A quantizer divides every element
/// by its scaler (TernGrad's `s`, QSGD's block norm); the reciprocal
/// overflows to inf when the scaler is below about 3e-39, which turned every
/// probability into inf or NaN. A tiny scaler is therefore lifted by 2^64 and
/// the elements by the same factor: powers of two are exact, and the choice
/// is made once, outside the hot loop (`pre = 1` leaves the usual path
/// bit-identical). CPU and device quantizers share it.
pub fn ratio_factors(num: f32, den: f32) -> (f32, f32) {
    const LIFT: f32 = 18_446_744_073_709_551_616.0; // 2^64
    if den < 1.0 / LIFT {
        (LIFT, num / (den * LIFT))
    } else {
        (1.0, num / den)
    }
}

#[cfg(test)]
mod tests {
    use super::ratio_factors;

    #[test]
    fn tiny_scalers_keep_finite_ratios() {
        for den in [1.0f32, 1e-19, 1e-30, 1e-38, 3e-39, 1e-42, f32::from_bits(1)] {
            let (pre, factor) = ratio_factors(1.0, den);
            assert!(factor.is_finite(), "{den}");
            // An element equal to the scaler maps to 1, half of it to 0.5
            // (to the rounding of x·(1/s)).
            assert!(((den * pre) * factor - 1.0).abs() < 1e-6, "{den}");
            if den * 0.5 * 2.0 == den {
                assert!(((den * 0.5 * pre) * factor - 0.5).abs() < 1e-6, "{den}");
            }
            let (pre, factor) = ratio_factors(7.0, den);
            assert!(((den * pre) * factor - 7.0).abs() < 1e-5, "{den}");
        }
    }
}
