//! [`DataParallel`]: one worker's handle on compressed data-parallel training.
//!
//! - [`init`](crate::DataParallelConfig::init) (`init.rs`): joining the group.
//! - `step.rs`: [`DataParallel::begin_step`] and [`DataParallel::step`].
//! - `agree.rs`: the rounds every worker takes part in besides the
//!   exchange: the step's agreement, checksums, model averaging.
//! - `location.rs`: where the exchange compresses, and the gradient there.

mod agree;
mod init;
pub use init::InitDataParallel;
mod location;
mod replan;
mod step;

use std::collections::BTreeMap;

use gradcomp_comm::{Collective, Gathered, Metered, StepBytes};
use gradcomp_compress::stats::Histogram;
use serde::{Deserialize, Serialize};

use crate::config::DataParallelConfig;
use crate::exchange::{ExchangeStats, Unit};
use crate::layout::GradientLayout;
use crate::strategy::Strategy;
use crate::DataParallelError;

/// What the last step did on this worker, for records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepStats {
    /// The step's number (from 0).
    pub step: u64,
    /// This worker's loss, if known; the mean over the workers that knew theirs.
    pub loss: Option<f64>,
    pub mean_loss: Option<f64>,
    /// The learning rate applied (CELGC's clipped step) and the target density.
    pub lr: f64,
    pub density: Option<f64>,
    /// A worker had a non-finite gradient or loss and the configuration
    /// skips such steps: every worker skipped it.
    pub skipped: bool,
    /// Bytes this worker moved for the strategy (model averaging included;
    /// control, checksum and evaluation rounds excluded), by collective.
    pub bytes: StepBytes,
    /// Seconds to read the gradient out of burn, and to hand the result back.
    pub read_seconds: f64,
    /// Seconds of a staged backward pass run inside the step (its later
    /// stages, while earlier buckets were on the wire); 0 for a whole one.
    pub backward_seconds: f64,
    pub write_seconds: f64,
    /// Seconds in the optimizer's step.
    pub optimizer_seconds: f64,
    /// Seconds in the non-finite check and the step's agreement (non-finite values, loss, stop).
    pub control_seconds: f64,
    /// Compression statistics and times of the exchange; `communicate_seconds`
    /// includes a model-averaging round before the step.
    pub exchange: ExchangeStats,
    /// Histogram of this worker's gradient, on measured steps (41 bins).
    pub histogram: Option<Histogram>,
    /// Strategy figures (CELGC's effective step, norm, clipping, round).
    pub extra: Vec<(&'static str, f64)>,
}

/// A handle's state, for checkpoints: the step counter, the byte totals and
/// the strategy's buffers (memories, CELGC's anchor). Serializable, so it can
/// go into any checkpoint format.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DataParallelState {
    pub step: u64,
    /// This worker's strategy bytes so far.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// All workers' (see [`DataParallel::group_bytes_sent`]).
    pub group_bytes_sent: u64,
    pub buffers: BTreeMap<String, Vec<f32>>,
    /// The step whose model-averaging round is already done (an epoch-end
    /// round comes before that epoch's checkpoint).
    #[serde(default)]
    pub averaged_at: Option<u64>,
}

impl DataParallelState {
    /// Whether buffer `name` is a per-worker memory (error-feedback
    /// residual, DGC's momentum and velocity, eSGD's residual): gradient
    /// mass this worker still owes the model. The compressors' own state
    /// (PowerSGD's Q, Signum's momentum) is not one.
    pub fn is_memory(name: &str) -> bool {
        gradcomp_exchange::StateKey::names_memory(name)
    }

    /// The state a worker that joins the run starts from, made from a
    /// running worker's: the same step and compressor state, zero memories
    /// and byte counts.
    pub fn for_new_worker(&self) -> Self {
        let mut s = self.clone();
        for (_, b) in s.buffers.iter_mut().filter(|(k, _)| Self::is_memory(k)) {
            b.iter_mut().for_each(|v| *v = 0.0);
        }
        (s.bytes_sent, s.bytes_received) = (0, 0);
        s
    }

