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

/// QSR's rule: the period beginning at boundary b is max(H, ⌈(α/η_b)²⌉),
/// worked out from the learning rate before the run, the fragments' merges
/// scaled with it; unresolved, local updates refuse to build.
#[test]
fn a_qsr_period_grows_as_the_learning_rate_falls() {
    // η 0.1 to step 20, 0.05 to step 40, then 0.025; α = 0.2, H = 2:
    // (0.2/0.1)² = 4, (0.2/0.05)² = 16, (0.2/0.025)² = 64.
    let lr = |t: u64| {
        if t < 20 {
            0.1
        } else if t < 40 {
            0.05
        } else {
            0.025
        }
    };
    let st = StrategyConfig::local(2).with_sync_phase(SyncPhase { steps: 2, ..SyncPhase::default() });
    let rule = PeriodRule::qsr(0.2).resolve(2, 2, 200, &lr);
    // Boundaries 2, 6, …, 18 (η 0.1: 4), 22 (η 0.05: 16), 38, 54 (η 0.025: 64), 118, 182 (cut past the run).
    let PeriodRule::Qsr { periods, .. } = &rule else { panic!("{rule:?}") };
    assert_eq!(periods, &vec![[2, 4], [22, 16], [54, 64], [182, 19]]);
    let s = OuterSchedule::new(&st.clone().with_period_rule(rule.clone()));
    let merges: Vec<u64> = (0..200).filter(|&t| s.merges_any(t)).collect();
    assert_eq!(merges, vec![6, 10, 14, 18, 22, 38, 54, 118, 182]);
    assert_eq!((s.period_at(20), s.period_at(40), s.period_at(100)), (4, 16, 64));
    // A constant rate under α/√H keeps H; the same rule resolves the same periods.
    let flat = PeriodRule::qsr(0.2).resolve(8, 0, 100, &|_| 0.1);
    assert_eq!(flat, PeriodRule::Qsr { alpha: 0.2, periods: vec![[0, 8]] });
    assert_eq!(PeriodRule::qsr(0.2).resolve(2, 2, 200, &lr), rule);
    let valid = |st: StrategyConfig| config_with(st).validate().map_err(|e| e.key);
    valid(st.clone().with_period_rule(rule)).unwrap();
    for (bad, key) in [
        (PeriodRule::Qsr { alpha: -1.0, periods: vec![] }, "strategy.period_rule.alpha"),
        (PeriodRule::Qsr { alpha: 0.2, periods: vec![[0, 4]] }, "strategy.period_rule.periods"),
        (PeriodRule::Qsr { alpha: 0.2, periods: vec![[2, 4], [8, 8]] }, "strategy.period_rule.periods"),
    ] {
        assert_eq!(valid(st.clone().with_period_rule(bad)).unwrap_err(), key);
    }
    let unresolved = config_with(st.with_period_rule(PeriodRule::qsr(0.2)));
    let e = LocalUpdates::new(&unresolved, &layout(), 2).err().expect("refused");
    assert!(e.key == "strategy.period_rule" && e.problem.contains("resolve"), "{e}");
}

/// The inner optimizer's state is averaged at the end of every k-th
/// period, counted from the rounds' start, as the period grows; the mean
/// is the workers'.
#[test]
fn the_inner_state_is_averaged_at_every_kth_period_end() {
    let st = StrategyConfig { inner_state_every: 2, ..StrategyConfig::local(4) }
        .with_sync_phase(SyncPhase { steps: 2, ..SyncPhase::default() })
        .with_period_rule(PeriodRule::Doubling { at: vec![6] });
    let s = LocalUpdates::new(&config_with(st), &layout(), 2).unwrap();
    // Period ends 6 (1st), 14 (2nd, H = 8 from 6), 22, 30 (4th).
    let ends: Vec<u64> = (0..32).filter_map(|t| s.schedule().period_ended(t).map(|n| t * 10 + n)).collect();
    assert_eq!(ends, vec![61, 142, 223, 304]);
    let due: Vec<u64> = (0..32).filter(|&t| s.averages_inner_state(t)).collect();
    assert_eq!(due, vec![14, 30]);
    let means = InProcessGroup::new(2)
        .run(|mut c| {
            let mut state = vec![c.rank() as f32, 4.0 * c.rank() as f32];
            c.allreduce_mean_f32(&mut state).unwrap();
            state
        })
        .unwrap();
    assert!(means.iter().all(|m| m.as_ref().is_ok_and(|m| m == &vec![0.5, 2.0])), "{means:?}");
    let burn_off = StrategyConfig { inner_state_every: 1, ..StrategyConfig::default() };
    assert_eq!(config_with(burn_off).validate().unwrap_err().key, "strategy.inner_state_every");
}

/// A period set while the run goes (plan = "auto" deciding again): the
/// rounds follow it from its boundary, a checkpoint carries it, and a
/// change that would cut a round in flight is refused.
#[test]
fn a_period_decided_again_takes_over_at_its_boundary_and_resumes() {
    let merges = |s: &LocalUpdates| (1..45).filter(|&t| s.schedule().merges_any(t)).collect::<Vec<_>>();
    let cfg = config_with(StrategyConfig::local(4));
    let mut s = LocalUpdates::new(&cfg, &layout(), 2).unwrap();
    s.set_period_from(8, 16).unwrap();
    assert_eq!(merges(&s), vec![4, 8, 24, 40]);
    assert!(s.set_period_from(12, 4).is_err(), "12 ends no period now");
    let saved = s.state().unwrap();
    assert_eq!(saved[super::local_updates::DECIDED_KEY], vec![8.0, 16.0]);
    let mut resumed = LocalUpdates::new(&cfg, &layout(), 2).unwrap();
    resumed.restore(&saved).unwrap();
    assert_eq!(merges(&resumed), merges(&s));
    let mut bad = saved.clone();
    bad.insert(super::local_updates::DECIDED_KEY.into(), vec![6.0, 16.0]);
    assert!(LocalUpdates::new(&cfg, &layout(), 2).unwrap().restore(&bad).is_err());
    // Two fragments, τ = 1: a period of 2 would start fragment 0's round at the boundary itself.
    let streaming = config_with(StrategyConfig::local(4).with_streaming(2, 1));
    let mut st = LocalUpdates::new(&streaming, &layout(), 2).unwrap();
    assert!(st.set_period_from(8, 2).is_err());
    st.set_period_from(8, 8).unwrap();
    assert_eq!(merges(&st), vec![2, 4, 6, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44]);
}

fn config_with(st: StrategyConfig) -> DataParallelConfig {
    DataParallelConfig::new(CompressorConfig::named("dense").unwrap()).with_strategy(st)
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
