//! The device kernels against the CPU reference of gradcomp-compress, on
//! whatever wgpu adapter the machine has: Mesa's software Vulkan (lavapipe)
//! in CI, a real GPU elsewhere. Deterministic compressors must produce the
//! same message and the same wire bytes; stochastic ones the same
//! distribution.
#![cfg(feature = "wgpu")]

use std::sync::OnceLock;

use cubecl::prelude::Client;
use gradcomp_compress::aggregate::TernarySum;
use gradcomp_compress::codec;
use gradcomp_compress::message::{SparseWire, TernaryMessage};
use gradcomp_compress::quantize::terngrad::{TernGrad, TernGradConfig};
use gradcomp_compress::{reduce, Compressor, CompressorConfig, Message, RngKey, UnitContext, UnitRng};
use gradcomp_kernels::terngrad::DeviceTernGrad;
use gradcomp_kernels::{aggregate, fp16, onebit, reduce as dreduce, select, DeviceF32};
use proptest::prelude::*;

fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        cubecl::Device::wgpu(Default::default())
            .expect("no wgpu adapter: install mesa-vulkan-drivers (lavapipe) or run on a GPU")
            .client()
    })
}

fn gaussian(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = UnitRng::from_parts(&[seed]);
    (0..n).map(|_| rng.next_gaussian() as f32).collect()
}

fn wire(msg: &Message) -> Vec<u8> {
    let mut out = Vec::new();
    codec::encode(msg, 3, &mut out);
    out
}

fn cpu_message(config: &CompressorConfig, g: &[f32], ctx: &UnitContext) -> Message {
    let mut msg = Message::default();
    config.build().compress(g, ctx, &mut msg);
    msg
}

/// Values every f32 edge case of the half conversion lands on.
fn edge_values() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -2.5,
        0.1,
        65504.0,
        65519.0,
        65520.0,
        -65536.0,
        70000.0,
        1e-8,
        -1e-8,
        5.96e-8,
        2.98e-8,
        2.99e-8,
        6.1e-5,
        6.09e-5,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-40,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        1.000_976_6,
        1.000_488_3,
        1.001_464_8,
    ];
    v.extend((0..2000).map(|i| f32::from_bits(0x3380_0000 + i * 0x0004_1234)));
    v
}

#[test]
fn fp16_is_bit_identical_to_the_cpu_on_every_edge_case() {
    let g = edge_values();
    let mut dev = Message::default();
    fp16::compress(client(), &DeviceF32::upload(client(), &g), &mut dev).unwrap();
    let cpu = cpu_message(&CompressorConfig::fp16(), &g, &UnitContext::default());
    let (Message::Half(d), Message::Half(c)) = (&dev, &cpu) else { panic!("not half messages") };
    for (i, (a, b)) in d.values.iter().zip(&c.values).enumerate() {
        assert_eq!(a, b, "element {i} = {:e}: device {a:#06x}, cpu {b:#06x}", g[i]);
    }
    assert_eq!(wire(&dev), wire(&cpu));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn fp16_matches_the_cpu_on_arbitrary_bits(bits in prop::collection::vec(any::<u32>(), 1..3000)) {
        let g: Vec<f32> = bits.into_iter().map(f32::from_bits).collect();
        let mut dev = Message::default();
        fp16::compress(client(), &DeviceF32::upload(client(), &g), &mut dev).unwrap();
        let cpu = cpu_message(&CompressorConfig::fp16(), &g, &UnitContext::default());
        prop_assert_eq!(wire(&dev), wire(&cpu));
    }

    /// Exact Top-k: same indices, values and wire bytes as the CPU, also with
    /// heavy ties (values drawn from a handful of levels) and zeros.
    #[test]
    fn top_k_is_identical_to_the_cpu(
        n in 1usize..5000,
        levels in prop::option::of(1u32..6),
        density in 0.0005f64..0.6,
        seed in any::<u64>(),
    ) {
        let mut g = gaussian(n, seed);
        if let Some(l) = levels {
            for v in &mut g {
                *v = (*v * l as f32).round() / l as f32;
            }
        }
        let config = CompressorConfig::topk(density);
        let cpu = cpu_message(&config, &g, &UnitContext::default());
        let mut dev = Message::default();
        select::top_k(client(), &DeviceF32::upload(client(), &g), density, SparseWire::default(), &mut dev).unwrap();
        prop_assert_eq!(&dev, &cpu);
        prop_assert_eq!(wire(&dev), wire(&cpu));
    }
}

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

