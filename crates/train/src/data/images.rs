//! Image classification datasets in memory: MNIST, Fashion-MNIST, or any
//! set of IDX files (any size, channel count and number of classes).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::DataError;
use super::idx;
use crate::config::{ImageFiles, ImageLayout};

/// Images as u8 (scaled to [0, 1] when batched), `channels × rows × cols`
/// each, and their labels.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageDataset {
    pub pixels: Arc<Vec<u8>>,
    pub labels: Arc<Vec<u8>>,
    /// `[channels, rows, cols]`.
    pub shape: [usize; 3],
    /// Labels are in `0..classes`.
    pub classes: usize,
    /// Pixel byte → input value, per channel (one table serves every channel
    /// when it is alone): `p/255`, or `(p/255 − mean)/std` once
    /// [`ImageDataset::normalized`].
    pub(super) lut: Arc<Vec<[f32; 256]>>,
}

/// The `p/255` table of an unnormalized dataset.
pub(super) fn unit_scale() -> Arc<Vec<[f32; 256]>> {
    Arc::new(vec![std::array::from_fn(|p| p as f32 / 255.0)])
}

impl ImageDataset {
    /// A dataset from memory: `pixels` holds `labels.len()` images of
    /// `shape` (`[channels, rows, cols]`, CHW order); every label must be
    /// below `classes`.
    pub fn new(
        pixels: Vec<u8>,
        labels: Vec<u8>,
        shape: [usize; 3],
        classes: usize,
    ) -> Result<Self, DataError> {
        let size = shape.iter().product::<usize>();
        if size == 0 {
            return Err(DataError::Invalid(format!("images of {shape:?} hold no pixels")));
        }
        if Some(pixels.len()) != labels.len().checked_mul(size) {
            return Err(DataError::Invalid(format!(
                "{} pixels are not {} images of {shape:?}",
                pixels.len(),
                labels.len()
            )));
        }
        if let Some(&bad) = labels.iter().find(|&&l| usize::from(l) >= classes) {
            return Err(DataError::Invalid(format!("label {bad} is outside 0..{classes}")));
        }
        Ok(Self { pixels: Arc::new(pixels), labels: Arc::new(labels), shape, classes, lut: unit_scale() })
    }

