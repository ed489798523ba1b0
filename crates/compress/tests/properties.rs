//! Property tests of the compressors, memories and codec (issue #2, item 3).

use gradcomp_compress::chunked::{DctTopKConfig, SparseLocoConfig, ValueCoding};
use gradcomp_compress::codebook::{dynamic_codebook, nearest_code};
use gradcomp_compress::codec;
use gradcomp_compress::lowrank::PowerSgdConfig;
use gradcomp_compress::memory::{ErrorFeedback, Memory, ResidualForm};
use gradcomp_compress::message::{IndexEncoding, Message, SparseWire, TernaryPacking, ValueEncoding};
use gradcomp_compress::quantize::{
    EfSignSgd, EightBitConfig, Fp4Config, Fp4Format, Natural, Qsgd, QsgdConfig, Rounding, Signum,
    SignumConfig, TernGrad, TernGradConfig,
};
use gradcomp_compress::sparsify::{GaussianK, GaussianKConfig, RandK, RandKConfig, TopK, TopKConfig};
use gradcomp_compress::{
    compress_as_sole_worker, k_for, Compressor, CompressorConfig, RngKey, UnitContext, UnitRng,
};
use proptest::prelude::*;

fn ctx(rank: u32, step: u64) -> UnitContext {
    UnitContext { key: RngKey::new(17, rank, step, 3), ..Default::default() }
}

fn gaussian(n: usize, seed: u64) -> Vec<f32> {
    let mut r = UnitRng::from_parts(&[seed]);
    (0..n).map(|_| r.next_gaussian() as f32).collect()
}

/// Every compressor in every wire variant, for round-trip tests.
fn all_configs() -> Vec<CompressorConfig> {
    let mut v: Vec<CompressorConfig> =
        CompressorConfig::NAMES.iter().map(|n| CompressorConfig::named(n).unwrap()).collect();
    v.push(CompressorConfig::Terngrad(TernGradConfig {
        packing: TernaryPacking::Base3,
        clipping: false,
        ..Default::default()
    }));
    v.push(CompressorConfig::Qsgd(QsgdConfig { levels: 3, block: 7 }));
    v.push(CompressorConfig::Eightbit(EightBitConfig { block: 7 }));
    // Chunked top-k with small tiles, f32 and 4-bit values, and a DCT with 8-bit values.
    v.push(CompressorConfig::Sparseloco(SparseLocoConfig {
        k: 5,
        chunk: 8,
        vector_chunk: 8,
        values: ValueCoding::F32,
        ..Default::default()
    }));
    v.push(CompressorConfig::Sparseloco(SparseLocoConfig {
        k: 3,
        vector_chunk: 6,
        values: ValueCoding::Bits4,
        clip: false,
        ..Default::default()
    }));
    v.push(CompressorConfig::DctTopk(DctTopKConfig {
        k: 2,
        vector_chunk: 5,
        values: ValueCoding::Bits8,
        ..Default::default()
    }));
    for (format, rounding) in [(Fp4Format::E2m1, Rounding::Nearest), (Fp4Format::E3m0, Rounding::Stochastic)]
    {
        v.push(CompressorConfig::Fp4(Fp4Config { block: 5, format, rounding }));
    }
    // PowerSGD past its warm-up, at a rank the one-column test matrices cap to 1.
    v.push(CompressorConfig::Powersgd(PowerSgdConfig { rank: 2, start_iter: 0, ..Default::default() }));
    for indices in [IndexEncoding::U32, IndexEncoding::Varint] {
        for values in [ValueEncoding::F32, ValueEncoding::F16] {
            v.push(CompressorConfig::Topk(TopKConfig { density: 0.3, wire: SparseWire { indices, values } }));
        }
    }
    v.push(CompressorConfig::Randk(RandKConfig {
        density: 0.5,
        same_seed: true,
        unbiased: true,
        wire: SparseWire { indices: IndexEncoding::Varint, values: ValueEncoding::F32 },
    }));
    v
}