/// The quantizers at the magnitudes: the scaler's sums no longer
/// overflow or vanish, and a scaler below ~3e-39 no longer has an infinite
/// reciprocal; the device messages are finite and carry the input.
#[test]
fn quantizers_on_the_device_hold_at_extreme_magnitudes() {
    use gradcomp_compress::quantize::qsgd::QsgdConfig;
    use gradcomp_kernels::qsgd::DeviceQsgd;
    for v in [3e19f32, 1e-20, 1e-40] {
        let g: Vec<f32> = gaussian(3000, 21).iter().map(|x| x * v).collect();
        let x = DeviceF32::upload(client(), &g);
        let mut t = Message::default();
        DeviceTernGrad::default().compress(client(), &x, None, &RngKey::new(1, 0, 0, 0), &mut t).unwrap();
        let mut q = Message::default();
        DeviceQsgd::new(QsgdConfig { levels: 15, bucket: 512 })
            .compress(client(), &x, &RngKey::new(1, 0, 0, 0), &mut q)
            .unwrap();
        for (name, msg) in [("terngrad", &t), ("qsgd", &q)] {
            let d = decode(msg, g.len());
            let nonzero = d.iter().filter(|&&v| v != 0.0).count();
            assert!(d.iter().all(|v| v.is_finite()) && nonzero > 300, "{name} at {v}: {nonzero} non-zero");
        }
        let Message::Ternary(tm) = &t else { panic!("not ternary") };
        let cpu = TernGrad::new(TernGradConfig::default()).scaler(&g);
        assert!((tm.scale - cpu).abs() <= 1e-3 * cpu, "scaler {} vs {cpu} at {v}", tm.scale);
    }
}

fn decode(m: &Message, len: usize) -> Vec<f32> {
    let mut out = vec![0.0; len];
    m.decompress_into(&mut out);
    out
}

#[test]
fn terngrad_scaler_matches_and_codes_follow_the_rule() {
    let n = 100_003;
    let g = gaussian(n, 11);
    let config = TernGradConfig::default();
    let dev_tg = DeviceTernGrad::new(config.clone());
    let x = DeviceF32::upload(client(), &g);
    let s_dev = dev_tg.scaler(client(), &x).unwrap();
    let s_cpu = TernGrad::new(config.clone()).scaler(&g);
    assert!((s_dev - s_cpu).abs() <= 1e-5 * s_cpu, "scaler {s_dev} vs {s_cpu}");

    let mut msg = Message::default();
    dev_tg.compress(client(), &x, Some(s_cpu), &RngKey::new(1, 0, 0, 0), &mut msg).unwrap();
    let Message::Ternary(t) = &msg else { panic!("not a ternary message") };
    assert_eq!((t.len, t.scale, t.packed.len()), (n, s_cpu, n.div_ceil(4)));
    let d = decode(&msg, n);
    for (i, (&v, &q)) in g.iter().zip(&d).enumerate() {
        // Every code is 0 or ±s with the sign of g; |g| ≥ s is always kept.
        assert!(q == 0.0 || q == s_cpu.copysign(v), "element {i}: {v} -> {q}");
        if v.abs() >= s_cpu {
            assert_eq!(q, s_cpu.copysign(v), "clipped element {i} dropped");
        }
    }
    // The padding codes past `len` are zero, as on the CPU.
    let tail = (n % 4) * 2;
    assert_eq!(t.packed.last().unwrap() >> tail, 0);
    // Wire bytes decode with the CPU codec.
    let mut back = Message::default();
    codec::decode(&wire(&msg), &mut back).unwrap();
    assert_eq!(back, msg);
}

