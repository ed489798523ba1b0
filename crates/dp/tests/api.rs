//! The library API on a model of the test's own, with in-process workers:
//! replicas start and stay identical, burn optimizers apply the result, and
//! misuse, disagreement between workers and non-finite values are errors on
//! every worker, never a hang.

use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{AdamWConfig, GradientsParams, SgdConfig};
use burn::tensor::{Device, Tensor, TensorData};
use gradcomp_comm::{InProcessCollective, InProcessGroup};
use gradcomp_compress::{CompressorConfig, StateError};
use gradcomp_dp::config::Granularity;
use gradcomp_dp::{
    Cuts, DataParallel, DataParallelConfig, DataParallelError, DataParallelState, InitDataParallel,
    OnNonFinite, Topology,
};

#[derive(Module, Debug)]
struct Mlp {
    a: Linear,
    b: Linear,
    relu: Relu,
}

impl Mlp {
    fn new(device: &Device, inputs: usize) -> Self {
        Self {
            a: LinearConfig::new(inputs, 16).init(device),
            b: LinearConfig::new(16, 1).init(device),
            relu: Relu::new(),
        }
    }

    /// Mean squared error against `y = Σ x` on a batch made from `seed`.
    fn loss(&self, seed: usize, device: &Device) -> Tensor<1> {
        self.loss_cut(seed, device, &mut Cuts::none())
    }

    /// [`Mlp::loss`] with the forward pass cut after the hidden layer.
    fn loss_cut(&self, seed: usize, device: &Device, cuts: &mut Cuts) -> Tensor<1> {
        let (x, y): (Vec<f32>, Vec<f32>) = (0..32)
            .map(|i| {
                let row: Vec<f32> =
                    (0..4).map(|j| (((seed * 31 + i * 7 + j * 3) % 11) as f32 - 5.0) / 5.0).collect();
                let target = row.iter().sum::<f32>();
                (row, target)
            })
            .fold((Vec::new(), Vec::new()), |(mut xs, mut ys), (r, t)| {
                xs.extend(r);
                ys.push(t);
                (xs, ys)
            });
        let x = Tensor::<2>::from_data(TensorData::new(x, [32, 4]), device);
        let y = Tensor::<2>::from_data(TensorData::new(y, [32, 1]), device);
        let h = cuts.cut(self.relu.forward(self.a.forward(x)));
        let d = self.b.forward(h) - y;
        (d.clone() * d).mean()
    }
}

/// Runs `f(rank, collective)` on `n` threads and returns their results in rank order.
fn workers<T: Send>(n: usize, f: impl Fn(usize, InProcessCollective) -> T + Sync) -> Vec<T> {
    let group = InProcessGroup::new(n).timeout(std::time::Duration::from_secs(20));
    let results = group.run(|c| f(gradcomp_comm::Collective::rank(&c), c)).unwrap();
    results.into_iter().map(|r| r.unwrap_or_else(|p| panic!("{p}"))).collect()
}

fn device() -> Device {
    gradcomp_dp::default_device()
}

fn flat(m: &Mlp) -> Vec<f32> {
    let mut v = Vec::new();
    gradcomp_dp::params::read_params(m, &mut v);
    v
}

fn sgd() -> burn::optim::ModuleOptimizer {
    SgdConfig::new().init()
}

#[test]
fn replicas_start_from_rank_0_and_stay_identical_under_adamw_and_terngrad() {
    let results = workers(3, |rank, c| {
        let d = device();
        d.seed(100 + rank as u64); // every worker draws different initial weights
        let model = Mlp::new(&d, 4);
        let cfg = DataParallelConfig::new(CompressorConfig::terngrad()).with_checksum_every(5);
        let (mut dp, mut model) = cfg.init(c, model).unwrap();
        let start = flat(&model);
        let mut optim = AdamWConfig::new().init();
        let first = f64::from(model.loss(rank, &d).into_scalar::<f32>());
        for step in 0..60 {
            model = dp.begin_step(model, 0).unwrap();
            let loss = model.loss(step * 3 + rank, &d);
            model = dp.step(model, loss, &mut optim, 0.01).unwrap();
            assert!(!dp.last_step().skipped && !dp.stop_requested());
        }
        let last = dp.last_step().loss.unwrap();
        assert_eq!(dp.steps(), 60);
        assert!(dp.bytes_sent() > 0 && dp.last_step().exchange.wire_bytes > 0);
        (start, flat(&model), first, last)
    });
    assert!(results.iter().all(|r| r.0 == results[0].0), "rank 0's parameters were not broadcast");
    assert!(results.iter().all(|r| r.1 == results[0].1), "replicas diverged");
    assert!(results[0].3 < results[0].2 * 0.5, "loss {} -> {}", results[0].2, results[0].3);
}

