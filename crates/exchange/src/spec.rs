//! [`CompressorSpec`]: the compressor every unit runs, one of gradcomp's
//! methods or a user's own, as one type. Everything the exchange, the
//! configuration's checks and the fronts ask of a compressor they ask here,
//! so no caller branches on "built-in or custom".

use gradcomp_compress::memory::{Memory, MemoryKind, ResidualForm};
use gradcomp_compress::method::Method;
use gradcomp_compress::{Combine, Compressor, CompressorConfig};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::custom::CustomCompressor;

/// A built-in method by its configuration (`[compressor]` in TOML), or a
/// compressor of the user's own (code: not read from a file).
#[derive(Clone, Debug, PartialEq)]
pub enum CompressorSpec {
    Builtin(CompressorConfig),
    Custom(CustomCompressor),
}

impl Default for CompressorSpec {
    fn default() -> Self {
        CompressorSpec::Builtin(CompressorConfig::dense())
    }
}

impl From<CompressorConfig> for CompressorSpec {
    fn from(c: CompressorConfig) -> Self {
        CompressorSpec::Builtin(c)
    }
}

impl From<CustomCompressor> for CompressorSpec {
    fn from(c: CustomCompressor) -> Self {
        CompressorSpec::Custom(c)
    }
}

impl CompressorSpec {
    /// The name records and errors show (`topk`, or the user's name).
    pub fn name(&self) -> &str {
        match self {
            CompressorSpec::Builtin(c) => c.name(),
            CompressorSpec::Custom(c) => c.name(),
        }
    }

    /// The built-in method's configuration; `None` for a user's compressor.
    pub fn builtin(&self) -> Option<&CompressorConfig> {
        match self {
            CompressorSpec::Builtin(c) => Some(c),
            CompressorSpec::Custom(_) => None,
        }
    }

    /// Whether a built-in method declares `property` (`Method::needs_loss`,
    /// ...); a user's compressor declares none.
    pub fn declares(&self, property: impl Fn(&dyn Method) -> bool) -> bool {
        self.builtin().is_some_and(|c| property(c.method()))
    }

    /// The compressor of a unit of `shape` (PowerSGD sees its matrix).
    pub fn build_for(&self, shape: &[usize]) -> Box<dyn Compressor> {
        match self {
            CompressorSpec::Builtin(c) => c.build_for(shape),
            CompressorSpec::Custom(c) => c.compressor(),
        }
    }

    /// How the messages of N workers combine, which decides the collective.
    pub fn combine(&self) -> Combine {
        match self {
            CompressorSpec::Builtin(c) => c.build().combine(),
            CompressorSpec::Custom(c) => c.compressor().combine(),
        }
    }

    /// Whether a unit of `shape` is compressed at all (PowerSGD leaves
    /// vectors and the matrices it would not shrink dense; a user's
    /// compressor takes every unit).
    pub fn compresses(&self, shape: &[usize]) -> bool {
        self.builtin().is_none_or(|c| c.compresses(shape))
    }

    /// Whether every unit travels as it is (the dense method).
    pub fn sends_values_as_they_are(&self) -> bool {
        matches!(self.builtin(), Some(CompressorConfig::Dense(_)))
    }

    /// The target density ρ of a built-in sparsifier.
    pub fn density(&self) -> Option<f64> {
        self.builtin().and_then(CompressorConfig::density)
    }

    /// The first step whose message is compressed (PowerSGD's `start_iter`).
    pub fn first_compressed_step(&self) -> u64 {
        self.builtin().map_or(0, CompressorConfig::first_compressed_step)
    }

    /// The memory kind in effect for `requested` (a built-in method's
    /// `auto` resolved); a user's compressor has its own or none (`None`).
    pub fn memory_kind(&self, requested: MemoryKind) -> MemoryKind {
        match self {
            CompressorSpec::Builtin(c) => c.resolve_memory(requested),
            CompressorSpec::Custom(_) => MemoryKind::None,
        }
    }

    /// A compressed unit's memory, `None` for the identity: the user's, or
    /// the built-in kind in effect with error feedback's `residual` form and
    /// DGC's `momentum`.
    pub fn memory(
        &self,
        requested: MemoryKind,
        residual: ResidualForm,
        momentum: f32,
    ) -> Option<Box<dyn Memory>> {
        match self {
            CompressorSpec::Custom(c) => c.memory(),
            CompressorSpec::Builtin(c) => c.build_memory(requested, residual, momentum),
        }
    }

    /// Whether compressed units have a memory (what [`CompressorSpec::memory`]
    /// would build), without building one.
    pub fn has_memory(&self, requested: MemoryKind) -> bool {
        match self {
            CompressorSpec::Custom(c) => c.has_memory(),
            CompressorSpec::Builtin(_) => {
                !matches!(self.memory_kind(requested), MemoryKind::None | MemoryKind::Auto)
            }
        }
    }
}

/// A built-in method serializes as its `[compressor]` table; a user's as
/// `{name = "custom:NAME"}`, which no file can load back (it is code).
impl Serialize for CompressorSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            CompressorSpec::Builtin(c) => c.serialize(s),
            CompressorSpec::Custom(c) => {
                let mut m = std::collections::BTreeMap::new();
                m.insert("name", format!("custom:{}", c.name()));
                m.serialize(s)
            }
        }
    }
}

impl<'de> Deserialize<'de> for CompressorSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        CompressorConfig::deserialize(d).map(CompressorSpec::Builtin)
    }
}

#[cfg(test)]
mod tests {
    use gradcomp_compress::memory::ErrorFeedback;

    use super::*;

    #[test]
    fn built_in_and_custom_answer_the_same_questions() {
        let topk = CompressorSpec::from(CompressorConfig::topk(0.01));
        assert_eq!(topk.name(), "topk");
        assert_eq!(topk.combine(), Combine::Gather);
        assert_eq!(topk.density(), Some(0.01));
        assert!(topk.memory(MemoryKind::Auto, ResidualForm::Raw, 0.9).is_some());
        assert!(topk.has_memory(MemoryKind::Auto) && !topk.has_memory(MemoryKind::None));
        let mine = CompressorSpec::from(
            CustomCompressor::new("mine", || CompressorConfig::dense().build())
                .with_memory(|| Box::new(ErrorFeedback::new(ResidualForm::Raw))),
        );
        assert_eq!(mine.name(), "mine");
        assert_eq!(mine.combine(), Combine::DenseSum);
        assert_eq!(mine.density(), None);
        assert!(mine.compresses(&[3]) && !mine.sends_values_as_they_are());
        assert!(mine.memory(MemoryKind::None, ResidualForm::Raw, 0.9).is_some());
        assert!(mine.has_memory(MemoryKind::None));
        assert!(CompressorSpec::default().sends_values_as_they_are());
    }

    #[test]
    fn a_built_in_method_serializes_as_its_table_and_a_custom_one_by_name() {
        let topk = CompressorSpec::from(CompressorConfig::topk(0.01));
        let json = serde_json::to_string(&topk).unwrap();
        assert_eq!(json, serde_json::to_string(&CompressorConfig::topk(0.01)).unwrap());
        assert_eq!(serde_json::from_str::<CompressorSpec>(&json).unwrap(), topk);
        let mine = CompressorSpec::from(CustomCompressor::new("mine", || CompressorConfig::dense().build()));
        assert_eq!(serde_json::to_string(&mine).unwrap(), r#"{"name":"custom:mine"}"#);
        assert!(serde_json::from_str::<CompressorSpec>(r#"{"name":"custom:mine"}"#).is_err());
    }
}
