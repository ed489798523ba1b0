//! The exchange's state for checkpoints: each unit's memory buffers and the
//! state a compressor carries between steps (PowerSGD's Q), named by
//! [`StateKey`] (`{scope}memory.{unit}.{i}`, `{scope}compressor.{unit}.{i}`),
//! the same whether the memories live on the host or on the device (so a run
//! can move between the two).

use std::fmt;

use super::gradient_exchange::{GradientExchange, StateBuffers};
use gradcomp_compress::StateError;

use crate::error::ExchangeError;

/// What a unit's state buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateKind {
    /// A memory's buffer (error-feedback residual, DGC's momentum and
    /// velocity, eSGD's residual): gradient mass this worker still owes.
    Memory,
    /// A compressor's own state (PowerSGD's Q, Signum's momentum).
    Compressor,
}

impl StateKind {
    /// How a buffer name spells the kind.
    pub fn name(self) -> &'static str {
        match self {
            StateKind::Memory => "memory",
            StateKind::Compressor => "compressor",
        }
    }

    /// The kind a name spells, if any.
    pub fn named(name: &str) -> Option<Self> {
        [StateKind::Memory, StateKind::Compressor].into_iter().find(|k| k.name() == name)
    }
}

/// The name of one unit's state buffer: `scope` (empty, or a strategy's
/// `delta.`), its kind, the unit and the buffer's index. Its text form is
/// what checkpoints store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateKey {
    pub scope: String,
    pub kind: StateKind,
    pub unit: usize,
    pub buffer: usize,
}

impl StateKey {
    pub fn new(scope: &str, kind: StateKind, unit: usize, buffer: usize) -> Self {
        StateKey { scope: scope.to_string(), kind, unit, buffer }
    }

    /// The key a buffer name spells, or `None` for a name that is not a
    /// unit's state (θ_outer, for one).
    pub fn parse(name: &str) -> Option<Self> {
        let mut parts = name.rsplitn(4, '.');
        let buffer = parts.next()?.parse().ok()?;
        let unit = parts.next()?.parse().ok()?;
        let kind = StateKind::named(parts.next()?)?;
        let scope = parts.next().map_or(String::new(), |s| format!("{s}."));
        Some(StateKey { scope, kind, unit, buffer })
    }

    /// Whether buffer `name` is a memory's (gradient mass a worker owes).
    pub fn names_memory(name: &str) -> bool {
        Self::parse(name).is_some_and(|k| k.kind == StateKind::Memory)
    }
}

impl fmt::Display for StateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}.{}.{}", self.scope, self.kind.name(), self.unit, self.buffer)
    }
}

/// θ_outer, the shared model of local updates' outer rounds.
pub const ANCHOR_KEY: &str = "outer.anchor";

/// Eager and delayed outer steps (ALGORITHMS.md §2.3): the average of the
/// round that was in flight, not yet applied, and this worker's own share
/// of its change, c_m/M, which the eager step takes back out of it.
pub const PENDING_KEY: &str = "outer.pending";
pub const OWN_KEY: &str = "outer.own";

/// ‖ḡ‖ of the last round, which CELGC's `global-average` clipping reads.
pub const GLOBAL_NORM_KEY: &str = "clip.global_norm";

/// Buffers renamed since checkpoints were first written, `(now, before)`:
/// a checkpoint that names a buffer the old way still restores
/// (docs/MIGRATING.md). Checkpoints are written with the new names only.
const RENAMED: [(&str, &str); 2] = [(ANCHOR_KEY, "celgc.anchor"), (GLOBAL_NORM_KEY, "celgc.global_norm")];

/// The scope of the change's memories in a checkpoint (`change.` for one
/// fragment, `change.p.` per fragment p), and the one it had before
/// (`delta.`): a checkpoint written with the old scope still restores.
pub const CHANGE_SCOPE: &str = "change.";
const CHANGE_SCOPE_BEFORE: &str = "delta.";

/// `s` with every buffer of the change's old scope (`delta.`) under the
/// new one (`change.`), where `s` holds no buffer of the new scope; else
/// `s` as it is. Copies only a checkpoint written before the rename.
pub(crate) fn with_change_scope(s: &StateBuffers) -> std::borrow::Cow<'_, StateBuffers> {
    if s.keys().any(|k| k.starts_with(CHANGE_SCOPE)) || !s.keys().any(|k| k.starts_with(CHANGE_SCOPE_BEFORE))
    {
        return std::borrow::Cow::Borrowed(s);
    }
    let renamed = s
        .iter()
        .map(|(k, v)| match k.strip_prefix(CHANGE_SCOPE_BEFORE) {
            Some(rest) => (format!("{CHANGE_SCOPE}{rest}"), v.clone()),
            None => (k.clone(), v.clone()),
        })
        .collect();
    std::borrow::Cow::Owned(renamed)
}

