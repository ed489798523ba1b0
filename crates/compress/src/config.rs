//! Choosing a compressor by name, as a configuration file does.
//!
//! ```toml
//! [compressor]
//! name = "gaussiank"
//! density = 0.001
//! wire = { indices = "varint", values = "f16" }
//! ```

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::compressor::{Compressor, Dense};
use crate::lowrank::{PowerSgd, PowerSgdConfig};
use crate::memory::{Memory, MemoryKind, ResidualForm};
use crate::quantize::{
    qsgd, EfSignSgd, EfSignSgdConfig, EightBit, EightBitConfig, Fp16, Natural, NaturalConfig, OneBit,
    OneBitConfig, Qsgd, QsgdConfig, SignSgd, SignSgdConfig, Signum, SignumConfig, TernGrad, TernGradConfig,
};
use crate::sparsify::{
    DgcK, DgcKConfig, Esgd, EsgdConfig, GaussianK, GaussianKConfig, RandK, RandKConfig, Threshold,
    ThresholdConfig, TopK, TopKConfig, TrimmedK, TrimmedKConfig,
};

impl From<PowerSgdConfig> for CompressorConfig {
    fn from(c: PowerSgdConfig) -> Self {
        CompressorConfig::Powersgd(c)
    }
}

/// Every compressor and its options, tagged by `name`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "lowercase", deny_unknown_fields)]
pub enum CompressorConfig {
    /// No compression: fp32 values. (Braces, so unknown keys are rejected.)
    Dense {},
    Fp16 {},
    Terngrad(TernGradConfig),
    Qsgd(QsgdConfig),
    Onebit(OneBitConfig),
    Topk(TopKConfig),
    Gaussiank(GaussianKConfig),
    Dgck(DgcKConfig),
    Trimmedk(TrimmedKConfig),
    Randk(RandKConfig),
    Threshold(ThresholdConfig),
    /// eSGD's importance-driven selection with momentum residuals (global
    /// granularity, parameter server; reads each worker's loss).
    Esgd(EsgdConfig),
    /// PowerSGD's rank-r approximation, its two factors summed by allreduces.
    Powersgd(PowerSgdConfig),
    /// signSGD: one sign bit per element, the aggregate a majority vote.
    Signsgd(SignSgdConfig),
    /// Signum: the signs of each worker's momentum, majority vote.
    Signum(SignumConfig),
    /// EF-SignSGD: the scaled sign ‖x‖₁/d · sign(x), with error feedback.
    Efsignsgd(EfSignSgdConfig),
    /// Natural compression: stochastic rounding to powers of two, one byte each.
    Natural(NaturalConfig),
    /// 8-bit quantization: Dettmers' dynamic tree data type, one scale per block.
    Eightbit(EightBitConfig),
}

impl Default for CompressorConfig {
    fn default() -> Self {
        CompressorConfig::Dense {}
    }
}

/// A compressor option outside its valid range.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("compressor.{key}: {problem}")]
pub struct InvalidOption {
    /// The option's key under `compressor`.
    pub key: &'static str,
    pub problem: String,
}

fn check(ok: bool, key: &'static str, problem: impl FnOnce() -> String) -> Result<(), InvalidOption> {
    if ok {
        Ok(())
    } else {
        Err(InvalidOption { key, problem: problem() })
    }
}

fn check_density(rho: f64) -> Result<(), InvalidOption> {
    check(rho > 0.0 && rho <= 1.0, "density", || {
        format!("{rho} is not in (0, 1]; e.g. 0.001 keeps one element in a thousand")
    })
}

