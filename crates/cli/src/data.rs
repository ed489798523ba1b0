//! `gradcomp data`: what the loader makes of a configuration's data, and a
//! generated image dataset in the IDX format gradcomp reads. Fetching the
//! named datasets (checking their MD5s) is `scripts/fetch-data.sh`.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args as ClapArgs, Subcommand};
use gradcomp_train::config::TrainConfig;
use gradcomp_train::data::{images_file, labels_file, synthetic, TrainData};
use gradcomp_train::models::ModelChoice;

use crate::user_error::UserError;

#[derive(Subcommand)]
pub enum DataCommand {
    /// Load a configuration's data and print what the loader sees: sizes,
    /// image shape and classes or vocabulary and unseen words, and whether
    /// the configured model fits.
    Inspect(InspectArgs),
    /// Write a generated image classification set as IDX files (gzip), to
    /// try `dataset = "images"` or test a model on a shape of your choice.
    Synthetic(SyntheticArgs),
}

#[derive(ClapArgs)]
pub struct InspectArgs {
    #[arg(long)]
    config: PathBuf,
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

#[derive(ClapArgs)]
pub struct SyntheticArgs {
    /// Directory to write the four IDX files into.
    #[arg(long)]
    out: PathBuf,
    /// Channels, rows, columns.
    #[arg(long, value_delimiter = ',', default_value = "1,28,28")]
    shape: Vec<usize>,
    #[arg(long, default_value_t = 10)]
    classes: usize,
    #[arg(long, default_value_t = 2000)]
    train: usize,
    #[arg(long, default_value_t = 500)]
    test: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

pub fn run(c: DataCommand) -> Result<()> {
    match c {
        DataCommand::Inspect(a) => inspect(&a),
        DataCommand::Synthetic(a) => write_synthetic(&a),
    }
}

fn inspect(a: &InspectArgs) -> Result<()> {
    let mut ov = crate::train::parse_sets(&a.set)?;
    if let Some(d) = &a.data_dir {
        ov.push(("data.dir".into(), format!("\"{}\"", d.display())));
    }
    let cfg = TrainConfig::load(&a.config, &ov).map_err(|e| UserError(e.to_string()))?;
    let data = TrainData::load(&cfg).map_err(|e| UserError(e.to_string()))?;
    let s = data.summary();
    println!("dataset: {:?}", cfg.data.dataset);
    match (s.image_shape, s.vocab) {
        (Some([c, h, w]), _) => {
            println!("images: {} train, {} test, {c} channel(s) of {h}×{w}", s.train, s.test);
            println!("classes: {}", s.classes.unwrap_or(0));
        }
        (_, Some(v)) => {
            let valid = s.valid.map_or("no validation file".to_string(), |n| format!("{n} validation"));
            println!("tokens: {} train, {valid}, {} test; vocabulary {v}", s.train, s.test);
            for (split, n) in &s.unknown_words {
                println!("words unseen in training ({split}): {n} (read as <unk>)");
            }
        }
        _ => {}
    }
    let steps = gradcomp_train::data::Loader::new(&data, &cfg, 0).batches_per_epoch();
    println!("{} workers, batch {} per worker: {steps} steps per epoch", cfg.workers, cfg.data.batch_size);
    match ModelChoice::new(&cfg, &data) {
        Ok(_) => println!("model {:?}: fits", cfg.model.name),
        Err(e) => println!("model {:?}: does not fit: {}", cfg.model.name, e.problem),
    }
    Ok(())
}

fn write_synthetic(a: &SyntheticArgs) -> Result<()> {
    let [c, h, w] = <[usize; 3]>::try_from(a.shape.as_slice())
        .map_err(|_| UserError("--shape takes three numbers: channels,rows,cols".into()))?;
    if c * h * w == 0 || !(1..=256).contains(&a.classes) || a.train == 0 {
        bail!(UserError("--shape must be positive, --classes in 1..=256 and --train at least 1".into()));
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    for (split, n, prefix) in [(0, a.train, "train"), (1, a.test, "t10k")] {
        let d = synthetic::images(n, a.seed, split, [c, h, w], a.classes);
        write_gz(
            &a.out.join(format!("{prefix}-images-idx3-ubyte.gz")),
            &images_file(&d.pixels, n, [c, h, w]),
        )?;
        write_gz(&a.out.join(format!("{prefix}-labels-idx1-ubyte.gz")), &labels_file(&d.labels))?;
    }
    println!(
        "wrote {} train and {} test images of {c}×{h}×{w} in {} classes to {}; train on them with data.dataset = \"images\", data.dir = \"{}\"",
        a.train,
        a.test,
        a.classes,
        a.out.display(),
        a.out.display()
    );
    Ok(())
}

fn write_gz(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut z = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
    z.write_all(bytes)?;
    z.finish()?;
    Ok(())
}
