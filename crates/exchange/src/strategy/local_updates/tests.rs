//! Local updates' own tests: the outer step against torch's, plain
//! averaging's state, old checkpoint names, membership's divisor.

use gradcomp_comm::InProcessGroup;
use gradcomp_compress::CompressorConfig;

use super::*;
use crate::config::{OuterConfig, StrategyConfig};
use crate::state::ANCHOR_KEY;

fn layout(len: usize) -> GradientLayout {
    GradientLayout::new([("w".to_string(), vec![len])])
}

fn strategy(st: &StrategyConfig, len: usize, workers: usize) -> LocalUpdates {
    let cfg = DataParallelConfig::new(CompressorConfig::named("dense").unwrap()).with_strategy(st.clone());
    LocalUpdates::new(&cfg, &layout(len), workers).unwrap()
}

/// Two workers' rounds with DiLoCo's Nesterov: each moves its model by its
/// own steps between rounds; after every round both hold θ_outer, which is
/// torch's SGD(lr 0.7, momentum 0.9, nesterov) on the averaged
/// change (computed here in f64).
#[test]
fn nesterov_rounds_move_the_shared_model_as_torchs_sgd_does() {
    let start = [1.0f32, -2.0, 0.5, 0.0];
    // Worker r's change before round k (rounds 1..=3; round 0 only anchors).
    let change = |r: usize, k: usize| -> Vec<f32> {
        (0..4).map(|j| ((r * 7 + k * 3 + j) % 5) as f32 * 0.125 - 0.25).collect()
    };
    let cfg = StrategyConfig::celgc(2, 0.0).with_outer(OuterConfig::nesterov());
    let results = InProcessGroup::new(2)
        .run(|mut c| {
            let rank = c.rank();
            let mut s = strategy(&cfg, 4, 2);
            let mut params = start.to_vec();
            let mut seen = Vec::new();
            for k in 0..4u64 {
                if k > 0 {
                    params.iter_mut().zip(change(rank, k as usize)).for_each(|(p, d)| *p += d);
                }
                s.average(2 * k, &mut params, &mut c).unwrap();
                seen.push(params.clone());
            }
            seen
        })
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect::<Vec<_>>();
    assert_eq!(results[0], results[1], "every worker adopts the same θ_outer");
    let (lr, mu) = (0.7, 0.9);
    let mut theta: Vec<f64> = start.iter().map(|&v| f64::from(v)).collect();
    let mut buf: Option<Vec<f64>> = None;
    for (k, round) in results[0].iter().enumerate().skip(1) {
        // Δ̄ = θ_outer − mean(θ_i) = −mean(change).
        let d: Vec<f64> =
            (0..4).map(|j| -(f64::from(change(0, k)[j]) + f64::from(change(1, k)[j])) / 2.0).collect();
        let b: Vec<f64> = match buf.take() {
            None => d.clone(),
            Some(b) => b.iter().zip(&d).map(|(b, d)| mu * b + d).collect(),
        };
        theta.iter_mut().zip(d.iter().zip(&b)).for_each(|(t, (d, b))| *t -= lr * (d + mu * b));
        buf = Some(b);
        for (got, want) in round.iter().zip(&theta) {
            assert!((f64::from(*got) - want).abs() < 1e-5, "round {k}: {round:?} against {theta:?}");
        }
    }
}

#[test]
fn plain_averaging_keeps_no_anchor_and_an_outer_optimizer_checkpoints_its_own() {
    let avg = strategy(&StrategyConfig::celgc(4, 0.0), 3, 1);
    assert!(!avg.state().unwrap().contains_key(ANCHOR_KEY), "the mean of the models needs no θ_outer");
    let cfg = StrategyConfig::celgc(4, 0.0).with_outer(OuterConfig::nesterov());
    let s = InProcessGroup::new(1)
        .run(|mut c| {
            let mut a = strategy(&cfg, 3, 1);
            for k in 0..3u64 {
                let mut p = vec![k as f32; 3];
                a.average(4 * k, &mut p, &mut c).unwrap();
            }
            a.state().unwrap()
        })
        .unwrap()
        .remove(0)
        .unwrap();
    assert!(s.contains_key(ANCHOR_KEY) && s.contains_key("outer.momentum"), "{:?}", s.keys());
    let mut b = strategy(&cfg, 3, 1);
    b.restore(&s).unwrap();
    let back = b.state().unwrap();
    for key in [ANCHOR_KEY, "outer.momentum"] {
        assert_eq!(back[key], s[key], "{key} round-trips");
    }
}