#[test]
fn burn_gradients_params_and_a_loss_value_go_in_as_well() {
    let models = workers(2, |rank, c| {
        let d = device();
        let (mut dp, model) =
            DataParallelConfig::new(CompressorConfig::dense()).init(c, Mlp::new(&d, 4)).unwrap();
        let loss = model.loss(rank, &d);
        let value = f64::from(loss.clone().into_scalar::<f32>());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let model = dp.step(model, (grads, value), &mut sgd(), 0.1).unwrap();
        assert_eq!(dp.last_step().loss, Some(value));
        flat(&model)
    });
    assert_eq!(models[0], models[1]);
}

#[test]
fn misuse_is_an_error_that_says_what_to_do() {
    workers(1, |_, c| {
        let d = device();
        let (mut dp, model) =
            DataParallelConfig::new(CompressorConfig::dense()).init(c, Mlp::new(&d, 4)).unwrap();
        let e = dp.step(model.clone(), model.loss(0, &d), &mut sgd(), 0.0).unwrap_err().to_string();
        assert!(e.contains("learning rate"), "{e}");
    });
    workers(2, |_, c| {
        let d = device();
        let (mut dp, model) = DataParallelConfig::new(CompressorConfig::dense())
            .with_celgc(2, 1.0, 0.1)
            .init(c, Mlp::new(&d, 4))
            .unwrap();
        let e = dp.step(model.clone(), model.loss(0, &d), &mut sgd(), 0.1).unwrap_err().to_string();
        assert!(e.contains("call begin_step"), "{e}");
        let model = dp.begin_step(model, 0).unwrap();
        dp.step(model.clone(), model.loss(0, &d), &mut sgd(), 0.1).unwrap();
        let lr = dp.last_step().lr;
        assert!(lr > 0.0 && lr <= 0.1, "{lr}");
    });
    workers(1, |_, c| {
        let d = device();
        let cfg =
            DataParallelConfig::new(CompressorConfig::esgd(0.5)).with_topology(Topology::ParameterServer);
        let (mut dp, model) = cfg.init(c, Mlp::new(&d, 4)).unwrap();
        // Gradients alone carry no loss, which eSGD's selection reads.
        let e =
            dp.step(model.clone(), model.loss(0, &d).backward(), &mut sgd(), 0.1).unwrap_err().to_string();
        assert!(e.contains("pass the loss"), "{e}");
        dp.step(model.clone(), model.loss(0, &d), &mut sgd(), 0.1).unwrap();
    });
    // A configuration mistake is found before any collective runs, with the key named.
    let e = workers(1, |_, c| {
        DataParallelConfig::new(CompressorConfig::topk(0.01))
            .with_topology(Topology::Allreduce)
            .init(c, Mlp::new(&device(), 4))
            .map(|_| ())
            .unwrap_err()
    });
    assert!(matches!(&e[0], DataParallelError::Config(c) if c.key == "comm.topology"), "{}", e[0]);
    // With no topology or granularity given, what the compressor needs is chosen.
    assert_eq!(DataParallelConfig::new(CompressorConfig::topk(0.01)).topology(), Topology::Allgather);
    assert_eq!(DataParallelConfig::new(CompressorConfig::esgd(0.5)).granularity(), Granularity::Global);
}