/// Unbiasedness, measured: averaged over many independent steps the device
/// codes reproduce g clipped to [−s, s] (clipping is TernGrad's one bias), and the kept fraction equals the CPU's E = Σ min(1, |g|/s)/n.
#[test]
fn terngrad_is_unbiased_and_keeps_what_the_cpu_keeps() {
    let n = 4096;
    let g = gaussian(n, 5);
    let config = TernGradConfig::default();
    let s = TernGrad::new(config.clone()).scaler(&g);
    let dev_tg = DeviceTernGrad::new(config);
    let x = DeviceF32::upload(client(), &g);
    let steps = 200;
    let mut mean = vec![0.0f64; n];
    let mut kept = 0usize;
    for step in 0..steps {
        let mut msg = Message::default();
        dev_tg.compress(client(), &x, Some(s), &RngKey::new(9, 0, step, 0), &mut msg).unwrap();
        for (m, q) in mean.iter_mut().zip(decode(&msg, n)) {
            *m += f64::from(q) / steps as f64;
            kept += usize::from(q != 0.0);
        }
    }
    let expected_kept: f64 = g.iter().map(|v| f64::from((v.abs() / s).min(1.0))).sum::<f64>() * steps as f64;
    let sd = expected_kept.sqrt();
    assert!(
        (kept as f64 - expected_kept).abs() < 5.0 * sd,
        "kept {kept}, expected {expected_kept:.0} ± {sd:.0}"
    );
    // Per element, the mean of `steps` draws of s·Bernoulli(p) has sd ≤ s/(2√steps).
    let tol = 5.0 * f64::from(s) / (2.0 * (steps as f64).sqrt());
    let worst = g.iter().zip(&mean).map(|(&v, &m)| (m - f64::from(v.clamp(-s, s))).abs()).fold(0.0, f64::max);
    assert!(worst < tol, "worst bias {worst} over tolerance {tol}");
    // Different steps draw different codes; the same step draws the same.
    let draw = |step| {
        let mut msg = Message::default();
        dev_tg.compress(client(), &x, Some(s), &RngKey::new(9, 0, step, 0), &mut msg).unwrap();
        msg
    };
    assert_eq!(draw(3), draw(3));
    assert_ne!(draw(3), draw(4));
}

#[test]
fn terngrad_with_zero_or_nan_input_sends_zeros() {
    let mut msg = Message::default();
    let dev_tg = DeviceTernGrad::default();
    dev_tg
        .compress(client(), &DeviceF32::upload(client(), &[0.0; 40]), None, &RngKey::default(), &mut msg)
        .unwrap();
    assert!(matches!(&msg, Message::Ternary(t) if t.scale == 0.0 && t.packed.iter().all(|&b| b == 0)));
    let mut g = vec![1.0f32; 40];
    g[3] = f32::NAN;
    dev_tg
        .compress(client(), &DeviceF32::upload(client(), &g), Some(1.0), &RngKey::default(), &mut msg)
        .unwrap();
    let d = decode(&msg, 40);
    assert_eq!(d[3], 0.0, "NaN must be dropped");
    assert!(d.iter().enumerate().all(|(i, &v)| i == 3 || v == 1.0));
}