fn values() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(
        prop_oneof![
            8 => -10.0f32..10.0,
            1 => Just(0.0f32),
            1 => -1e-3f32..1e-3,
        ],
        0..300,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// encode → decode gives the same message; the byte count is exact; the
    /// fused decode-and-accumulate equals the in-memory decompression.
    #[test]
    fn codec_round_trip(x in values(), unit in any::<u32>(), step in 0u64..1000) {
        for cfg in all_configs() {
            let mut c = cfg.build_for(&[x.len(), 1]);
            let mut msg = Message::default();
            compress_as_sole_worker(&mut *c, &x, &ctx(0, step), &mut msg);
            let mut bytes = vec![0xAA]; // encode appends
            let written = codec::encode(&msg, unit, &mut bytes);
            prop_assert_eq!(written, codec::encoded_len(&msg));
            prop_assert_eq!(bytes.len(), 1 + written);
            let bytes = &bytes[1..];
            let mut back = Message::default();
            let h = codec::decode(bytes, &mut back).unwrap();
            prop_assert_eq!(h.unit, unit);
            prop_assert_eq!(h.len as usize, x.len());
            prop_assert_eq!(&back, &msg, "{}", cfg.name());
            let scale = match &msg {
                Message::Ternary(t) => Some(t.scale),
                _ => None,
            };
            prop_assert_eq!(codec::ternary_scale(bytes).unwrap(), scale, "{}", cfg.name());
            let mut want = vec![0.5f32; x.len()];
            msg.add_to(0.25, &mut want);
            let mut got = vec![0.5f32; x.len()];
            codec::accumulate(bytes, 0.25, &mut got).unwrap();
            for (a, b) in got.iter().zip(&want) {
                prop_assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{}: {} vs {}", cfg.name(), a, b);
            }
            // Concatenated messages split back at the right place.
            let mut two = bytes.to_vec();
            two.extend_from_slice(bytes);
            let (first, rest) = codec::split_first(&two).unwrap();
            prop_assert_eq!(first, bytes);
            prop_assert_eq!(rest, bytes);
        }
    }

    /// Exact Top-k equals the k largest |x| found by a full sort (ties to the
    /// lower index).
    #[test]
    fn topk_equals_sort(x in values(), rho in 0.001f64..1.0) {
        let mut c = TopK::compressor(&TopKConfig { density: rho, ..Default::default() });
        let mut msg = Message::default();
        c.compress(&x, &ctx(0, 0), &mut msg);
        let Message::Sparse(m) = &msg else { panic!() };
        let k = k_for(rho, x.len());
        let mut idx: Vec<u32> = (0..x.len() as u32).collect();
        idx.sort_by(|&a, &b| x[b as usize].abs().total_cmp(&x[a as usize].abs()).then(a.cmp(&b)));
        idx.truncate(k);
        idx.sort_unstable();
        prop_assert_eq!(&m.indices, &idx);
        for (&i, &v) in m.indices.iter().zip(&m.values) {
            prop_assert_eq!(v, x[i as usize]);
        }
    }

    /// Error feedback conserves mass: sent + residual = compensated input,
    /// for every compressor.
    #[test]
    fn error_feedback_conserves_mass(x in values(), e0 in values()) {
        for cfg in all_configs() {
            let mut ef = ErrorFeedback::new(ResidualForm::Raw);
            let mut c = cfg.build_for(&[x.len(), 1]);
            let mut msg = Message::default();
            // A first step leaves some residual behind.
            let mut g0 = e0.clone();
            g0.resize(x.len(), 0.0);
            let acc = ef.compensate(&g0, 1.0).to_vec();
            compress_as_sole_worker(&mut *c, &acc, &ctx(0, 0), &mut msg);
            ef.update(&msg);
            let acc = ef.compensate(&x, 1.0).to_vec();
            compress_as_sole_worker(&mut *c, &acc, &ctx(0, 1), &mut msg);
            ef.update(&msg);
            let mut sent = vec![0.0; x.len()];
            msg.decompress_into(&mut sent);
            for ((s, r), a) in sent.iter().zip(ef.residual()).zip(&acc) {
                prop_assert!((s + r - a).abs() <= 1e-5 * a.abs().max(1.0), "{}: {} + {} != {}", cfg.name(), s, r, a);
            }
        }
    }
}

/// Mean of `draws` decompressions of `c(x)`, each with a fresh stream.
fn mean_decompression(c: &mut dyn Compressor, x: &[f32], draws: u64) -> Vec<f64> {
    let mut sum = vec![0.0f64; x.len()];
    let mut msg = Message::default();
    let mut out = vec![0.0f32; x.len()];
    for step in 0..draws {
        c.compress(x, &ctx(0, step), &mut msg);
        msg.decompress_into(&mut out);
        for (s, &o) in sum.iter_mut().zip(&out) {
            *s += f64::from(o);
        }
    }
    sum.iter().map(|s| s / draws as f64).collect()
}

