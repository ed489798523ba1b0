//! The outer rounds' tests: the fragments' cut, the schedule, Streaming
//! against a reference written from torchft's rules, resume, agreement.

use gradcomp_comm::InProcessGroup;
use gradcomp_compress::CompressorConfig;

use super::*;
use crate::config::{OuterConfig, StrategyConfig, Topology};

#[test]
fn fragments_are_contiguous_tensor_runs_of_about_equal_size() {
    assert_eq!(partition(&[10, 10, 10, 10], 2), vec![0..2, 2..4]);
    assert_eq!(partition(&[100, 1, 1, 1], 2), vec![0..1, 1..4]);
    assert_eq!(partition(&[1, 1, 1, 100], 2), vec![0..3, 3..4]);
    assert_eq!(partition(&[5, 5, 5], 3), vec![0..1, 1..2, 2..3]);
    assert_eq!(partition(&[7], 1), vec![0..1]);
    // Every group keeps a tensor even when one tensor dominates.
    assert_eq!(partition(&[1000, 1, 1, 1], 3), vec![0..1, 1..2, 2..4]);
}

/// Tensors of 3, 2 and 3 values: two fragments are values 0..3 and 3..8.
fn layout() -> GradientLayout {
    GradientLayout::new([("a".to_string(), vec![3]), ("b".to_string(), vec![2]), ("c".to_string(), vec![3])])
}

fn config(st: StrategyConfig) -> DataParallelConfig {
    DataParallelConfig::new(CompressorConfig::named("dense").unwrap()).with_strategy(st)
}

/// Worker r's own change at inner step t (its inner optimizer's work).
fn change(r: usize, t: u64, j: usize) -> f32 {
    ((r * 5 + t as usize * 3 + j * 7) % 11) as f32 * 0.0625 - 0.3
}

