//! Synthetic data for tests: learnable, tiny, and needing no files.

use std::sync::Arc;

use gradcomp_compress::UnitRng;

use super::images::unit_scale;
use super::images::ImageDataset;

/// `n` images of `shape` (`[channels, rows, cols]`) in `classes` classes:
/// each class a fixed random stroke pattern (from `seed`), each example that
/// pattern plus noise (from `seed` and `split`, so a test split shares the
/// classes but not the examples). A small network learns it in a few dozen
/// steps. `classes` is at most 256 (labels are bytes).
pub fn images(n: usize, seed: u64, split: u64, shape: [usize; 3], classes: usize) -> ImageDataset {
    let size: usize = shape.iter().product();
    let classes = classes.clamp(1, 256);
    let mut rng = UnitRng::from_parts(&[seed, 0x0053_594e]);
    let protos: Vec<Vec<u8>> = (0..classes)
        .map(|_| (0..size).map(|_| if rng.next_f32() < 0.15 { 255 } else { 0 }).collect())
        .collect();
    let mut rng = UnitRng::from_parts(&[seed, 0x0053_594e, split]);
    let mut pixels = Vec::with_capacity(n * size);
    let mut labels = Vec::with_capacity(n);
    for _ in 0..n {
        let c = rng.below(classes as u64) as usize;
        labels.push(c as u8);
        pixels.extend(protos[c].iter().map(|&p| {
            let noise = (rng.next_f32() * 60.0) as u8;
            if rng.next_f32() < 0.05 {
                255 - p.min(200)
            } else {
                p.saturating_sub(noise).max(noise / 2)
            }
        }));
    }
    ImageDataset { pixels: Arc::new(pixels), labels: Arc::new(labels), shape, classes, lut: unit_scale() }
}

/// A token stream over `vocab` words from a noisy deterministic chain
/// (mostly `next = (3·t + 1) mod vocab`), so a language model's loss falls
/// fast; `split` varies the noise only.
pub fn tokens(n: usize, vocab: u32, seed: u64, split: u64) -> Vec<u32> {
    let mut rng = UnitRng::from_parts(&[seed, 0x0054_4f4b, split]);
    let mut t = 0u32;
    (0..n)
        .map(|_| {
            t = if rng.next_f32() < 0.1 { rng.below(u64::from(vocab)) as u32 } else { (3 * t + 1) % vocab };
            t
        })
        .collect()
}
