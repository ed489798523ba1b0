//! Repeated timing with a median, the shared clock of every `bench`, and the
//! median every command reports.

use std::time::{Duration, Instant};

/// The median of a list (the upper one for an even count; NaN when empty):
/// the library's, which the performance model measures with.
pub use gradcomp_dp::predict::median;

/// Runs `f` once to warm up, then until `min_time` has passed and at least
/// `min_reps` runs were made; returns the median seconds per run.
pub fn median_seconds(min_time: Duration, min_reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < min_reps || start.elapsed() < min_time {
        let t = Instant::now();
        f();
        times.push(t.elapsed().as_secs_f64());
    }
    median(times)
}
