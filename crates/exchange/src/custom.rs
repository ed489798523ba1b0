//! A compressor of the user's own: any [`Compressor`] (and, if it wants one,
//! any [`Memory`]) built in the user's crate and handed to
//! [`DataParallelConfig::custom`](crate::DataParallelConfig::custom).

use std::fmt;
use std::sync::Arc;

use gradcomp_compress::memory::Memory;
use gradcomp_compress::Compressor;

type MakeCompressor = Arc<dyn Fn() -> Box<dyn Compressor> + Send + Sync>;
type MakeMemory = Arc<dyn Fn() -> Box<dyn Memory> + Send + Sync>;

/// How to build a user's compressor for each compression unit, and its
/// memory. Every worker must build the same one: the name takes part in
/// the configuration every worker compares at `init`.
///
/// The compressor's [`Compressor::combine`] decides its collective as for
/// the built-in ones (a `Gather` compressor over allgather or the parameter
/// server, a summable one over allreduce too). It has no device form: the
/// exchange runs it on the host.
#[derive(Clone)]
pub struct CustomCompressor {
    name: String,
    compressor: MakeCompressor,
    memory: Option<MakeMemory>,
}

impl CustomCompressor {
    /// `make` builds one unit's compressor; it is called once per unit.
    pub fn new(
        name: impl Into<String>,
        make: impl Fn() -> Box<dyn Compressor> + Send + Sync + 'static,
    ) -> Self {
        Self { name: name.into(), compressor: Arc::new(make), memory: None }
    }

    /// Gives every compressed unit the memory `make` builds (error feedback,
    /// or one of the user's own); without it, units have none.
    pub fn with_memory(mut self, make: impl Fn() -> Box<dyn Memory> + Send + Sync + 'static) -> Self {
        self.memory = Some(Arc::new(make));
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn compressor(&self) -> Box<dyn Compressor> {
        (self.compressor)()
    }

    /// Whether the user gave a memory.
    pub fn has_memory(&self) -> bool {
        self.memory.is_some()
    }

    /// A unit's memory, if the user gave one.
    pub fn memory(&self) -> Option<Box<dyn Memory>> {
        self.memory.as_ref().map(|m| m())
    }
}

impl fmt::Debug for CustomCompressor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CustomCompressor")
            .field("name", &self.name)
            .field("memory", &self.memory.is_some())
            .finish()
    }
}

/// Two custom compressors are the same when their names and whether they
/// have a memory are: what workers can compare.
impl PartialEq for CustomCompressor {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.memory.is_some() == other.memory.is_some()
    }
}
