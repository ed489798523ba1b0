//! The reduce-scatter's tests: bit-identity across workers, the memories,
//! the bytes against the meter, resume and re-cut, and a DiLoCo change
//! through it.

use gradcomp_comm::{InProcessGroup, Metered};
use gradcomp_compress::CompressorConfig;

use super::*;
use crate::config::{DataParallelConfig, Granularity, Topology};
use crate::grad_stages::CompleteGrad;
use crate::layout::GradientLayout;
use crate::route::{scatter_bytes, SHARD_ALIGN};
use crate::state::{StateKey, StateKind};
use crate::{Gradient, GradientExchange, StateBuffers, StepInput};

/// Tensors of 1200, 300, 70 and 5 values: some cut into as many shards
/// as workers, the small ones into fewer (empty shards).
fn layout() -> GradientLayout {
    GradientLayout::new([
        ("a".to_string(), vec![40, 30]),
        ("b".to_string(), vec![300]),
        ("c".to_string(), vec![70]),
        ("d".to_string(), vec![5]),
    ])
}

fn exchange(name: &str, workers: usize) -> GradientExchange {
    let cfg = DataParallelConfig::new(CompressorConfig::named(name).unwrap())
        .with_granularity(Granularity::Layer)
        .with_topology(Topology::ReduceScatter);
    cfg.validate().unwrap();
    GradientExchange::new(&layout(), &cfg, workers, 11)
}

/// Worker r's gradient, the same every step.
fn grad(r: usize) -> Vec<f32> {
    (0..1575).map(|i| ((i * 7 + r * 13) % 29) as f32 * 0.01 - 0.14 + (i as f32 * 0.001).sin()).collect()
}

fn mean(workers: usize) -> Vec<f32> {
    let mut m = vec![0.0f32; 1575];
    for r in 0..workers {
        m.iter_mut().zip(grad(r)).for_each(|(m, g)| *m += g / workers as f32);
    }
    m
}

fn step(x: &mut GradientExchange, t: u64, c: &mut dyn Collective) -> Vec<f32> {
    let g = grad(c.rank());
    let mut out = vec![0.0; g.len()];
    let input = StepInput { step: t, lr: 0.1, loss: None, measure: false };
    x.exchange(Gradient::Host(&mut CompleteGrad(&g)), &input, &mut out, c).unwrap();
    out
}

fn dist(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(a, b)| f64::from(a - b).powi(2)).sum::<f64>().sqrt()
}

#[test]
fn shards_cover_the_unit_in_aligned_runs_of_about_equal_size() {
    for (len, n) in [(1200, 4), (300, 8), (5, 3), (64 * 10 + 1, 3), (0, 2), (4096, 1024)] {
        let shards: Vec<Range<usize>> = (0..n).map(|j| shard(len, n, j)).collect();
        assert_eq!(shards[0].start, 0);
        assert_eq!(shards[n - 1].end, len);
        let blocks = len.div_ceil(SHARD_ALIGN);
        for (j, s) in shards.iter().enumerate() {
            if j > 0 {
                assert_eq!(s.start, shards[j - 1].end, "{len}/{n}: contiguous");
            }
            assert!(s.start % SHARD_ALIGN == 0 || s.start == len, "{len}/{n}: aligned");
            let whole = s.len().div_ceil(SHARD_ALIGN);
            assert!(whole <= blocks.div_ceil(n), "{len}/{n}: shard {j} of {whole} blocks");
        }
    }
}