/// Two workers, `steps` inner steps, a round call at every step; every
/// worker's model after each step. `save_at`: the rounds are saved after
/// that step and restored into a fresh strategy (a resume).
fn run(st: &StrategyConfig, steps: u64, save_at: Option<u64>) -> Vec<Vec<Vec<f32>>> {
    let cfg = config(st.clone());
    InProcessGroup::new(2)
        .run(|mut c| {
            let r = c.rank();
            let mut rounds = OuterRounds::new(&cfg, &layout(), 2, false).unwrap();
            let mut params: Vec<f32> = (0..8).map(|j| j as f32 * 0.25 - 1.0).collect();
            let mut seen = Vec::new();
            for t in 0..=steps {
                if t > 0 {
                    params.iter_mut().enumerate().for_each(|(j, p)| *p += change(r, t, j));
                }
                if rounds.schedule().due(t) {
                    rounds.start(t, &params, &mut c).unwrap();
                    rounds.merge(t, &mut params);
                }
                seen.push(params.clone());
                if Some(t) == save_at {
                    let mut s = StateBuffers::new();
                    rounds.state(&mut s).unwrap();
                    rounds = OuterRounds::new(&cfg, &layout(), 2, false).unwrap();
                    rounds.restore(&s).unwrap();
                }
            }
            seen
        })
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

/// The same in f64, written from the method's description (ALGORITHMS.md
/// §2.2) rather than the code: fragment p of range `ranges[p]` merges at
/// t ≥ o_p = ⌊(p+1)·H/P⌋, (t − o_p) mod H = 0, having started at t − τ ≥ 1
/// with its outer Nesterov step on the averaged change.
fn reference(h: u64, tau: u64, alpha: f64, ranges: &[Range<usize>], steps: u64) -> Vec<Vec<Vec<f64>>> {
    let (lr, mu) = (0.7, 0.9);
    let p_count = ranges.len() as u64;
    let mut theta: Vec<Vec<f64>> = vec![(0..8).map(|j| j as f64 * 0.25 - 1.0).collect(); 2];
    let mut anchor = theta[0].clone();
    let mut momentum: Vec<Option<Vec<f64>>> = vec![None; ranges.len()];
    let mut seen = vec![vec![]; 2];
    let merges = |p: u64, t: u64| {
        let o = (p + 1) * h / p_count;
        t >= o && (t - o).is_multiple_of(h) && t > tau
    };
    let starts = |p: u64, t: u64| merges(p, t + tau);
    for t in 0..=steps {
        if t > 0 {
            for (r, th) in theta.iter_mut().enumerate() {
                th.iter_mut().enumerate().for_each(|(j, x)| *x = (*x as f32 + change(r, t, j)) as f64);
            }
        }
        for (p, range) in ranges.iter().enumerate() {
            if starts(p as u64, t) {
                // c = mean(θ_i − θ_outer) = −Δ̄; torch's SGD on Δ̄ = −c.
                let c: Vec<f64> =
                    range.clone().map(|j| (theta[0][j] + theta[1][j]) / 2.0 - anchor[j]).collect();
                let m = match momentum[p].take() {
                    None => c.clone(),
                    Some(m) => m.iter().zip(&c).map(|(m, c)| mu * m + c).collect(),
                };
                for (k, j) in range.clone().enumerate() {
                    anchor[j] += lr * (c[k] + mu * m[k]);
                }
                momentum[p] = Some(m);
            }
            if merges(p as u64, t) {
                for th in theta.iter_mut() {
                    range.clone().for_each(|j| th[j] = alpha * th[j] + (1.0 - alpha) * anchor[j]);
                }
            }
        }
        for (r, th) in theta.iter().enumerate() {
            seen[r].push(th.clone());
        }
    }
    seen
}

fn assert_close(got: &[Vec<Vec<f32>>], want: &[Vec<Vec<f64>>], what: &str) {
    for (r, (g, w)) in got.iter().zip(want).enumerate() {
        for (t, (g, w)) in g.iter().zip(w).enumerate() {
            for (j, (g, w)) in g.iter().zip(w).enumerate() {
                assert!(
                    (f64::from(*g) - w).abs() < 1e-4,
                    "{what}: worker {r} step {t} value {j}: {g} against {w}"
                );
            }
        }
    }
}

#[test]
fn streaming_rounds_follow_the_schedule_the_outer_step_and_the_mix() {
    let ranges = [0..3, 3..8];
    for (fragments, delay, mix) in
        [(1, 0, None), (2, 0, None), (2, 1, Some(0.5)), (2, 2, Some(0.0)), (2, 3, None)]
    {
        let mut st =
            StrategyConfig::local(4).with_outer(OuterConfig::nesterov()).with_streaming(fragments, delay);
        st.mix = mix;
        let got = run(&st, 13, None);
        let whole = [Range { start: 0, end: 8 }];
        let r: &[Range<usize>] = if fragments == 1 { &whole } else { &ranges };
        let want = reference(4, delay, st.mix(), r, 13);
        assert_close(&got, &want, &format!("P {fragments}, τ {delay}, α {}", st.mix()));
    }
}

/// Eager rounds per fragment in f64, from the description (ALGORITHMS.md
/// §2.3, per fragment) rather than the code: fragment p's round takes each
/// worker's change c_m = θ_m − θ_outer,m at t − τ and averages it; at the
/// merge t worker m steps its own θ_outer,m (Nesterov, its own momentum) on
/// c̄ − c_m/M + (θ_m(t) − θ_outer,m)/M and adopts it.
fn eager_reference(h: u64, tau: u64, ranges: &[Range<usize>], steps: u64) -> Vec<Vec<Vec<f64>>> {
    let (lr, mu, workers) = (0.7, 0.9, 2.0);
    let p_count = ranges.len() as u64;
    let mut theta: Vec<Vec<f64>> = vec![(0..8).map(|j| j as f64 * 0.25 - 1.0).collect(); 2];
    let mut anchor = theta.clone();
    let mut momentum: Vec<Vec<Option<Vec<f64>>>> = vec![vec![None; ranges.len()]; 2];
    let mut pending: Vec<(Vec<f64>, Vec<Vec<f64>>)> = vec![(vec![], vec![]); ranges.len()];
    let mut seen = vec![vec![]; 2];
    let merges = |p: u64, t: u64| {
        let o = (p + 1) * h / p_count;
        t >= o && (t - o).is_multiple_of(h) && t > tau
    };
    for t in 0..=steps {
        if t > 0 {
            for (r, th) in theta.iter_mut().enumerate() {
                th.iter_mut().enumerate().for_each(|(j, x)| *x = (*x as f32 + change(r, t, j)) as f64);
            }
        }
        for (p, range) in ranges.iter().enumerate() {
            if merges(p as u64, t + tau) {
                let own: Vec<Vec<f64>> = (0..2)
                    .map(|r| range.clone().map(|j| (theta[r][j] - anchor[r][j]) / workers).collect())
                    .collect();
                pending[p] = (own[0].iter().zip(&own[1]).map(|(a, b)| a + b).collect(), own);
            }
            if merges(p as u64, t) {
                for r in 0..2 {
                    let (avg, own) = &pending[p];
                    let g: Vec<f64> = range
                        .clone()
                        .enumerate()
                        .map(|(k, j)| avg[k] - own[r][k] + (theta[r][j] - anchor[r][j]) / workers)
                        .collect();
                    let m = match momentum[r][p].take() {
                        None => g.clone(),
                        Some(m) => m.iter().zip(&g).map(|(m, g)| mu * m + g).collect(),
                    };
                    for (k, j) in range.clone().enumerate() {
                        anchor[r][j] += lr * (g[k] + mu * m[k]);
                        theta[r][j] = anchor[r][j];
                    }
                    momentum[r][p] = Some(m);
                }
            }
        }
        for (r, th) in theta.iter().enumerate() {
            seen[r].push(th.clone());
        }
    }
    seen
}

#[test]
fn eager_rounds_per_fragment_step_each_workers_model_on_its_fresh_change() {
    let ranges = [0..3, 3..8];
    for (fragments, delay) in [(1, 1), (1, 3), (2, 1), (2, 2)] {
        let st = StrategyConfig::local(4)
            .with_outer(OuterConfig::nesterov())
            .with_streaming(fragments, delay)
            .with_overlap(crate::config::Overlap::Eager);
        assert_eq!(st.mix(), 0.0, "eager adopts θ_m");
        let got = run(&st, 13, None);
        let whole = [Range { start: 0, end: 8 }];
        let r: &[Range<usize>] = if fragments == 1 { &whole } else { &ranges };
        assert_close(&got, &eager_reference(4, delay, r, 13), &format!("eager, P {fragments}, τ {delay}"));
        assert_ne!(got[0][13], got[1][13], "each worker's θ_m is its own");
        // A resume between a round's start and its merge, bit for bit.
        for at in [1, 3, 5] {
            assert_eq!(run(&st, 13, Some(at)), got, "P {fragments}, τ {delay}: resumed after step {at}");
        }
    }
    let rounds = |st: StrategyConfig| OuterRounds::new(&config(st), &layout(), 2, false).unwrap();
    let eager = StrategyConfig::local(4).with_streaming(1, 1).with_overlap(crate::config::Overlap::Eager);
    assert!(!rounds(eager).merges_whole(), "no agreement to check: θ_m differ");
}

#[test]
fn a_resume_inside_an_overlap_continues_bit_for_bit() {
    // P 2, H 4, τ 2: fragment 0 merges at 6, 10 (started at 4, 8; its
    // round ending at 2 would start at 0, left out), fragment 1 at 4, 8,
    // 12 (started at 2, 6, 10). Saving after step 3, 5 or 7 leaves a
    // round between its start and its merge.
    let st = StrategyConfig::local(4).with_streaming(2, 2);
    let whole = run(&st, 13, None);
    for at in [3, 5, 7] {
        assert_eq!(run(&st, 13, Some(at)), whole, "resumed after step {at}");
    }
}

#[test]
fn only_a_whole_unmixed_merge_leaves_the_replicas_equal() {
    use crate::strategy::{LocalUpdates, ModelAveraging};
    let rounds = |st: StrategyConfig| LocalUpdates::new(&config(st), &layout(), 2).unwrap();
    let diloco = rounds(StrategyConfig::local(4));
    assert!(diloco.agrees_after(4) && !diloco.agrees_after(3));
    let merges_of =
        |r: &LocalUpdates, p: usize| (0..17).filter(|&t| r.schedule().merges(p, t)).collect::<Vec<_>>();
    assert_eq!(merges_of(&diloco, 0), vec![4, 8, 12, 16]);
    let streaming = rounds(StrategyConfig::local(8).with_streaming(2, 1));
    let torchfts = (merges_of(&streaming, 0), merges_of(&streaming, 1));
    assert_eq!(torchfts, (vec![4, 12], vec![8, 16]), "torchft's: fragment p ends at (p+1)·H/P");
    let starts: Vec<u64> = (0..20).filter(|&t| streaming.schedule().starts_any(t) && t > 0).collect();
    let merges: Vec<u64> = (0..20).filter(|&t| streaming.schedule().merges_any(t)).collect();
    assert_eq!((starts, merges), (vec![3, 7, 11, 15, 19], vec![4, 8, 12, 16]));
    assert!(!rounds(StrategyConfig::local(4).with_streaming(2, 0)).agrees_after(4));
    assert!(!rounds(StrategyConfig::local(4).with_streaming(1, 1)).agrees_after(4), "mixed at α 0.5");
    assert!(rounds(StrategyConfig::local(4).with_streaming(1, 1).with_mix(0.0)).agrees_after(4));
    let got = run(&StrategyConfig::local(4), 8, None);
    assert_eq!(got[0][4], got[1][4], "after a DiLoCo round both workers hold θ_outer");
    // Warm-up steps first: θ_outer is recorded at step S, and the rounds
    // fall every H steps from there.
    let warm = StrategyConfig { warmup_steps: 3, ..StrategyConfig::local(4) };
    let schedule = OuterSchedule::new(&warm);
    let due: Vec<u64> = (0..16).filter(|&t| schedule.due(t)).collect();
    assert_eq!(due, vec![3, 7, 11, 15]);
    assert!(schedule.starts_any(3) && !schedule.merges_any(3), "step S records the model");
    let warming: Vec<u64> = (0..6).filter(|&t| schedule.warming(t)).collect();
    assert_eq!(warming, vec![0, 1, 2], "steps 1..=S (taken after 0..S steps) are synchronous");
}

/// A checkpoint written before the change's memories were `change.`
/// (`delta.`, `delta.p.`) restores them.
#[test]
fn a_checkpoint_naming_the_change_delta_still_restores() {
    let cfg = DataParallelConfig::new(CompressorConfig::named("topk").unwrap())
        .with_strategy(StrategyConfig::local(4).with_streaming(2, 0).with_compress_change(true));
    let fresh = || OuterRounds::new(&cfg, &layout(), 1, true).unwrap();
    let mut saved = StateBuffers::new();
    fresh().state(&mut saved).unwrap();
    // A state after a round: θ_outer and each unit's memory (fragment 0 is
    // tensor a, 3 values; fragment 1 is b and c, 2 and 3) with values.
    let lens = [
        ("outer.anchor", 8),
        ("change.0.memory.0.0", 3),
        ("change.1.memory.0.0", 2),
        ("change.1.memory.1.0", 3),
    ];
    let mut x = 0.0;
    for (key, n) in lens {
        assert!(saved.contains_key(key), "{key} in {:?}", saved.keys());
        let v = saved.get_mut(key).unwrap();
        *v = (0..n)
            .map(|_| {
                x += 0.25;
                x
            })
            .collect();
    }
    let old: StateBuffers = saved
        .iter()
        .map(|(k, v)| (k.strip_prefix("change.").map_or(k.clone(), |r| format!("delta.{r}")), v.clone()))
        .collect();
    assert!(old.keys().all(|k| !k.starts_with("change.")));
    let mut back = fresh();
    back.restore(&old).unwrap();
    let mut again = StateBuffers::new();
    back.state(&mut again).unwrap();
    assert_eq!(again, saved, "the old names read as the new");
}

#[test]
fn more_fragments_than_tensors_is_refused_naming_the_key() {
    let cfg = config(StrategyConfig::local(8).with_streaming(4, 0));
    let e = OuterRounds::new(&cfg, &layout(), 2, false).err().expect("4 fragments of 3 tensors");
    assert_eq!(e.key, "strategy.fragments", "{e}");
}

#[test]
fn each_fragment_checkpoints_its_own_momentum_and_memory() {
    let cfg = DataParallelConfig::new(CompressorConfig::named("topk").unwrap())
        .with_strategy(StrategyConfig::local(4).with_streaming(2, 0).with_compress_change(true));
    let rounds = OuterRounds::new(&cfg, &layout(), 1, true).unwrap();
    let mut s = StateBuffers::new();
    rounds.state(&mut s).unwrap();
    for key in [ANCHOR_KEY, "outer.momentum.0", "outer.momentum.1"] {
        assert!(s.contains_key(key), "{key} in {:?}", s.keys());
    }
    assert!(
        s.keys().any(|k| k.starts_with("change.0.")) && s.keys().any(|k| k.starts_with("change.1.")),
        "{:?}",
        s.keys()
    );
    assert_eq!(
        rounds.units().iter().map(|u| u.offset).collect::<Vec<_>>(),
        vec![0, 3, 5],
        "units at their model offsets"
    );
}

/// A worker's NaN reaches a round: every worker refuses it, naming the
/// worker, and θ_outer (and the outer momentum) stay as they were.
#[test]
fn a_non_finite_model_is_refused_by_every_worker_and_nothing_is_applied() {
    for (compressor, topology) in
        [("dense", Topology::Allreduce), ("topk", Topology::Allgather), ("fp4", Topology::ReduceScatter)]
    {
        let cfg = DataParallelConfig::new(CompressorConfig::named(compressor).unwrap())
            .with_topology(topology)
            .with_strategy(StrategyConfig::local(4).with_compress_change(compressor != "dense"));
        let outcomes = InProcessGroup::new(3)
            .run(|mut c| {
                let r = c.rank();
                let mut rounds = OuterRounds::new(&cfg, &layout(), 3, compressor != "dense").unwrap();
                let mut params: Vec<f32> = (0..8).map(|j| j as f32 * 0.25).collect();
                rounds.start(0, &params, &mut c).unwrap();
                let mut before = StateBuffers::new();
                rounds.state(&mut before).unwrap();
                params.iter_mut().for_each(|p| *p += 0.5);
                if r == 1 {
                    params[5] = f32::NAN;
                }
                let e = rounds.start(4, &params, &mut c).unwrap_err();
                let mut after = StateBuffers::new();
                rounds.state(&mut after).unwrap();
                (
                    e.to_string(),
                    matches!(e, ExchangeError::NonFiniteModel { step: 4, ref ranks } if ranks == &[1]),
                    format!("{before:?}") == format!("{after:?}"),
                )
            })
            .unwrap();
        for (w, o) in outcomes.into_iter().enumerate() {
            let (text, named, unchanged) = o.unwrap();
            assert!(named, "{compressor}: worker {w}: {text}");
            assert!(text.contains("worker(s) [1]") && text.contains("step 4"), "{text}");
            assert!(unchanged, "{compressor}: worker {w}: the round left its state");
        }
    }
}