/// Constructors with every other option at its default, for library users:
/// `CompressorConfig::topk(0.001)`.
impl CompressorConfig {
    pub fn dense() -> Self {
        Self::Dense {}
    }
    pub fn fp16() -> Self {
        Self::Fp16 {}
    }
    /// TernGrad with c·σ clipping (c = 2.5) and a shared scaler.
    pub fn terngrad() -> Self {
        Self::Terngrad(Default::default())
    }
    pub fn qsgd() -> Self {
        Self::Qsgd(Default::default())
    }
    pub fn onebit() -> Self {
        Self::Onebit(Default::default())
    }
    /// Exact top-k at density `density` (k = ⌊ρd⌋).
    pub fn topk(density: f64) -> Self {
        Self::Topk(TopKConfig { density, ..Default::default() })
    }
    pub fn gaussiank(density: f64) -> Self {
        Self::Gaussiank(GaussianKConfig { density, ..Default::default() })
    }
    pub fn dgck(density: f64) -> Self {
        Self::Dgck(DgcKConfig { density, ..Default::default() })
    }
    pub fn trimmedk(density: f64) -> Self {
        Self::Trimmedk(TrimmedKConfig { density, ..Default::default() })
    }
    pub fn randk(density: f64) -> Self {
        Self::Randk(RandKConfig { density, ..Default::default() })
    }
    pub fn threshold(threshold: f32) -> Self {
        Self::Threshold(ThresholdConfig { threshold, ..Default::default() })
    }
    pub fn esgd(density: f64) -> Self {
        Self::Esgd(EsgdConfig { density, ..Default::default() })
    }
    /// PowerSGD at `rank`, every other option at PyTorch's default: plain
    /// allreduce (dense bytes) for the first 1000 steps. To compress sooner:
    /// `PowerSgdConfig::new(rank).with_start_iter(2).into()`.
    pub fn powersgd(rank: u32) -> Self {
        Self::Powersgd(PowerSgdConfig { rank, ..Default::default() })
    }
    pub fn signsgd() -> Self {
        Self::Signsgd(Default::default())
    }
    /// Signum with momentum β.
    pub fn signum(momentum: f32) -> Self {
        Self::Signum(SignumConfig { momentum })
    }
    pub fn efsignsgd() -> Self {
        Self::Efsignsgd(Default::default())
    }
    pub fn natural() -> Self {
        Self::Natural(Default::default())
    }
    pub fn eightbit() -> Self {
        Self::Eightbit(Default::default())
    }
}

impl CompressorConfig {
    /// All configuration names, in the benchmark's order.
    pub const NAMES: [&'static str; 19] = [
        "dense",
        "fp16",
        "terngrad",
        "qsgd",
        "onebit",
        "topk",
        "gaussiank",
        "gaussiank-refined",
        "dgck",
        "trimmedk",
        "randk",
        "threshold",
        "esgd",
        "powersgd",
        "signsgd",
        "signum",
        "efsignsgd",
        "natural",
        "eightbit",
    ];

