//! The outer round's arithmetic on the host, per value (issue #36's
//! overhead target): forming the change, DiLoCo's Nesterov step on θ_outer
//! and adopting it, on the LSTM's 4.65M values, as the performance model
//! measures it (`predict::outer_seconds_per_value`).
//!
//!   cargo bench -p gradcomp-exchange --bench outer

use criterion::{criterion_group, criterion_main, Criterion};

fn outer(c: &mut Criterion) {
    const VALUES: usize = 4_650_000;
    let mut g = c.benchmark_group("outer");
    g.sample_size(10);
    // The model's own timing (the median of 3 rounds, buffers allocated
    // outside it), so this reports exactly what it prices.
    g.bench_function("nesterov-4.65M", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let per_value = gradcomp_exchange::predict::outer_seconds_per_value(VALUES);
                    std::time::Duration::from_secs_f64(per_value * VALUES as f64)
                })
                .sum()
        })
    });
    g.finish();
}

criterion_group!(benches, outer);
criterion_main!(benches);
