//! Per-worker shards and minibatches. Every choice is seeded: the global
//! split into shards by the run seed, each epoch's order by (seed, rank,
//! epoch), so a batch is a pure function of (epoch, index) and resuming needs
//! only those two numbers.

use gradcomp_compress::UnitRng;

use super::batch::Batch;
use super::images::ImageDataset;
use crate::config::Augment;

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
    augment: Augment,
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
        Self { data, shard, batch: batch.max(1), seed, rank, augment: Augment::default(), order: None }
    }

    /// This loader with training-time augmentation: each example's crop and
    /// flip are drawn from (seed, rank, epoch, batch index), so a batch stays
    /// a pure function of (epoch, index) and a resumed run sees the same.
    pub fn with_augment(self, augment: Augment) -> Self {
        Self { augment, ..self }
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
        if !self.augment.is_on() {
            return gather(&self.data, ids.iter().map(|&j| j as usize));
        }
        let mut rng =
            UnitRng::from_parts(&[self.seed, self.rank as u64, u64::from(epoch), i as u64, 0x4155_4720]);
        let (pad, flip) = (self.augment.crop_padding, self.augment.flip);
        let mut pixels = Vec::with_capacity(ids.len() * self.data.image_size());
        let mut labels = Vec::with_capacity(ids.len());
        for &j in ids {
            // torchvision's order: RandomCrop(padding) and then RandomHorizontalFlip.
            let dy = rng.below(2 * pad as u64 + 1) as isize - pad as isize;
            let dx = rng.below(2 * pad as u64 + 1) as isize - pad as isize;
            let mirror = flip && rng.next_f64() < 0.5;
            self.data.push_transformed(j as usize, dy, dx, mirror, &mut pixels, &mut labels);
        }
        let [channels, height, width] = self.data.shape;
        Batch::Images { pixels, labels, channels, height, width }
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

    /// Batch `i` of the fixed-length cut.
    pub fn batch(&self, i: usize) -> Batch {
        self.segment(i * self.steps, self.steps)
    }

    /// Columns `start .. start + len` of every row, with the next tokens as
    /// targets; `start + len` must be below the row length.
    pub fn segment(&self, start: usize, len: usize) -> Batch {
        let r = self.rows;
        let mut inputs = Vec::with_capacity(r * len);
        let mut targets = Vec::with_capacity(r * len);
        for row in 0..r {
            let base = row * self.cols + start;
            inputs.extend_from_slice(&self.grid[base..base + len]);
            targets.extend_from_slice(&self.grid[base + 1..base + len + 1]);
        }
        Batch::Tokens { inputs, targets, batch: r, steps: len, key: 0 }
    }

    /// One epoch's segments `(start, len)` under AWD-LSTM's variable BPTT
    /// (Merity et al. 2018; the CELGC authors' `nlp/main_lstm.py`): the
    /// length is drawn from N(b, 5), floored at 5, where b is `bptt` with
    /// probability 0.95 and `bptt / 2` otherwise. The trainer needs the same
    /// number of steps in every epoch and on every worker, so an epoch holds
    /// as many segments as the fixed cut ([`Self::batches_per_epoch`]) and
    /// the draws depend on (seed, epoch) only; in the rare epoch whose draws
    /// overrun the row, every length is scaled down to fit.
    pub fn variable_segments(&self, seed: u64, epoch: u32) -> Vec<(usize, usize)> {
        let (count, room) = (self.batches_per_epoch(), self.cols.saturating_sub(1));
        let mut rng = UnitRng::from_parts(&[seed, u64::from(epoch), 0x4250_5454]);
        let bptt = self.steps as f64;
        let lens: Vec<usize> = (0..count)
            .map(|_| {
                let b = if rng.next_f64() < 0.95 { bptt } else { bptt / 2.0 };
                // Python's int() truncates toward zero.
                (b + 5.0 * rng.next_gaussian()).trunc().max(5.0) as usize
            })
            .collect();
        // Segment k ends at the k-th partial sum, scaled by room/total when
        // the draws overrun the row.
        let total = lens.iter().sum::<usize>().max(1);
        let end = |sum: usize| if total > room { sum * room / total } else { sum };
        let mut sum = 0;
        lens.into_iter()
            .map(|l| {
                let from = end(sum);
                sum += l;
                let len = (end(sum) - from).max(1);
                (from.min(room - len), len)
            })
            .collect()
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

    /// AWD-LSTM's draws: as many segments as the fixed cut, contiguous and
    /// inside the row, lengths around bptt (≥ 5, a few near bptt/2), the
    /// same for every shard of an epoch and different across epochs.
    #[test]
    fn variable_segments_follow_awd_lstm_and_fit_the_row() {
        let tokens: Vec<u32> = (0..400_000).collect();
        let shard = |rank| TokenLoader::shard(&tokens, rank, 4, 0, 3, 70);
        let l = shard(0);
        let segs = l.variable_segments(9, 0);
        assert_eq!(segs.len(), l.batches_per_epoch());
        assert_eq!(segs, shard(3).variable_segments(9, 0), "workers would disagree on the step count");
        assert_ne!(segs, l.variable_segments(9, 1));
        let mut next = 0;
        for &(start, len) in &segs {
            assert_eq!(start, next, "segments leave gaps or overlap");
            assert!(len >= 5);
            next = start + len;
        }
        assert!(next < l.cols, "the last target lies past the row");
        let mean = next as f64 / segs.len() as f64;
        assert!((mean - 0.975 * 70.0).abs() < 1.5, "mean length {mean}");
        let halves = segs.iter().filter(|s| s.1 < 50).count() as f64 / segs.len() as f64;
        assert!((0.02..0.09).contains(&halves), "share of bptt/2 draws {halves}");
        // Draws that overrun the row (the floor of 5 against bptt 2) are
        // scaled down to fit it.
        let short = TokenLoader::new(&tokens[..200], 2, 2);
        let segs = short.variable_segments(1, 0);
        assert_eq!(segs.len(), short.batches_per_epoch());
        assert!(segs.iter().all(|&(s, n)| n >= 1 && s + n < short.cols));
        for (start, len) in segs {
            let Batch::Tokens { inputs, targets, steps, .. } = short.segment(start, len) else { panic!() };
            assert_eq!((steps, inputs.len()), (len, 2 * len));
            assert_eq!(targets[0], inputs[0] + 1);
        }
    }

    /// Cropping and flipping: a fixed function of (seed, rank, epoch, index),
    /// labels untouched, and every image a shifted, possibly mirrored copy of
    /// its source with zero-byte padding.
    #[test]
    fn augmented_batches_are_seeded_crops_and_flips() {
        let data = synthetic::images(64, 3, 0, [1, 6, 6], 4);
        let plain = ImageLoader::shard(data.clone(), 0, 1, 8, 7);
        let aug = Augment { crop_padding: 2, flip: true };
        let mut l = plain.clone().with_augment(aug);
        let (a, b) = (l.batch(0, 1), l.batch(0, 1));
        assert_eq!(a, b);
        assert_ne!(a, l.batch(1, 1));
        let Batch::Images { pixels, labels, .. } = a else { panic!() };
        let Batch::Images { pixels: raw, labels: raw_labels, .. } = plain.clone().batch(0, 1) else {
            panic!()
        };
        assert_eq!(labels, raw_labels);
        assert_ne!(pixels, raw, "nothing was augmented");
        for (out, src) in pixels.chunks(36).zip(raw.chunks(36)) {
            let found = (-2..=2).any(|dy: isize| {
                (-2..=2).any(|dx: isize| {
                    [false, true].into_iter().any(|m| {
                        (0..36).all(|p| {
                            let (y, x) =
                                (p as isize / 6 + dy, if m { 5 - p % 6 } else { p % 6 } as isize + dx);
                            let want = if (0..6).contains(&y) && (0..6).contains(&x) {
                                src[(y * 6 + x) as usize]
                            } else {
                                0.0
                            };
                            out[p] == want
                        })
                    })
                })
            });
            assert!(found, "an image is not a crop or flip of its source");
        }
        let mut none = plain.clone().with_augment(Augment::default());
        assert_eq!(none.batch(0, 1), plain.clone().batch(0, 1));
    }
}
