//! A CPU worker and a device worker training one model together. Each
//! compresses its gradient its own way (gradcomp-compress on the host,
//! gradcomp-kernels on the device, each with its own compensation memory),
//! the wire bytes meet in one in-process allgather, and both ranks apply
//! the same decoded average. The loss must fall, and the two replicas must
//! stay bit-identical: they decode the same bytes in the same order.
#![cfg(feature = "wgpu")]

use std::thread;

use gradcomp_comm::{Collective, Gathered, InProcessGroup};
use gradcomp_compress::memory::{ErrorFeedback, Memory, ResidualForm};
use gradcomp_compress::{
    codec, Compressor, CompressorConfig, Message, ReduceOp, RngKey, UnitContext, UnitRng,
};
use gradcomp_kernels::memory::DeviceErrorFeedback;
use gradcomp_kernels::{DeviceCompressor, DeviceF32};

const D: usize = 256;
const ROWS: usize = 384;
const STEPS: u64 = 120;
const LR: f32 = 0.3;

/// A least-squares shard: `y = X·w*` with one `w*` shared by every shard.
struct Shard {
    x: Vec<f32>,
    y: Vec<f32>,
}

fn shard(rank: usize) -> Shard {
    let mut truth = UnitRng::from_parts(&[99]);
    let w_star: Vec<f32> = (0..D).map(|_| truth.next_gaussian() as f32).collect();
    let mut rng = UnitRng::from_parts(&[rank as u64, 7]);
    let x: Vec<f32> = (0..ROWS * D).map(|_| rng.next_gaussian() as f32).collect();
    let y = x.chunks_exact(D).map(|row| row.iter().zip(&w_star).map(|(a, b)| a * b).sum()).collect();
    Shard { x, y }
}

impl Shard {
    fn residuals(&self, w: &[f32]) -> Vec<f32> {
        self.x
            .chunks_exact(D)
            .zip(&self.y)
            .map(|(row, y)| row.iter().zip(w).map(|(a, b)| a * b).sum::<f32>() - y)
            .collect()
    }

    fn loss(&self, w: &[f32]) -> f64 {
        self.residuals(w).iter().map(|r| f64::from(r * r)).sum::<f64>() / (2 * ROWS) as f64
    }

    /// `Xᵀ(Xw − y)/rows`.
    fn gradient(&self, w: &[f32]) -> Vec<f32> {
        let mut g = vec![0.0f32; D];
        for (row, r) in self.x.chunks_exact(D).zip(self.residuals(w)) {
            for (gj, a) in g.iter_mut().zip(row) {
                *gj += a * r / ROWS as f32;
            }
        }
        g
    }
}

/// How one rank turns its gradient into a message.
enum Path {
    Cpu {
        compressor: Box<dyn Compressor>,
        memory: Option<ErrorFeedback>,
    },
    Device {
        client: gradcomp_kernels::Client,
        compressor: Box<DeviceCompressor>,
        memory: Option<DeviceErrorFeedback>,
    },
}

impl Path {
    fn new(on_device: bool, config: &CompressorConfig, error_feedback: bool) -> Self {
        if on_device {
            Path::Device {
                client: gradcomp_kernels::device::client("wgpu").expect("a wgpu adapter (lavapipe in CI)"),
                compressor: Box::new(DeviceCompressor::new(config, &[D]).expect("a device form")),
                memory: error_feedback.then(|| DeviceErrorFeedback::new(ResidualForm::Raw)),
            }
        } else {
            Path::Cpu {
                compressor: config.build(),
                memory: error_feedback.then(|| ErrorFeedback::new(ResidualForm::Raw)),
            }
        }
    }

