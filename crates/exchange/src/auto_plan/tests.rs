//! The rule's decisions on stated inputs (ALGORITHMS.md §2.5).

use super::*;

/// Decided again for a step twice as fast, the period doubles where
/// the link bounds it; within the margin nothing is decided.
#[test]
fn a_drifted_step_decides_the_period_again() {
    assert!(!drifted(0.2, 0.24) && drifted(0.2, 0.26) && drifted(0.2, 0.14));
    let inputs = |t: f64| PlanInputs {
        step_seconds: t,
        link: NetworkModel::from_bits_per_second(1e8, 1e-4),
        workers: 4,
        shapes: lstm(),
        total_steps: 800,
    };
    let costs = PlanCosts::measure(&lstm());
    let plan = choose(&inputs(0.2), &costs);
    let (again, why) = replan_period(&inputs(0.2), &costs, &plan.strategy, plan.topology);
    assert_eq!(again, plan.strategy.period, "the same inputs, the same period");
    assert_eq!(why.value, again.to_string(), "{why}");
    let (faster, why) = replan_period(&inputs(0.01), &costs, &plan.strategy, plan.topology);
    assert!(faster > plan.strategy.period, "{why}");
}

/// A probe round over the workers gives every one the same link, with
/// a bandwidth and a latency in range (in process: memory's speed).
#[test]
fn a_probe_round_measures_one_link_for_every_worker() {
    let links = gradcomp_comm::InProcessGroup::new(2).run(|mut c| probe_link(&mut c).unwrap()).unwrap();
    let links: Vec<NetworkModel> = links.into_iter().map(|l| l.unwrap()).collect();
    assert_eq!(links[0], links[1]);
    assert!(links[0].bandwidth.is_finite() && links[0].bandwidth > 0.0, "{:?}", links[0]);
    assert!(links[0].alpha.is_finite() && links[0].alpha >= 0.0, "{:?}", links[0]);
}

/// The 2-layer LSTM of experiments/tta-ptb-lstm-local.toml (4.65M
/// values in 11 tensors).
fn lstm() -> Vec<Vec<usize>> {
    let mut s = vec![vec![10_000, 200]];
    for _ in 0..2 {
        s.extend([vec![800, 200], vec![800, 200], vec![800], vec![800]]);
    }
    s.extend([vec![10_000, 200], vec![10_000]]);
    s
}

/// The costs with the codecs' seconds left out, so the decisions follow
/// from the bytes and the link alone, the same on every machine.
fn wire_only(shapes: &[Vec<usize>]) -> PlanCosts {
    let mut c = PlanCosts::measure(shapes);
    for m in [&mut c.dense, &mut c.powersgd, &mut c.fp4_gather, &mut c.fp4_scatter] {
        m.compress_seconds = 0.0;
        m.decode_seconds = 0.0;
        for u in &mut m.units {
            u.compress_seconds = 0.0;
            u.decode_seconds = 0.0;
        }
    }
    c.outer_per_value = 0.0;
    c
}

fn plan(bps: f64, step: f64, total: u64, costs: &PlanCosts) -> AutoPlan {
    let inputs = PlanInputs {
        step_seconds: step,
        link: NetworkModel::from_bits_per_second(bps, 1e-4),
        workers: 4,
        shapes: lstm(),
        total_steps: total,
    };
    choose(&inputs, costs)
}

/// On a fast link the rounds cost nothing: blocking rounds every
/// MIN_PERIOD steps, Nesterov warmed up, no synchronous phase
/// (one would be dense); at 100 Mbit/s (a phase would be PowerSGD's) the
/// fp4 change by allgather (0.70 s a round, the reduce-scatter's 0.35 s)
/// in four fragments, each hidden behind a step; at
/// 10 Mbit/s more fragments, τ up to MAX_DELAY, and a longer period.
#[test]
fn the_plan_follows_the_link() {
    let costs = wire_only(&lstm());
    let fast = plan(1e10, 0.3, 800, &costs);
    let st = &fast.strategy;
    assert_eq!((st.period, st.fragments, st.delay, st.sync_steps()), (MIN_PERIOD, 1, 0, 0), "{fast:#?}");
    let sync = |p: &AutoPlan| p.decisions.iter().find(|d| d.key == "strategy.sync").unwrap().reason.clone();
    assert!(sync(&fast).contains("one would go dense"), "{fast:#?}");
    let outer = st.outer();
    assert_eq!((outer.kind_name(), outer.warmup_rounds), ("nesterov", OUTER_WARMUP_ROUNDS), "{fast:#?}");
    assert!(st.compress_change);
    assert_eq!(fast.compressor.name(), "fp4");

    let mid = plan(1e8, 0.3, 800, &costs);
    let st = &mid.strategy;
    assert!(sync(&mid).contains("one would go powersgd r=2"), "{mid:#?}");
    assert_eq!(mid.topology, Topology::ReduceScatter, "{mid:#?}");
    assert_eq!((st.period, st.fragments, st.delay), (MIN_PERIOD, 2, 1), "{mid:#?}");
    assert!(mid.local_step_seconds < 0.3 * (1.0 + HIDDEN_SHARE), "{mid:#?}");

    let slow = plan(1e7, 0.3, 800, &costs);
    let st = &slow.strategy;
    assert!(st.fragments > 1 && st.delay >= 1 && st.period > MIN_PERIOD, "{slow:#?}");
    let cfg = crate::DataParallelConfig::new(slow.compressor.clone())
        .with_topology(slow.topology)
        .with_strategy(st.clone());
    cfg.validate().unwrap();
}