#[test]
fn workers_that_disagree_on_the_model_or_configuration_fail_together() {
    let errors = workers(2, |rank, c| {
        let inputs = if rank == 0 { 4 } else { 5 };
        DataParallelConfig::new(CompressorConfig::dense())
            .init(c, Mlp::new(&device(), inputs))
            .map(|_| ())
            .unwrap_err()
    });
    for e in &errors {
        assert!(e.to_string().contains("other parameters"), "{e}");
    }
    let errors = workers(2, |rank, c| {
        let compressor = if rank == 0 { CompressorConfig::dense() } else { CompressorConfig::fp16() };
        DataParallelConfig::new(compressor).init(c, Mlp::new(&device(), 4)).map(|_| ()).unwrap_err()
    });
    for e in &errors {
        assert!(e.to_string().contains("DataParallelConfig differs"), "{e}");
    }
}

/// A gradient with a NaN on worker 1 only; returns whether the step was skipped.
fn poisoned_step(
    dp: &mut DataParallel,
    model: &Mlp,
    rank: usize,
    d: &Device,
) -> Result<bool, DataParallelError> {
    let loss = model.loss(0, d) * if rank == 1 { f32::NAN } else { 1.0 };
    dp.step(model.clone(), loss, &mut sgd(), 0.1).map(|_| dp.last_step().skipped)
}

#[test]
fn a_non_finite_gradient_stops_every_worker_or_is_skipped_by_every_worker() {
    let results = workers(3, |rank, c| {
        let d = device();
        let (mut dp, model) =
            DataParallelConfig::new(CompressorConfig::dense()).init(c, Mlp::new(&d, 4)).unwrap();
        poisoned_step(&mut dp, &model, rank, &d).unwrap_err()
    });
    assert!(matches!(&results[1], DataParallelError::NonFinite { rank: 1, step: 0, .. }), "{}", results[1]);
    for r in [0, 2] {
        assert!(
            matches!(&results[r], DataParallelError::PeerNonFinite { ranks, .. } if ranks == &[1]),
            "{}",
            results[r]
        );
    }
    let skipped = workers(3, |rank, c| {
        let d = device();
        let cfg = DataParallelConfig::new(CompressorConfig::dense()).with_on_nonfinite(OnNonFinite::Skip);
        let (mut dp, model) = cfg.init(c, Mlp::new(&d, 4)).unwrap();
        let skipped = poisoned_step(&mut dp, &model, rank, &d).unwrap();
        // The next, healthy step goes through.
        dp.step(model.clone(), model.loss(0, &d), &mut sgd(), 0.1).unwrap();
        (skipped, dp.last_step().skipped, dp.steps())
    });
    assert!(skipped.iter().all(|&s| s == (true, false, 2)), "{skipped:?}");
}

/// A worker's model turns non-finite right before an outer round (after
/// its last inner step, where the step's own agreement cannot see it): the
/// round is refused by every worker, naming the worker, before anything is
/// applied. (An overlapped round's start is refused where it lands; the
/// next step's agreement sees the non-finite loss first.)
#[test]
fn a_non_finite_model_at_an_outer_round_stops_every_worker_naming_it() {
    use gradcomp_dp::config::StrategyConfig;
    // DiLoCo's rounds at 2, 4, ...; Streaming's fragment 0 (`a.weight`) at 2, 6, ...
    for st in [StrategyConfig::local(2), StrategyConfig::local(4).with_streaming(2, 0)] {
        let results = workers(3, |rank, c| {
            let d = device();
            let cfg = DataParallelConfig::new(CompressorConfig::dense()).with_strategy(st.clone());
            let (mut dp, mut model) = cfg.init(c, Mlp::new(&d, 4)).unwrap();
            for step in 0..12 {
                model = match dp.begin_step(model, 0) {
                    Ok(m) => m,
                    Err(e) => return (step, e),
                };
                let loss = model.loss(step, &d);
                model = dp.step(model, loss, &mut sgd(), 0.01).unwrap_or_else(|e| panic!("step {step}: {e}"));
                if rank == 1 && step == 5 {
                    let mut p = flat(&model);
                    p[3] = f32::NAN;
                    model = gradcomp_dp::params::write_params(model, &p);
                }
            }
            panic!("no worker refused the round");
        });
        for (rank, (step, e)) in results.iter().enumerate() {
            assert!(
                matches!(e, DataParallelError::NonFiniteModel { step: 6, ranks } if ranks == &[1]),
                "{st:?}: worker {rank} at step {step}: {e}"
            );
            assert_eq!(*step, 6, "every worker stops at the round");
        }
    }
}