/// Four workers: every worker ends with the same bits; for the
/// quantizers one exchange is off the true mean by the rounding, and the
/// two error feedbacks carry what each rounding dropped, so the mean of
/// 16 exchanges of the same gradients comes within a fraction of that.
#[test]
fn every_worker_decodes_the_same_average_and_the_memories_carry_what_rounding_dropped() {
    for name in ["fp4", "eightbit", "topk"] {
        let outs = InProcessGroup::new(4)
            .run(|mut c| {
                let mut x = exchange(name, 4);
                (0..16).map(|t| step(&mut x, t, &mut c)).collect::<Vec<_>>()
            })
            .unwrap();
        let outs: Vec<Vec<Vec<f32>>> = outs.into_iter().map(Result::unwrap).collect();
        for w in 1..4 {
            let same = outs[w]
                .iter()
                .zip(&outs[0])
                .all(|(a, b)| a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits()));
            assert!(same, "{name}: worker {w} differs from worker 0");
        }
        if name == "topk" {
            continue; // 1% a round: 16 rounds carry too little to compare
        }
        let want = mean(4);
        let first = dist(&outs[0][0], &want);
        let mut avg = vec![0.0f32; want.len()];
        for o in &outs[0] {
            avg.iter_mut().zip(o).for_each(|(a, v)| *a += v / 16.0);
        }
        let carried = dist(&avg, &want);
        assert!(
            first > 0.0 && carried < 0.25 * first,
            "{name}: one exchange off by {first}, 16 by {carried}"
        );
    }
}

/// What the meter counts for one exchange is [`bytes`] with fp4's
/// encoding of each shard; and at N = 8 a worker receives less than 0.3×
/// what the allgather of the same messages brings it.
#[test]
fn the_bytes_counted_are_the_formulas() {
    let lens = [1200, 300, 70, 5];
    let encoded = |l: usize| {
        let mut m = Message::default();
        let ctx = UnitContext::default();
        CompressorConfig::named("fp4").unwrap().build().compress(&vec![0.5; l], &ctx, &mut m);
        codec::encoded_len(&m) as u64
    };
    for n in [2, 3, 4] {
        let counted = InProcessGroup::new(n)
            .run(|c| {
                let mut c = Metered::new(c);
                let mut x = exchange("fp4", n);
                step(&mut x, 0, &mut c);
                let s = c.meter_mut().take_step();
                let (a, g) = (s.get(OpKind::Alltoallv), s.get(OpKind::Allgatherv));
                (c.rank(), a.sent + g.sent, a.received + g.received)
            })
            .unwrap();
        for r in counted {
            let (rank, sent, received) = r.unwrap();
            assert_eq!((sent, received), scatter_bytes(&lens, n, rank, encoded), "N {n}, worker {rank}");
        }
    }
    let whole: u64 = lens.iter().map(|&l| encoded(l)).sum();
    let (_, received) = scatter_bytes(&lens, 8, 0, encoded);
    let ratio = received as f64 / (7 * whole) as f64;
    assert!(ratio < 0.3, "reduce-scatter / allgather at N = 8: {ratio}");
}

