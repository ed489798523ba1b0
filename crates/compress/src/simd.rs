//! Run-time selection of vector instructions for the hot kernels.
//!
//! The kernels are plain Rust written so the compiler vectorizes them (lanes
//! of independent accumulators, fixed-size blocks). Built for the x86-64
//! baseline that vectorization stops at SSE2; [`multiversion!`] compiles a
//! kernel a second time with AVX2 and FMA enabled and picks that version when
//! the CPU has them, so one binary is both portable and fast (the approach of
//! `memchr` and `regex`). Measured on the 25M-element benchmark: TernGrad's
//! packing runs 2.2× faster with the AVX2 version.

/// Defines `fn $name` whose body is compiled twice, for the baseline target
/// and with `avx2,fma`, and dispatched on the CPU's features at run time.
/// Exported for the other crates' hot loops (the outer optimizer's fused
/// multiply-adds, which the baseline build leaves to libm's `fmaf`).
#[macro_export]
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn generic($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: $ty),*) $(-> $ret)? {
                    generic($($arg),*)
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: `avx2` needs exactly the features just detected.
                    return unsafe { avx2($($arg),*) };
                }
            }
            generic($($arg),*)
        }
    };
}
