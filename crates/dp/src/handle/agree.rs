//! The rounds every worker takes part in besides the exchange: the step's
//! agreement (non-finite values, losses, stop requests), parameter
//! checksums, and the model-averaging rounds of CELGC. Only the last are
//! the strategy's bytes; the others go round the meter
//! ([`Metered::unmetered`](gradcomp_comm::Metered::unmetered)).

use std::time::Instant;

use burn::module::Module;
use gradcomp_comm::Collective;

use super::DataParallel;
use crate::config::OnNonFinite;
use crate::params;
use crate::DataParallelError;

/// What the step's agreement decided.
pub(super) struct Agreement {
    pub skip: bool,
    pub mean_loss: Option<f64>,
    pub seconds: f64,
}

impl DataParallel {
    /// The step's agreement: non-finite values (`bad`, this worker's first),
    /// losses and stop requests, one small allreduce.
    pub(super) fn agree(
        &mut self,
        step: u64,
        bad: Option<super::NonFinite>,
        loss: Option<f64>,
    ) -> Result<Agreement, DataParallelError> {
        let t = Instant::now();
        let (rank, n) = (self.rank(), self.world_size());
        // [stop, loss sum, losses, previous step's bytes, one non-finite flag per rank]
        const FLAGS: usize = 4;
        let mut control = vec![0.0f32; FLAGS + n];
        control[0] = f32::from(u8::from(self.stop));
        if let Some(l) = loss.filter(|l| l.is_finite()) {
            control[1] = l as f32;
            control[2] = 1.0;
        }
        control[3] = self.last.bytes.sent() as f32;
        control[FLAGS + rank] = f32::from(u8::from(bad.is_some()));
        self.c
            .unmetered()
            .allreduce_sum_f32(&mut control)
            .map_err(|source| DataParallelError::Comm { rank, source })?;
        self.stop = false;
        self.stop_agreed = control[0] > 0.0;
        self.group_sent += control[3] as u64;
        let bad_ranks: Vec<usize> = (0..n).filter(|&r| control[FLAGS + r] > 0.0).collect();
        if !bad_ranks.is_empty() && self.cfg.on_nonfinite == OnNonFinite::Stop {
            return Err(match bad {
                Some((what, tensor)) => DataParallelError::NonFinite { step, rank, what, tensor },
                None => DataParallelError::PeerNonFinite { step, ranks: bad_ranks },
            });
        }
        Ok(Agreement {
            skip: !bad_ranks.is_empty(),
            mean_loss: (control[2] > 0.0).then(|| f64::from(control[1]) / f64::from(control[2])),
            seconds: t.elapsed().as_secs_f64(),
        })
    }

    /// Whether the next step begins with an outer round (local updates).
    pub(crate) fn averages_now(&self) -> bool {
        self.strategy.averaging().is_some_and(|a| a.due(self.step)) && self.averaged_at != Some(self.step)
    }

    /// Averages the workers' models now (CELGC's round); checksums compared
    /// right after, when due.
    pub(super) fn average_round<M: Module>(&mut self, model: M) -> Result<M, DataParallelError> {
        let t = Instant::now();
        params::read_params(&model, &mut self.params);
        let (step, rank) = (self.step, self.rank());
        let averaging = self.strategy.averaging_mut().ok_or_else(|| {
            DataParallelError::Usage("this strategy averages no models: it has no outer rounds".into())
        })?;
        averaging
            .average(step, &mut self.params, &mut self.c)
            .map_err(|e| DataParallelError::from_exchange(rank, e))?;
        self.pending.add(&averaging.take_channel_bytes());
        self.pending.add(&self.c.meter_mut().take_step());
        self.pending_seconds += t.elapsed().as_secs_f64();
        self.averaged_at = Some(step);
        let mut model = params::write_params(model, &self.params);
        if self.cfg.strategy.average_buffers {
            model = self.average_buffers(model)?;
        }
        // Replicas agree right after a round that merges the whole model,
        // before local steps move them apart (not after a Streaming fragment's).
        let round = step / self.cfg.strategy.period;
        if self.cfg.checksum_every > 0
            && round.is_multiple_of(self.cfg.checksum_every)
            && self.strategy.averaging().is_some_and(|a| a.agrees_after(step))
        {
            self.compare_checksums(step)?;
        }
        Ok(model)
    }

    /// The workers' mean of the model's buffers (BatchNorm's running
    /// statistics), at a round (`strategy.average_buffers`).
    fn average_buffers<M: Module>(&mut self, model: M) -> Result<M, DataParallelError> {
        // burn keeps a forward pass's update of a running statistic aside
        // until the state is synced (a visit reads the value one update
        // behind, and a write would be overwritten by that update): `train`
        // syncs them and leaves the model in training mode, as it is here.
        let model = model.train();
        let mut buffers = Vec::new();
        params::read_buffers(&model, &mut buffers);
        if buffers.is_empty() {
            return Ok(model);
        }
        let rank = self.rank();
        self.c.allreduce_mean_f32(&mut buffers).map_err(|source| DataParallelError::Comm { rank, source })?;
        self.pending.add(&self.c.meter_mut().take_step());
        Ok(params::write_buffers(model, &buffers))
    }

    /// A model every worker agrees on: the replica itself when replicas are
    /// identical, else (CELGC between rounds) the average of the workers'
    /// models, leaving each worker's own model as it is. For evaluation and
    /// the final result.
    pub fn consensus_model<M: Module>(&mut self, model: &M) -> Result<M, DataParallelError> {
        if self.strategy.identical_replicas() {
            return Ok(model.clone());
        }
        params::read_params(model, &mut self.params);
        let rank = self.rank();
        self.c
            .unmetered()
            .allreduce_mean_f32(&mut self.params)
            .map_err(|source| DataParallelError::Comm { rank, source })?;
        Ok(params::write_params(model.clone(), &self.params))
    }

    /// Compares the checksum of `self.params` across workers; a difference
    /// is [`DataParallelError::ReplicaMismatch`] on every worker.
    pub(super) fn compare_checksums(&mut self, step: u64) -> Result<(), DataParallelError> {
        let rank = self.rank();
        let sum = params::checksum(&self.params).to_le_bytes();
        self.c
            .unmetered()
            .allgatherv(&sum, &mut self.gathered)
            .map_err(|source| DataParallelError::Comm { rank, source })?;
        let first = self.gathered.get(0).to_vec();
        let ranks: Vec<usize> = (0..self.gathered.len()).filter(|&r| self.gathered.get(r) != first).collect();
        if ranks.is_empty() {
            Ok(())
        } else {
            Err(DataParallelError::ReplicaMismatch { step, ranks })
        }
    }
}
