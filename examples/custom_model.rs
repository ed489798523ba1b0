//! Your own burn model, your own data, your own training loop: compressed
//! data-parallel training with gradcomp's library, burn's AdamW and TernGrad.
//!
//! ```text
//! cargo run --release -p gradcomp-dp --example custom_model            # 4 in-process workers
//! cargo build --release -p gradcomp-dp --features mpi --example custom_model
//! mpirun -np 2 target/release/examples/custom_model                    # one worker per MPI rank
//! ```
//!
//! The gradcomp-specific lines are marked `// gradcomp`.

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Gelu, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::optim::AdamWConfig;
use burn::tensor::{Device, Int, Tensor, TensorData};
use gradcomp_dp::prelude::*; // gradcomp

pub const SEED: u64 = 1;
pub const BATCH: usize = 16;
pub const EPOCHS: u32 = 3;
pub const LR: f64 = 2e-3;

/// A model of this example's own: an MLP with a normalized residual block
/// and GELU, for 8×8 glyphs in ten classes.
#[derive(Module, Debug)]
pub struct GlyphNet {
    stem: Linear,
    mix: Linear,
    norm: LayerNorm,
    head: Linear,
    act: Gelu,
}

impl GlyphNet {
    pub fn new(device: &Device) -> Self {
        Self {
            stem: LinearConfig::new(64, 96).init(device),
            mix: LinearConfig::new(96, 96).init(device),
            norm: LayerNormConfig::new(96).init(device),
            head: LinearConfig::new(96, 10).init(device),
            act: Gelu::new(),
        }
    }

    pub fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        let [n, c, h, w] = images.dims();
        let x = self.act.forward(self.stem.forward(images.reshape([n, c * h * w])));
        let x = x.clone() + self.act.forward(self.mix.forward(self.norm.forward(x)));
        self.head.forward(x)
    }

    /// The mean cross-entropy of a batch.
    pub fn loss(&self, batch: &Batch) -> Tensor<1> {
        let logits = self.forward(batch.images.clone());
        CrossEntropyLossConfig::new().init(&logits.device()).forward(logits, batch.labels.clone())
    }
}

/// Glyphs: 8×8 images of pixels 0 or 1, and their classes.
#[derive(Clone, Debug)]
pub struct Glyphs {
    pub pixels: Vec<f32>,
    pub labels: Vec<i64>,
}

/// A minibatch on a device.
pub struct Batch {
    pub images: Tensor<4>,
    pub labels: Tensor<1, Int>,
}

/// xorshift64: the example's only source of randomness.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// The data, made here: ten random glyphs of 8×8 pixels; each example is its
/// class's glyph with 25% of the pixels flipped. Returns (train, test).
pub fn make_data(seed: u64) -> (Glyphs, Glyphs) {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let glyphs: Vec<Vec<bool>> =
        (0..10).map(|_| (0..64).map(|_| xorshift(&mut state).is_multiple_of(3)).collect()).collect();
    let mut split = |n: usize| {
        let mut g = Glyphs { pixels: Vec::with_capacity(n * 64), labels: Vec::with_capacity(n) };
        for _ in 0..n {
            let class = (xorshift(&mut state) % 10) as usize;
            g.labels.push(class as i64);
            let flip = |state: &mut u64| xorshift(state) % 100 < 25;
            g.pixels.extend(glyphs[class].iter().map(|&on| f32::from(u8::from(on ^ flip(&mut state)))));
        }
        g
    };
    (split(4000), split(1000))
}

impl Glyphs {
    pub fn count(&self) -> usize {
        self.labels.len()
    }

    /// Worker `rank`'s minibatches of `epoch`: its share (every `workers`-th
    /// example), shuffled by epoch; the last partial batch is dropped.
    pub fn shard_batches(&self, rank: usize, workers: usize, epoch: u32, device: &Device) -> Vec<Batch> {
        let mut mine: Vec<usize> = (rank..self.count()).step_by(workers).collect();
        let mut state = (SEED ^ (u64::from(epoch) << 32)).wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
        for i in (1..mine.len()).rev() {
            mine.swap(i, (xorshift(&mut state) % (i as u64 + 1)) as usize);
        }
        mine.chunks_exact(BATCH).map(|ids| self.batch(ids, device)).collect()
    }

