//! The outer round's arithmetic on the host, per value (issue #36's
//! overhead target): forming the change, DiLoCo's Nesterov step on θ_outer
//! and adopting it, on the LSTM's 4.65M values, as the performance model
//! measures it (`predict::outer_seconds_per_value`); and the eager step
//! ahead (ALGORITHMS.md §2.3: the change, G = (c̄ − o) + c/M, Nesterov's
//! step and the adoption, `OuterRounds::step_ahead`) on the same values.
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
    g.bench_function("eager-step-ahead-4.65M", |b| {
        b.iter_custom(|iters| {
            use gradcomp_exchange::config::{Overlap, StrategyConfig};
            let st = StrategyConfig::local(8).with_overlap(Overlap::Eager);
            let cfg = gradcomp_exchange::DataParallelConfig::new(
                gradcomp_compress::CompressorConfig::named("dense").unwrap(),
            )
            .with_strategy(st);
            let layout = gradcomp_exchange::GradientLayout::new([("w".to_string(), vec![VALUES])]);
            let timed = gradcomp_comm::InProcessGroup::new(1).run(|mut c| {
                let mut rounds =
                    gradcomp_exchange::strategy::OuterRounds::new(&cfg, &layout, 1, false).unwrap();
                let mut params = vec![0.25f32; VALUES];
                rounds.start(0, &params, &mut c).unwrap();
                let t = std::time::Instant::now();
                for _ in 0..iters {
                    params[0] += 1e-3;
                    rounds.step_ahead(&mut params, 4);
                }
                t.elapsed()
            });
            timed.unwrap().into_iter().map(Result::unwrap).sum()
        })
    });
    g.finish();
}

criterion_group!(benches, outer);
criterion_main!(benches);
