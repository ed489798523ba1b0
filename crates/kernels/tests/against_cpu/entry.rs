//! Statistics, finiteness, the one device entry point and its errors.

use super::*;

#[test]
fn moments_agree_with_the_cpu_at_every_magnitude() {
    // Ordinary data, then the issue #12 edges: squares past f32's range
    // (3e19, 1e30), below it (1e-20, 1e-40), and a mean 10⁴σ from zero.
    let cases: Vec<(usize, u64, f32, f32)> = vec![
        (1, 1, 3.0, 0.5),
        (17, 2, 3.0, 0.5),
        (4096, 3, 3.0, 0.5),
        (1_000_001, 4, 3.0, 0.5),
        (50_000, 5, 3e19, 0.0),
        (50_000, 6, 1e30, 1e30),
        (50_000, 7, 1e-20, 0.0),
        (50_000, 8, 1e-40, 0.0),
        (300_000, 9, 1.0, 1e4),
    ];
    for (n, seed, sigma, mean) in cases {
        let g: Vec<f32> = gaussian(n, seed).iter().map(|v| v * sigma + mean).collect();
        let dev = dreduce::moments(client(), &DeviceF32::upload(client(), &g)).unwrap();
        let cpu = reduce::moments(&g);
        let tol = if sigma < 1e-38 { 1e-3 } else { 1e-5 };
        let rms = (cpu.sum_of_squares() / n as f64).sqrt();
        assert_eq!(dev.n, n);
        assert!(dev.m2.is_finite() && dev.mean.is_finite(), "{n} at σ {sigma}: {dev:?}");
        assert!(
            (dev.mean - cpu.mean).abs() <= tol * rms,
            "{n} at σ {sigma}: mean {} vs {}",
            dev.mean,
            cpu.mean
        );
        let (sd, sc) = (dev.population_std(), cpu.population_std());
        assert!((sd - sc).abs() <= tol * sc.max(f64::MIN_POSITIVE), "{n} at σ {sigma}: σ {sd} vs {sc}");
        let (qd, qc) = (dev.sum_of_squares(), cpu.sum_of_squares());
        assert!((qd - qc).abs() <= tol * qc, "{n} at σ {sigma}: Σx² {qd} vs {qc}");
        assert_eq!(dev.max_abs, cpu.max_abs);
    }
    // NaN reaches the moments, as on the CPU.
    let nan = dreduce::moments(client(), &DeviceF32::upload(client(), &[1.0, f32::NAN, 2.0])).unwrap();
    assert!(nan.m2.is_nan());
}

#[test]
fn finiteness_and_the_read_pass_on_the_device() {
    let mut g = vec![f32::MAX; 70_001];
    g[3] = -f32::MAX;
    let finite = |g: &[f32]| dreduce::all_finite(client(), &DeviceF32::upload(client(), g)).unwrap();
    assert!(finite(&g), "the largest finite values are finite");
    assert!(finite(&[]));
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        for at in [0, 35_000, 70_000] {
            let keep = g[at];
            g[at] = bad;
            assert!(!finite(&g), "{bad} at {at}");
            g[at] = keep;
        }
    }
    let x = gaussian(100_003, 5);
    let dev = dreduce::sum(client(), &DeviceF32::upload(client(), &x)).unwrap();
    assert!((dev - reduce::sum(&x)).abs() < 1e-2, "{dev} vs {}", reduce::sum(&x));
}

/// Every method with a device form, through the one entry point: the
/// deterministic ones produce the CPU's wire bytes; the rest are refused
/// with an error that names them.
#[test]
fn device_compressor_matches_the_cpu_for_every_deterministic_method() {
    use gradcomp_compress::sparsify::randk::RandKConfig;
    use gradcomp_kernels::{DeviceCompressor, KernelError};
    let g = awkward(50_001, 21);
    let x = DeviceF32::upload(client(), &g);
    let ctx = UnitContext { key: RngKey::new(8, 0, 3, 1), ..UnitContext::default() };
    let configs = [
        CompressorConfig::dense(),
        CompressorConfig::fp16(),
        CompressorConfig::Onebit(Default::default()),
        CompressorConfig::topk(0.01),
        CompressorConfig::gaussiank(0.01),
        CompressorConfig::Dgck(Default::default()),
        CompressorConfig::Randk(RandKConfig { density: 0.01, ..RandKConfig::default() }),
        CompressorConfig::threshold(0.5),
    ];
    for config in configs {
        let cpu = cpu_message(&config, &g, &ctx);
        let mut dev = Message::default();
        DeviceCompressor::new(&config, &[g.len()]).unwrap().compress(client(), &x, &ctx, &mut dev).unwrap();
        assert_eq!(wire(&dev), wire(&cpu), "{config:?}");
    }
    for config in [CompressorConfig::Trimmedk(Default::default()), CompressorConfig::Esgd(Default::default())]
    {
        let err = DeviceCompressor::new(&config, &[g.len()]).unwrap_err();
        assert!(matches!(err, KernelError::Unsupported(_)), "{err}");
        assert!(err.to_string().contains("compresses on the host"), "{err}");
    }
}

#[test]
fn a_short_device_buffer_is_an_error_not_a_panic() {
    let x = DeviceF32::upload(client(), &[1.0, 2.0]);
    let claimed = DeviceF32::from_handle(x.handle.clone(), 1000);
    let err = claimed.read(client()).unwrap_err();
    assert!(err.to_string().contains("expected"), "{err}");
}
