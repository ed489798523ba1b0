//! [`run_in_process`]: N workers as threads of this process, with one flat
//! result: every worker's value, or the error that explains the failure.

use gradcomp_comm::{InProcessCollective, InProcessGroup};

use crate::error::DataParallelError;

/// Runs `f` on `workers` in-process workers (a thread each, with its rank's
/// collective) and returns their values in rank order, or one error: a
/// worker's panic first, else the lowest rank's own error (one that does not
/// merely report another worker's failure, see [`DataParallelError::is_secondary`]),
/// else the lowest rank's error. [`InProcessGroup::run`] gives every
/// worker's outcome instead.
pub fn run_in_process<T: Send>(
    workers: usize,
    f: impl Fn(InProcessCollective) -> Result<T, DataParallelError> + Sync,
) -> Result<Vec<T>, DataParallelError> {
    let outcomes =
        InProcessGroup::new(workers).run(f).map_err(|source| DataParallelError::Comm { rank: 0, source })?;
    let mut values = Vec::with_capacity(outcomes.len());
    let mut errors = Vec::new();
    for outcome in outcomes {
        match outcome {
            Ok(Ok(v)) => values.push(v),
            Ok(Err(e)) => errors.push(e),
            Err(p) => return Err(DataParallelError::Panic { rank: p.rank, message: p.message }),
        }
    }
    if errors.is_empty() {
        return Ok(values);
    }
    let first = errors.iter().position(|e| !e.is_secondary()).unwrap_or(0);
    Err(errors.swap_remove(first))
}

#[cfg(test)]
mod tests {
    use gradcomp_comm::{Collective, CommError};

    use super::*;

    #[test]
    fn values_come_in_rank_order() {
        assert_eq!(run_in_process(3, |c| Ok(c.rank() * 10)).unwrap(), [0, 10, 20]);
    }

    #[test]
    fn the_error_that_explains_the_failure_is_returned() {
        // Worker 2 fails on its own; the others only see a peer gone.
        let e = run_in_process(3, |mut c| {
            if c.rank() == 2 {
                return Err(DataParallelError::Usage("worker 2's own mistake".into()));
            }
            let mut x = [1.0f32];
            c.allreduce_sum_f32(&mut x)
                .map_err(|source| DataParallelError::Comm { rank: c.rank(), source })?;
            Ok(())
        })
        .unwrap_err();
        assert!(e.to_string().contains("worker 2's own mistake"), "{e}");
        let e = run_in_process(2, |c| -> Result<(), DataParallelError> {
            if c.rank() == 1 {
                panic!("boom");
            }
            Err(DataParallelError::Comm { rank: 0, source: CommError::Invalid("x".into()) })
        })
        .unwrap_err();
        assert!(matches!(e, DataParallelError::Panic { rank: 1, .. }), "{e}");
    }
}