    /// This dataset with inputs `(p/255 − mean_c)/std_c` for channel c (one
    /// value, or one per channel): the normalisation of the papers' scripts
    /// (MNIST: mean 0.1307, std 0.3081), the same for every split it is
    /// applied to.
    pub fn normalized(self, mean: &[f64], std: &[f64]) -> Result<Self, DataError> {
        let channels = self.shape[0];
        if mean.len() != std.len() || !(mean.len() == 1 || mean.len() == channels) {
            return Err(DataError::Invalid(format!(
                "data.normalize: {} mean(s) and {} std(s) for images of {channels} channel(s): give one value, or one per channel, of each",
                mean.len(),
                std.len()
            )));
        }
        let lut = mean
            .iter()
            .zip(std)
            .map(|(&m, &s)| std::array::from_fn(|p| ((p as f64 / 255.0 - m) / s) as f32))
            .collect();
        Ok(Self { lut: Arc::new(lut), ..self })
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Values per image.
    pub fn image_size(&self) -> usize {
        self.shape.iter().product()
    }

    /// The first `n` examples (all of them when `n` is 0 or too large).
    pub fn truncated(self, n: usize) -> Self {
        if n == 0 || n >= self.len() {
            return self;
        }
        let sz = self.image_size();
        Self {
            pixels: Arc::new(self.pixels[..n * sz].to_vec()),
            labels: Arc::new(self.labels[..n].to_vec()),
            ..self
        }
    }

    /// Reads an IDX image file and its IDX label file. The classes are the
    /// labels seen (largest + 1); [`ImageSplits::load`] makes both splits agree.
    pub fn load(images: &Path, labels: &Path, layout: ImageLayout) -> Result<Self, DataError> {
        let img = idx::parse_images(&idx::read_maybe_gz(images)?, images, layout)?;
        let lab = idx::parse_labels(&idx::read_maybe_gz(labels)?, labels)?;
        if lab.len() != img.count {
            return Err(DataError::corrupt(
                labels,
                format!("{} labels for {} images in {}", lab.len(), img.count, images.display()),
            ));
        }
        let classes = lab.iter().max().map_or(0, |&m| usize::from(m) + 1);
        Ok(Self {
            pixels: Arc::new(img.pixels),
            labels: Arc::new(lab),
            shape: img.shape,
            classes,
            lut: unit_scale(),
        })
    }

    /// A dataset of `labels.len()` images of `shape` whose classes are the
    /// labels seen (largest + 1), as [`ImageDataset::load`] makes them.
    #[cfg(test)]
    fn load_parts(pixels: Vec<u8>, labels: Vec<u8>, shape: [usize; 3]) -> Self {
        let classes = labels.iter().max().map_or(0, |&m| usize::from(m) + 1);
        Self { pixels: Arc::new(pixels), labels: Arc::new(labels), shape, classes, lut: unit_scale() }
    }

    /// Appends example `i` as model input: scaled to [0, 1], or normalized.
    pub fn push_example(&self, i: usize, pixels: &mut Vec<f32>, labels: &mut Vec<i64>) {
        let sz = self.image_size();
        let plane = self.shape[1] * self.shape[2];
        for (c, channel) in self.pixels[i * sz..(i + 1) * sz].chunks(plane).enumerate() {
            let lut = &self.lut[c % self.lut.len()];
            pixels.extend(channel.iter().map(|&p| lut[usize::from(p)]));
        }
        labels.push(i64::from(self.labels[i]));
    }

    /// Appends example `i` shifted by (`dy`, `dx`) pixels and mirrored
    /// left-right if `mirror`: output pixel (y, x) is source pixel
    /// (y + dy, x' + dx), x' = x or its mirror, and pixel byte 0 where that
    /// falls outside the image. This is a crop of the image zero-padded by
    /// |shift| (torchvision's `RandomCrop(padding)`, which pads before
    /// normalising), then a flip.
    pub fn push_transformed(
        &self,
        i: usize,
        dy: isize,
        dx: isize,
        mirror: bool,
        pixels: &mut Vec<f32>,
        labels: &mut Vec<i64>,
    ) {
        let [_, h, w] = self.shape;
        let plane = h * w;
        let image = &self.pixels[i * self.image_size()..(i + 1) * self.image_size()];
        for (c, channel) in image.chunks_exact(plane).enumerate() {
            let lut = &self.lut[c % self.lut.len()];
            for y in 0..h {
                let sy = y as isize + dy;
                if !(0..h as isize).contains(&sy) {
                    pixels.extend(std::iter::repeat_n(lut[0], w));
                    continue;
                }
                let row = &channel[sy as usize * w..(sy as usize + 1) * w];
                pixels.extend((0..w).map(|x| {
                    let sx = if mirror { w - 1 - x } else { x } as isize + dx;
                    if (0..w as isize).contains(&sx) {
                        lut[usize::from(row[sx as usize])]
                    } else {
                        lut[0]
                    }
                }));
            }
        }
        labels.push(i64::from(self.labels[i]));
    }
}

/// A training and a test split that share image shape and classes.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageSplits {
    pub train: ImageDataset,
    pub test: ImageDataset,
}

