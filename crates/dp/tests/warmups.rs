//! The warm-ups of local updates through the burn front (ALGORITHMS.md
//! §2.4): synchronous steps first, whose averaged gradients keep the
//! replicas equal, and BatchNorm's running statistics averaged at every
//! round (`strategy.average_buffers`), on in-process workers.

use burn::module::Module;
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
use burn::optim::SgdConfig;
use burn::tensor::{Device, Tensor, TensorData};
use gradcomp_comm::{Collective, InProcessGroup};
use gradcomp_compress::CompressorConfig;
use gradcomp_dp::config::{PeriodRule, StrategyConfig, SyncPhase};
use gradcomp_dp::{DataParallelConfig, InitDataParallel};

#[derive(Module, Debug)]
struct Net {
    a: Linear,
    norm: BatchNorm,
    b: Linear,
}

impl Net {
    fn new(device: &Device) -> Self {
        Self {
            a: LinearConfig::new(4, 8).init(device),
            norm: BatchNormConfig::new(8).init(device),
            b: LinearConfig::new(8, 1).init(device),
        }
    }

    /// Mean squared error against `y = Σ x` on a batch made from `seed`.
    fn loss(&self, seed: usize, device: &Device) -> Tensor<1> {
        let x: Vec<f32> =
            (0..64).map(|i| ((seed * 7919 + i * i * 104_729) % 997) as f32 / 500.0 - 1.0).collect();
        let y: Vec<f32> = x.chunks(4).map(|r| r.iter().sum()).collect();
        let x = Tensor::<2>::from_data(TensorData::new(x, [16, 4]), device);
        let y = Tensor::<2>::from_data(TensorData::new(y, [16, 1]), device);
        let d = self.b.forward(self.norm.forward(self.a.forward(x))) - y;
        (d.clone() * d).mean()
    }
}

/// The model's parameters and buffers, the running statistics synced first
/// (burn reads them one forward pass behind otherwise).
fn read(model: &Net) -> (Vec<f32>, Vec<f32>) {
    let synced = model.clone().train();
    let (mut p, mut b) = (Vec::new(), Vec::new());
    gradcomp_dp::params::read_params(&synced, &mut p);
    gradcomp_dp::params::read_buffers(&synced, &mut b);
    (p, b)
}

/// Each worker's (parameters, buffers) after every one of 5 steps and after
/// the round that follows them, with `average_buffers` on or off: local
/// updates of period 3 after 2 warm-up steps.
fn run(average_buffers: bool) -> Vec<Vec<(Vec<f32>, Vec<f32>)>> {
    run_with(StrategyConfig { warmup_steps: 2, average_buffers, ..StrategyConfig::local(3) })
}

fn run_with(st: StrategyConfig) -> Vec<Vec<(Vec<f32>, Vec<f32>)>> {
    let group = InProcessGroup::new(2).timeout(std::time::Duration::from_secs(20));
    let results = group
        .run(|c| {
            let rank = c.rank();
            let d = gradcomp_dp::default_device();
            let cfg = DataParallelConfig::new(CompressorConfig::dense()).with_strategy(st.clone());
            let (mut dp, mut model) = cfg.init(c, Net::new(&d)).unwrap();
            let mut optim = SgdConfig::new().init();
            let mut seen = Vec::new();
            for step in 0..5 {
                model = dp.begin_step(model, 0).unwrap();
                let loss = model.loss(step * 2 + rank, &d);
                model = dp.step(model, loss, &mut optim, 0.05).unwrap();
                seen.push(read(&model));
            }
            // The round after 5 steps (before the sixth step's forward pass).
            model = dp.begin_step(model, 0).unwrap();
            seen.push(read(&model));
            seen
        })
        .unwrap();
    results.into_iter().map(|r| r.unwrap()).collect()
}