#[test]
fn a_diverged_replica_is_found_at_the_next_checksum() {
    let errors = workers(2, |rank, c| {
        let d = device();
        let cfg = DataParallelConfig::new(CompressorConfig::dense()).with_checksum_every(1);
        let (mut dp, model) = cfg.init(c, Mlp::new(&d, 4)).unwrap();
        // Worker 1 applies another learning rate than everyone else.
        let lr = if rank == 1 { 0.5 } else { 0.1 };
        let model = dp.step(model.clone(), model.loss(0, &d), &mut sgd(), lr).unwrap();
        dp.step(model.clone(), model.loss(1, &d), &mut sgd(), 0.1).map(|_| ()).unwrap_err()
    });
    for e in &errors {
        assert!(matches!(e, DataParallelError::ReplicaMismatch { step: 1, ranks } if ranks == &[1]), "{e}");
    }
}

#[test]
fn state_round_trips_and_a_misshapen_buffer_is_named() {
    workers(1, |_, c| {
        let d = device();
        let cfg = DataParallelConfig::new(CompressorConfig::topk(0.1));
        let (mut dp, model) = cfg.clone().init(c, Mlp::new(&d, 4)).unwrap();
        for i in 0..3 {
            dp.step(model.clone(), model.loss(i, &d), &mut sgd(), 0.1).unwrap();
        }
        let state = dp.state().unwrap();
        assert_eq!(state.step, 3);
        assert!(state.buffers.keys().any(|k| k.starts_with("memory.")), "{:?}", state.buffers.keys());
        let json = serde_json::to_string(&state).unwrap();
        let back: DataParallelState = serde_json::from_str(&json).unwrap();
        let c2 = InProcessGroup::new(1).build().unwrap().pop().unwrap();
        let (mut other, _) = cfg.init(c2, Mlp::new(&d, 4)).unwrap();
        other.restore(&back).unwrap();
        assert_eq!(other.state().unwrap(), state);
        let mut bad = state.clone();
        let (name, buf) = bad.buffers.iter_mut().next().unwrap();
        let name = name.clone();
        buf.push(1.0);
        let e = other.restore(&bad).unwrap_err();
        assert!(
            matches!(&e, DataParallelError::State(StateError::Unit { source, .. })
                if matches!(**source, StateError::Length { .. })),
            "{e:?}"
        );
        let e = e.to_string();
        assert!(e.contains(&name) && e.contains("values"), "{e}");
        let mut lacking = state.clone();
        lacking.buffers.remove(&name);
        let e = other.restore(&lacking).unwrap_err();
        assert!(
            matches!(&e, DataParallelError::State(StateError::Unit { source, .. })
                if **source == StateError::Missing { buffer: name.clone() }),
            "{e:?}"
        );
    });
}

