//! Starting the workers: N threads joined by in-process collectives, or this
//! process as one MPI rank; and picking the error to report when they fail.

use std::time::Duration;

use burn::tensor::Device;
use gradcomp_comm::InProcessGroup;

use super::{worker, RunSummary, Shared, TrainError};
use gradcomp_dp::SyncError;
use crate::config::Backend;
use crate::models::Net;

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
    let handles = InProcessGroup::new(sh.cfg.workers)
        .timeout(Duration::from_secs_f64(sh.cfg.comm.timeout_seconds))
        .build()
        .map_err(|source| SyncError::Comm { rank: 0, source })?;
    let results: Vec<Result<Option<RunSummary>, TrainError>> = std::thread::scope(|s| {
        let threads: Vec<_> = handles
            .into_iter()
            .enumerate()
            .map(|(rank, c)| {
                let make = make.clone();
                std::thread::Builder::new()
                    .name(format!("worker-{rank}"))
                    .spawn_scoped(s, move || worker::run(rank, c, sh, make))
                    .expect("spawning a worker thread")
            })
            .collect();
        threads
            .into_iter()
            .enumerate()
            .map(|(rank, t)| {
                t.join().unwrap_or_else(|p| Err(TrainError::Panic { rank, message: panic_message(&*p) }))
            })
            .collect()
    });
    pick_result(results)
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
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
    let c = gradcomp_comm::mpi::MpiCollective::init(Some(sh.cfg.workers), timeout)
        .map_err(|source| SyncError::Comm { rank: 0, source })?
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
