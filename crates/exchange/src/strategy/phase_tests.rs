//! A run of local updates as a plan of phases: the synchronous phase
//! through a per-step compressor, the switch, a resume inside each phase,
//! and the period rules' schedules.

use gradcomp_comm::{Collective, InProcessGroup};
use gradcomp_compress::CompressorConfig;

use super::{LocalUpdates, ModelAveraging, OuterSchedule, Strategy};
use crate::config::{DataParallelConfig, PeriodRule, StrategyConfig, SyncPhase};
use crate::grad_stages::CompleteGrad;
use crate::layout::GradientLayout;
use crate::strategy::local_updates::{PHASE_KEY, SYNC_PREFIX};
use crate::{Gradient, GradientExchange, StateBuffers, StepInput};

fn layout() -> GradientLayout {
    GradientLayout::new([("w".to_string(), vec![6]), ("b".to_string(), vec![3])])
}

/// Top-k at half density with error feedback for 3 synchronous steps, then
/// local updates with DiLoCo's Nesterov every 2 steps.
fn config() -> DataParallelConfig {
    let topk = gradcomp_compress::sparsify::TopKConfig { density: 0.5, ..Default::default() }.into();
    let st = StrategyConfig::local(2).with_sync_phase(SyncPhase::new(3, topk));
    DataParallelConfig::new(CompressorConfig::named("dense").unwrap()).with_strategy(st)
}

fn grad(rank: usize, step: u64) -> Vec<f32> {
    (0..9).map(|j| ((rank * 5 + step as usize * 3 + j * 7) % 11) as f32 * 0.1 - 0.5).collect()
}

/// One worker's run of `steps` steps as the burn front drives it (a due
/// round before the step's gradient, then the update, applied at lr 0.1),
/// resumed from its own checkpoint taken before step `resume_at` if given.
/// Returns every step's combined gradient and the final model.
fn run(
    c: &mut dyn Collective,
    cfg: &DataParallelConfig,
    steps: u64,
    resume_at: Option<u64>,
) -> (Vec<Vec<f32>>, Vec<f32>) {
    let rank = c.rank();
    let mut s = LocalUpdates::new(cfg, &layout(), c.world_size()).unwrap();
    let mut params = vec![0.25f32; 9];
    let mut outs = Vec::new();
    for step in 0..steps {
        if Some(step) == resume_at {
            let saved: StateBuffers = s.state().unwrap();
            s = LocalUpdates::new(cfg, &layout(), c.world_size()).unwrap();
            s.restore(&saved).unwrap();
        }
        if s.due(step) {
            s.average(step, &mut params, c).unwrap();
        }
        let g = grad(rank, step);
        let mut out = vec![0.0f32; 9];
        let input = StepInput { step, lr: 0.1, loss: None, measure: false };
        let u = s.update(&input, Gradient::Host(&mut CompleteGrad(&g)), &mut out, c).unwrap();
        params.iter_mut().zip(&out).for_each(|(p, o)| *p -= u.lr as f32 * o);
        outs.push(out);
    }
    (outs, params)
}

/// The synchronous phase's steps are the synchronous exchange's through
/// the phase's compressor, error feedback included, bit for bit; after it
/// every worker steps on its own gradient.
#[test]
fn the_synchronous_phase_exchanges_through_its_compressor_then_the_workers_go_local() {
    let cfg = config();
    let results = InProcessGroup::new(2)
        .run(|mut c| {
            let (outs, _) = run(&mut c, &cfg, 6, None);
            let sc = cfg.sync_phase_config().unwrap();
            let mut ex = GradientExchange::new(&layout(), &sc, 2, sc.seed);
            let mut want = Vec::new();
            for step in 0..3 {
                let mut out = vec![0.0f32; 9];
                let input = StepInput { step, lr: 0.1, loss: None, measure: false };
                ex.exchange(
                    Gradient::Host(&mut CompleteGrad(&grad(c.rank(), step))),
                    &input,
                    &mut out,
                    &mut c,
                )
                .unwrap();
                want.push(out);
            }
            (c.rank(), outs, want)
        })
        .unwrap();
    for r in results {
        let (rank, outs, want) = r.unwrap();
        assert_eq!(outs[..3], want[..], "rank {rank}: the phase's steps are top-k's with its memory");
        assert_ne!(want[1], want[2], "the memory carries: not a fixed gradient");
        for step in 3..6 {
            assert_eq!(outs[step as usize], grad(rank, step), "rank {rank}: step {step} is local");
        }
    }
}