impl ImageSplits {
    /// Loads `files` from `dir`. A name is tried as given, then with `.gz`,
    /// then (MNIST's own spelling) with its first `-` before `idx` as a `.`.
    /// `missing` says how to get a file that is not there; `classes` how the
    /// class count is known, and both splits get it.
    pub fn load(
        dir: &Path,
        files: &ImageFiles,
        layout: ImageLayout,
        dataset: &str,
        missing: &str,
        classes: Classes,
    ) -> Result<Self, DataError> {
        let find = |name: &str| -> Result<PathBuf, DataError> {
            let candidates = [name.to_string(), format!("{name}.gz"), name.replacen("-idx", ".idx", 1)];
            candidates.iter().map(|n| dir.join(n)).find(|p| p.is_file()).ok_or_else(|| DataError::Missing {
                dataset: dataset.to_string(),
                file: format!("{name}[.gz]"),
                dir: dir.to_path_buf(),
                hint: missing.to_string(),
            })
        };
        let train_labels = find(&files.train_labels)?;
        let train = ImageDataset::load(&find(&files.train_images)?, &train_labels, layout)?;
        let (test_images, test_labels) = (find(&files.test_images)?, find(&files.test_labels)?);
        let test = ImageDataset::load(&test_images, &test_labels, layout)?;
        if train.is_empty() {
            return Err(DataError::Invalid(format!(
                "the training split of {dataset} in {} holds no images",
                dir.display()
            )));
        }
        if test.shape != train.shape {
            return Err(DataError::corrupt(
                &test_images,
                format!(
                    "test images are {:?} (channels, rows, cols) but training images are {:?}",
                    test.shape, train.shape
                ),
            ));
        }
        let given = match classes {
            Classes::Known(k) => Some((k, format!("{dataset}'s {k} classes 0..={}", k - 1))),
            Classes::Declared(k) => Some((k, format!("data.classes = {k} (labels 0..={})", k - 1))),
            Classes::Inferred => None,
        };
        let classes = match given {
            Some((k, name)) => {
                first_label_outside(&train, &train_labels, k, &name)?;
                first_label_outside(&test, &test_labels, k, &name)?;
                k
            }
            None => {
                if train.classes < 2 {
                    return Err(DataError::corrupt(
                        &train_labels,
                        "every training label is 0: classification needs at least two classes",
                    ));
                }
                too_many_classes(&train, &train_labels)?;
                // The model has one output per class seen in training: a test label
                // past them could never be predicted, and the accuracy would be wrong.
                if let Some(&bad) = test.labels.iter().find(|&&l| usize::from(l) >= train.classes) {
                    return Err(DataError::corrupt(
                        &test_labels,
                        format!(
                            "test label {bad} is outside the training labels' 0..{}: the model would never predict it",
                            train.classes
                        ),
                    ));
                }
                train.classes
            }
        };
        Ok(Self { train: ImageDataset { classes, ..train }, test: ImageDataset { classes, ..test } })
    }
}

/// How a dataset's class count is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classes {
    /// Fixed by the dataset (MNIST, Fashion-MNIST: 10); a label outside is an error.
    Known(usize),
    /// Set by the user (`data.classes`); a label outside is an error.
    Declared(usize),
    /// The largest training label + 1, refused when far above the labels
    /// present ([`too_many_classes`]).
    Inferred,
}

/// An error naming the file and the first example whose label is not below `classes`.
fn first_label_outside(d: &ImageDataset, path: &Path, classes: usize, name: &str) -> Result<(), DataError> {
    match d.labels.iter().position(|&l| usize::from(l) >= classes) {
        Some(i) => {
            Err(DataError::corrupt(path, format!("label {} of example {i} is outside {name}", d.labels[i])))
        }
        None => Ok(()),
    }
}

