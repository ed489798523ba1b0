//! Top-k, the threshold selectors, Rand-k and DGC-k on the device against the CPU.

use super::*;

#[test]
fn top_k_on_a_large_vector_matches_the_cpu() {
    // Large enough for many cubes and many chunks per cube in every pass.
    let g = gaussian(1_000_003, 7);
    for density in [0.001, 0.01, 0.1] {
        let config = CompressorConfig::topk(density);
        let cpu = cpu_message(&config, &g, &UnitContext::default());
        let mut dev = Message::default();
        select::top_k(client(), &DeviceF32::upload(client(), &g), density, SparseWire::default(), &mut dev)
            .unwrap();
        assert_eq!(wire(&dev), wire(&cpu), "density {density}");
    }
}

/// Gaussian-k and the threshold sparsifier share the ordered compaction; on
/// ordinary gradients their selections equal the CPU's.
#[test]
fn threshold_sparsifiers_match_the_cpu() {
    for (n, seed) in [(10usize, 1u64), (5000, 2), (300_007, 3)] {
        let g: Vec<f32> = gaussian(n, seed).iter().map(|v| v * 0.01 + 0.001).collect();
        let x = DeviceF32::upload(client(), &g);
        for density in [0.001, 0.01, 0.3] {
            let cpu = cpu_message(&CompressorConfig::gaussiank(density), &g, &UnitContext::default());
            let mut dev = Message::default();
            select::gaussian_k(client(), &x, density, SparseWire::default(), &mut dev).unwrap();
            assert_eq!(wire(&dev), wire(&cpu), "gaussian-k n {n} density {density}");
        }
        for thr in [-1.0f32, 0.0, 0.005, 0.02, f32::INFINITY] {
            let cpu = cpu_message(&CompressorConfig::threshold(thr), &g, &UnitContext::default());
            let mut dev = Message::default();
            select::threshold(client(), &x, thr, SparseWire::default(), &mut dev).unwrap();
            assert_eq!(wire(&dev), wire(&cpu), "threshold {thr} n {n}");
        }
    }
    // NaN is never selected, as on the CPU.
    let mut g = vec![1.0f32; 600];
    g[7] = f32::NAN;
    let mut dev = Message::default();
    select::threshold(client(), &DeviceF32::upload(client(), &g), 0.5, SparseWire::default(), &mut dev)
        .unwrap();
    assert!(matches!(&dev, Message::Sparse(m) if m.indices.len() == 599 && !m.indices.contains(&7)));
}

/// Rand-k: the same indices and values as the CPU for the same key, in every
/// option combination.
#[test]
fn rand_k_is_identical_to_the_cpu() {
    use gradcomp_compress::sparsify::randk::RandKConfig;
    let g = gaussian(30_001, 8);
    let x = DeviceF32::upload(client(), &g);
    for (same_seed, unbiased) in [(false, false), (true, false), (false, true)] {
        for density in [0.0001, 0.01, 1.0] {
            let config = RandKConfig { density, same_seed, unbiased, ..RandKConfig::default() };
            let ctx = UnitContext { key: RngKey::new(5, 2, 7, 1), ..UnitContext::default() };
            let cpu = cpu_message(&CompressorConfig::Randk(config.clone()), &g, &ctx);
            let mut dev = Message::default();
            select::rand_k(client(), &x, &config, &ctx, &mut dev).unwrap();
            assert_eq!(wire(&dev), wire(&cpu), "same_seed {same_seed} unbiased {unbiased} density {density}");
        }
    }
}

/// DGC-k: the same sample, threshold, adaptation and fallback as the CPU,
/// so the same message; with the same key, on ordinary and tied inputs.
#[test]
fn dgc_k_is_identical_to_the_cpu() {
    use gradcomp_compress::sparsify::dgck::DgcKConfig;
    for (n, seed) in [(10usize, 1u64), (4999, 2), (200_003, 3)] {
        for ties in [false, true] {
            let mut g = gaussian(n, seed);
            if ties {
                g.iter_mut().for_each(|v| *v = (*v * 2.0).round() / 2.0);
            }
            let x = DeviceF32::upload(client(), &g);
            for density in [0.001, 0.01, 0.2] {
                for sample_fraction in [0.01, 0.3] {
                    let config = DgcKConfig { density, sample_fraction, ..DgcKConfig::default() };
                    let ctx = UnitContext { key: RngKey::new(4, 1, n as u64, 0), ..UnitContext::default() };
                    let cpu = cpu_message(&CompressorConfig::Dgck(config.clone()), &g, &ctx);
                    let mut dev = Message::default();
                    select::dgc_k(client(), &x, &config, &ctx, &mut dev).unwrap();
                    assert_eq!(
                        wire(&dev),
                        wire(&cpu),
                        "n {n} ties {ties} density {density} sample {sample_fraction}"
                    );
                }
            }
        }
    }
}

/// SparseLoCo's per-tile selection on the device gives the CPU's message
/// bit for bit: tiles by the divisor rule (70×13 in 35×13), a prime side's
/// shorter last tile (67 rows), a vector's runs, ties at the threshold (values
/// rounded to halves), k beyond a small tile, every value coding.
#[test]
fn sparseloco_is_bit_identical_to_the_cpu() {
    use gradcomp_compress::chunked::{SparseLocoConfig, ValueCoding};
    use gradcomp_kernels::chunked;
    let shapes: [&[usize]; 4] = [&[70, 13], &[67, 130], &[4099], &[256, 512]];
    for (s, shape) in shapes.iter().enumerate() {
        let n: usize = shape.iter().product();
        for ties in [false, true] {
            let mut g = gaussian(n, 90 + s as u64);
            if ties {
                g.iter_mut().for_each(|v| *v = (*v * 2.0).round() / 2.0);
            }
            let x = DeviceF32::upload(client(), &g);
            for (k, values) in [(64, ValueCoding::Bits2), (6, ValueCoding::F32), (500, ValueCoding::Bits8)] {
                let cfg = SparseLocoConfig { k, values, vector_chunk: 1024, ..Default::default() };
                let mut cpu = Message::default();
                CompressorConfig::Sparseloco(cfg.clone()).build_for(shape).compress(
                    &g,
                    &UnitContext::default(),
                    &mut cpu,
                );
                let mut dev = Message::default();
                chunked::compress(client(), &x, shape, &cfg.options(), &mut dev).unwrap();
                assert_eq!(dev, cpu, "{shape:?} ties {ties} k {k}");
            }
        }
    }
}