/// Checks `|mean_j − x_j| ≤ 5 · sd_j / √draws` for every element, where sd_j
/// bounds the per-draw standard deviation: a 5-sigma test at a fixed seed.
fn assert_unbiased(name: &str, mean: &[f64], x: &[f32], sd: impl Fn(usize) -> f64, draws: u64) {
    for (j, (&m, &v)) in mean.iter().zip(x).enumerate() {
        let tol = 5.0 * sd(j) / (draws as f64).sqrt() + 1e-6;
        assert!((m - f64::from(v)).abs() <= tol, "{name}: element {j}: mean {m} vs {v} (tolerance {tol})");
    }
}

#[test]
fn terngrad_is_unbiased_without_clipping() {
    let x = gaussian(200, 1);
    let draws = 4000;
    let mut c = TernGrad::new(TernGradConfig { clipping: false, ..Default::default() });
    let s = f64::from(c.scaler(&x));
    let mean = mean_decompression(&mut c, &x, draws);
    // b ~ Bernoulli(p): sd of s·b is s·sqrt(p(1−p)) ≤ s/2.
    assert_unbiased("terngrad", &mean, &x, |_| s / 2.0, draws);
}

#[test]
fn terngrad_with_clipping_is_unbiased_inside_the_clip_level() {
    let x = gaussian(200, 2);
    let draws = 4000;
    let mut c = TernGrad::default();
    let s = c.scaler(&x);
    let mean = mean_decompression(&mut c, &x, draws);
    let clipped: Vec<f32> = x.iter().map(|v| v.clamp(-s, s)).collect();
    assert_unbiased("terngrad clip", &mean, &clipped, |_| f64::from(s) / 2.0, draws);
}

#[test]
fn qsgd_is_unbiased() {
    let x = gaussian(300, 3);
    let draws = 3000;
    let cfg = QsgdConfig { levels: 4, block: 64 };
    let norms: Vec<f64> =
        x.chunks(64).map(|b| b.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>().sqrt()).collect();
    let mean = mean_decompression(&mut Qsgd::new(cfg), &x, draws);
    // One draw deviates by at most one level, n/s.
    assert_unbiased("qsgd", &mean, &x, |j| norms[j / 64] / 4.0 / 2.0, draws);
}