    /// Compensates, runs the method's rounds (TernGrad's shared scalar),
    /// compresses and updates the memory.
    fn step(&mut self, g: &[f32], key: RngKey, comm: &mut dyn Collective, out: &mut Message) {
        match self {
            Path::Cpu { compressor, memory } => {
                let acc = match memory {
                    Some(m) => m.compensate(g, LR).to_vec(),
                    None => g.to_vec(),
                };
                let ctx = UnitContext { key, loss: None };
                for round in 0..compressor.rounds() {
                    let mut part = Vec::new();
                    let op = compressor.round_contribution(round, &acc, &ctx, &mut part);
                    assert_eq!(op, Some(ReduceOp::Max), "TernGrad's one round is its scaler's max");
                    let shared = share(comm, part.first().copied());
                    compressor.round_result(round, &[shared.unwrap()], 2);
                }
                compressor.compress(&acc, &ctx, out);
                if let Some(m) = memory {
                    m.update(out);
                }
            }
            Path::Device { client, compressor, memory } => {
                let g = DeviceF32::upload(client, g);
                let acc = match memory {
                    Some(m) => m.compensate(client, &g, LR).clone(),
                    None => g,
                };
                let ctx = UnitContext { key, loss: None };
                for round in 0..compressor.rounds() {
                    let mut part = Vec::new();
                    let op = compressor.round_contribution(client, round, &acc, &ctx, &mut part).unwrap();
                    assert_eq!(op, Some(ReduceOp::Max), "TernGrad's one round is its scaler's max");
                    let shared = share(comm, part.first().copied());
                    compressor.round_result(round, &[shared.unwrap()], 2);
                }
                compressor.compress(client, &acc, &ctx, out).unwrap();
                if let Some(m) = memory {
                    m.update(client, out).unwrap();
                }
            }
        }
    }
}

/// The max over ranks of a shared scalar (TernGrad's scaler sharing).
fn share(comm: &mut dyn Collective, local: Option<f32>) -> Option<f32> {
    local.map(|s| {
        let mut buf = [s];
        comm.allreduce_max_f32(&mut buf).unwrap();
        buf[0]
    })
}

/// Trains with rank 0 on the CPU and rank 1 on the device; returns each
/// rank's (initial loss, final loss, final weights).
fn train_mixed(config: &CompressorConfig, error_feedback: bool) -> Vec<(f64, f64, Vec<f32>)> {
    let comms = InProcessGroup::new(2).build().unwrap();
    let handles: Vec<_> = comms
        .into_iter()
        .enumerate()
        .map(|(rank, mut comm)| {
            let config = config.clone();
            thread::spawn(move || {
                let data = shard(rank);
                let mut path = Path::new(rank == 1, &config, error_feedback);
                let mut w = vec![0.0f32; D];
                let initial = data.loss(&w);
                let (mut msg, mut bytes, mut gathered) =
                    (Message::default(), Vec::new(), Gathered::default());
                let mut received = Message::default();
                for step in 0..STEPS {
                    let g = data.gradient(&w);
                    path.step(&g, RngKey::new(11, rank as u32, step, 0), &mut comm, &mut msg);
                    bytes.clear();
                    codec::encode(&msg, 0, &mut bytes);
                    comm.allgatherv(&bytes, &mut gathered).unwrap();
                    let mut update = vec![0.0f32; D];
                    for part in gathered.iter() {
                        codec::decode(part, &mut received).unwrap();
                        received.add_to(0.5, &mut update);
                    }
                    for (wj, u) in w.iter_mut().zip(&update) {
                        *wj -= LR * u;
                    }
                }
                (initial, data.loss(&w), w)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().expect("a worker panicked")).collect()
}

#[test]
fn a_cpu_worker_and_a_device_worker_train_together() {
    let methods = [
        ("fp16", CompressorConfig::fp16(), false),
        ("terngrad", CompressorConfig::terngrad(), false),
        ("qsgd", CompressorConfig::Qsgd(Default::default()), false),
        ("onebit", CompressorConfig::Onebit(Default::default()), true),
        ("topk", CompressorConfig::topk(0.05), true),
        ("gaussiank", CompressorConfig::gaussiank(0.05), true),
        (
            "dgck",
            CompressorConfig::Dgck(gradcomp_compress::sparsify::dgck::DgcKConfig {
                density: 0.05,
                ..Default::default()
            }),
            true,
        ),
        (
            "randk",
            CompressorConfig::Randk(gradcomp_compress::sparsify::randk::RandKConfig {
                density: 0.25,
                ..Default::default()
            }),
            true,
        ),
    ];
    for (name, config, error_feedback) in methods {
        let ranks = train_mixed(&config, error_feedback);
        let (cpu, dev) = (&ranks[0], &ranks[1]);
        assert!(
            cpu.2.iter().zip(&dev.2).all(|(a, b)| a.to_bits() == b.to_bits()),
            "{name}: the CPU and device replicas diverged"
        );
        for (rank, (initial, last, _)) in ranks.iter().enumerate() {
            assert!(last < &(0.01 * initial), "{name}: rank {rank} loss {initial:.3} -> {last:.3}");
        }
    }
}
