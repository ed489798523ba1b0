//! The device-resident exchange (a gradient left on the GPU, compressed by
//! the device kernels, memories in device memory) against the host exchange
//! on the same gradients: the same combined gradient bit for bit for every
//! deterministic method, the same memory state, checkpoints that move
//! between the two, and clear fallbacks. Runs on wgpu, which is Mesa's
//! software Vulkan (lavapipe) where there is no GPU.
#![cfg(feature = "wgpu")]

use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::{Device, DeviceKind, Tensor, TensorData};
use gradcomp_comm::{InProcessCollective, InProcessGroup};
use gradcomp_compress::lowrank::PowerSgdConfig;
use gradcomp_compress::sparsify::dgck::DgcKConfig;
use gradcomp_compress::sparsify::randk::RandKConfig;
use gradcomp_compress::CompressorConfig;
use gradcomp_dp::config::{Exclusions, Granularity, Topology};
use gradcomp_dp::{
    params, CompressionLocation, DataParallel, DataParallelConfig, DataParallelError, InitDataParallel,
};

#[derive(Module, Debug)]
struct Mlp {
    a: Linear,
    b: Linear,
    relu: Relu,
}

impl Mlp {
    fn new(device: &Device) -> Self {
        Self {
            a: LinearConfig::new(8, 32).init(device),
            b: LinearConfig::new(32, 1).init(device),
            relu: Relu::new(),
        }
    }

    /// Mean squared error against `y = Σ x` on a batch made from `seed`.
    fn loss(&self, seed: usize, device: &Device) -> Tensor<1> {
        let x: Vec<f32> = (0..32 * 8).map(|i| (((seed * 31 + i * 7) % 13) as f32 - 6.0) / 6.0).collect();
        let y: Vec<f32> = x.chunks(8).map(|r| r.iter().sum()).collect();
        let x = Tensor::<2>::from_data(TensorData::new(x, [32, 8]), device);
        let y = Tensor::<2>::from_data(TensorData::new(y, [32, 1]), device);
        let d = self.b.forward(self.relu.forward(self.a.forward(x))) - y;
        (d.clone() * d).mean()
    }
}

fn gpu() -> Device {
    Device::wgpu(DeviceKind::DefaultDevice).autodiff()
}

fn single() -> InProcessCollective {
    InProcessGroup::new(1).build().unwrap().pop().unwrap()
}

/// One handle on the device path and one on the host path, over the same model.
fn pair(cfg: &DataParallelConfig, model: &Mlp) -> (DataParallel, DataParallel) {
    let (dev, _) = cfg.clone().with_on_device(true).init(single(), model.clone()).unwrap();
    let (host, _) = cfg.clone().with_on_device(false).init(single(), model.clone()).unwrap();
    (dev, host)
}

fn flat(model: &Mlp) -> Vec<f32> {
    let mut v = Vec::new();
    params::read_params(model, &mut v);
    v
}

/// The combined gradient `dp` makes of `grads`, exactly: the step applied
/// by plain SGD at learning rate 1 to `model`'s parameter ids at zero is −g.
fn combined(dp: &mut DataParallel, model: &Mlp, grads: &GradientsParams) -> Vec<f32> {
    let zero = params::write_params(model.clone(), &vec![0.0; flat(model).len()]);
    let stepped = dp.step(zero, grads, &mut SgdConfig::new().init(), 1.0).unwrap();
    flat(&stepped).iter().map(|v| -v).collect()
}

/// Each step's combined gradient from the device path and from the host path.
type StepResults = Vec<(Vec<f32>, Vec<f32>)>;