/// Flat gradients of `grads` in layout order, as bits.
fn grad_bits(model: &Mlp, grads: &GradientsParams) -> Vec<u32> {
    let mut g = Vec::new();
    gradcomp_dp::params::read_grads(model, grads, &mut g);
    g.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn a_staged_backward_pass_gives_the_whole_passes_gradients_bit_for_bit() {
    let d = device();
    d.seed(3);
    let model = Mlp::new(&d, 4);
    let whole = GradientsParams::from_grads(model.loss(1, &d).backward(), &model);
    let mut cuts = Cuts::new();
    let loss = model.loss_cut(1, &d, &mut cuts);
    assert_eq!(cuts.len(), 1);
    let stages: Vec<_> = cuts.backward(loss).collect();
    assert_eq!(stages.len(), 2);
    // The first stage holds only the layer after the cut.
    assert!(model.a.weight.val().grad(&stages[0]).is_none());
    assert!(model.b.weight.val().grad(&stages[0]).is_some());
    let merged = gradcomp_dp::params::merge_stages(&model, stages).unwrap();
    assert_eq!(grad_bits(&model, &merged), grad_bits(&model, &whole));
}

/// Trains 6 steps of Top-k with error feedback (or `compressor`) on 3
/// workers, each bucket a tensor, stepping whole or in stages; returns per
/// worker the final parameters' bits and, per step, the staged backward
/// seconds spent inside the step and the bytes the step sent.
fn train_staged(
    compressor: CompressorConfig,
    topology: Topology,
    staged: bool,
) -> Vec<(Vec<u32>, Vec<f64>, Vec<u64>)> {
    // The same start in both runs (the workers share the device's generator).
    let d = device();
    d.seed(7);
    let start = flat(&Mlp::new(&d, 4));
    workers(3, |rank, c| {
        let d = device();
        let model = gradcomp_dp::params::write_params(Mlp::new(&d, 4), &start);
        let cfg =
            DataParallelConfig::new(compressor.clone()).with_topology(topology).with_buckets(0.00001, true);
        let (mut dp, mut model) = cfg.init(c, model).unwrap();
        let mut optim = sgd();
        let (mut inside, mut sent) = (Vec::new(), Vec::new());
        for step in 0..6 {
            model = if staged {
                let mut cuts = Cuts::new();
                let loss = model.loss_cut(step * 3 + rank, &d, &mut cuts);
                dp.step(model, cuts.backward(loss), &mut optim, 0.05).unwrap()
            } else {
                let loss = model.loss(step * 3 + rank, &d);
                dp.step(model, loss, &mut optim, 0.05).unwrap()
            };
            assert!(!dp.last_step().skipped);
            inside.push(dp.last_step().backward_seconds);
            sent.push(dp.last_step().bytes.sent());
        }
        (flat(&model).iter().map(|v| v.to_bits()).collect(), inside, sent)
    })
}

#[test]
fn stepping_in_stages_streams_the_buckets_and_changes_no_bit() {
    for (compressor, topology) in [
        (CompressorConfig::topk(0.25), Topology::Allgather),
        (CompressorConfig::terngrad(), Topology::Allreduce),
        (CompressorConfig::dense(), Topology::ParameterServer),
    ] {
        let whole = train_staged(compressor.clone(), topology, false);
        let staged = train_staged(compressor.clone(), topology, true);
        assert!(whole.iter().all(|w| w.0 == whole[0].0), "replicas diverged");
        for (w, s) in whole.iter().zip(&staged) {
            assert_eq!(w.0, s.0, "{compressor:?} over {topology:?}: a staged step changed the model");
            // The same bytes, counted (the step's agreement once dropped a
            // staged step's exchange from the meter).
            assert!(w.2.iter().all(|&b| b > 0), "{:?}", w.2);
            assert_eq!(w.2, s.2, "{compressor:?} over {topology:?}: bytes per step");
        }
        // The first step decides where compression runs and gathers the
        // stages; from the second on, the second stage's backward pass runs
        // inside the step, while the first stage's buckets are on the wire.
        for (_, inside, _) in &staged {
            assert_eq!(inside[0], 0.0);
            assert!(inside[1..].iter().all(|&s| s > 0.0), "{inside:?}");
        }
        assert!(whole.iter().all(|(_, inside, _)| inside.iter().all(|&s| s == 0.0)));
    }
}

#[test]
fn a_parameter_on_both_sides_of_a_cut_is_an_error_on_every_worker() {
    let errors = workers(2, |rank, c| {
        let d = device();
        let (mut dp, model) = DataParallelConfig::new(CompressorConfig::dense())
            .with_buckets(0.00001, true)
            .init(c, Mlp::new(&d, 4))
            .unwrap();
        let mut errors = Vec::new();
        // Step 0 gathers the stages, step 1 streams them: both refuse.
        for step in 0..2 {
            let mut cuts = Cuts::new();
            let loss = model.loss_cut(step + rank, &d, &mut cuts);
            // `a` is used again after the cut.
            let x = Tensor::<2>::ones([1, 4], &d);
            let loss = loss + model.a.forward(x).sum() * 0.0;
            if step == 1 {
                // A healthy step first, so the location is decided and the next one streams.
                dp.step(model.clone(), model.loss(0, &d), &mut sgd(), 0.1).unwrap();
            }
            errors
                .push(dp.step(model.clone(), cuts.backward(loss), &mut sgd(), 0.1).unwrap_err().to_string());
        }
        errors
    });
    for e in errors.iter().flatten() {
        assert!(e.contains("two backward stages") && e.contains("a."), "{e}");
    }
}

#[test]
fn a_non_finite_stage_is_skipped_everywhere_and_leaves_the_memories_as_they_were() {
    let results = workers(3, |rank, c| {
        let d = device();
        let cfg = DataParallelConfig::new(CompressorConfig::topk(0.25))
            .with_topology(Topology::Allgather)
            .with_buckets(0.00001, true)
            .with_on_nonfinite(OnNonFinite::Skip);
        let (mut dp, model) = cfg.init(c, Mlp::new(&d, 4)).unwrap();
        dp.step(model.clone(), model.loss(rank, &d), &mut sgd(), 0.1).unwrap();
        let before = dp.state().unwrap().buffers;
        let mut cuts = Cuts::new();
        // Worker 1's loss is NaN: every gradient of it too.
        let loss = model.loss_cut(rank, &d, &mut cuts) * if rank == 1 { f32::NAN } else { 1.0 };
        let after = dp.step(model.clone(), cuts.backward(loss), &mut sgd(), 0.1).unwrap();
        let skipped = dp.last_step().skipped;
        let restored = dp.state().unwrap().buffers == before;
        dp.step(after.clone(), after.loss(rank, &d), &mut sgd(), 0.1).unwrap();
        (skipped, restored, dp.last_step().skipped, flat(&after) == flat(&model))
    });
    assert!(results.iter().all(|r| r.0 && r.1 && !r.2 && r.3), "{results:?}");
}

/// The same seeds train the same model twice, bit for bit, while another
/// thread keeps a core busy: parameters, every step's loss and the bytes of a
/// data-dependent compressor (Gaussian-k's count varies with the values).
/// What does not repeat across machines (burn's matrix kernels block by the
/// CPU's cache sizes) is in docs/RESULTS.md, "Reproducibility".
#[test]
fn the_same_seeds_train_the_same_bits_twice_under_load() {
    let busy = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let spinner = {
        let busy = busy.clone();
        std::thread::spawn(move || {
            let mut x = 0u64;
            while busy.load(std::sync::atomic::Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        })
    };
    // One model, drawn and materialized on this thread (burn's initializer
    // draws from a process-wide generator), so both runs start alike.
    let init = {
        let d = device();
        d.seed(7);
        let m = Mlp::new(&d, 4);
        flat(&m);
        m
    };
    let run = |compressor: CompressorConfig| {
        workers(4, |rank, c| {
            let d = device();
            let cfg =
                DataParallelConfig::new(compressor.clone()).with_topology(Topology::Allgather).with_seed(3);
            let (mut dp, mut model) = cfg.init(c, init.clone()).unwrap();
            let mut optim = AdamWConfig::new().init();
            let mut losses = Vec::new();
            for step in 0..20 {
                model = dp.begin_step(model, 0).unwrap();
                let loss = model.loss(step * 4 + rank, &d);
                model = dp.step(model, loss, &mut optim, 0.01).unwrap();
                losses.push(dp.last_step().loss.unwrap().to_bits());
            }
            (flat(&model).iter().map(|v| v.to_bits()).collect::<Vec<_>>(), losses, dp.bytes_sent())
        })
    };
    for compressor in [CompressorConfig::dense(), CompressorConfig::gaussiank(0.1)] {
        let (first, second) = (run(compressor.clone()), run(compressor.clone()));
        assert_eq!(first, second, "{}: two runs with the same seeds differ", compressor.name());
    }
    busy.store(false, std::sync::atomic::Ordering::Relaxed);
    spinner.join().unwrap();
}