/// A checkpoint says its phase: in the synchronous phase it carries the
/// phase's memories (under `sync.`), after the switch it does not; a
/// resume from either continues bit for bit, and a checkpoint of the
/// synchronous phase is refused by a strategy past it.
#[test]
fn a_resume_inside_either_phase_continues_bit_for_bit() {
    let cfg = config();
    let results = InProcessGroup::new(2)
        .run(|mut c| {
            let whole = run(&mut c, &cfg, 8, None);
            let resumed: Vec<_> = [1, 2, 3, 4, 5].iter().map(|&k| run(&mut c, &cfg, 8, Some(k))).collect();
            let mut s = LocalUpdates::new(&cfg, &layout(), 2).unwrap();
            let early = s.state().unwrap();
            let mut p = vec![0.0f32; 9];
            s.average(3, &mut p, &mut c).unwrap();
            let late = s.state().unwrap();
            let refused = s.restore(&early).unwrap_err().to_string();
            (whole, resumed, early, late, refused)
        })
        .unwrap();
    for r in results {
        let (whole, resumed, early, late, refused) = r.unwrap();
        for (k, got) in resumed.iter().enumerate() {
            assert_eq!(got, &whole, "resumed before step {}", k + 1);
        }
        assert_eq!(early[PHASE_KEY], vec![0.0]);
        assert!(early.keys().any(|k| k.starts_with(SYNC_PREFIX)), "{:?}", early.keys());
        assert_eq!(late[PHASE_KEY], vec![1.0]);
        assert!(!late.keys().any(|k| k.starts_with(SYNC_PREFIX)), "dropped at the switch: {:?}", late.keys());
        assert!(refused.contains("synchronous phase"), "{refused}");
    }
}

/// The period rules: fixed, and doubling at stated steps (the first period
/// that begins at or after one is twice the last), fragments' merges
/// scaled with the period and the delay kept in inner steps.
#[test]
fn a_doubling_period_begins_at_the_first_boundary_after_its_step() {
    let sched = |st: StrategyConfig| OuterSchedule::new(&st);
    let merges = |s: &OuterSchedule, to: u64| (0..to).filter(|&t| s.merges_any(t)).collect::<Vec<_>>();
    let fixed = sched(StrategyConfig::local(4));
    assert_eq!(merges(&fixed, 17), vec![4, 8, 12, 16]);
    let doubling = PeriodRule::Doubling { at: vec![6, 20] };
    let grows = sched(StrategyConfig::local(4).with_period_rule(doubling.clone()));
    // Boundaries 0, 4, 8 (the first at or after 6: H = 8), 16, 24 (after 20: H = 16), 40.
    assert_eq!(merges(&grows, 41), vec![4, 8, 16, 24, 40]);
    assert_eq!((grows.period_at(3), grows.period_at(9), grows.period_at(30)), (4, 8, 16));
    // After a synchronous phase of 2 steps the boundaries are 2, 6 (at or
    // after 6: H = 8), 14, 22 (at or after 20: H = 16), 38.
    let phased = StrategyConfig::local(4)
        .with_period_rule(doubling.clone())
        .with_sync_phase(SyncPhase { steps: 2, ..SyncPhase::default() });
    assert_eq!(merges(&sched(phased), 43), vec![6, 14, 22, 38]);
    // Two fragments with τ = 1: each period's halves, starts one step before.
    let streaming = sched(StrategyConfig::local(4).with_streaming(2, 1).with_period_rule(doubling));
    assert_eq!(merges(&streaming, 41), vec![2, 4, 6, 8, 12, 16, 20, 24, 32, 40]);
    let starts: Vec<u64> = (1..41).filter(|&t| streaming.starts_any(t)).collect();
    assert_eq!(starts, vec![1, 3, 5, 7, 11, 15, 19, 23, 31, 39]);
    assert_eq!((streaming.next_start(8), streaming.next_start(24)), (11, 31));
}

