//! A worker resumed from a checkpoint of another number of workers (issue
//! #27; local updates, issue #49): the state each worker restores, and the
//! run's new place in its epochs.

use super::super::checkpoint::Checkpoint;
use super::super::run::{io, TrainError};
use super::Worker;
use crate::data::Loader;
use crate::models::Net;
use gradcomp_dp::DataParallelState;

/// How a local-update run resumed with another number of workers restarted
/// ([`Worker::outer_restart`]), for its line in `membership.jsonl`.
pub(super) struct OuterRestart {
    /// Where the model came from: `outer.anchor` (θ_outer) or `mean`.
    model: &'static str,
    /// Local steps since the last outer round started: their progress,
    /// taken up by no round, is discarded by the restart.
    steps_since_round: u64,
}

impl<M: Net> Worker<'_, '_, M> {
    /// This worker in a local-update run (`kind = "local"`) resumed from a
    /// checkpoint of `from` workers with another number: the workers' own
    /// models differ between outer rounds, so every worker restarts from the
    /// run's shared model, θ_outer (`outer.anchor`), or, for plain model
    /// averaging (which keeps none), from the mean of the `from` saved
    /// models, which is the round's result. The shared state (θ_outer, the
    /// outer momentum, a compressor's own state) comes from rank 0's file
    /// for every worker, so all start alike; every error-feedback memory is
    /// zero (reset: the gradient mass a memory owes was owed by a model that
    /// is replaced here, and a worker new to the run has none, as a worker
    /// healed by torchft); the inner optimizer's state is the rank's own
    /// where that rank was in the run, else fresh.
    pub(super) fn outer_restart(
        &mut self,
        model: M,
        saved: &Checkpoint,
        from: usize,
    ) -> Result<(M, DataParallelState, OuterRestart), TrainError> {
        let rank = self.dp.rank();
        let (shared, _) = saved.rank_state(0)?;
        let mut state = shared.for_new_worker();
        let own = if rank < from {
            let (mine, own) = saved.rank_state(rank)?;
            (state.bytes_sent, state.bytes_received) = (mine.bytes_sent, mine.bytes_received);
            own
        } else {
            None
        };
        // θ_outer's buffer (gradcomp-exchange's `ANCHOR_KEY`).
        let (theta, source) = match state.buffers.get("outer.anchor").filter(|a| !a.is_empty()) {
            Some(anchor) => (anchor.clone(), "outer.anchor"),
            None => {
                let mut mean = vec![0.0f64; saved.replica.params.len()];
                for r in 0..from {
                    let (_, replica) = saved.rank_state(r)?;
                    let params = replica.map_or_else(|| saved.replica.params.clone(), |m| m.params);
                    mean.iter_mut().zip(&params).for_each(|(m, &p)| *m += f64::from(p));
                }
                (mean.iter().map(|m| (m / from as f64) as f32).collect(), "mean")
            }
        };
        // The rank's own model and optimizer where it has them (the model's
        // values then replaced); a new rank keeps its fresh optimizer.
        let model = match &own {
            Some(own) => {
                let (model, optim) = own.apply(model, self.optim.clone())?;
                self.optim = optim;
                model
            }
            None => saved.replica.apply(model, self.optim.clone())?.0,
        };
        let layout = gradcomp_dp::params::layout(&model);
        if theta.len() != layout.total() {
            return Err(TrainError::Checkpoint(format!(
                "the checkpoint's shared model has {} values, this model {}",
                theta.len(),
                layout.total()
            )));
        }
        let model = gradcomp_dp::params::write_params(model, &theta);
        let steps_since_round = self.steps_since_round(saved.counters.step, state.averaged_at);
        Ok((model, state, OuterRestart { model: source, steps_since_round }))
    }

    /// How many steps before `step` the last outer round started (0 when
    /// one started at `step` itself, before the checkpoint: `averaged_at`):
    /// the local steps whose progress no round has taken up.
    fn steps_since_round(&self, step: u64, averaged_at: Option<u64>) -> u64 {
        let schedule = gradcomp_dp::strategy::OuterSchedule::new(&self.sh.cfg.strategy);
        let done = |t: u64| schedule.starts_any(t) && (t < step || averaged_at == Some(step));
        (0..=step).rev().find(|&t| done(t)).map_or(step, |t| step - t)
    }

    /// This worker's state in a run of `to` workers resumed from a
    /// checkpoint of `from`: a surviving rank takes its own, a new rank
    /// rank 0's with its memories zeroed; the memories of ranks that are gone
    /// are folded into it or dropped (`elastic.lost_state`).
    pub(super) fn resized_state(
        &self,
        saved: &Checkpoint,
        from: usize,
        to: usize,
    ) -> Result<DataParallelState, TrainError> {
        let rank = self.dp.rank();
        let mut state =
            if rank < from { saved.rank_state(rank)?.0 } else { saved.rank_state(0)?.0.for_new_worker() };
        if self.sh.cfg.elastic.lost_state == crate::config::LostState::Fold {
            for lost in to..from {
                state.fold_lost(&saved.rank_state(lost)?.0, from);
            }
        }
        Ok(state)
    }

    /// Places a run resumed from `from` workers with `to` (its state
    /// restored): the data is sharded anew among `to`, the run goes on at the
    /// same point of the same epoch, as a fraction of it, with the learning
    /// rate `elastic.lr` says; rank 0 records the change in `membership.jsonl`.
    pub(super) fn resize(
        &mut self,
        saved: &Checkpoint,
        from: usize,
        to: usize,
        restart: Option<OuterRestart>,
    ) -> Result<(), TrainError> {
        let cfg = self.sh.cfg;
        let step = saved.counters.step;
        let old_per_epoch =
            (Loader::new(self.sh.data, &crate::config::TrainConfig { workers: from, ..cfg.clone() }, 0)
                .batches_per_epoch() as u64)
                .max(1);
        let old_position = saved.counters.position();
        let epoch = old_position / old_per_epoch;
        let within = (old_position % old_per_epoch) as f64 / old_per_epoch as f64;
        let position = epoch * self.steps_per_epoch + (within * self.steps_per_epoch as f64).round() as u64;
        self.set_position(step, position);
        self.lr_factor *= match cfg.elastic.lr {
            crate::config::ElasticLr::Keep => 1.0,
            crate::config::ElasticLr::Linear => to as f64 / from as f64,
        };
        self.recorder.totals.workers = to;
        self.recorder.totals.lr_factor = (self.lr_factor != 1.0).then_some(self.lr_factor);
        if self.dp.rank() == 0 {
            let lost_state = if to < from {
                format!("{:?}", cfg.elastic.lost_state).to_lowercase()
            } else {
                "none".into()
            };
            let mut line = serde_json::json!({
                "step": step, "from": from, "to": to, "epoch": epoch,
                "steps_per_epoch": [old_per_epoch, self.steps_per_epoch], "position": position,
                "lost_state": lost_state, "lr_factor": self.lr_factor,
            });
            if let Some(r) = restart {
                // Local updates: every worker restarted from the shared
                // model; memories reset; `lost_state` does not apply.
                line["lost_state"] = "reset".into();
                line["model"] = r.model.into();
                line["memories"] = "reset".into();
                line["fresh_optimizers"] = to.saturating_sub(from).into();
                line["steps_since_round"] = r.steps_since_round.into();
            }
            crate::records::append_membership(&self.sh.run_dir, &line).map_err(io(&self.sh.run_dir))?;
        }
        Ok(())
    }
}