/// A checkpoint taken between exchanges restores to the same next
/// exchanges, bit for bit; restored at another cut (N 4 → 2), e₂ keeps
/// the positions the worker still owns and drops the others.
#[test]
fn a_resume_continues_bit_for_bit_and_a_new_cut_keeps_what_is_still_owned() {
    let runs = InProcessGroup::new(4)
        .run(|mut c| {
            let mut x = exchange("fp4", 4);
            let whole: Vec<Vec<f32>> = (0..5).map(|t| step(&mut x, t, &mut c)).collect();
            let mut y = exchange("fp4", 4);
            (0..3).for_each(|t| drop(step(&mut y, t, &mut c)));
            let mut s = StateBuffers::new();
            y.state("", &mut s).unwrap();
            let mut z = exchange("fp4", 4);
            z.restore("", &s).unwrap();
            let mut resumed: Vec<Vec<f32>> = whole[..3].to_vec();
            resumed.extend((3..5).map(|t| step(&mut z, t, &mut c)));
            (whole == resumed, s)
        })
        .unwrap();
    let states: Vec<StateBuffers> = runs
        .into_iter()
        .map(|r| {
            let (same, s) = r.unwrap();
            assert!(same, "resumed exchanges differ");
            s
        })
        .collect();
    // Worker 1 of 4 owned values 256..576 of unit 0 (1200 values, 19
    // blocks of 64: blocks 4..9); as worker 0 of 2 it owns 0..576.
    let key = |i| StateKey::new("scatter.", StateKind::Memory, 0, i).to_string();
    assert_eq!(states[1][&key(1)], vec![4.0, 1.0]);
    let old = states[1][&key(0)].clone();
    assert_eq!(old.len(), 320);
    assert!(old.iter().any(|&v| v != 0.0), "fp4 leaves a rounding error");
    let mut x = exchange("fp4", 4);
    x.restore("", &states[1]).unwrap();
    x.scatter.recut(&x.plan, &x.recipe, 2, 0);
    let mut s = StateBuffers::new();
    x.state("", &mut s).unwrap();
    let now = &s[&key(0)];
    assert_eq!((now.len(), s[&key(1)].clone()), (576, vec![2.0, 0.0]));
    assert!(now[..256].iter().all(|&v| v == 0.0), "worker 0's old positions start from zero");
    assert_eq!(&now[256..576], &old[..], "the positions still owned keep their memory");
    // A buffer of the wrong length for its cut is refused, naming it.
    let mut bad = states[1].clone();
    bad.get_mut(&key(0)).unwrap().pop();
    let e = exchange("fp4", 4).restore("", &bad).unwrap_err().to_string();
    assert!(e.contains("scatter.memory.0.0"), "{e}");
    // A cut that is none of [N, rank] (corrupt) is refused naming its buffer;
    // a zeroed one (a worker that joins) starts e₂ from zero.
    for cut in [vec![4.0, 4.0], vec![4.5, 1.0], vec![1e30, 0.0], vec![f32::NAN, 0.0], vec![4.0]] {
        let mut bad = states[1].clone();
        bad.insert(key(1), cut.clone());
        let e = exchange("fp4", 4).restore("", &bad).unwrap_err().to_string();
        assert!(e.contains("scatter.memory.0.1"), "{cut:?}: {e}");
    }
    let mut joined = states[1].clone();
    joined.values_mut().for_each(|v| v.iter_mut().for_each(|x| *x = 0.0));
    exchange("fp4", 4).restore("", &joined).unwrap();
}

/// DiLoCo's change in fp4 through the reduce-scatter among four workers,
/// as both fronts drive it (`ModelAveraging::average`): after every round
/// all workers hold the same bits, and the owner's e₂ is checkpointed with
/// the change's memories (`delta.`, which a heal does not send).
#[test]
fn a_diloco_change_through_the_reduce_scatter_leaves_every_worker_the_same_model() {
    use crate::config::StrategyConfig;
    use crate::strategy::{LocalUpdates, ModelAveraging, Strategy};
    let cfg = DataParallelConfig::new(CompressorConfig::named("fp4").unwrap())
        .with_topology(Topology::ReduceScatter)
        .with_strategy(StrategyConfig::local(4).with_compress_change(true));
    let layout = GradientLayout::new([("a".to_string(), vec![300]), ("b".to_string(), vec![200])]);
    let seen = InProcessGroup::new(4)
        .run(|mut c| {
            let r = c.rank();
            let mut s = LocalUpdates::new(&cfg, &layout, 4).unwrap();
            let mut params: Vec<f32> = (0..500).map(|j| (j as f32 * 0.01).sin()).collect();
            let mut after = Vec::new();
            // The round at step 0 records θ_outer, the same on every worker.
            s.average(0, &mut params, &mut c).unwrap();
            for k in 1..3u64 {
                let own = |j: usize| ((j * 7 + r * 5 + k as usize) % 11) as f32 * 0.01;
                params.iter_mut().enumerate().for_each(|(j, p)| *p += own(j));
                s.average(4 * k, &mut params, &mut c).unwrap();
                after.push(params.clone());
            }
            (after, s.state().unwrap().keys().cloned().collect::<Vec<_>>())
        })
        .unwrap();
    let seen: Vec<_> = seen.into_iter().map(Result::unwrap).collect();
    for (w, (after, keys)) in seen.iter().enumerate() {
        assert_eq!(after, &seen[0].0, "worker {w}'s models after the rounds");
        for u in 0..2 {
            let owner = format!("change.scatter.memory.{u}.0");
            assert!(keys.contains(&owner), "worker {w}: {owner} in {keys:?}");
        }
    }
}
