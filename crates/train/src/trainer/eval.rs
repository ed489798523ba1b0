//! Evaluation: the one routine that runs a model over a test (or
//! validation) set, shared among the workers and summed by one allreduce,
//! or run whole by one process (`gradcomp eval`).

use gradcomp_comm::Collective;

use super::checkpoint::Checkpoint;
use super::run::{Shared, TrainError};
use crate::config::TrainConfig;
use crate::data::{eval_batches, ImageDataset, TokenLoader, TrainData};
use crate::models::{EvalStats, Net};
use gradcomp_dp::{DataParallel, DataParallelError};

/// Images per evaluation batch.
const IMAGE_BATCH: usize = 500;
use crate::data::EVAL_TOKEN_ROWS as TOKEN_ROWS;

/// A split to evaluate on.
#[derive(Clone, Copy, Debug)]
pub enum EvalSet<'a> {
    Images(&'a ImageDataset),
    /// A token stream, cut into rows of `bptt`-long segments.
    Tokens {
        tokens: &'a [u32],
        bptt: usize,
    },
}

/// The test split's statistics and, for language models with a validation
/// file, the validation split's.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Evaluation {
    pub test: EvalStats,
    pub valid: Option<EvalStats>,
}

/// `model`'s statistics on the batches of `set` that fall to worker `rank`
/// of `workers` (every `workers`-th batch).
pub fn share<M: Net>(model: &M, set: EvalSet<'_>, rank: usize, workers: usize) -> EvalStats {
    let device =
        gradcomp_dp::params::grad_device(model).unwrap_or_else(|| gradcomp_dp::default_device().inner());
    let model = model.valid();
    let mut stats = EvalStats::default();
    match set {
        EvalSet::Images(data) => {
            for (b, batch) in eval_batches(data, IMAGE_BATCH).enumerate() {
                if b % workers == rank {
                    stats.add(&model.evaluate(&batch, &device));
                }
            }
        }
        EvalSet::Tokens { tokens, bptt } => {
            let l = TokenLoader::new(tokens, TOKEN_ROWS, bptt);
            for b in (0..l.batches_per_epoch()).filter(|b| b % workers == rank) {
                stats.add(&model.evaluate(&l.batch(b), &device));
            }
        }
    }
    stats
}

/// Sums every worker's share. Counts are exact in f64 from their f32 sums
/// up to 2^24; the loss is good to about 7 digits.
fn sum(stats: EvalStats, c: &mut dyn Collective) -> Result<EvalStats, DataParallelError> {
    let mut v = [stats.loss_sum as f32, stats.correct as f32, stats.count as f32];
    c.allreduce_sum_f32(&mut v).map_err(|source| DataParallelError::Comm { rank: c.rank(), source })?;
    Ok(EvalStats {
        loss_sum: f64::from(v[0]),
        correct: f64::from(v[1]).round() as u64,
        count: f64::from(v[2]).round() as u64,
    })
}

/// The test (and validation) split of the run's data.
fn splits<'a>(data: &'a TrainData, cfg: &TrainConfig) -> (EvalSet<'a>, Option<EvalSet<'a>>) {
    let bptt = cfg.data.bptt;
    match data {
        TrainData::Images { test, .. } => (EvalSet::Images(test), None),
        TrainData::Tokens { test, valid, .. } => (
            EvalSet::Tokens { tokens: test, bptt },
            valid.as_deref().map(|v| EvalSet::Tokens { tokens: v, bptt }),
        ),
    }
}

/// Evaluates `model` with every worker taking a share.
pub(super) fn evaluate<M: Net>(
    dp: &mut DataParallel,
    model: &M,
    sh: &Shared<'_>,
) -> Result<Evaluation, TrainError> {
    let (rank, n) = (dp.rank(), dp.world_size());
    let (test, valid) = splits(sh.data, sh.cfg);
    let test = sum(share(model, test, rank, n), dp.collective_mut())?;
    let valid = valid.map(|v| sum(share(model, v, rank, n), dp.collective_mut())).transpose()?;
    Ok(Evaluation { test, valid })
}

/// Evaluates a checkpoint's model (rank 0's) on the test split, alone.
pub(super) fn checkpoint<M: Net>(
    saved: &Checkpoint,
    model: M,
    data: &TrainData,
    cfg: &TrainConfig,
) -> Result<EvalStats, TrainError> {
    let optim = crate::optim::optimizer(&cfg.optimizer, &model);
    let (model, _) = saved.replica.apply(model, optim)?;
    Ok(share(&model, splits(data, cfg).0, 0, 1))
}
