//! Developer benchmarks (criterion): every compressor, its encoding and its
//! decode-and-aggregate on 1M N(0,1) elements, beside a plain read pass.
//! `cargo bench -p gradcomp-compress`; the user-facing table with the
//! issue's sizes is `gradcomp bench compress`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gradcomp_compress::{codec, reduce, CompressorConfig, Message, RngKey, UnitContext, UnitRng};

const N: usize = 1 << 20;

fn input() -> Vec<f32> {
    let mut r = UnitRng::from_parts(&[1]);
    (0..N).map(|_| r.next_gaussian() as f32).collect()
}

fn benches(c: &mut Criterion) {
    let x = input();
    let mut g = c.benchmark_group("1M");
    g.throughput(Throughput::Bytes(4 * N as u64));
    g.bench_function("read_pass", |b| b.iter(|| reduce::sum(black_box(&x))));
    // The scaler pass of TernGrad, QSGD and Gaussian-k (scaled, pivoted moments).
    g.bench_function("moments", |b| b.iter(|| reduce::moments(black_box(&x))));
    for name in CompressorConfig::NAMES {
        let mut cfg = CompressorConfig::named(name).expect("known name");
        cfg.set_density(0.001);
        let mut comp = cfg.build();
        let mut msg = Message::default();
        let mut step = 0;
        g.bench_function(BenchmarkId::new("compress", name), |b| {
            b.iter(|| {
                step += 1;
                let ctx = UnitContext { key: RngKey::new(0, 0, step, 0), ..Default::default() };
                comp.compress(black_box(&x), &ctx, &mut msg);
            })
        });
        let mut bytes = Vec::new();
        g.bench_function(BenchmarkId::new("encode", name), |b| {
            b.iter(|| {
                bytes.clear();
                codec::encode(black_box(&msg), 0, &mut bytes)
            })
        });
        let mut out = vec![0.0f32; N];
        g.bench_function(BenchmarkId::new("decode_aggregate", name), |b| {
            b.iter(|| codec::accumulate(black_box(&bytes), 0.5, &mut out).expect("decodes"))
        });
    }
    g.finish();
}

criterion_group!(compress, benches);
criterion_main!(compress);