/// The synchronous phase's keys are checked as a synchronous run's, named
/// under `strategy.sync`; the older `warmup_steps` is its dense case.
#[test]
fn a_phase_that_cannot_run_is_named_under_strategy_sync() {
    let dense = || CompressorConfig::named("dense").unwrap();
    let with = |st: StrategyConfig| DataParallelConfig::new(dense()).with_strategy(st).validate();
    with(config().strategy).unwrap();
    let old = StrategyConfig { warmup_steps: 4, ..StrategyConfig::local(4) };
    assert_eq!(old.sync_phase().unwrap(), SyncPhase { steps: 4, ..SyncPhase::default() });
    let vote = SyncPhase {
        topology: Some(crate::config::Topology::Allreduce),
        ..SyncPhase::new(3, CompressorConfig::named("signsgd").unwrap())
    };
    let bad = [
        (StrategyConfig::local(4).with_sync_phase(vote), "strategy.sync.topology"),
        (StrategyConfig { warmup_steps: 2, ..config().strategy }, "strategy.warmup_steps"),
        (
            StrategyConfig::local(4).with_sync_phase(SyncPhase { steps: 0, ..SyncPhase::new(0, dense()) }),
            "strategy.sync.steps",
        ),
        (StrategyConfig::default().with_sync_phase(SyncPhase::new(3, dense())), "strategy.sync.steps"),
        (
            StrategyConfig::local(4).with_period_rule(PeriodRule::Doubling { at: vec![9, 3] }),
            "strategy.period_rule.at",
        ),
        (
            StrategyConfig::default().with_period_rule(PeriodRule::Doubling { at: vec![3] }),
            "strategy.period_rule",
        ),
    ];
    for (st, key) in bad {
        let e = with(st.clone()).unwrap_err();
        assert_eq!(e.key, key, "{st:?}: {e}");
    }
}

/// Warm-up steps are synchronous data parallel: each averages the
/// workers' gradients; the first local step sends nothing, and the model
/// rounds start from the warm-up's end (θ_outer recorded there).
#[test]
fn warm_up_steps_average_the_gradients_and_local_steps_after_them_do_not() {
    let st = StrategyConfig { warmup_steps: 2, ..StrategyConfig::local(3) };
    let results = InProcessGroup::new(2)
        .run(|mut c| {
            let rank = c.rank() as f32;
            let cfg =
                DataParallelConfig::new(CompressorConfig::named("dense").unwrap()).with_strategy(st.clone());
            let mut s =
                LocalUpdates::new(&cfg, &GradientLayout::new([("w".to_string(), vec![2])]), 2).unwrap();
            let mut outs = Vec::new();
            for step in 0..4u64 {
                let grad = [rank + 1.0, -rank];
                let mut out = [0.0f32; 2];
                let input = StepInput { step, lr: 0.1, loss: None, measure: false };
                let u = s.update(&input, Gradient::Host(&mut CompleteGrad(&grad)), &mut out, &mut c).unwrap();
                let sent = u.extra.iter().find(|(k, _)| *k == "communicated").unwrap().1;
                outs.push((out, sent));
            }
            let due: Vec<u64> = (0..9).filter(|&t| s.due(t)).collect();
            (outs, due)
        })
        .unwrap();
    for (r, res) in results.into_iter().enumerate() {
        let (outs, due) = res.unwrap();
        assert_eq!(outs[0], ([1.5, -0.5], 1.0), "warm-up step 1: the mean gradient");
        assert_eq!(outs[1], ([1.5, -0.5], 1.0), "warm-up step 2");
        // Step 3 comes after the model is recorded (the round at step S).
        assert_eq!(outs[2].0, [r as f32 + 1.0, -(r as f32)], "the first local step is the worker's own");
        assert_eq!(outs[3], ([r as f32 + 1.0, -(r as f32)], 0.0), "and sends nothing");
        assert_eq!(due, vec![2, 5, 8], "θ_outer recorded after the warm-up, rounds every H from there");
    }
}
