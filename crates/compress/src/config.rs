//! Choosing a compressor by name, as a configuration file does: the
//! registry of built-in methods, one line each (its name and its
//! configuration type). What the exchange asks of a method is answered
//! beside it, by its configuration's [`Method`] implementation.
//!
//! ```toml
//! [compressor]
//! name = "gaussiank"
//! density = 0.001
//! wire = { indices = "varint", values = "f16" }
//! ```

use serde::{Deserialize, Serialize};

use crate::chunked::{DctTopKConfig, SparseLocoConfig};
use crate::compressor::Compressor;
use crate::lowrank::PowerSgdConfig;
use crate::memory::{Memory, MemoryKind, ResidualForm};
use crate::method::Method;
use crate::quantize::{
    EfSignSgdConfig, EightBitConfig, Fp16Config, Fp4Config, NaturalConfig, OneBitConfig, QsgdConfig,
    SignSgdConfig, SignumConfig, TernGradConfig,
};
use crate::sparsify::{
    DgcKConfig, EsgdConfig, GaussianKConfig, RandKConfig, ThresholdConfig, TopKConfig, TrimmedKConfig,
};

/// Declares the registry: [`CompressorConfig`] (tagged by `name` in
/// configuration files), its conversions from each method's configuration,
/// [`CompressorConfig::NAMES`], `named`, `name`, and the method behind a
/// configuration. A line is `"name" => Variant(Config)`, with `| "other"`
/// for the names of the method's variants ([`Method::variant`]).
macro_rules! methods {
    ($( $(#[$doc:meta])* $name:literal $(| $variant:literal)* => $v:ident($ty:ty), )*) => {
        /// Every built-in method and its options, tagged by `name`.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "name", deny_unknown_fields)]
        pub enum CompressorConfig {
            $( $(#[$doc])* #[serde(rename = $name)] $v($ty), )*
        }

        $( impl From<$ty> for CompressorConfig {
            fn from(c: $ty) -> Self {
                CompressorConfig::$v(c)
            }
        } )*

        impl CompressorConfig {
            /// All configuration names (variants' names after their method's), in the benchmark's order.
            pub const NAMES: [&'static str; [$($name, $($variant,)*)*].len()] = [$($name, $($variant,)*)*];

            /// The default configuration of the compressor called `name`.
            pub fn named(name: &str) -> Option<Self> {
                match name {
                    $( $name => Some(Self::$v(<$ty>::default())),
                       $( $variant => <$ty as Method>::variant(name).map(Self::$v), )* )*
                    _ => None,
                }
            }

            /// The configuration's name: its method's, or its variant's.
            pub fn name(&self) -> &'static str {
                match self {
                    $( Self::$v(c) => c.variant_name().unwrap_or($name), )*
                }
            }

            /// The method these options configure.
            pub fn method(&self) -> &dyn Method {
                match self {
                    $( Self::$v(c) => c, )*
                }
            }

            fn method_mut(&mut self) -> &mut dyn Method {
                match self {
                    $( Self::$v(c) => c, )*
                }
            }
        }
    };
}

methods! {
    /// No compression: fp32 values.
    "dense" => Dense(DenseConfig),
    /// IEEE half precision, summed in a half-precision allreduce.
    "fp16" => Fp16(Fp16Config),
    /// TernGrad: codes in {−1, 0, +1} times a shared scaler.
    "terngrad" => Terngrad(TernGradConfig),
    /// QSGD's stochastic levels per block.
    "qsgd" => Qsgd(QsgdConfig),
    /// 1-bit SGD with error feedback.
    "onebit" => Onebit(OneBitConfig),
    /// Exact top-k.
    "topk" => Topk(TopKConfig),
    /// Gaussian-k's threshold from the gradient's mean and deviation.
    "gaussiank" | "gaussiank-refined" => Gaussiank(GaussianKConfig),
    /// DGC's sampled threshold with momentum correction.
    "dgck" => Dgck(DgcKConfig),
    /// Trimmed top-k.
    "trimmedk" => Trimmedk(TrimmedKConfig),
    /// Rand-k.
    "randk" => Randk(RandKConfig),
    /// A fixed magnitude threshold.
    "threshold" => Threshold(ThresholdConfig),
    /// eSGD's importance-driven selection with momentum residuals (global
    /// granularity, parameter server; reads each worker's loss).
    "esgd" => Esgd(EsgdConfig),
    /// PowerSGD's rank-r approximation, its two factors summed by allreduces.
    "powersgd" => Powersgd(PowerSgdConfig),
    /// signSGD: one sign bit per element, the aggregate a majority vote.
    "signsgd" => Signsgd(SignSgdConfig),
    /// Signum: the signs of each worker's momentum, majority vote.
    "signum" => Signum(SignumConfig),
    /// EF-SignSGD: the scaled sign ‖x‖₁/d · sign(x), with error feedback.
    "efsignsgd" => Efsignsgd(EfSignSgdConfig),
    /// Natural compression: stochastic rounding to powers of two, one byte each.
    "natural" => Natural(NaturalConfig),
    /// 8-bit quantization: Dettmers' dynamic tree data type, one scale per block.
    "eightbit" => Eightbit(EightBitConfig),
    /// 4-bit floats (E3M0, or OCP's E2M1), one scale per block.
    "fp4" => Fp4(Fp4Config),
    /// SparseLoCo: top-k per 64×64 tile, 2-bit values, decaying error feedback.
    "sparseloco" => Sparseloco(SparseLocoConfig),
    /// DeMo: top-k of each tile's 2-D DCT, sign values, decaying memory.
    "dct-topk" => DctTopk(DctTopKConfig),
}

impl Default for CompressorConfig {
    fn default() -> Self {
        CompressorConfig::Dense(DenseConfig {})
    }
}

/// The dense baseline's options: none.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenseConfig {}

impl Method for DenseConfig {
    fn default_memory(&self) -> MemoryKind {
        MemoryKind::None
    }
    fn build(&self, _shape: &[usize]) -> Box<dyn Compressor> {
        Box::new(crate::compressor::Dense)
    }
}

pub use crate::method::InvalidOption;

/// Constructors with every other option at its default, for library users:
/// `CompressorConfig::topk(0.001)`.
impl CompressorConfig {
    pub fn dense() -> Self {
        Self::Dense(DenseConfig {})
    }
    pub fn fp16() -> Self {
        Self::Fp16(Fp16Config {})
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

/// What the exchange asks of a configuration, answered by its method.
impl CompressorConfig {
    /// The target density, for sparsifiers that have one.
    pub fn density(&self) -> Option<f64> {
        self.method().density()
    }

    /// Sets the target density of a sparsifier; returns false for other compressors.
    pub fn set_density(&mut self, rho: f64) -> bool {
        self.method_mut().set_density(rho)
    }

    /// The memory `auto` means for this compressor ([`Method::default_memory`]).
    pub fn default_memory(&self) -> MemoryKind {
        self.method().default_memory()
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
            kind => Some(kind.build(residual, momentum, self.method().memory_decay())),
        }
    }

    /// Checks every option's range.
    pub fn validate(&self) -> Result<(), InvalidOption> {
        self.method().validate()
    }

    /// Whether a unit of `shape` is compressed at all; PowerSGD leaves
    /// vectors and the matrices it would not shrink enough to travel dense.
    pub fn compresses(&self, shape: &[usize]) -> bool {
        self.method().compresses(shape)
    }

    /// The first step on which the compressor compresses: PowerSGD's
    /// `start_iter` (plain allreduce before it), 0 for the rest.
    pub fn first_compressed_step(&self) -> u64 {
        self.method().first_compressed_step()
    }

    /// Builds the compressor of a unit of `shape` (PowerSGD sees its matrix).
    pub fn build_for(&self, shape: &[usize]) -> Box<dyn Compressor> {
        self.method().build(shape)
    }

    /// The tag of a standalone compressor's messages (the bytes API's, one
    /// tensor per compressor): an FNV-1a hash of this configuration and the
    /// tensor's `shape`, carried in the header's unit field. Workers built
    /// alike tag alike; a message of another method, configuration or shape
    /// carries another tag and is refused instead of mixed in.
    pub fn message_tag(&self, shape: &[usize]) -> u32 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in format!("{self:?}/{shape:?}").bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        (h ^ (h >> 32)) as u32
    }

    /// Builds the compressor of a shape-less unit. Call
    /// [`CompressorConfig::validate`] first.
    pub fn build(&self) -> Box<dyn Compressor> {
        self.method().build(&[])
    }
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

    /// `draws_random` is true exactly for the methods whose message changes
    /// with the seed (the Python front refuses `seed` for the others).
    #[test]
    fn draws_random_says_whether_the_seed_changes_the_message() {
        let x: Vec<f32> = (0..512).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        for name in CompressorConfig::NAMES {
            let mut c = CompressorConfig::named(name).unwrap();
            c.set_density(0.3);
            let sent = |seed: u64| {
                let mut compressor = c.build();
                let mut msg = crate::Message::default();
                let ctx = crate::UnitContext { key: crate::RngKey::new(seed, 0, 3, 0), loss: Some(1.0) };
                compressor.compress(&x, &ctx, &mut msg);
                let mut wire = Vec::new();
                crate::codec::encode(&msg, 0, &mut wire);
                wire
            };
            assert_eq!(sent(1) != sent(2), c.method().draws_random(), "{name}");
        }
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
            ("fp4", ErrorFeedback),
            ("sparseloco", ErrorFeedback),
            ("dct-topk", ErrorFeedback),
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
        let q = CompressorConfig::Qsgd(QsgdConfig { levels: 0, block: 4 });
        assert!(q.validate().unwrap_err().to_string().starts_with("compressor.levels"));
        let bad = [
            (CompressorConfig::Fp4(Fp4Config { block: 0, ..Default::default() }), "block"),
            (CompressorConfig::Sparseloco(SparseLocoConfig { k: 0, ..Default::default() }), "k"),
            (CompressorConfig::Sparseloco(SparseLocoConfig { decay: 1.5, ..Default::default() }), "decay"),
            (CompressorConfig::DctTopk(DctTopKConfig { chunk: 300, ..Default::default() }), "chunk"),
            (
                CompressorConfig::DctTopk(DctTopKConfig { vector_chunk: 0, ..Default::default() }),
                "vector_chunk",
            ),
            // A DCT tile's side is at most 256, which receivers accept.
            (
                CompressorConfig::DctTopk(DctTopKConfig { vector_chunk: 4096, ..Default::default() }),
                "vector_chunk",
            ),
        ];
        for (c, key) in bad {
            assert_eq!(c.validate().unwrap_err().key, key, "{c:?}");
        }
        let unknown = r#"{"name":"fp4","format":"e5m2"}"#;
        assert!(serde_json::from_str::<CompressorConfig>(unknown).is_err(), "an unknown fp4 format");
    }
}