/// The plan applied to a configuration validates and keeps the keys it
/// does not choose; its overrides name every key it chose.
#[test]
fn the_plan_applies_and_freezes_to_overrides() {
    let costs = wire_only(&lstm());
    let mid = plan(1e8, 0.3, 800, &costs);
    let mut cfg = crate::DataParallelConfig::new(CompressorConfig::dense()).with_strategy(StrategyConfig {
        plan: crate::config::PlanChoice::Auto,
        average_buffers: true,
        ..StrategyConfig::local(4)
    });
    mid.apply(&mut cfg);
    cfg.validate().unwrap();
    assert_eq!(cfg.strategy.plan, crate::config::PlanChoice::Given);
    assert!(cfg.strategy.average_buffers, "kept");
    assert_eq!((cfg.compressor_name().as_str(), cfg.topology()), ("fp4", Topology::ReduceScatter));
    assert_eq!(cfg.strategy.sync_steps(), 0);
    let o = mid.overrides().join(" ");
    for key in
        ["strategy.period=16", "strategy.fragments=2", "strategy.delay=1", "strategy.outer.warmup_rounds=8"]
    {
        assert!(o.contains(key), "{key} in {o}");
    }
    // A plan with a synchronous phase freezes its compressor's table.
    let phased = AutoPlan {
        strategy: mid.strategy.clone().with_sync_phase(SyncPhase::new(200, sync_powersgd())),
        ..mid.clone()
    };
    let o = phased.overrides().join(" ");
    assert!(o.contains("strategy.sync.steps=200"), "{o}");
    assert!(o.contains("strategy.sync.compressor={ name = \"powersgd\""), "{o}");
}

#[test]
fn nesterov_min_rounds_follows_the_outer_momentum() {
    // Two horizons of DiLoCo's momentum (1/(1 − μ) rounds each) after its warm-up.
    let horizon = (1.0 / (1.0 - crate::config::OuterConfig::nesterov().momentum())).round() as u64;
    assert_eq!(NESTEROV_MIN_ROUNDS, OUTER_WARMUP_ROUNDS + 2 * horizon);
}

/// Every decision is one line naming its key and its reason; a run of
/// fewer rounds than NESTEROV_MIN_ROUNDS averages, one of that many
/// takes Nesterov warmed up.
#[test]
fn each_decision_says_why_and_a_short_run_averages() {
    let costs = wire_only(&lstm());
    for (total, name, warmup) in [
        (64, "sgd", 0),
        ((NESTEROV_MIN_ROUNDS - 1) * MIN_PERIOD, "sgd", 0),
        (NESTEROV_MIN_ROUNDS * MIN_PERIOD, "nesterov", OUTER_WARMUP_ROUNDS),
    ] {
        let p = plan(1e9, 0.3, total, &costs);
        let outer = p.strategy.outer();
        assert_eq!((outer.kind_name(), outer.warmup_rounds), (name, warmup), "{total}: {p:#?}");
        let line = p.decisions.iter().find(|d| d.key == "strategy.outer").unwrap().to_string();
        assert!(line.contains(if name == "sgd" { "fewer than" } else { "warmed up" }), "{line}");
    }
    let short = plan(1e9, 0.3, 64, &costs);
    assert!(short.overrides().contains(&"strategy.outer.name=\"sgd\"".to_string()), "{short:#?}");
    let long = plan(1e9, 0.3, 100_000, &costs);
    let keys: Vec<&str> = long.decisions.iter().map(|d| d.key).collect();
    assert_eq!(
        keys,
        [
            "comm.topology",
            "strategy.fragments, strategy.delay",
            "strategy.period",
            "strategy.sync",
            "strategy.outer"
        ]
    );
    for d in &long.decisions {
        let line = d.to_string();
        assert!(!line.contains('\n') && line.len() > d.key.len() + 10, "{line}");
    }
}