#[test]
fn warm_up_steps_keep_the_replicas_equal_and_rounds_average_the_buffers() {
    for average_buffers in [true, false] {
        let w = run(average_buffers);
        let params: Vec<bool> = (0..6).map(|k| w[0][k].0 == w[1][k].0).collect();
        // Steps 1 and 2 are synchronous; θ_outer is recorded before step 3
        // and the workers step apart until the round after step 5.
        assert_eq!(params, [true, true, false, false, false, true], "{average_buffers}");
        let buffers: Vec<bool> = (0..6).map(|k| w[0][k].1 == w[1][k].1).collect();
        assert!(!w[0][0].1.is_empty(), "BatchNorm's running statistics are read");
        // Each worker's statistics are its own batches'; a round averages
        // them (before step 3: seen after it, moved by step 3's own batch).
        let want = if average_buffers { [false, false, false, false, false, true] } else { [false; 6] };
        assert_eq!(buffers, want, "average_buffers = {average_buffers}");
    }
}

/// A plan of phases: two synchronous steps through Top-k at half density
/// with its error feedback (the combined gradient the same on every
/// worker), then local updates of period 3 doubling at step 4: the round
/// recorded before step 3 and the next after step 5 (2 + 3), none before
/// step 11 (5 + 6).
#[test]
fn a_compressed_phase_keeps_the_replicas_equal_then_the_period_doubles() {
    let topk = gradcomp_compress::sparsify::TopKConfig { density: 0.5, ..Default::default() };
    let st = StrategyConfig::local(3)
        .with_sync_phase(SyncPhase::new(2, topk.into()))
        .with_period_rule(PeriodRule::Doubling { at: vec![4] });
    let w = run_with(st.clone());
    let params: Vec<bool> = (0..6).map(|k| w[0][k].0 == w[1][k].0).collect();
    assert_eq!(params, [true, true, false, false, false, true]);
    assert_ne!(w[0][0].0, w[0][1].0, "the phase's steps move the model");
    let schedule = gradcomp_dp::strategy::OuterSchedule::new(&st);
    let due: Vec<u64> = (0..12).filter(|&t| schedule.due(t)).collect();
    assert_eq!(due, vec![2, 5, 11]);
}

/// `plan = "auto"` deciding again on the burn handle: a plan chosen for
/// 100 s steps whose steps take milliseconds. At the second period's end
/// (step 8) rank 0 decides the period again and both workers take it: no
/// round at step 12 where the first period's 4 would have put one, and the
/// line says why on rank 0 only.
#[test]
fn a_drifted_step_decides_the_period_again_on_every_worker() {
    use gradcomp_dp::exchange::auto_plan::PlanInputs;
    let group = InProcessGroup::new(2).timeout(std::time::Duration::from_secs(60));
    let results = group
        .run(|c| {
            let rank = c.rank();
            let d = gradcomp_dp::default_device();
            let cfg =
                DataParallelConfig::new(CompressorConfig::dense()).with_strategy(StrategyConfig::local(4));
            let net = Net::new(&d);
            let shapes = gradcomp_dp::params::layout(&net).slots().iter().map(|s| s.shape.clone()).collect();
            let (mut dp, mut model) = cfg.init(c, net).unwrap();
            let link = gradcomp_comm::NetworkModel::from_bits_per_second(1e8, 1e-4);
            dp.decide_again_from(PlanInputs {
                step_seconds: 100.0,
                link,
                workers: 2,
                shapes,
                total_steps: 1000,
            });
            let mut optim = SgdConfig::new().init();
            let mut equal_after_round_of = Vec::new();
            for step in 0..13 {
                model = dp.begin_step(model, 0).unwrap();
                if step % 4 == 0 {
                    equal_after_round_of.push((step, read(&model).0));
                }
                let loss = model.loss(step * 2 + rank, &d);
                model = dp.step(model, loss, &mut optim, 0.05).unwrap();
            }
            (equal_after_round_of, dp.take_plan_lines())
        })
        .unwrap();
    let (w0, lines0) = results[0].as_ref().unwrap();
    let (w1, lines1) = results[1].as_ref().unwrap();
    let agree: Vec<(usize, bool)> = w0.iter().zip(w1).map(|(a, b)| (a.0, a.1 == b.1)).collect();
    assert_eq!(agree, [(0, true), (4, true), (8, true), (12, false)], "the period after step 8 is not 4");
    assert_eq!(lines0.len(), 1, "{lines0:?}");
    assert!(lines0[0].starts_with("at inner step 8 the step measured"), "{lines0:?}");
    assert!(lines1.is_empty(), "rank 0 says why: {lines1:?}");
}