#[test]
fn ternary_aggregation_is_bit_identical_to_the_cpu_sum() {
    let n = 70_001;
    let workers = 4;
    let s = 0.75f32;
    let mut cpu_sum = TernarySum::default();
    cpu_sum.reset(n);
    let mut messages = Vec::new();
    for r in 0..workers {
        let g = gaussian(n, 100 + r);
        let mut msg = Message::default();
        let ctx = UnitContext { key: RngKey::new(2, r as u32, 0, 0), shared_scalar: Some(s), loss: None };
        TernGrad::default().compress(&g, &ctx, &mut msg);
        messages.push(msg);
    }
    let ternaries: Vec<&TernaryMessage> =
        messages.iter().map(|m| if let Message::Ternary(t) = m { t } else { unreachable!() }).collect();
    for t in &ternaries {
        cpu_sum.add(t).unwrap();
    }
    let mut cpu = vec![0.5f32; n];
    Message::TernarySum(cpu_sum.result().clone()).add_to(-0.1, &mut cpu);
    let out = DeviceF32::upload(client(), &vec![0.5f32; n]);
    aggregate::add_shared_scale(client(), &ternaries, -0.1, &out).unwrap();
    let dev = out.read(client()).unwrap();
    assert!(dev.iter().zip(&cpu).all(|(a, b)| a.to_bits() == b.to_bits()));
    // Messages with different scalers cannot be summed in integers.
    let mut other = ternaries[0].clone();
    other.scale = 2.0;
    let err = aggregate::add_shared_scale(client(), &[ternaries[0], &other], 1.0, &out).unwrap_err();
    assert!(err.to_string().contains("one scaler"), "{err}");
}