    /// Folds the memories of a worker that is gone into this survivor's:
    /// each survivor adds them divided by `old_workers`, so the gradient
    /// mass the lost worker owed reaches the model as it would have (its
    /// share of the mean over the old N). Issue #27's `elastic.lost_state`.
    pub fn fold_lost(&mut self, lost: &DataParallelState, old_workers: usize) {
        let share = 1.0 / old_workers.max(1) as f32;
        for (k, b) in self.buffers.iter_mut().filter(|(k, _)| Self::is_memory(k)) {
            if let Some(l) = lost.buffers.get(k) {
                b.iter_mut().zip(l).for_each(|(v, l)| *v += share * l);
            }
        }
    }
}

/// Where this worker compresses.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum CompressionLocation {
    /// Not decided yet (no step has run).
    #[default]
    Undecided,
    /// On the model's GPU: the gradient stays in device memory and only
    /// messages cross to the host.
    Device,
    /// On the host, and why (a CPU model, `compression.on_device = false`,
    /// a method or strategy without a device form, or a build without the
    /// `cuda`/`wgpu` features).
    Host(String),
}

/// A worker's first non-finite value: what holds it (`gradient`, `loss`)
/// and the tensor.
pub(crate) type NonFinite = (&'static str, String);

/// One worker's handle: owns the collective, the strategy with its memories,
/// the byte meter and the record of the last step.
///
/// Per step, every worker calls [`begin_step`](Self::begin_step) before its
/// forward pass and [`step`](Self::step) with the loss (or the gradients)
/// and its burn optimizer, which the handle applies to the combined gradient.
///
/// **Evaluate [`consensus_model`](Self::consensus_model)**, not a worker's
/// own model: under CELGC (and any strategy whose
/// [`identical_replicas`](Self::identical_replicas) is false) the replicas
/// differ between averaging rounds, and the consensus is their average.
pub struct DataParallel {
    cfg: DataParallelConfig,
    /// The collective, metered: what passes through it is the strategy's bytes.
    c: Metered<Box<dyn Collective>>,
    strategy: Box<dyn Strategy>,
    layout: GradientLayout,
    step: u64,
    /// The epoch whose density the strategy has.
    epoch: Option<u32>,
    /// The step whose model-averaging round has been done.
    averaged_at: Option<u64>,
    /// This worker asked to stop; the group learns it at the next step.
    stop: bool,
    /// The last step's agreement: some worker asked to stop.
    stop_agreed: bool,
    density: Option<f64>,
    grad: Vec<f32>,
    out: Vec<f32>,
    params: Vec<f32>,
    gathered: Gathered,
    /// Strategy bytes and seconds since the last step (a model-averaging round).
    pending: StepBytes,
    pending_seconds: f64,
    totals: StepBytes,
    /// Byte totals of the run before a restore.
    earlier: (u64, u64),
    /// All workers' strategy bytes through the previous step (the step's agreement).
    group_sent: u64,
    last: StepStats,
    /// Where the exchange compresses: decided at the first step, from where
    /// burn left the gradient and whether the strategy has a device form.
    location: CompressionLocation,
    /// `plan = "auto"` deciding again ([`DataParallel::decide_again_from`]).
    replanning: Option<Replanning>,
}

/// A running `plan = "auto"`'s state in the handle (`replan.rs`).
struct Replanning {
    replan: crate::exchange::auto_plan::Replan,
    /// This worker's inner steps since the last decision, in seconds.
    times: Vec<f64>,
    /// Where the step being timed began.
    since: Option<std::time::Instant>,
    /// Rank 0's lines, until taken.
    lines: Vec<String>,
}

impl DataParallel {
    pub fn rank(&self) -> usize {
        self.c.rank()
    }

    pub fn world_size(&self) -> usize {
        self.c.world_size()
    }

    /// Steps done so far (the number of the next step).
    pub fn steps(&self) -> u64 {
        self.step
    }

    pub fn config(&self) -> &DataParallelConfig {
        &self.cfg
    }

    /// The flat gradient layout: every trainable parameter's name, offset and shape.
    pub fn layout(&self) -> &GradientLayout {
        &self.layout
    }

    /// The compression units (empty for CELGC without compressed deltas).
    pub fn units(&self) -> &[Unit] {
        self.strategy.units()
    }

    /// Where this worker compresses (decided at the first step).
    pub fn compression_location(&self) -> &CompressionLocation {
        &self.location
    }

    /// What the last step did on this worker.
    pub fn last_step(&self) -> &StepStats {
        &self.last
    }

    /// Bytes this worker sent and received for the strategy so far.
    pub fn bytes_sent(&self) -> u64 {
        self.earlier.0 + self.totals.sent()
    }

    pub fn bytes_received(&self) -> u64 {
        self.earlier.1 + self.totals.received()
    }

    /// Whether every worker's model is identical after every step (false
    /// for CELGC between rounds: use [`consensus_model`](Self::consensus_model)).
    pub fn identical_replicas(&self) -> bool {
        self.strategy.identical_replicas()
    }

    /// Bytes all workers together sent through the strategy up to the last
    /// step, learned in the agreement of each step (f32 sums: exact to
    /// about 7 digits), for progress displays. Exact per-worker counts are
    /// [`StepStats::bytes`].
    pub fn group_bytes_sent(&self) -> u64 {
        self.group_sent
    }

    /// The collective, for the caller's own operations (evaluation sums,
    /// records). It is the one under the meter: its bytes are not the
    /// strategy's.
    pub fn collective_mut(&mut self) -> &mut dyn Collective {
        &mut **self.c.unmetered()
    }

    /// Asks every worker to stop: after the next step,
    /// [`stop_requested`](Self::stop_requested) is true on every worker.
    pub fn request_stop(&mut self) {
        self.stop = true;
    }

    /// Whether some worker asked to stop, as every worker learned it at the
    /// last step (each can then checkpoint and leave together).
    pub fn stop_requested(&self) -> bool {
        self.stop_agreed
    }

    /// The state an exact resume needs.
    pub fn state(&self) -> Result<DataParallelState, DataParallelError> {
        let buffers = self.strategy.state().map_err(|e| DataParallelError::from_exchange(self.rank(), e))?;
        Ok(DataParallelState {
            step: self.step,
            bytes_sent: self.bytes_sent(),
            bytes_received: self.bytes_received(),
            group_bytes_sent: self.group_sent,
            buffers,
            averaged_at: self.averaged_at,
        })
    }

    /// Restores [`DataParallel::state`] (made by the same model and
    /// configuration); a missing or misshapen buffer is an error naming it.
    pub fn restore(&mut self, state: &DataParallelState) -> Result<(), DataParallelError> {
        self.strategy.restore(&state.buffers)?;
        self.step = state.step;
        self.averaged_at = state.averaged_at;
        self.earlier = (state.bytes_sent, state.bytes_received);
        self.group_sent = state.group_bytes_sent;
        self.totals = StepBytes::default();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::DataParallelState;

    fn state(memory: f32, q: f32) -> DataParallelState {
        DataParallelState {
            step: 7,
            bytes_sent: 100,
            buffers: [
                ("memory.0.0".to_string(), vec![memory; 3]),
                ("compressor.0.0".to_string(), vec![q; 2]),
            ]
            .into(),
            ..Default::default()
        }
    }

    #[test]
    fn lost_memories_fold_by_the_old_count_and_new_workers_start_empty() {
        let mut survivor = state(1.0, 5.0);
        survivor.fold_lost(&state(4.0, 9.0), 4);
        // 1 + 4/4 in the memory; the compressor's own state is the survivor's.
        assert_eq!(survivor.buffers["memory.0.0"], [2.0; 3]);
        assert_eq!(survivor.buffers["compressor.0.0"], [5.0; 2]);
        let new = state(3.0, 5.0).for_new_worker();
        assert_eq!((new.step, new.bytes_sent), (7, 0));
        assert_eq!(new.buffers["memory.0.0"], [0.0; 3]);
        assert_eq!(new.buffers["compressor.0.0"], [5.0; 2]);
    }
}
