//! Your own burn model, your own data, your own training loop: compressed
//! data-parallel training with gradcomp's library API, burn's AdamW and
//! TernGrad.
//!
//! ```text
//! cargo run --release -p gradcomp-train --example custom_model            # 4 in-process workers
//! cargo build --release -p gradcomp-train --features mpi --example custom_model
//! mpirun -np 2 target/release/examples/custom_model                       # one worker per MPI rank
//! ```
//!
//! The gradcomp-specific lines of the loop are marked `// gradcomp`.

use burn::module::Module;
use burn::nn::{Gelu, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::optim::AdamWConfig;
use burn::tensor::{Device, Tensor};
use gradcomp_train::api::prelude::*; // gradcomp
use gradcomp_train::data::{ImageDataset, ImageLoader};
use gradcomp_train::models::{classification_stats, cross_entropy, Batch, EvalStats, Net};

pub const SEED: u64 = 1;
pub const BATCH: usize = 16;
pub const EPOCHS: u32 = 3;
pub const LR: f64 = 2e-3;

/// A model that is not one of gradcomp's: an MLP with a normalized residual
/// block and GELU, for 8×8 glyphs in ten classes.
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
}

/// So gradcomp's built-in trainer can train it too (`trainer::train_with`).
impl Net for GlyphNet {
    fn loss(&self, batch: &Batch, device: &Device) -> Tensor<1> {
        let (x, y) = batch.images(device);
        cross_entropy(self.forward(x), y)
    }

    fn evaluate(&self, batch: &Batch, device: &Device) -> EvalStats {
        let (x, y) = batch.images(device);
        classification_stats(self.forward(x), y)
    }
}

/// The data, made here: ten random glyphs of 8×8 pixels; each example is its
/// class's glyph with 25% of the pixels flipped. Returns (train, test).
pub fn make_data(seed: u64) -> (ImageDataset, ImageDataset) {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let glyphs: Vec<Vec<bool>> = (0..10).map(|_| (0..64).map(|_| next() % 3 == 0).collect()).collect();
    let mut split = |n: usize| {
        let (mut pixels, mut labels) = (Vec::with_capacity(n * 64), Vec::with_capacity(n));
        for _ in 0..n {
            let class = (next() % 10) as usize;
            labels.push(class as u8);
            pixels.extend(glyphs[class].iter().map(|&on| if on ^ (next() % 100 < 25) { 255 } else { 0 }));
        }
        ImageDataset::new(pixels, labels, [1, 8, 8], 10).expect("the glyphs are well-formed")
    };
    (split(4000), split(1000))
}

/// Test accuracy of `model`.
pub fn accuracy(model: &GlyphNet, test: &ImageDataset, device: &Device) -> f64 {
    let mut stats = EvalStats::default();
    for batch in gradcomp_train::data::eval_batches(test, 500) {
        stats.add(&model.valid().evaluate(&batch, &device.clone().inner()));
    }
    stats.accuracy()
}

/// One worker's training loop; returns its model and the bytes it sent.
pub fn train_worker(c: impl Collective + 'static, model: GlyphNet, train: ImageDataset) -> (GlyphNet, u64) {
    let device = gradcomp_train::default_device();
    let (rank, workers) = (c.rank(), c.world_size());
    let mut loader = ImageLoader::shard(train, rank, workers, BATCH, SEED);
    let dp = DataParallelConfig::new(CompressorConfig::terngrad()).with_seed(SEED); // gradcomp
    let (mut dp, mut model) = dp.init(c, model).expect("workers agree"); // gradcomp: rank 0's weights everywhere
    let mut optim = AdamWConfig::new().init();
    for epoch in 0..EPOCHS {
        for i in 0..loader.batches_per_epoch() {
            let loss = model.loss(&loader.batch(epoch, i), &device);
            let synced = dp.sync(&model, loss.backward(), LR).expect("sync"); // gradcomp
            model = optim.step(synced.lr, model, synced.grads);
        }
    }
    (model, dp.bytes_sent()) // gradcomp
}

/// Trains on `workers` in-process workers; returns the test accuracy and
/// the bytes all workers sent.
pub fn run(workers: usize) -> (f64, u64) {
    let device = gradcomp_train::default_device();
    device.seed(SEED);
    let model = GlyphNet::new(&device);
    let (train, test) = make_data(SEED);
    let group = InProcessGroup::new(workers).build().expect("a group of workers"); // gradcomp
    let results: Vec<(GlyphNet, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = group
            .into_iter()
            .map(|c| {
                let (model, train) = (model.clone(), train.clone());
                s.spawn(move || train_worker(c, model, train))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a worker panicked")).collect()
    });
    (accuracy(&results[0].0, &test, &device), results.iter().map(|r| r.1).sum())
}

fn main() {
    #[cfg(feature = "mpi")]
    if std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some() || std::env::var_os("PMI_SIZE").is_some() {
        let c =
            gradcomp_comm::mpi::MpiCollective::init(None, std::time::Duration::from_secs(120)).expect("MPI");
        let rank = c.rank();
        let device = gradcomp_train::default_device();
        device.seed(SEED);
        let (train, test) = make_data(SEED);
        let (model, sent) = train_worker(c, GlyphNet::new(&device), train);
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
    let (acc, sent) = run(4);
    println!(
        "4 workers, TernGrad, AdamW: test accuracy {:.2}%, bytes sent {:.2} MB",
        acc * 100.0,
        sent as f64 / 1e6
    );
}