/// A checkpoint written before the buffers were renamed
/// (`celgc.anchor`, `celgc.global_norm`) restores to the same state.
#[test]
fn a_checkpoint_with_the_old_buffer_names_still_restores() {
    let cfg = StrategyConfig::celgc(4, 0.0).with_outer(OuterConfig::nesterov());
    let saved = InProcessGroup::new(1)
        .run(|mut c| {
            let mut a = strategy(&cfg, 3, 1);
            for k in 0..3u64 {
                a.average(4 * k, &mut [k as f32 * 0.5; 3], &mut c).unwrap();
            }
            a.state().unwrap()
        })
        .unwrap()
        .remove(0)
        .unwrap();
    let old: StateBuffers = saved
        .iter()
        .map(|(k, v)| {
            let k = k
                .replace(ANCHOR_KEY, "celgc.anchor")
                .replace(crate::state::GLOBAL_NORM_KEY, "celgc.global_norm");
            (k, v.clone())
        })
        .collect();
    assert!(old.contains_key("celgc.anchor") && old.contains_key("celgc.global_norm"), "{:?}", old.keys());
    let mut b = strategy(&cfg, 3, 1);
    b.restore(&old).unwrap();
    // Compared as text: the unset norm is NaN.
    assert_eq!(format!("{:?}", b.state().unwrap()), format!("{saved:?}"), "restored from the old names");
}

/// Under membership a round's average counts only the workers that
/// contribute a change: a worker just healed from a peer (holding
/// θ_outer, so its change is zero) leaves the mean of the others', and
/// a round with more workers than the rounds were built for, or with no
/// contribution, is refused naming both counts. Plain averaging keeps
/// θ_outer under membership.
#[test]
fn under_membership_a_round_divides_by_the_workers_that_contribute() {
    // SGD at lr 1: plain averaging, kept anchored under membership.
    let st = StrategyConfig::local(2).with_outer(OuterConfig::sgd(1.0, 0.0));
    let cfg = DataParallelConfig::new(CompressorConfig::named("dense").unwrap()).with_strategy(st.clone());
    let results = InProcessGroup::new(3)
        .run(|mut c| {
            let rank = c.rank();
            let mut s = LocalUpdates::with_membership(&cfg, &layout(2), 3).unwrap();
            let mut params = vec![1.0f32, 2.0];
            s.average(0, &mut params, &mut c).unwrap();
            // Workers 0 and 1 moved; worker 2 joined and holds θ_outer.
            if rank < 2 {
                params.iter_mut().for_each(|p| *p += 0.5 * (rank as f32 + 1.0));
            }
            s.set_contributors(2).unwrap();
            s.average(2, &mut params, &mut c).unwrap();
            let counted = params.clone();
            let mut wrong = LocalUpdates::with_membership(&cfg, &layout(2), 2).unwrap();
            let mut p = vec![1.0f32, 2.0];
            wrong.average(0, &mut p, &mut c).unwrap();
            let too_many = wrong.average(2, &mut p, &mut c).unwrap_err().to_string();
            s.set_contributors(0).unwrap();
            let none = s.average(4, &mut params, &mut c).unwrap_err().to_string();
            let plain = LocalUpdates::new(&cfg, &layout(2), 3).unwrap().set_contributors(2).unwrap_err();
            (counted, too_many, none, plain.to_string())
        })
        .unwrap();
    for r in results {
        let (counted, too_many, none, plain) = r.unwrap();
        // θ_outer + the mean of 0.5 and 1.0 (not of 0.5, 1.0 and 0).
        assert_eq!(counted, vec![1.75, 2.75]);
        assert!(too_many.contains("3 workers") && too_many.contains("at most 2"), "{too_many}");
        assert!(none.contains("0 contribute"), "{none}");
        assert!(plain.contains("keeps no θ_outer"), "{plain}");
    }
}