/// Buffer `key` of `s`, under its current name or the one it had before
/// ([`RENAMED`]); a missing buffer is [`StateError::Missing`] naming `key`.
pub(crate) fn read_renamed<'a>(s: &'a StateBuffers, key: &str) -> Result<&'a Vec<f32>, StateError> {
    let before = RENAMED.iter().find(|(now, _)| *now == key).map(|(_, before)| *before);
    s.get(key)
        .or_else(|| before.and_then(|b| s.get(b)))
        .ok_or_else(|| StateError::Missing { buffer: key.to_string() })
}

/// Each unit's buffers of `kind` under `scope`.
fn insert_units<B: Into<Vec<f32>>>(scope: &str, kind: StateKind, units: Vec<Vec<B>>, out: &mut StateBuffers) {
    for (u, bufs) in units.into_iter().enumerate() {
        for (i, b) in bufs.into_iter().enumerate() {
            out.insert(StateKey::new(scope, kind, u, i).to_string(), b.into());
        }
    }
}

impl GradientExchange {
    /// The memories' and compressors' state as named buffers, read from the
    /// device when they live there (an error if the device cannot be read).
    pub fn state(&self, scope: &str, out: &mut StateBuffers) -> Result<(), ExchangeError> {
        #[cfg(feature = "device-kernels")]
        if let Some(d) = &self.device {
            let device = |e: gradcomp_kernels::KernelError| {
                ExchangeError::Device(format!("reading the device state for a checkpoint: {e}"))
            };
            insert_units(scope, StateKind::Memory, d.state().map_err(device)?, out);
            insert_units(scope, StateKind::Compressor, d.compressor_state().map_err(device)?, out);
            return Ok(());
        }
        let memories = self.host.units.iter().map(|c| c.memory().state()).collect();
        insert_units(scope, StateKind::Memory, memories, out);
        let compressors = self.host.units.iter().map(|c| c.compressor().state()).collect();
        insert_units(scope, StateKind::Compressor, compressors, out);
        // The reduce-scatter's owner memories e₂, as memories of their units.
        for (u, i, values) in self.scatter.state() {
            out.insert(
                StateKey::new(&format!("{scope}scatter."), StateKind::Memory, u, i).to_string(),
                values,
            );
        }
        Ok(())
    }

    /// Restores [`GradientExchange::state`]; every buffer must be present and
    /// empty (a memory that has not run yet) or exactly its unit's length.
    pub fn restore(&mut self, scope: &str, state: &StateBuffers) -> Result<(), StateError> {
        for (u, cu) in self.host.units.iter_mut().enumerate() {
            let unit = &self.plan.units[u];
            let get = |kind, i| {
                let buffer = StateKey::new(scope, kind, u, i).to_string();
                state.get(&buffer).ok_or(StateError::Missing { buffer })
            };
            let in_unit = |e: StateError| e.in_unit(&unit.name);
            let mut bufs = Vec::new();
            for i in 0..cu.memory().state().len() {
                let b = get(StateKind::Memory, i).map_err(in_unit)?;
                if !b.is_empty() && b.len() != unit.len {
                    let buffer = StateKey::new(scope, StateKind::Memory, u, i).to_string();
                    return Err(in_unit(StateError::Length { buffer, expected: unit.len, got: b.len() }));
                }
                bufs.push(b.clone());
            }
            cu.memory_mut().restore(&bufs).map_err(in_unit)?;
            let bufs = (0..cu.compressor().state().len())
                .map(|i| get(StateKind::Compressor, i).cloned())
                .collect::<Result<Vec<_>, _>>()
                .map_err(in_unit)?;
            cu.compressor_mut().restore(&bufs).map_err(in_unit)?;
        }
        let key = |u, i| StateKey::new(&format!("{scope}scatter."), StateKind::Memory, u, i).to_string();
        self.scatter.restore(&self.plan, &self.recipe, |u, i| state.get(&key(u, i)), key)?;
        // A device form takes the restored state from the host.
        #[cfg(feature = "device-kernels")]
        if let Some(d) = &mut self.device {
            d.load(&self.host)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_their_names() {
        for key in [
            StateKey::new("", StateKind::Memory, 0, 0),
            StateKey::new("", StateKind::Compressor, 12, 1),
            StateKey::new("change.", StateKind::Memory, 3, 1),
        ] {
            assert_eq!(StateKey::parse(&key.to_string()), Some(key));
        }
        assert_eq!(StateKey::new("change.", StateKind::Memory, 3, 1).to_string(), "change.memory.3.1");
        for other in [ANCHOR_KEY, "memory.x.0", "memory.0", "residual.0.0", ""] {
            assert_eq!(StateKey::parse(other), None, "{other}");
        }
        assert!(StateKey::names_memory("change.memory.0.0"));
        assert!(!StateKey::names_memory("compressor.0.0"));
    }
}