/// Feeds the same gradients to both paths for `steps` steps (the model moves
/// with the host path's result) and returns every step's two results.
fn run_both(cfg: &DataParallelConfig, steps: usize) -> (DataParallel, DataParallel, StepResults) {
    let d = gpu();
    d.seed(7);
    let mut model = Mlp::new(&d);
    let (mut dev, mut host) = pair(cfg, &model);
    let mut optim = SgdConfig::new().init();
    let mut results = Vec::new();
    for step in 0..steps {
        let grads = GradientsParams::from_grads(model.loss(step, &d).backward(), &model);
        let a = combined(&mut dev, &model, &grads);
        let b = combined(&mut host, &model, &grads);
        model = optim.step(0.05, model.clone(), params::grads_params(&model, &b));
        results.push((a, b));
    }
    (dev, host, results)
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[test]
fn the_device_exchange_gives_the_host_exchanges_result_bit_for_bit() {
    let cases: Vec<(&str, DataParallelConfig)> = vec![
        ("fp16", DataParallelConfig::new(CompressorConfig::fp16())),
        ("onebit", DataParallelConfig::new(CompressorConfig::onebit())),
        ("topk", DataParallelConfig::new(CompressorConfig::topk(0.1))),
        (
            "topk global",
            DataParallelConfig::new(CompressorConfig::topk(0.1)).with_granularity(Granularity::Global),
        ),
        ("gaussiank", DataParallelConfig::new(CompressorConfig::gaussiank(0.1))),
        (
            "dgck",
            DataParallelConfig::new(CompressorConfig::Dgck(DgcKConfig {
                density: 0.1,
                ..Default::default()
            })),
        ),
        (
            "randk",
            DataParallelConfig::new(CompressorConfig::Randk(RandKConfig {
                density: 0.25,
                ..Default::default()
            })),
        ),
        ("threshold", DataParallelConfig::new(CompressorConfig::threshold(0.01))),
        (
            "powersgd rank 2, compressing from step 2",
            DataParallelConfig::new(CompressorConfig::Powersgd(PowerSgdConfig {
                rank: 2,
                start_iter: 2,
                ..Default::default()
            })),
        ),
        ("signsgd (majority vote)", DataParallelConfig::new(CompressorConfig::signsgd())),
        (
            "signsgd, parameter server",
            DataParallelConfig::new(CompressorConfig::signsgd()).with_topology(Topology::ParameterServer),
        ),
        ("signum", DataParallelConfig::new(CompressorConfig::signum(0.9))),
        ("efsignsgd", DataParallelConfig::new(CompressorConfig::efsignsgd())),
        ("eightbit", DataParallelConfig::new(CompressorConfig::eightbit())),
        ("fp4", DataParallelConfig::new(CompressorConfig::named("fp4").unwrap())),
        ("sparseloco", DataParallelConfig::new(CompressorConfig::named("sparseloco").unwrap())),
        (
            "sparseloco, parameter server",
            DataParallelConfig::new(CompressorConfig::named("sparseloco").unwrap())
                .with_topology(Topology::ParameterServer),
        ),
        (
            "topk, small tensors dense, parameter server",
            DataParallelConfig::new(CompressorConfig::topk(0.1))
                .with_exclusions(Exclusions { min_size: 64, ..Default::default() })
                .with_topology(Topology::ParameterServer),
        ),
    ];
    for (name, cfg) in cases {
        let (dev, host, results) = run_both(&cfg, 4);
        assert_eq!(dev.compression_location(), &CompressionLocation::Device, "{name}");
        assert!(
            matches!(host.compression_location(), CompressionLocation::Host(why) if why.contains("on_device")),
            "{name}: {:?}",
            host.compression_location()
        );
        for (step, (a, b)) in results.iter().enumerate() {
            assert!(a.iter().any(|&v| v != 0.0), "{name}: step {step} combined nothing");
            assert!(same_bits(a, b), "{name}: step {step}: the device and host exchanges differ");
        }
        // The memories (error feedback, DGC momentum) agree bit for bit too.
        assert_eq!(dev.state().unwrap().buffers, host.state().unwrap().buffers, "{name}: memories differ");
        let (da, ha) = (&dev.last_step().exchange, &host.last_step().exchange);
        assert_eq!((da.wire_bytes, da.selected), (ha.wire_bytes, ha.selected), "{name}");
        assert!((da.residual_norm - ha.residual_norm).abs() <= 1e-6 * ha.residual_norm.max(1.0), "{name}");
    }
}

/// A method without a device form (DeMo's DCT top-k) compresses on the host
/// of a device run, and the location says why.
#[test]
fn dct_topk_stays_on_the_host_and_says_why() {
    let cfg = DataParallelConfig::new(CompressorConfig::named("dct-topk").unwrap());
    let (dev, _, results) = run_both(&cfg, 2);
    assert!(
        matches!(dev.compression_location(), CompressionLocation::Host(why) if why.contains("dct-topk")),
        "{:?}",
        dev.compression_location()
    );
    assert!(results.iter().all(|(a, b)| same_bits(a, b)));
}

/// Two workers train with `compressor`, compressing on the device or on the
/// host; returns each worker's site, first and last loss.
fn train_two(compressor: &CompressorConfig, on_device: bool) -> Vec<(CompressionLocation, f32, f32)> {
    let group = InProcessGroup::new(2).timeout(std::time::Duration::from_secs(120));
    // One model, made before the workers start: seeding the device's one
    // generator from two threads would race, and each run would start elsewhere.
    let d = gpu();
    d.seed(11);
    let init = Mlp::new(&d);
    let results = group
        .run(|c| {
            let rank = gradcomp_comm::Collective::rank(&c);
            let d = gpu();
            let cfg =
                DataParallelConfig::new(compressor.clone()).with_checksum_every(5).with_on_device(on_device);
            let (mut dp, mut model) = cfg.init(c, init.clone()).unwrap();
            let mut optim = SgdConfig::new().init();
            let first: f32 = model.loss(rank, &d).into_scalar();
            for step in 0..60 {
                let loss = model.loss(step * 2 + rank, &d);
                model = dp.step(model, loss, &mut optim, 0.05).unwrap();
            }
            let last: f32 = model.loss(rank, &d).into_scalar();
            (dp.compression_location().clone(), first, last)
        })
        .unwrap();
    results.into_iter().map(|r| r.unwrap()).collect()
}

/// TernGrad, QSGD and natural compression draw differently on the device (a counter-based hash,
/// not the CPU's stream), so their runs are compared in outcome: replicas
/// stay identical (checksums every 5 steps), and the loss falls on the device
/// as it does on the host.
#[test]
fn stochastic_methods_train_on_the_device_as_well_as_on_the_host() {
    for compressor in [CompressorConfig::terngrad(), CompressorConfig::qsgd(), CompressorConfig::natural()] {
        let name = compressor.name();
        let dev = train_two(&compressor, true);
        let host = train_two(&compressor, false);
        for (rank, ((site, first, last), (_, _, host_last))) in dev.iter().zip(&host).enumerate() {
            eprintln!("{name}, worker {rank}: loss {first} -> {last} on the device, {host_last} on the host");
            assert_eq!(site, &CompressionLocation::Device, "{name}");
            assert!(last < &(first * 0.6), "{name}, worker {rank}: loss {first} -> {last} on the device");
            assert!(
                last < &(host_last * 1.5),
                "{name}, worker {rank}: {last} on the device, {host_last} on the host"
            );
        }
    }
}

#[test]
fn checkpoints_move_between_the_device_and_the_host() {
    let dgc = CompressorConfig::Dgck(DgcKConfig { density: 0.1, ..Default::default() });
    let powersgd =
        CompressorConfig::Powersgd(PowerSgdConfig { rank: 2, start_iter: 2, ..Default::default() });
    // DGC's momentum and velocity; PowerSGD's residuals and warm-start Q; Signum's momentum.
    for compressor in [dgc, powersgd, CompressorConfig::signum(0.9)] {
        let name = compressor.name();
        let cfg = DataParallelConfig::new(compressor);
        let (dev, host, _) = run_both(&cfg, 3);
        let saved = dev.state().unwrap();
        assert!(
            saved.buffers.values().any(|b| b.iter().any(|&v| v != 0.0)),
            "{name}: no state was read back"
        );
        // Restored into fresh handles, both paths continue alike from the device's state.
        let d = gpu();
        d.seed(7);
        let model = Mlp::new(&d);
        let (mut dev2, mut host2) = pair(&cfg, &model);
        dev2.restore(&saved).unwrap();
        host2.restore(&saved).unwrap();
        assert_eq!(dev2.state().unwrap().buffers, saved.buffers, "{name}: the device did not take the state");
        let grads = GradientsParams::from_grads(model.loss(9, &d).backward(), &model);
        let a = combined(&mut dev2, &model, &grads);
        let b = combined(&mut host2, &model, &grads);
        assert!(same_bits(&a, &b), "{name}");
        assert_eq!(dev2.state().unwrap().buffers, host2.state().unwrap().buffers, "{name}");
        drop((dev, host));
    }
}

#[test]
fn a_run_without_a_device_form_compresses_on_the_host_and_says_why() {
    let d = gpu();
    let model = Mlp::new(&d);
    let (mut dp, _) =
        DataParallelConfig::new(CompressorConfig::trimmedk(0.1)).init(single(), model.clone()).unwrap();
    dp.step(model.clone(), model.loss(0, &d), &mut SgdConfig::new().init(), 0.05).unwrap();
    assert!(
        matches!(dp.compression_location(), CompressionLocation::Host(why) if why.contains("trimmedk")),
        "{:?}",
        dp.compression_location()
    );
    // Nothing to compress: one read-back on the host beats one per unit.
    let (mut dp, _) =
        DataParallelConfig::new(CompressorConfig::dense()).init(single(), model.clone()).unwrap();
    dp.step(model.clone(), model.loss(0, &d), &mut SgdConfig::new().init(), 0.05).unwrap();
    assert!(
        matches!(dp.compression_location(), CompressionLocation::Host(why) if why.contains("uncompressed")),
        "{:?}",
        dp.compression_location()
    );
    // A CPU model with on_device left on: the host path, named.
    let cpu = gradcomp_dp::default_device();
    let model = Mlp::new(&cpu);
    let (mut dp, _) =
        DataParallelConfig::new(CompressorConfig::topk(0.1)).init(single(), model.clone()).unwrap();
    dp.step(model.clone(), model.loss(0, &cpu), &mut SgdConfig::new().init(), 0.05).unwrap();
    assert!(
        matches!(dp.compression_location(), CompressionLocation::Host(why) if why.contains("not f32 tensors on a GPU")),
        "{:?}",
        dp.compression_location()
    );
}

#[test]
fn a_non_finite_gradient_on_the_device_names_its_tensor() {
    let d = gpu();
    let model = Mlp::new(&d);
    let (mut dp, _) =
        DataParallelConfig::new(CompressorConfig::topk(0.1)).init(single(), model.clone()).unwrap();
    dp.step(model.clone(), model.loss(0, &d), &mut SgdConfig::new().init(), 0.05).unwrap();
    assert!(!dp.last_step().skipped);
    assert_eq!(dp.compression_location(), &CompressionLocation::Device);
    // The gradients alone: a NaN loss would be named before any tensor.
    let grads = (model.loss(1, &d) * f32::NAN).backward();
    let e = dp.step(model.clone(), grads, &mut SgdConfig::new().init(), 0.05).unwrap_err();
    assert!(matches!(&e, DataParallelError::NonFinite { tensor, .. } if tensor.starts_with("a.")), "{e}");
}