    pub fn batch(&self, ids: &[usize], device: &Device) -> Batch {
        let pixels: Vec<f32> =
            ids.iter().flat_map(|&i| self.pixels[i * 64..(i + 1) * 64].iter().copied()).collect();
        let labels: Vec<i64> = ids.iter().map(|&i| self.labels[i]).collect();
        Batch {
            images: Tensor::from_data(TensorData::new(pixels, [ids.len(), 1, 8, 8]), device),
            labels: Tensor::from_data(TensorData::new(labels, [ids.len()]), device),
        }
    }
}

/// Test accuracy of `model`.
pub fn accuracy(model: &GlyphNet, test: &Glyphs, device: &Device) -> f64 {
    let model = model.valid();
    let device = device.clone().inner();
    let ids: Vec<usize> = (0..test.count()).collect();
    let batch = test.batch(&ids, &device);
    let predicted = model.forward(batch.images).argmax(1).reshape([test.count()]);
    let right: i64 = predicted.equal(batch.labels).int().sum().into_scalar();
    right as f64 / test.count() as f64
}

/// One worker's training loop with `config`; returns its model and the bytes it sent.
pub fn train_worker(
    c: impl Collective + 'static,
    config: DataParallelConfig,
    model: GlyphNet,
    train: &Glyphs,
) -> Result<(GlyphNet, u64), DataParallelError> {
    let device = gradcomp_dp::default_device();
    let (rank, workers) = (c.rank(), c.world_size());
    let (mut dp, mut model) = config.init(c, model)?; // gradcomp: rank 0's weights everywhere
    let mut optim = AdamWConfig::new().init();
    for epoch in 0..EPOCHS {
        for batch in train.shard_batches(rank, workers, epoch, &device) {
            model = dp.begin_step(model, epoch)?; // gradcomp
            let loss = model.loss(&batch);
            model = dp.step(model, loss, &mut optim, LR)?; // gradcomp: compress, exchange, apply
        }
    }
    Ok((model, dp.bytes_sent())) // gradcomp
}

/// Trains on `workers` in-process workers with `config`; returns the test
/// accuracy and the bytes all workers sent.
pub fn run(workers: usize, config: DataParallelConfig) -> (f64, u64) {
    let device = gradcomp_dp::default_device();
    device.seed(SEED);
    let model = GlyphNet::new(&device);
    let (train, test) = make_data(SEED);
    let results = run_in_process(workers, |c| train_worker(c, config.clone(), model.clone(), &train)) // gradcomp
        .expect("training");
    (accuracy(&results[0].0, &test, &device), results.iter().map(|r| r.1).sum())
}

/// The configuration this example trains with.
pub fn terngrad() -> DataParallelConfig {
    DataParallelConfig::new(CompressorConfig::terngrad()).with_seed(SEED) // gradcomp
}

#[allow(dead_code)]
fn main() {
    #[cfg(feature = "mpi")]
    if std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some() || std::env::var_os("PMI_SIZE").is_some() {
        let c =
            gradcomp_comm::mpi::MpiCollective::init(None, std::time::Duration::from_secs(120)).expect("MPI");
        let rank = c.rank();
        let device = gradcomp_dp::default_device();
        device.seed(SEED);
        let (train, test) = make_data(SEED);
        let (model, sent) = train_worker(c, terngrad(), GlyphNet::new(&device), &train).expect("training");
        if rank == 0 {
            let acc = accuracy(&model, &test, &device);
            println!(
                "MPI rank 0: test accuracy {:.2}%, bytes sent by this rank {:.2} MB",
                acc * 100.0,
                sent as f64 / 1e6
            );
        }
        return;
    }
    let (acc, sent) = run(4, terngrad());
    println!(
        "4 workers, TernGrad, AdamW: test accuracy {:.2}%, bytes sent {:.2} MB",
        acc * 100.0,
        sent as f64 / 1e6
    );
}