    /// The default configuration of the compressor called `name`.
    pub fn named(name: &str) -> Option<Self> {
        Some(match name {
            "dense" => Self::Dense {},
            "fp16" => Self::Fp16 {},
            "terngrad" => Self::Terngrad(Default::default()),
            "qsgd" => Self::Qsgd(Default::default()),
            "onebit" => Self::Onebit(Default::default()),
            "topk" => Self::Topk(Default::default()),
            "gaussiank" => Self::Gaussiank(Default::default()),
            "gaussiank-refined" => Self::Gaussiank(GaussianKConfig { refine: true, ..Default::default() }),
            "dgck" => Self::Dgck(Default::default()),
            "trimmedk" => Self::Trimmedk(Default::default()),
            "randk" => Self::Randk(Default::default()),
            "threshold" => Self::Threshold(Default::default()),
            "esgd" => Self::Esgd(Default::default()),
            "powersgd" => Self::Powersgd(Default::default()),
            "signsgd" => Self::Signsgd(Default::default()),
            "signum" => Self::Signum(Default::default()),
            "efsignsgd" => Self::Efsignsgd(Default::default()),
            "natural" => Self::Natural(Default::default()),
            "eightbit" => Self::Eightbit(Default::default()),
            _ => return None,
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Dense {} => "dense",
            Self::Fp16 {} => "fp16",
            Self::Terngrad(_) => "terngrad",
            Self::Qsgd(_) => "qsgd",
            Self::Onebit(_) => "onebit",
            Self::Topk(_) => "topk",
            Self::Gaussiank(c) if c.refine => "gaussiank-refined",
            Self::Gaussiank(_) => "gaussiank",
            Self::Dgck(_) => "dgck",
            Self::Trimmedk(_) => "trimmedk",
            Self::Randk(_) => "randk",
            Self::Threshold(_) => "threshold",
            Self::Esgd(_) => "esgd",
            Self::Powersgd(_) => "powersgd",
            Self::Signsgd(_) => "signsgd",
            Self::Signum(_) => "signum",
            Self::Efsignsgd(_) => "efsignsgd",
            Self::Natural(_) => "natural",
            Self::Eightbit(_) => "eightbit",
        }
    }

    /// The target density, for sparsifiers that have one.
    pub fn density(&self) -> Option<f64> {
        match self {
            Self::Topk(c) => Some(c.density),
            Self::Gaussiank(c) => Some(c.density),
            Self::Dgck(c) => Some(c.density),
            Self::Trimmedk(c) => Some(c.density),
            Self::Randk(c) => Some(c.density),
            Self::Esgd(c) => Some(c.density),
            _ => None,
        }
    }

    /// Sets the target density of a sparsifier; returns false for other compressors.
    pub fn set_density(&mut self, rho: f64) -> bool {
        let slot = match self {
            Self::Topk(c) => &mut c.density,
            Self::Gaussiank(c) => &mut c.density,
            Self::Dgck(c) => &mut c.density,
            Self::Trimmedk(c) => &mut c.density,
            Self::Randk(c) => &mut c.density,
            Self::Esgd(c) => &mut c.density,
            _ => return false,
        };
        *slot = rho;
        true
    }

    /// The memory `auto` means for this compressor: error feedback for the
    /// biased ones whose dropped mass must come back (sparsifiers, 1-bit
    /// SGD, EF-SignSGD, 8-bit rounding), DGC's momentum correction for
    /// DGC-k, none for the unbiased quantizers, fp16, dense, eSGD (which
    /// carries its own residual) and the majority votes (signSGD and Signum
    /// as their papers and GRACE run them).
    pub fn default_memory(&self) -> MemoryKind {
        match self {
            Self::Dgck(_) => MemoryKind::DgcMomentum,
            Self::Onebit(_)
            | Self::Topk(_)
            | Self::Gaussiank(_)
            | Self::Trimmedk(_)
            | Self::Randk(_)
            | Self::Threshold(_)
            | Self::Efsignsgd(_)
            | Self::Eightbit(_) => MemoryKind::ErrorFeedback,
            Self::Dense {}
            | Self::Fp16 {}
            | Self::Terngrad(_)
            | Self::Qsgd(_)
            | Self::Esgd(_)
            | Self::Signsgd(_)
            | Self::Signum(_)
            | Self::Natural(_) => MemoryKind::None,
            Self::Powersgd(c) if c.error_feedback => MemoryKind::ErrorFeedback,
            Self::Powersgd(_) => MemoryKind::None,
        }
    }

    /// `requested`, with `Auto` replaced by [`CompressorConfig::default_memory`].
    pub fn resolve_memory(&self, requested: MemoryKind) -> MemoryKind {
        match requested {
            MemoryKind::Auto => self.default_memory(),
            k => k,
        }
    }

    /// The memory in effect for `requested` (`auto` resolved), built with
    /// error feedback's `residual` form and DGC's `momentum`; `None` where
    /// there is none (the gradient is compressed as it is).
    pub fn build_memory(
        &self,
        requested: MemoryKind,
        residual: ResidualForm,
        momentum: f32,
    ) -> Option<Box<dyn Memory>> {
        match self.resolve_memory(requested) {
            MemoryKind::None | MemoryKind::Auto => None,
            kind => Some(kind.build(residual, momentum)),
        }
    }

    /// Checks every option's range.
    pub fn validate(&self) -> Result<(), InvalidOption> {
        if let Some(rho) = self.density() {
            check_density(rho)?;
        }
        match self {
            Self::Terngrad(c) => check(c.c > 0.0 && c.c.is_finite(), "c", || {
                format!("{} must be a positive number (the paper uses 2.5)", c.c)
            }),
            Self::Qsgd(c) => {
                check((1..=qsgd::MAX_LEVELS).contains(&c.levels), "levels", || {
                    format!("{} is not in 1..={}", c.levels, qsgd::MAX_LEVELS)
                })?;
                check(c.bucket >= 1 && c.bucket <= u32::MAX as usize, "bucket", || {
                    format!("{} must be at least 1", c.bucket)
                })
            }
            Self::Dgck(c) => {
                check(c.sample_fraction > 0.0 && c.sample_fraction <= 1.0, "sample_fraction", || {
                    format!("{} is not in (0, 1]", c.sample_fraction)
                })
            }
            Self::Threshold(c) => check(c.threshold >= 0.0 && c.threshold.is_finite(), "threshold", || {
                format!("{} must be a finite number ≥ 0", c.threshold)
            }),
            Self::Esgd(c) => {
                check((0.0..1.0).contains(&c.beta), "beta", || format!("{} is not in [0, 1)", c.beta))?;
                check(c.epsilon > 0.0 && c.epsilon.is_finite(), "epsilon", || {
                    format!("{} must be positive", c.epsilon)
                })
            }
            Self::Powersgd(c) => validate_powersgd(c),
            Self::Signum(c) => check((0.0..1.0).contains(&c.momentum), "momentum", || {
                format!("{} is not in [0, 1) (GRACE's default is 0.9)", c.momentum)
            }),
            Self::Eightbit(c) => check(c.block >= 1 && c.block <= u32::MAX as usize, "block", || {
                format!("{} must be at least 1 (bitsandbytes' default is 4096)", c.block)
            }),
            _ => Ok(()),
        }
    }

    /// Whether a unit of `shape` is compressed at all; PowerSGD leaves
    /// vectors and the matrices it would not shrink enough to travel dense.
    pub fn compresses(&self, shape: &[usize]) -> bool {
        match self {
            Self::Powersgd(c) => c.compresses(shape),
            _ => true,
        }
    }

    /// The first step on which the compressor compresses: PowerSGD's
    /// `start_iter` (plain allreduce before it), 0 for the rest.
    pub fn first_compressed_step(&self) -> u64 {
        match self {
            Self::Powersgd(c) => c.start_iter,
            _ => 0,
        }
    }

    /// Builds the compressor of a unit of `shape` (PowerSGD sees its matrix).
    pub fn build_for(&self, shape: &[usize]) -> Box<dyn Compressor> {
        match self {
            Self::Powersgd(c) => Box::new(PowerSgd::new(c, shape)),
            _ => self.build(),
        }
    }

    /// Builds the compressor. Call [`CompressorConfig::validate`] first.
    pub fn build(&self) -> Box<dyn Compressor> {
        match self {
            Self::Dense {} => Box::new(Dense),
            Self::Fp16 {} => Box::new(Fp16),
            Self::Terngrad(c) => Box::new(TernGrad::new(c.clone())),
            Self::Qsgd(c) => Box::new(Qsgd::new(c.clone())),
            Self::Onebit(_) => Box::new(OneBit),
            Self::Topk(c) => Box::new(TopK::compressor(c)),
            Self::Gaussiank(c) => Box::new(GaussianK::compressor(c)),
            Self::Dgck(c) => Box::new(DgcK::compressor(c)),
            Self::Trimmedk(c) => Box::new(TrimmedK::compressor(c)),
            Self::Randk(c) => Box::new(RandK::compressor(c)),
            Self::Threshold(c) => Box::new(Threshold::compressor(c)),
            Self::Esgd(c) => Box::new(Esgd::new(c.clone())),
            // A shape-less PowerSGD sees a vector: build_for gives it its matrix.
            Self::Powersgd(c) => Box::new(PowerSgd::new(c, &[])),
            Self::Signsgd(_) => Box::new(SignSgd),
            Self::Signum(c) => Box::new(Signum::new(c)),
            Self::Efsignsgd(_) => Box::new(EfSignSgd),
            Self::Natural(_) => Box::new(Natural),
            Self::Eightbit(c) => Box::new(EightBit::new(c)),
        }
    }
}

fn validate_powersgd(c: &PowerSgdConfig) -> Result<(), InvalidOption> {
    check(c.rank >= 1, "rank", || "must be at least 1".into())?;
    check(!(c.error_feedback || c.warm_start) || c.start_iter >= 2, "start_iter", || {
        format!(
            "{} is too early: with error feedback or warm start PowerSGD starts at step 2 at the earliest (as PyTorch's hook)",
            c.start_iter
        )
    })?;
    check(
        c.min_compression_rate > 0.0 && c.min_compression_rate.is_finite(),
        "min_compression_rate",
        || format!("{} must be a positive number (PyTorch's default is 2)", c.min_compression_rate),
    )?;
    check(
        c.orthogonalization_epsilon >= 0.0 && c.orthogonalization_epsilon.is_finite(),
        "orthogonalization_epsilon",
        || format!("{} must be a finite number ≥ 0", c.orthogonalization_epsilon),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_builds_a_compressor_of_that_name() {
        for name in CompressorConfig::NAMES {
            let c = CompressorConfig::named(name).unwrap();
            c.validate().unwrap();
            assert_eq!(c.name(), name);
            assert_eq!(c.build().name(), name);
        }
        assert!(CompressorConfig::named("zip").is_none());
    }

    #[test]
    fn parses_from_toml_like_value_and_rejects_unknown_keys() {
        let c: CompressorConfig =
            serde_json::from_str(r#"{"name":"topk","density":0.01,"wire":{"indices":"varint"}}"#).unwrap();
        assert_eq!(c.density(), Some(0.01));
        assert!(serde_json::from_str::<CompressorConfig>(r#"{"name":"topk","densty":0.01}"#).is_err());
        assert!(serde_json::from_str::<CompressorConfig>(r#"{"name":"dense","density":0.01}"#).is_err());
    }

    #[test]
    fn auto_memory_is_error_feedback_for_biased_compressors_only() {
        use crate::memory::MemoryKind::*;
        for (name, want) in [
            ("dense", None),
            ("fp16", None),
            ("terngrad", None),
            ("qsgd", None),
            ("esgd", None),
            ("onebit", ErrorFeedback),
            ("topk", ErrorFeedback),
            ("randk", ErrorFeedback),
            ("dgck", DgcMomentum),
            ("signsgd", None),
            ("signum", None),
            ("natural", None),
            ("efsignsgd", ErrorFeedback),
            ("eightbit", ErrorFeedback),
        ] {
            let c = CompressorConfig::named(name).unwrap();
            assert_eq!(c.resolve_memory(Auto), want, "{name}");
            assert_eq!(c.resolve_memory(ErrorFeedback), ErrorFeedback, "{name}: explicit choice stays");
        }
        assert_eq!(CompressorConfig::topk(0.01).density(), Some(0.01));
    }

    #[test]
    fn validation_names_the_key() {
        let mut c = CompressorConfig::named("gaussiank").unwrap();
        c.set_density(0.0);
        assert_eq!(c.validate().unwrap_err().key, "density");
        let q = CompressorConfig::Qsgd(QsgdConfig { levels: 0, bucket: 4 });
        assert!(q.validate().unwrap_err().to_string().starts_with("compressor.levels"));
    }
}
