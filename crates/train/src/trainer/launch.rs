//! Starting the workers: N threads joined by in-process collectives, or this
//! process as one MPI rank; and picking the error to report when they fail.

use std::time::Duration;

use burn::tensor::Device;
use gradcomp_comm::InProcessGroup;

use super::run::{RunSummary, Shared, TrainError};
use super::worker;
use crate::config::Backend;
use crate::models::Net;
use gradcomp_dp::DataParallelError;

pub(super) fn run<M: Net>(
    sh: &Shared<'_>,
    make: impl Fn(&Device) -> M + Send + Sync + Clone,
) -> Result<RunSummary, TrainError> {
    match sh.cfg.backend {
        Backend::InProcess => in_process(sh, make),
        Backend::Mpi => mpi_rank(sh, make),
    }
}

fn in_process<M: Net>(
    sh: &Shared<'_>,
    make: impl Fn(&Device) -> M + Send + Sync + Clone,
) -> Result<RunSummary, TrainError> {
    let group =
        InProcessGroup::new(sh.cfg.workers).timeout(Duration::from_secs_f64(sh.cfg.comm.timeout_seconds));
    let results = group
        .run(|c| worker::run(gradcomp_comm::Collective::rank(&c), c, sh, make.clone()))
        .map_err(|source| DataParallelError::Comm { rank: 0, source })?;
    let results = results
        .into_iter()
        .map(|r| r.unwrap_or_else(|p| Err(TrainError::Panic { rank: p.rank, message: p.message })))
        .collect();
    pick_result(results)
}

/// The summary (rank 0's), or the first worker error that is not a
/// consequence of another's failure.
fn pick_result(results: Vec<Result<Option<RunSummary>, TrainError>>) -> Result<RunSummary, TrainError> {
    let mut summary = None;
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(Some(s)) => summary = Some(s),
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        let idx = errors.iter().position(|e| !e.is_secondary()).unwrap_or(0);
        return Err(errors.swap_remove(idx));
    }
    Ok(summary.expect("rank 0 returns the summary"))
}

#[cfg(feature = "mpi")]
fn mpi_rank<M: Net>(
    sh: &Shared<'_>,
    make: impl Fn(&Device) -> M + Send + Sync + Clone,
) -> Result<RunSummary, TrainError> {
    let timeout = Duration::from_secs_f64(sh.cfg.comm.timeout_seconds);
    // A delayed round runs on a thread of its own over a duplicate of the
    // world, which needs MPI_THREAD_MULTIPLE.
    let overlap = sh.cfg.strategy.kind.steps_locally() && sh.cfg.strategy.delay > 0;
    let c = gradcomp_comm::mpi::MpiCollective::init_with(Some(sh.cfg.workers), timeout, overlap)
        .map_err(|source| DataParallelError::Comm { rank: 0, source })?
        .heartbeat_bound(Duration::from_secs_f64(sh.cfg.comm.heartbeat_seconds));
    // Other ranks return no summary: theirs is rank 0's.
    let rank = gradcomp_comm::Collective::rank(&c);
    worker::run(rank, c, sh, make).map(|s| {
        s.unwrap_or_else(|| RunSummary {
            run_dir: sh.run_dir.clone(),
            epochs: Vec::new(),
            steps: 0,
            params_checksum: 0,
            interrupted: false,
            reached_target: None,
            final_params: Vec::new(),
        })
    })
}

#[cfg(not(feature = "mpi"))]
fn mpi_rank<M: Net>(
    _sh: &Shared<'_>,
    _make: impl Fn(&Device) -> M + Send + Sync + Clone,
) -> Result<RunSummary, TrainError> {
    Err(TrainError::Config(crate::config::ConfigError {
        key: "backend".into(),
        problem: "this gradcomp was built without MPI; rebuild with `--features mpi`".into(),
    }))
}