/// Refuses an inferred class count more than twice the number of distinct
/// training labels. The model gets one output per class, so labels {0, 200}
/// would train a 201-way classifier whose accuracy means nothing, with no
/// sign of it; an error, not a warning, because the run's every figure
/// would be wrong and a warning scrolls away. A set that really has classes
/// absent from training says so with `data.classes`.
fn too_many_classes(train: &ImageDataset, path: &Path) -> Result<(), DataError> {
    let mut seen = [false; 256];
    train.labels.iter().for_each(|&l| seen[usize::from(l)] = true);
    let distinct = seen.iter().filter(|&&s| s).count();
    if train.classes > 2 * distinct {
        return Err(DataError::corrupt(
            path,
            format!(
                "the training labels hold {distinct} distinct value(s) but the largest is {}, so the model would have {} outputs, most never trained: relabel the classes 0..={}, or set data.classes = {} if the other classes are meant",
                train.classes - 1,
                train.classes,
                distinct - 1,
                train.classes
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_counts_far_above_the_labels_present_are_refused() {
        let set = |labels: Vec<u8>| {
            let n = labels.len();
            ImageDataset::load_parts(vec![0; n], labels, [1, 1, 1])
        };
        let path = Path::new("tr-y.idx");
        // {0, 200}: 2 distinct labels, 201 outputs.
        let err = too_many_classes(&set(vec![0, 200, 0]), path).unwrap_err().to_string();
        assert!(
            err.contains("2 distinct") && err.contains("201 outputs") && err.contains("tr-y.idx"),
            "{err}"
        );
        // 9 of 10 classes present (one absent from a small set) is fine; so is 3 of 6.
        assert!(too_many_classes(&set((0..9).chain([9]).filter(|&l| l != 4).collect()), path).is_ok());
        assert!(too_many_classes(&set(vec![0, 2, 5]), path).is_ok());
        let err = first_label_outside(&set(vec![1, 2, 10, 11]), path, 10, "MNIST's 10 classes 0..=9")
            .unwrap_err()
            .to_string();
        assert!(err.contains("label 10 of example 2 is outside MNIST's 10 classes"), "{err}");
    }

    fn two_channel_set() -> ImageDataset {
        // One image of 2 channels × 1 × 2: channel 0 = [0, 255], channel 1 = [51, 102].
        ImageDataset::new(vec![0, 255, 51, 102], vec![1], [2, 1, 2], 2).unwrap()
    }

    #[test]
    fn a_zero_shift_is_the_example_and_a_shift_pads_with_byte_zero() {
        let d = ImageDataset::new((0..48).collect(), vec![0, 1, 1], [1, 4, 4], 2)
            .unwrap()
            .normalized(&[0.5], &[0.25])
            .unwrap();
        let (mut a, mut b, mut la, mut lb) = (vec![], vec![], vec![], vec![]);
        d.push_example(1, &mut a, &mut la);
        d.push_transformed(1, 0, 0, false, &mut b, &mut lb);
        assert_eq!((&a, &la), (&b, &lb));
        let mut m = vec![];
        d.push_transformed(1, 1, -1, true, &mut m, &mut lb);
        // Row 0 of the output is source row 1 mirrored and shifted left by
        // one: source columns 2, 1, 0 and then padding.
        let lut = |p: u8| (p as f32 / 255.0 - 0.5) / 0.25;
        assert_eq!(&m[..4], &[lut(22), lut(21), lut(20), lut(0)]);
        // The last row falls below the image: all padding.
        assert!(m[12..16].iter().all(|&v| v == lut(0)));
    }

    #[test]
    fn inputs_are_scaled_or_normalized_per_channel() {
        let (mut px, mut lab) = (Vec::new(), Vec::new());
        two_channel_set().push_example(0, &mut px, &mut lab);
        assert_eq!(px, [0.0, 1.0, 0.2, 0.4]);
        assert_eq!(lab, [1]);
        // MNIST's constants on every channel.
        let n = two_channel_set().normalized(&[0.1307], &[0.3081]).unwrap();
        px.clear();
        n.push_example(0, &mut px, &mut lab);
        let want = [0.0f64, 1.0, 0.2, 0.4].map(|v| ((v - 0.1307) / 0.3081) as f32);
        for (g, w) in px.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{px:?} vs {want:?}");
        }
        // One mean and std per channel.
        let n = two_channel_set().normalized(&[0.5, 0.0], &[0.5, 2.0]).unwrap();
        px.clear();
        n.push_example(0, &mut px, &mut lab);
        assert_eq!(px, [-1.0, 1.0, 0.1, 0.2]);
        // Three values for two channels is an error that names the key.
        let err = two_channel_set().normalized(&[0.1, 0.2, 0.3], &[1.0, 1.0, 1.0]).unwrap_err().to_string();
        assert!(err.contains("data.normalize") && err.contains("2 channel"), "{err}");
    }
}