/// Error feedback over several steps: the device residual and every message
/// equal the CPU's `ErrorFeedback` + compressor, in both residual forms.
#[test]
fn error_feedback_on_the_device_tracks_the_cpu_bit_for_bit() {
    use gradcomp_compress::memory::{ErrorFeedback, Memory, ResidualForm};
    use gradcomp_kernels::memory::DeviceErrorFeedback;
    let n = 20_011;
    for form in [ResidualForm::Raw, ResidualForm::LrScaled] {
        for name in ["topk", "terngrad"] {
            let mut cpu_ef = ErrorFeedback::new(form);
            let mut dev_ef = DeviceErrorFeedback::new(form);
            let config =
                if name == "topk" { CompressorConfig::topk(0.01) } else { CompressorConfig::terngrad() };
            let mut cpu_c = config.build();
            for step in 0..4u64 {
                let g = gaussian(n, 40 + step);
                let lr = 0.1;
                let acc = cpu_ef.compensate(&g, lr).to_vec();
                let s = TernGrad::default().scaler(&acc);
                let ctx = UnitContext { key: RngKey::new(1, 0, step, 0), shared_scalar: Some(s), loss: None };
                let mut cpu = Message::default();
                cpu_c.compress(&acc, &ctx, &mut cpu);
                cpu_ef.update(&cpu);

                let dev_acc = dev_ef.compensate(client(), &DeviceF32::upload(client(), &g), lr).clone();
                assert_eq!(dev_acc.read(client()).unwrap(), acc, "{name} {form:?} step {step}: compensated");
                // TernGrad draws differ by design: feed the CPU's message to the
                // device memory, which must then land on the CPU's residual.
                if name == "topk" {
                    let mut dev = Message::default();
                    select::top_k(client(), &dev_acc, 0.01, SparseWire::default(), &mut dev).unwrap();
                    assert_eq!(dev, cpu, "{name} {form:?} step {step}: message");
                }
                dev_ef.update(client(), &cpu).unwrap();
                let e = dev_ef.residual().unwrap().read(client()).unwrap();
                assert!(
                    e.iter().zip(cpu_ef.residual()).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{name} {form:?} step {step}: residual"
                );
            }
        }
    }
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

/// Gradients at many scales with zeros, negative zeros and NaN: the inputs
/// where a sign rule or a reduction order shows.
fn awkward(n: usize, seed: u64) -> Vec<f32> {
    let mut g = gaussian(n, seed);
    for (i, v) in g.iter_mut().enumerate() {
        match i % 97 {
            0 => *v = 0.0,
            1 => *v = -0.0,
            2 => *v *= 1e6,
            3 => *v *= 1e-6,
            _ => {}
        }
    }
    g
}

/// 1-bit: the same sign bits and, because the device adds in the CPU's
/// order, the same two means, bit for bit.
#[test]
fn one_bit_is_bit_identical_to_the_cpu() {
    for (n, seed) in [(1usize, 1u64), (7, 2), (1023, 3), (1025, 4), (8 * 1024 + 5, 5), (300_007, 6)] {
        let g = awkward(n, seed);
        let cpu = cpu_message(&CompressorConfig::Onebit(Default::default()), &g, &UnitContext::default());
        let mut dev = Message::default();
        onebit::compress(client(), &DeviceF32::upload(client(), &g), &mut dev).unwrap();
        assert_eq!(dev, cpu, "n {n}");
        assert_eq!(wire(&dev), wire(&cpu), "n {n}");
    }
    // NaN is a negative sign, as on the CPU (and makes the negative mean NaN).
    let g = [1.0, f32::NAN, -2.0, 3.0];
    let cpu = cpu_message(&CompressorConfig::Onebit(Default::default()), &g, &UnitContext::default());
    let mut dev = Message::default();
    onebit::compress(client(), &DeviceF32::upload(client(), &g), &mut dev).unwrap();
    assert_eq!(wire(&dev), wire(&cpu));
    // Near the largest float the partial sums overflow: both saturate alike.
    let g: Vec<f32> = (0..3000).map(|i| if i % 3 == 0 { -f32::MAX } else { f32::MAX * 0.9 }).collect();
    let cpu = cpu_message(&CompressorConfig::Onebit(Default::default()), &g, &UnitContext::default());
    let mut dev = Message::default();
    onebit::compress(client(), &DeviceF32::upload(client(), &g), &mut dev).unwrap();
    assert_eq!(wire(&dev), wire(&cpu));
    let Message::Sign(m) = &dev else { panic!("sign message") };
    assert_eq!((m.positive, m.negative), (f32::MAX, f32::MIN));
}

/// QSGD: norms equal to rounding, levels bounded and signed like the input,
/// and the decoded vector unbiased (measured over many independent steps).
#[test]
fn qsgd_norms_match_and_levels_are_unbiased() {
    use gradcomp_compress::quantize::qsgd::{Qsgd, QsgdConfig};
    use gradcomp_kernels::qsgd::DeviceQsgd;
    let n = 5000;
    let mut g = awkward(n, 12);
    g[600..1112].fill(0.0); // one whole bucket of zeros sends zeros
    let config = QsgdConfig { levels: 4, bucket: 512 };
    let x = DeviceF32::upload(client(), &g);
    let dev_q = DeviceQsgd::new(config.clone());
    let mut cpu = Message::default();
    Qsgd::new(config.clone()).compress(&g, &UnitContext::default(), &mut cpu);
    let Message::Qsgd(c) = &cpu else { panic!("not a QSGD message") };

    let steps = 300u64;
    let mut mean = vec![0.0f64; n];
    for step in 0..steps {
        let mut msg = Message::default();
        dev_q.compress(client(), &x, &RngKey::new(3, 0, step, 0), &mut msg).unwrap();
        let Message::Qsgd(m) = &msg else { panic!("not a QSGD message") };
        assert_eq!((m.levels, m.bucket, m.codes.len(), m.norms.len()), (4, 512, n, c.norms.len()));
        for (b, (d, h)) in m.norms.iter().zip(&c.norms).enumerate() {
            assert!((d - h).abs() <= 1e-5 * h, "bucket {b}: norm {d} vs {h}");
        }
        for (i, (&code, &v)) in m.codes.iter().zip(&g).enumerate() {
            assert!(code.abs() <= 4, "element {i}: level {code}");
            assert!(code == 0 || (code < 0) == v.is_sign_negative(), "element {i}: {v} -> {code}");
        }
        for (acc, q) in mean.iter_mut().zip(decode(&msg, n)) {
            *acc += f64::from(q) / steps as f64;
        }
    }
    // Each draw is norm/s times a level within one of |v|·s/norm: sd ≤ norm/(2s).
    for (b, chunk) in g.chunks(512).enumerate() {
        let tol = 5.0 * f64::from(c.norms[b]) / 4.0 / 2.0 / (steps as f64).sqrt() + 1e-12;
        for (j, &v) in chunk.iter().enumerate() {
            let i = b * 512 + j;
            assert!((mean[i] - f64::from(v)).abs() <= tol, "element {i}: mean {} vs {v}", mean[i]);
        }
    }
    assert!(mean[600..1112].iter().all(|&m| m == 0.0));
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

/// DGC momentum on the device: `u` and `v` equal the CPU's after every step,
/// with sparse messages (masking where sent) and a dense one (masking all).
#[test]
fn dgc_momentum_on_the_device_tracks_the_cpu_bit_for_bit() {
    use gradcomp_compress::memory::{DgcMomentum, Memory};
    use gradcomp_kernels::memory::DeviceDgcMomentum;
    let n = 10_007;
    let mut cpu_m = DgcMomentum::new(0.9);
    let mut dev_m = DeviceDgcMomentum::new(0.9);
    for step in 0..5u64 {
        let g = gaussian(n, 70 + step);
        let v = cpu_m.compensate(&g, 0.1).to_vec();
        let dev_v = dev_m.compensate(client(), &DeviceF32::upload(client(), &g)).clone();
        assert_eq!(dev_v.read(client()).unwrap(), v, "step {step}: velocity");
        let config = if step == 3 { CompressorConfig::fp16() } else { CompressorConfig::topk(0.01) };
        let sent = cpu_message(&config, &v, &UnitContext::default());
        cpu_m.update(&sent);
        dev_m.update(client(), &sent).unwrap();
        let (u, v) = dev_m.state().unwrap();
        let (u, v) = (u.read(client()).unwrap(), v.read(client()).unwrap());
        let [cu, cv] = cpu_m.state()[..] else { panic!("two buffers") };
        assert!(u.iter().zip(cu).all(|(a, b)| a.to_bits() == b.to_bits()), "step {step}: u");
        assert!(v.iter().zip(cv).all(|(a, b)| a.to_bits() == b.to_bits()), "step {step}: v");
    }
    // Out-of-range indices are an error, not a wild write.
    let bad = Message::Sparse(gradcomp_compress::message::SparseMessage {
        len: n,
        indices: vec![n as u32],
        values: vec![1.0],
        ..Default::default()
    });
    assert!(dev_m.update(client(), &bad).is_err());
    // State restored from the host continues where the host left off.
    let (cu, cv) = (cpu_m.state()[0].to_vec(), cpu_m.state()[1].to_vec());
    let mut fresh = DeviceDgcMomentum::new(0.9);
    fresh.restore(client(), &cu, &cv).unwrap();
    let g = gaussian(n, 99);
    let next = cpu_m.compensate(&g, 0.1).to_vec();
    let dev_next = fresh.compensate(client(), &DeviceF32::upload(client(), &g)).read(client()).unwrap();
    assert!(dev_next.iter().zip(&next).all(|(a, b)| a.to_bits() == b.to_bits()), "after restore");
    assert!(fresh.restore(client(), &cu, &cv[1..]).is_err(), "u and v of different lengths");
}

#[test]
fn scaling_on_the_device_is_the_cpus_product_and_leaves_its_input() {
    let g = awkward(5_003, 17);
    let dev = DeviceF32::upload(client(), &g);
    let s = 0.3712f32;
    let out = gradcomp_kernels::elementwise::scaled(client(), &dev, s).unwrap().read(client()).unwrap();
    assert!(out.iter().zip(&g).all(|(o, x)| o.to_bits() == (s * x).to_bits()));
    assert_eq!(dev.read(client()).unwrap(), g, "the input was modified");
    let empty = DeviceF32::from_handle(client().empty(4), 0);
    assert!(gradcomp_kernels::elementwise::scaled(client(), &empty, s)
        .unwrap()
        .read(client())
        .unwrap()
        .is_empty());
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
        DeviceCompressor::new(&config).unwrap().compress(client(), &x, &ctx, &mut dev).unwrap();
        assert_eq!(wire(&dev), wire(&cpu), "{config:?}");
    }
    for config in [CompressorConfig::Trimmedk(Default::default()), CompressorConfig::Esgd(Default::default())]
    {
        let err = DeviceCompressor::new(&config).unwrap_err();
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
