//! The exchange's state for checkpoints: each unit's memory buffers, named
//! `{prefix}memory.{unit}.{i}`, the same whether the memories live on the
//! host or on the device (so a run can move between the two), and the state
//! a compressor carries between steps (PowerSGD's Q), `{prefix}compressor.{unit}.{i}`.

use super::gradient_exchange::{GradientExchange, StateBuffers};

impl GradientExchange {
    /// The memories' state as named buffers, read from the device when they
    /// live there (an unreadable device buffer is a panic: the device is gone).
    pub fn state(&self, prefix: &str, out: &mut StateBuffers) {
        #[cfg(feature = "device-kernels")]
        if let Some(d) = &self.device {
            let units = d.state().expect("reading the device memories for a checkpoint");
            for (u, bufs) in units.into_iter().enumerate() {
                for (i, b) in bufs.into_iter().enumerate() {
                    out.insert(format!("{prefix}memory.{u}.{i}"), b);
                }
            }
            let compressors = d.compressor_state().expect("reading the device compressors for a checkpoint");
            insert_compressor_state(prefix, compressors, out);
            return;
        }
        for (u, mem) in self.host.memories.iter().enumerate() {
            for (i, b) in mem.state().into_iter().enumerate() {
                out.insert(format!("{prefix}memory.{u}.{i}"), b.to_vec());
            }
        }
        self.compressor_state(prefix, out);
    }

    /// The host compressors' own state.
    fn compressor_state(&self, prefix: &str, out: &mut StateBuffers) {
        insert_compressor_state(prefix, self.host.compressors.iter().map(|c| c.state()).collect(), out);
    }

    /// Restores [`GradientExchange::state`]; every buffer must be present and
    /// empty (a memory that has not run yet) or exactly its unit's length.
    pub fn restore(&mut self, prefix: &str, state: &StateBuffers) -> Result<(), String> {
        for (u, mem) in self.host.memories.iter_mut().enumerate() {
            let unit = &self.plan.units[u];
            let mut bufs = Vec::new();
            for i in 0..mem.state().len() {
                let name = format!("{prefix}memory.{u}.{i}");
                let b = state
                    .get(&name)
                    .ok_or_else(|| format!("the memory of unit {} ({name}) is missing", unit.name))?;
                if !b.is_empty() && b.len() != unit.len {
                    return Err(format!(
                        "the memory of unit {} ({name}) holds {} values, the unit has {}",
                        unit.name,
                        b.len(),
                        unit.len
                    ));
                }
                bufs.push(b.clone());
            }
            mem.restore(&bufs)?;
        }
        for (u, c) in self.host.compressors.iter_mut().enumerate() {
            let unit = &self.plan.units[u];
            let bufs = (0..c.state().len())
                .map(|i| {
                    let name = format!("{prefix}compressor.{u}.{i}");
                    state.get(&name).cloned().ok_or_else(|| {
                        format!("the compressor state of unit {} ({name}) is missing", unit.name)
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            c.restore(&bufs).map_err(|e| format!("unit {}: {e}", unit.name))?;
        }
        // A device form takes the restored state from the host.
        #[cfg(feature = "device-kernels")]
        if let Some(d) = &mut self.device {
            d.load(&self.host)?;
        }
        Ok(())
    }
}

/// Each unit's compressor state, `{prefix}compressor.{unit}.{i}`.
fn insert_compressor_state<B: Into<Vec<f32>>>(prefix: &str, units: Vec<Vec<B>>, out: &mut StateBuffers) {
    for (u, bufs) in units.into_iter().enumerate() {
        for (i, b) in bufs.into_iter().enumerate() {
            out.insert(format!("{prefix}compressor.{u}.{i}"), b.into());
        }
    }
}