/// Natural compression is unbiased, and its variance stays within the
/// paper's ‖x‖²/8 (Horváth et al. 2019, Theorem 1), measured over the draws.
#[test]
fn natural_compression_is_unbiased_within_an_eighth_of_the_norm() {
    let mut x = gaussian(300, 6);
    x.extend([1e-35f32, -3e-34, 65535.0, 0.0, 2.0, -0.75]);
    let draws = 4000;
    let mean = mean_decompression(&mut Natural, &x, draws);
    // Between 2^e and 2^(e+1) a draw deviates by at most 2^e ≤ |x|.
    assert_unbiased("natural", &mean, &x, |j| f64::from(x[j].abs()), draws);
    let (mut msg, mut out, mut sq) = (Message::default(), vec![0.0f32; x.len()], 0.0f64);
    for step in 0..draws {
        Natural.compress(&x, &ctx(0, step), &mut msg);
        msg.decompress_into(&mut out);
        sq += out.iter().zip(&x).map(|(o, v)| f64::from(o - v).powi(2)).sum::<f64>();
    }
    let norm: f64 = x.iter().map(|&v| f64::from(v).powi(2)).sum();
    assert!(sq / draws as f64 <= norm / 8.0, "variance {} > ‖x‖²/8 = {}", sq / draws as f64, norm / 8.0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// EF-SignSGD's scaled sign leaves exactly (1 − ‖x‖₁²/(d‖x‖₂²))·‖x‖²
    /// (Karimireddy et al. 2019, Lemma 8: a δ-compressor with δ = ‖x‖₁²/(d‖x‖₂²)).
    #[test]
    fn the_scaled_sign_contracts_by_the_l1_ratio(x in values()) {
        prop_assume!(x.iter().any(|&v| v != 0.0));
        let mut msg = Message::default();
        EfSignSgd.compress(&x, &ctx(0, 0), &mut msg);
        let mut out = vec![0.0f32; x.len()];
        msg.decompress_into(&mut out);
        let l1: f64 = x.iter().map(|&v| f64::from(v.abs())).sum();
        let l2: f64 = x.iter().map(|&v| f64::from(v).powi(2)).sum();
        let err: f64 = out.iter().zip(&x).map(|(o, v)| f64::from(o - v).powi(2)).sum();
        let want = (1.0 - l1 * l1 / (x.len() as f64 * l2)) * l2;
        prop_assert!((err - want).abs() <= 1e-4 * l2, "{} vs {}", err, want);
    }

    /// fp4 codes are the argmin over the format's 15 values (ties to the
    /// lower value), so the error is at most half the widest gap times the
    /// block's maximum.
    #[test]
    fn fp4_rounds_to_the_nearest_table_value(x in values(), block in 1usize..40, e2m1: bool) {
        let format = if e2m1 { Fp4Format::E2m1 } else { Fp4Format::E3m0 };
        let cfg = Fp4Config { block, format, ..Default::default() };
        let mut msg = Message::default();
        CompressorConfig::Fp4(cfg).build().compress(&x, &ctx(0, 0), &mut msg);
        let Message::Blockwise(m) = &msg else { panic!("a blockwise message") };
        let table = m.codebook.values();
        let widest = if e2m1 { 2.0 / 6.0 } else { 0.5 };
        for (b, chunk) in x.chunks(block).enumerate() {
            let absmax = m.absmax[b];
            for (j, &v) in chunk.iter().enumerate() {
                let s = if absmax > 0.0 { (v * (1.0 / absmax)).clamp(-1.0, 1.0) } else { 0.0 };
                let q = m.codes[b * block + j] as usize;
                let best = (0..16).filter(|&c| c != 8).map(|c| (table[c] - s).abs()).fold(f32::MAX, f32::min);
                // Nearest up to the rounding of a midpoint (an f32 ulp at 1).
                prop_assert!((table[q] - s).abs() <= best + 6e-8, "{} → {}", s, table[q]);
                prop_assert_eq!(m.codes[b * block + j], m.codebook.nearest(s), "the run's count is the search's");
                prop_assert!((table[q] * absmax - v).abs() <= (widest / 2.0 + 1e-6) * absmax);
            }
        }
    }

    /// 8-bit codes are the argmin over the codebook (ties to the lower
    /// index), and each element is off by at most half the codebook's widest
    /// gap (0.9/128) times its block's maximum.
    #[test]
    fn eightbit_rounds_to_the_nearest_codebook_value(x in values(), block in 1usize..64) {
        let codebook = dynamic_codebook();
        let mut msg = Message::default();
        CompressorConfig::Eightbit(EightBitConfig { block }).build().compress(&x, &ctx(0, 0), &mut msg);
        let Message::Blockwise(m) = &msg else { panic!("an 8-bit message") };
        for (b, chunk) in x.chunks(block).enumerate() {
            let absmax = m.absmax[b];
            for (j, &v) in chunk.iter().enumerate() {
                let s = if absmax > 0.0 { (v * (1.0 / absmax)).clamp(-1.0, 1.0) } else { 0.0 };
                let brute = (0..256).fold(0usize, |best, i| {
                    if (codebook[i] - s).abs() < (codebook[best] - s).abs() { i } else { best }
                });
                // Nearest up to the rounding of a midpoint (an f32 ulp at 1).
                let q = nearest_code(s) as usize;
                prop_assert!((codebook[q] - s).abs() <= (codebook[brute] - s).abs() + 6e-8, "{} → {} not {}", s, q, brute);
                prop_assert_eq!(m.codes[b * block + j] as usize, q);
                let back = codebook[q] * absmax;
                prop_assert!((back - v).abs() <= (0.9 / 128.0 + 1e-6) * absmax, "{} → {}", v, back);
            }
        }
    }
}

#[test]
fn signum_signs_follow_its_momentum_across_steps() {
    let g1 = gaussian(64, 7);
    let g2 = gaussian(64, 8);
    let mut s = Signum::new(&SignumConfig { momentum: 0.9 });
    let mut msg = Message::default();
    s.compress(&g1, &ctx(0, 0), &mut msg);
    s.compress(&g2, &ctx(0, 1), &mut msg);
    let mut out = vec![0.0f32; 64];
    msg.decompress_into(&mut out);
    for j in 0..64 {
        let m = 0.1 * g2[j] + 0.9 * g1[j];
        assert_eq!(out[j], if m >= 0.0 { 1.0 } else { -1.0 }, "element {j}");
    }
}

#[test]
fn unbiased_randk_is_unbiased_and_plain_randk_shrinks_by_k_over_d() {
    let x = gaussian(100, 4);
    let draws = 20_000;
    let mut c = RandK::compressor(&RandKConfig { density: 0.2, unbiased: true, ..Default::default() });
    let mean = mean_decompression(&mut c, &x, draws);
    // Each element is (d/k)·x w.p. k/d: sd = |x|·sqrt(d/k − 1) = 2|x|.
    assert_unbiased("randk", &mean, &x, |j| 2.0 * f64::from(x[j].abs()), draws);
    let mut plain = RandK::compressor(&RandKConfig { density: 0.2, ..Default::default() });
    let mean = mean_decompression(&mut plain, &x, draws);
    let shrunk: Vec<f32> = x.iter().map(|v| v * 0.2).collect();
    assert_unbiased("randk plain", &mean, &shrunk, |j| 0.4 * f64::from(x[j].abs()), draws);
}

#[test]
fn randk_same_seed_agrees_across_ranks_and_differs_otherwise() {
    let x = gaussian(1000, 5);
    let pick = |same_seed, rank| {
        let mut c = RandK::compressor(&RandKConfig { density: 0.05, same_seed, ..Default::default() });
        let mut msg = Message::default();
        c.compress(&x, &ctx(rank, 9), &mut msg);
        let Message::Sparse(m) = msg else { panic!() };
        assert_eq!(m.indices.len(), 50);
        assert!(m.indices.windows(2).all(|w| w[0] < w[1]));
        m.indices
    };
    assert_eq!(pick(true, 0), pick(true, 3));
    assert_ne!(pick(false, 0), pick(false, 3));
}

#[test]
fn gaussiank_count_is_within_its_bounds_on_gaussian_data() {
    for (n, rho, seed) in [(100_000, 0.001, 6), (100_000, 0.01, 7), (1_000_000, 0.001, 8), (20_000, 0.05, 9)]
    {
        let x = gaussian(n, seed);
        let k = k_for(rho, n) as f64;
        let mut c = GaussianK::compressor(&GaussianKConfig { density: rho, ..Default::default() });
        let mut msg = Message::default();
        c.compress(&x, &ctx(0, 0), &mut msg);
        let got = msg.selected() as f64;
        assert!(got >= 2.0 * k / 3.0 && got <= 4.0 * k / 3.0, "n={n} rho={rho}: selected {got}, k={k}");
    }
}

#[test]
fn every_sparsifier_selects_about_k_on_gaussian_data() {
    let n = 200_000;
    let x = gaussian(n, 10);
    for name in ["topk", "gaussiank", "dgck", "trimmedk", "randk"] {
        for rho in [0.001, 0.01] {
            let mut cfg = CompressorConfig::named(name).unwrap();
            cfg.set_density(rho);
            let mut c = cfg.build();
            let mut msg = Message::default();
            c.compress(&x, &ctx(0, 0), &mut msg);
            let k = k_for(rho, n) as f64;
            let got = msg.selected() as f64;
            let (lo, hi) = match name {
                "gaussiank" => (2.0 / 3.0, 4.0 / 3.0),
                "dgck" => (0.8, 1.3),
                _ => (1.0, 1.0),
            };
            assert!(got >= lo * k && got <= hi * k, "{name} rho={rho}: {got} vs k={k}");
            let Message::Sparse(m) = &msg else { panic!() };
            assert!(m.indices.windows(2).all(|w| w[0] < w[1]), "{name}: indices not ascending");
        }
    }
}

/// The quantizers at every magnitude (issue #12): scalers computed in f32
/// overflowed above ~1.8e19 or vanished below ~1e-19, and a scaler below
/// ~3e-39 had an infinite reciprocal, so the message came out all zeros or
/// NaN. Scaling the input by a power of two that keeps it normal must scale
/// the message exactly (same codes, scaler times 2^e); and at the subnormal
/// end the message must still be finite, non-zero and bounded by its scaler.
fn quantizers() -> Vec<CompressorConfig> {
    vec![
        CompressorConfig::Terngrad(TernGradConfig::default()),
        CompressorConfig::Terngrad(TernGradConfig { clipping: false, ..Default::default() }),
        CompressorConfig::Qsgd(QsgdConfig { levels: 15, block: 512 }),
        CompressorConfig::Eightbit(EightBitConfig { block: 256 }),
    ]
}

fn scaled(x: &[f32], e: i32) -> Vec<f32> {
    x.iter().map(|&v| v * 2f32.powi(e.clamp(-126, 127)) * 2f32.powi(e - e.clamp(-126, 127))).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn quantizers_scale_exactly_with_their_input(e in -90i32..=90, seed in 0u64..1000) {
        let x = gaussian(1500, seed);
        for cfg in quantizers() {
            let (mut a, mut b) = (Message::default(), Message::default());
            cfg.build().compress(&x, &ctx(0, seed), &mut a);
            cfg.build().compress(&scaled(&x, e), &ctx(0, seed), &mut b);
            let (mut da, mut db) = (vec![0.0f32; x.len()], vec![0.0f32; x.len()]);
            a.decompress_into(&mut da);
            b.decompress_into(&mut db);
            prop_assert_eq!(scaled(&da, e), db, "{:?} at 2^{}", cfg, e);
        }
    }

    #[test]
    fn quantizers_stay_finite_at_the_subnormal_end(e in -149i32..=-100, seed in 0u64..1000) {
        let x = scaled(&gaussian(1500, seed), e);
        prop_assume!(x.iter().any(|&v| v != 0.0));
        let bound = x.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
        for cfg in quantizers() {
            let mut m = Message::default();
            cfg.build().compress(&x, &ctx(0, seed), &mut m);
            let mut d = vec![0.0f32; x.len()];
            m.decompress_into(&mut d);
            prop_assert!(d.iter().all(|v| v.is_finite()), "{:?} at 2^{}", cfg, e);
            prop_assert!(d.iter().any(|&v| v != 0.0), "{:?} at 2^{}: all zeros", cfg, e);
            // TernGrad sends ±s (s = max |x| or 2.5σ); QSGD at most the bucket norm.
            let limit = 3.0 * bound * (x.len() as f32).sqrt();
            prop_assert!(d.iter().all(|v| v.abs() <= limit), "{:?} at 2^{}", cfg, e);
        }
    }
}

#[test]
fn quantizers_at_the_issues_magnitudes() {
    // 3e19 (squares overflow f32) and 1e-20, 1e-40 (underflow; 1/s overflows).
    for v in [3e19f32, 1e-20, 1e-40] {
        let x: Vec<f32> = gaussian(1000, 9).iter().map(|g| g * v).collect();
        for cfg in quantizers() {
            let mut m = Message::default();
            cfg.build().compress(&x, &ctx(0, 1), &mut m);
            let mut d = vec![0.0f32; x.len()];
            m.decompress_into(&mut d);
            let nonzero = d.iter().filter(|&&v| v != 0.0).count();
            assert!(d.iter().all(|v| v.is_finite()) && nonzero > 100, "{cfg:?} at {v}: {nonzero} non-zero");
        }
    }
}

proptest! {
    /// SparseLoCo's selection on a matrix is the exact top-k of every tile
    /// (by a sort: magnitude down, position up on ties), in ascending
    /// position with the input's values, and survives the codec.
    #[test]
    fn chunked_top_k_is_each_tiles_top_k_by_a_sort(
        rows in 2usize..40,
        cols in 1usize..40,
        chunk in 1usize..16,
        k in 1usize..20,
        seed in 0u64..1000,
    ) {
        let x: Vec<f32> = gaussian(rows * cols, seed).iter().map(|v| (v * 4.0).round() / 4.0).collect();
        let cfg = SparseLocoConfig { k, chunk, vector_chunk: chunk, values: ValueCoding::F32, ..Default::default() };
        let mut msg = Message::default();
        CompressorConfig::Sparseloco(cfg).build_for(&[rows, cols]).compress(&x, &ctx(0, 0), &mut msg);
        let Message::Chunked(m) = &msg else { panic!("a chunked message") };
        let t = m.tiles;
        let mut e = 0;
        for tile in 0..t.count() {
            let (r0, c0, h, w) = t.tile(tile);
            let at = |p: usize| x[(r0 + p / w) * cols + c0 + p % w];
            let mut order: Vec<usize> = (0..h * w).collect();
            order.sort_by(|&a, &b| at(b).abs().total_cmp(&at(a).abs()).then(a.cmp(&b)));
            order.truncate(t.k_of(tile, m.k as usize));
            order.sort_unstable();
            let n = order.len();
            let got: Vec<usize> = m.positions[e..e + n].iter().map(|&p| usize::from(p)).collect();
            prop_assert_eq!(&got, &order, "tile {}", tile);
            for (i, &p) in order.iter().enumerate() {
                prop_assert_eq!(m.values[e + i], at(p));
            }
            e += n;
        }
        prop_assert_eq!(e, m.positions.len());
        let mut bytes = Vec::new();
        codec::encode(&msg, 3, &mut bytes);
        let mut back = Message::default();
        codec::decode(&bytes, &mut back).unwrap();
        prop_assert_eq!(back, msg);
    }
}
