//! GRACE's compressors on the device against the CPU: the sign family and
//! 8-bit quantization bit for bit, Signum's momentum across steps, natural
//! compression in distribution.

use gradcomp_compress::codebook::natural_value;
use gradcomp_compress::codebook::BlockCodebook;
use gradcomp_compress::quantize::eightbit::EightBitConfig;
use gradcomp_compress::quantize::signum::SignumConfig;
use gradcomp_compress::quantize::{Fp4Config, Fp4Format};
use gradcomp_kernels::signum::DeviceSignum;
use gradcomp_kernels::{blockwise, natural};

use super::*;

const SIZES: [(usize, u64); 5] = [(1, 1), (7, 2), (1025, 4), (8 * 1024 + 5, 5), (100_003, 6)];

#[test]
fn signsgd_and_efsignsgd_are_bit_identical_to_the_cpu() {
    for (n, seed) in SIZES {
        let g = awkward(n, seed);
        let x = DeviceF32::upload(client(), &g);
        for (config, values) in [
            (CompressorConfig::signsgd(), onebit::SignValues::Unit),
            (CompressorConfig::efsignsgd(), onebit::SignValues::Scaled),
        ] {
            let cpu = cpu_message(&config, &g, &UnitContext::default());
            let mut dev = Message::default();
            onebit::compress(client(), &x, values, &mut dev).unwrap();
            assert_eq!(wire(&dev), wire(&cpu), "{} n {n}", config.name());
        }
    }
}

#[test]
fn signum_momentum_follows_the_cpu_step_after_step() {
    let cfg = SignumConfig { momentum: 0.9 };
    let n = 10_007;
    let mut cpu = CompressorConfig::Signum(cfg.clone()).build();
    let mut dev = DeviceSignum::new(&cfg);
    for step in 0..5u64 {
        let g = awkward(n, 40 + step);
        let mut c = Message::default();
        cpu.compress(&g, &UnitContext::default(), &mut c);
        let mut d = Message::default();
        dev.compress(client(), &DeviceF32::upload(client(), &g), &mut d).unwrap();
        assert_eq!(wire(&d), wire(&c), "step {step}");
    }
    // The momentum itself, as checkpoints carry it.
    let state = dev.state(client()).unwrap();
    assert_eq!(state, cpu.state()[0]);
    // Restored into a fresh one, the next step is the same again.
    let mut back = DeviceSignum::new(&cfg);
    back.restore(client(), &state);
    let g = gaussian(n, 99);
    let (mut a, mut b) = (Message::default(), Message::default());
    back.compress(client(), &DeviceF32::upload(client(), &g), &mut a).unwrap();
    dev.compress(client(), &DeviceF32::upload(client(), &g), &mut b).unwrap();
    assert_eq!(a, b);
}

/// 8-bit and fp4 (both formats) quantization, blockwise, rounded to nearest.
#[test]
fn blockwise_quantization_is_bit_identical_to_the_cpu() {
    let mut configs = Vec::new();
    for block in [1usize, 32, 64, 4096] {
        configs.push((CompressorConfig::Eightbit(EightBitConfig { block }), BlockCodebook::Dynamic, block));
        for format in [Fp4Format::E3m0, Fp4Format::E2m1] {
            let cfg = Fp4Config { block, format, ..Default::default() };
            configs.push((CompressorConfig::Fp4(cfg.clone()), cfg.codebook(), block));
        }
    }
    for (n, seed) in SIZES {
        let mut g = awkward(n, seed);
        // One block of zeros (scale 0) and one at a tiny magnitude.
        if n > 200 {
            g[64..128].fill(0.0);
            g[128..192].iter_mut().for_each(|v| *v *= 1e-40);
        }
        let x = DeviceF32::upload(client(), &g);
        for (cfg, codebook, block) in &configs {
            let cpu = cpu_message(cfg, &g, &UnitContext::default());
            let mut dev = Message::default();
            blockwise::compress(client(), &x, *codebook, *block, &mut dev).unwrap();
            assert_eq!(dev, cpu, "n {n} {codebook:?} block {block}");
            assert_eq!(wire(&dev), wire(&cpu));
        }
    }
}

/// Every device code is one of the two powers of two around |x| with x's
/// sign (from 2^18 up, 2^18: the one saturation), the same key draws the
/// same codes, and the decoded mean over many keys is x (unbiased) within
/// its measured spread.
#[test]
fn natural_rounds_to_neighbouring_powers_without_bias() {
    let n = 4096;
    let g = awkward(n, 8);
    let x = DeviceF32::upload(client(), &g);
    let draw = |step| {
        let mut m = Message::default();
        natural::compress(client(), &x, &RngKey::new(3, 0, step, 0), &mut m).unwrap();
        m
    };
    assert_eq!(draw(1), draw(1));
    assert_ne!(draw(1), draw(2));
    let steps = 400u64;
    let mut mean = vec![0.0f64; n];
    for step in 0..steps {
        let Message::Natural(m) = draw(step) else { panic!("not a natural message") };
        for ((acc, &c), &v) in mean.iter_mut().zip(&m.codes).zip(&g) {
            let q = natural_value(c);
            if v == 0.0 || v.abs() >= 262_144.0 {
                assert_eq!(q, v.clamp(-262_144.0, 262_144.0), "{v}");
                continue;
            }
            let low = 2f32.powi(v.abs().log2().floor() as i32);
            assert!(q.abs() == low || q.abs() == 2.0 * low, "{v} -> {q}");
            assert_eq!(q.is_sign_negative(), v.is_sign_negative(), "{v} -> {q}");
            *acc += f64::from(q) / steps as f64;
        }
    }
    // Per element the draw is low or 2·low: the mean's sd ≤ low/(2√steps).
    for (&v, &m) in g.iter().zip(&mean).filter(|(v, _)| v.abs() < 262_144.0) {
        let low = f64::from(2f32.powi(v.abs().log2().floor() as i32));
        let tol = 5.0 * low / (2.0 * (steps as f64).sqrt());
        assert!((m - f64::from(v)).abs() <= tol, "{v}: mean {m}, tolerance {tol}");
    }
}
