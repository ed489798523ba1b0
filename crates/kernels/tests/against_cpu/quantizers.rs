//! fp16, TernGrad, 1-bit and QSGD on the device against the CPU.

use super::*;

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
        DeviceQsgd::new(QsgdConfig { levels: 15, block: 512 })
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
        let ctx = UnitContext { key: RngKey::new(2, r as u32, 0, 0), loss: None };
        let mut t = TernGrad::default();
        t.round_result(0, &[s], workers as usize);
        t.compress(&g, &ctx, &mut msg);
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

/// 1-bit: the same sign bits and, because the device adds in the CPU's
/// order, the same two means, bit for bit.
#[test]
fn one_bit_is_bit_identical_to_the_cpu() {
    for (n, seed) in [(1usize, 1u64), (7, 2), (1023, 3), (1025, 4), (8 * 1024 + 5, 5), (300_007, 6)] {
        let g = awkward(n, seed);
        let cpu = cpu_message(&CompressorConfig::Onebit(Default::default()), &g, &UnitContext::default());
        let mut dev = Message::default();
        onebit::compress(client(), &DeviceF32::upload(client(), &g), onebit::SignValues::Means, &mut dev)
            .unwrap();
        assert_eq!(dev, cpu, "n {n}");
        assert_eq!(wire(&dev), wire(&cpu), "n {n}");
    }
    // NaN is a negative sign, as on the CPU (and makes the negative mean NaN).
    let g = [1.0, f32::NAN, -2.0, 3.0];
    let cpu = cpu_message(&CompressorConfig::Onebit(Default::default()), &g, &UnitContext::default());
    let mut dev = Message::default();
    onebit::compress(client(), &DeviceF32::upload(client(), &g), onebit::SignValues::Means, &mut dev)
        .unwrap();
    assert_eq!(wire(&dev), wire(&cpu));
    // Near the largest float the partial sums overflow: both saturate alike.
    let g: Vec<f32> = (0..3000).map(|i| if i % 3 == 0 { -f32::MAX } else { f32::MAX * 0.9 }).collect();
    let cpu = cpu_message(&CompressorConfig::Onebit(Default::default()), &g, &UnitContext::default());
    let mut dev = Message::default();
    onebit::compress(client(), &DeviceF32::upload(client(), &g), onebit::SignValues::Means, &mut dev)
        .unwrap();
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
    g[600..1112].fill(0.0); // one whole block of zeros sends zeros
    let config = QsgdConfig { levels: 4, block: 512 };
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
        assert_eq!((m.levels, m.block, m.codes.len(), m.norms.len()), (4, 512, n, c.norms.len()));
        for (b, (d, h)) in m.norms.iter().zip(&c.norms).enumerate() {
            assert!((d - h).abs() <= 1e-5 * h, "block {b}: norm {d} vs {h}");
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
