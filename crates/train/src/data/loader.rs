//! Per-worker shards and minibatches. Every choice is seeded: the global
//! split into shards by the run seed, each epoch's order by (seed, rank,
//! epoch), so a batch is a pure function of (epoch, index) and resuming needs
//! only those two numbers.

use gradcomp_compress::UnitRng;

use super::ImageDataset;
use crate::models::Batch;

fn shuffle(v: &mut [u32], rng: &mut UnitRng) {
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
}

/// A worker's shard of an image dataset.
#[derive(Clone, Debug)]
pub struct ImageLoader {
    data: ImageDataset,
    shard: Vec<u32>,
    batch: usize,
    seed: u64,
    rank: usize,
    /// The current epoch's order (epoch, permutation of `shard`).
    order: Option<(u32, Vec<u32>)>,
}

impl ImageLoader {
    /// Shard `rank` of `world`: a seeded permutation of all examples cut into
    /// `world` disjoint, equal blocks (the remainder is dropped).
    pub fn shard(data: ImageDataset, rank: usize, world: usize, batch: usize, seed: u64) -> Self {
        let mut all: Vec<u32> = (0..data.len() as u32).collect();
        shuffle(&mut all, &mut UnitRng::from_parts(&[seed, 0x0053_4841_5244]));
        let per = data.len() / world.max(1);
        let shard = all[rank * per..(rank + 1) * per].to_vec();
        Self { data, shard, batch: batch.max(1), seed, rank, order: None }
    }

    pub fn shard_len(&self) -> usize {
        self.shard.len()
    }

    /// Full batches per epoch.
    pub fn batches_per_epoch(&self) -> usize {
        self.shard.len() / self.batch
    }

    /// Batch `i` of `epoch`.
    pub fn batch(&mut self, epoch: u32, i: usize) -> Batch {
        if self.order.as_ref().is_none_or(|(e, _)| *e != epoch) {
            let mut o = self.shard.clone();
            shuffle(&mut o, &mut UnitRng::from_parts(&[self.seed, self.rank as u64, u64::from(epoch)]));
            self.order = Some((epoch, o));
        }
        let order = &self.order.as_ref().expect("set above").1;
        let ids = &order[i * self.batch..(i + 1) * self.batch];
        gather(&self.data, ids.iter().map(|&j| j as usize))
    }
}

/// The batch of the given examples.
fn gather(data: &ImageDataset, ids: impl ExactSizeIterator<Item = usize>) -> Batch {
    let n = ids.len();
    let mut pixels = Vec::with_capacity(n * data.image_size());
    let mut labels = Vec::with_capacity(n);
    for i in ids {
        data.push_example(i, &mut pixels, &mut labels);
    }
    let [channels, height, width] = data.shape;
    Batch::Images { pixels, labels, channels, height, width }
}

/// Consecutive evaluation batches over a whole dataset (the last may be short).
pub fn eval_batches(data: &ImageDataset, batch: usize) -> impl Iterator<Item = Batch> + '_ {
    let n = data.len();
    (0..n.div_ceil(batch)).map(move |b| gather(data, b * batch..((b + 1) * batch).min(n)))
}

/// Truncated-BPTT batches from a token stream: the stream is cut into `batch`
/// contiguous rows, and batch `i` is columns `i·steps .. (i+1)·steps` with the
/// next tokens as targets.
#[derive(Clone, Debug)]
pub struct TokenLoader {
    /// `rows × cols`, row-major.
    grid: Vec<i64>,
    rows: usize,
    cols: usize,
    steps: usize,
}

impl TokenLoader {
    pub fn new(tokens: &[u32], batch: usize, steps: usize) -> Self {
        let rows = batch.max(1);
        let cols = tokens.len() / rows;
        let mut grid = Vec::with_capacity(rows * cols);
        for r in 0..rows {
            grid.extend(tokens[r * cols..(r + 1) * cols].iter().map(|&t| i64::from(t)));
        }
        Self { grid, rows, cols, steps: steps.max(1) }
    }

    /// Worker `rank`'s contiguous share of `tokens` among `world` workers,
    /// shifted by `rotation` (CELGC rotates shards each epoch).
    pub fn shard(
        tokens: &[u32],
        rank: usize,
        world: usize,
        rotation: usize,
        batch: usize,
        steps: usize,
    ) -> Self {
        let per = tokens.len() / world.max(1);
        let s = (rank + rotation) % world.max(1);
        Self::new(&tokens[s * per..(s + 1) * per], batch, steps)
    }

    /// Batches in one pass (the inputs need one more token for the targets).
    pub fn batches_per_epoch(&self) -> usize {
        self.cols.saturating_sub(1) / self.steps
    }

    pub fn batch(&self, i: usize) -> Batch {
        let (r, t) = (self.rows, self.steps);
        let mut inputs = Vec::with_capacity(r * t);
        let mut targets = Vec::with_capacity(r * t);
        for row in 0..r {
            let base = row * self.cols + i * t;
            inputs.extend_from_slice(&self.grid[base..base + t]);
            targets.extend_from_slice(&self.grid[base + 1..base + t + 1]);
        }
        Batch::Tokens { inputs, targets, batch: r, steps: t, key: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::synthetic;

    #[test]
    fn shards_are_disjoint_and_epochs_reshuffle() {
        let data = synthetic::images(1000, 3, 0, [1, 28, 28], 10);
        let loaders: Vec<ImageLoader> =
            (0..4).map(|r| ImageLoader::shard(data.clone(), r, 4, 10, 7)).collect();
        let mut seen: Vec<u32> = loaders.iter().flat_map(|l| l.shard.clone()).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 1000);
        let mut l = loaders[1].clone();
        assert_eq!(l.batches_per_epoch(), 25);
        let a = l.batch(0, 0);
        assert_eq!(a, l.batch(0, 0));
        assert_ne!(a, l.batch(1, 0));
        assert_eq!(a.len(), 10);
    }

    #[test]
    fn token_batches_shift_targets_by_one() {
        let tokens: Vec<u32> = (0..100).collect();
        let l = TokenLoader::new(&tokens, 2, 5);
        let Batch::Tokens { inputs, targets, .. } = l.batch(1) else { panic!() };
        assert_eq!(&inputs[..5], &[5, 6, 7, 8, 9]);
        assert_eq!(&targets[..5], &[6, 7, 8, 9, 10]);
        assert_eq!(&inputs[5..], &[55, 56, 57, 58, 59]);
        assert_eq!(l.batches_per_epoch(), 9);
        let s = TokenLoader::shard(&tokens, 1, 4, 1, 1, 4);
        let Batch::Tokens { inputs, .. } = s.batch(0) else { panic!() };
        assert_eq!(inputs, [50, 51, 52, 53]);
    }
}
