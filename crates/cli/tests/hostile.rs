//! The hostile-input catalog (issue #12): bad data files, bad
//! configurations, damaged checkpoints and records, and signals, each run
//! through the `gradcomp` binary. Every case must end, within a deadline,
//! in a clean outcome: a one-line `error:` naming the problem (exit 1 or 2)
//! for bad input, never a panic, an abort, a hang or a silent success; a
//! signal's checkpoint and exit code for signals.
//!
//! [`catalog`] generates the cases and their files into a scratch directory;
//! `GRADCOMP_CATALOG_KEEP=1` keeps that directory to inspect or replay a case
//! (each case prints its command line on failure).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gradcomp_train::data::{images_file, labels_file, synthetic};

fn error(needles: &[&str]) -> Expect {
    Expect::Error(needles.iter().map(|s| s.to_string()).collect())
}

/// What a case must end in.
enum Expect {
    /// Exit 1 or 2, one `error:` line on stderr containing every needle
    /// (case-insensitive).
    Error(Vec<String>),
    /// Killed by this signal once training runs: exits with 128 + signal
    /// number after writing a checkpoint.
    Signal(i32),
}

/// How a case is run.
enum Action {
    /// Run to the end.
    Run,
    /// Send `signal` (a `kill` name) once training has written a step
    /// record, or at once when `at_start`; `twice` sends it again at once.
    Signal { signal: &'static str, at_start: bool, twice: bool, run_dir: std::path::PathBuf },
}

struct Case {
    class: &'static str,
    name: String,
    args: Vec<String>,
    action: Action,
    expect: Expect,
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_gradcomp")
}

fn experiments(name: &str) -> String {
    format!("{}/../../experiments/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn write(path: &Path, bytes: impl AsRef<[u8]>) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// An IDX header: magic for u8 data with `dims.len()` dimensions, then the dims.
fn idx_header(dims: &[u32]) -> Vec<u8> {
    let mut v = vec![0, 0, 8, dims.len() as u8];
    for d in dims {
        v.extend(d.to_be_bytes());
    }
    v
}

/// A small valid image set (1×16×16, 10 classes) in `dir` under the
/// standard MNIST names, returning its four files' bytes.
struct ImageSet {
    train_x: Vec<u8>,
    train_y: Vec<u8>,
    test_x: Vec<u8>,
    test_y: Vec<u8>,
}

impl ImageSet {
    fn new() -> Self {
        let shape = [1, 16, 16];
        let tr = synthetic::images(64, 3, 0, shape, 10);
        let te = synthetic::images(32, 3, 1, shape, 10);
        Self {
            train_x: images_file(&tr.pixels, 64, shape),
            train_y: labels_file(&tr.labels),
            test_x: images_file(&te.pixels, 32, shape),
            test_y: labels_file(&te.labels),
        }
    }

    /// Writes the set into `dir` with the file names `names` (train images,
    /// train labels, test images, test labels), replacing file `which` with
    /// `bad` (or removing it when `bad` is None).
    fn write(&self, dir: &Path, names: [&str; 4], which: usize, bad: Option<Vec<u8>>) {
        std::fs::create_dir_all(dir).unwrap();
        let files = [&self.train_x, &self.train_y, &self.test_x, &self.test_y];
        for (i, (name, good)) in names.iter().zip(files).enumerate() {
            if i == which {
                if let Some(b) = &bad {
                    write(&dir.join(name), b);
                }
            } else {
                write(&dir.join(name), good);
            }
        }
    }
}

/// `train` on quick-synthetic.toml with a fresh run directory and `sets`.
fn train_args(root: &Path, case: &str, sets: &[String]) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "train".into(),
        "--quiet".into(),
        "--config".into(),
        experiments("quick-synthetic.toml"),
        "--set".into(),
        format!("run_dir=\"{}\"", root.join("runs").join(case).display()),
    ];
    for s in sets {
        a.push("--set".into());
        a.push(s.clone());
    }
    a
}

const MNIST_NAMES: [&str; 4] = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
];
const IMAGE_NAMES: [&str; 4] = ["tr-x.idx", "tr-y.idx", "te-x.idx", "te-y.idx"];

/// `train` on the image set in `dir` (file names [`IMAGE_NAMES`]), with `extra` settings.
fn images_case(root: &Path, id: &str, dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut sets = vec![
        "data.dataset=\"images\"".to_string(),
        format!("data.dir=\"{}\"", dir.display()),
        "data.batch_size=8".into(),
    ];
    for (key, name) in ["train_images", "train_labels", "test_images", "test_labels"].iter().zip(IMAGE_NAMES)
    {
        sets.push(format!("data.{key}=\"{name}\""));
    }
    sets.extend(extra.iter().map(|s| s.to_string()));
    train_args(root, id, &sets)
}

/// Damaged versions of a valid IDX file `good` (`images`: an image file),
/// each named.
fn idx_damage(good: &[u8], images: bool) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = vec![
        ("empty".into(), vec![]),
        ("3-byte header".into(), good[..3].to_vec()),
        ("header cut inside the dims".into(), good[..6].to_vec()),
        ("payload short by one byte".into(), good[..good.len() - 1].to_vec()),
        ("payload cut in half".into(), good[..good.len() / 2].to_vec()),
        ("trailing garbage".into(), [good, &b"garbage"[..]].concat()),
        ("magic 0xdeadbeef".into(), [&[0xde, 0xad, 0xbe, 0xef][..], &good[4..]].concat()),
        ("element type float".into(), [&[0, 0, 0x0d][..], &good[3..]].concat()),
        ("plain text".into(), b"this is not an idx file\n".to_vec()),
    ];
    if images {
        v.extend([
            ("zero images".into(), idx_header(&[0, 16, 16])),
            ("zero rows".into(), idx_header(&[64, 0, 16])),
            ("zero columns".into(), idx_header(&[64, 16, 0])),
            (
                "dims of 65535² with a small payload".into(),
                [idx_header(&[64, 65535, 65535]), good[16..].to_vec()].concat(),
            ),
            ("a count of 2^32−1".into(), [idx_header(&[u32::MAX, 16, 16]), good[16..].to_vec()].concat()),
            ("dims overflowing 64 bits".into(), idx_header(&[u32::MAX, u32::MAX, u32::MAX, u32::MAX])),
            ("a labels file in its place".into(), labels_file(&[1, 2, 3])),
            ("five dimensions".into(), idx_header(&[64, 1, 1, 16, 16])),
        ]);
    } else {
        v.extend([
            ("zero labels".into(), idx_header(&[0])),
            ("one label too few".into(), [idx_header(&[63]), good[8..good.len() - 1].to_vec()].concat()),
            ("an images file in its place".into(), idx_header(&[64, 16, 16])),
            ("labels with two dims".into(), [idx_header(&[64, 1]), good[8..].to_vec()].concat()),
        ]);
    }
    v
}

/// Every case, with its files written under `root`.
fn catalog(root: &Path) -> Vec<Case> {
    let mut cases = Vec::new();
    let set = ImageSet::new();
    let mut n = 0;
    let mut next = |class: &str| {
        n += 1;
        format!("{class}-{n}")
    };

    // Image files, through `data.dataset = "images"` with our own names.
    for (which, role) in [(0, "train images"), (1, "train labels"), (2, "test images"), (3, "test labels")] {
        let good = [&set.train_x, &set.train_y, &set.test_x, &set.test_y][which];
        for (what, bad) in idx_damage(good, which % 2 == 0) {
            let id = next("images");
            let dir = root.join("data").join(&id);
            set.write(&dir, IMAGE_NAMES, which, Some(bad));
            cases.push(Case {
                class: "data",
                name: format!("{role}: {what}"),
                args: images_case(root, &id, &dir, &[]),
                action: Action::Run,
                expect: error(&[IMAGE_NAMES[which]]),
            });
        }
    }
    // Whole-set problems.
    {
        let id = next("images");
        let dir = root.join("data").join(&id);
        let small = synthetic::images(32, 4, 1, [1, 8, 8], 10);
        set.write(&dir, IMAGE_NAMES, 2, Some(images_file(&small.pixels, 32, [1, 8, 8])));
        cases.push(Case {
            class: "data",
            name: "test images 8×8, train 16×16".into(),
            args: images_case(root, &id, &dir, &[]),
            action: Action::Run,
            expect: error(&["te-x.idx", "[1, 8, 8]", "[1, 16, 16]"]),
        });
        let id = next("images");
        let dir = root.join("data").join(&id);
        set.write(&dir, IMAGE_NAMES, 3, Some(labels_file(&[200; 32])));
        cases.push(Case {
            class: "data",
            name: "test labels outside the training classes".into(),
            args: images_case(root, &id, &dir, &[]),
            action: Action::Run,
            expect: error(&["label", "200"]),
        });
        let id = next("images");
        let dir = root.join("data").join(&id);
        let tiny =
            |n, split| images_file(&synthetic::images(n, 1, split, [1, 8, 8], 10).pixels, n, [1, 8, 8]);
        set.write(&dir, IMAGE_NAMES, 0, Some(tiny(64, 0)));
        write(&dir.join(IMAGE_NAMES[2]), tiny(32, 1));
        cases.push(Case {
            class: "data",
            name: "8×8 images for LeNet-5".into(),
            args: images_case(root, &id, &dir, &["model.name=\"lenet5\""]),
            action: Action::Run,
            expect: error(&["16×16", "8×8"]),
        });
        let id = next("images");
        let dir = root.join("data").join(&id);
        set.write(&dir, IMAGE_NAMES, 0, Some(set.train_x.clone()));
        std::fs::remove_file(dir.join(IMAGE_NAMES[0])).unwrap();
        std::fs::create_dir_all(dir.join(IMAGE_NAMES[0])).unwrap();
        cases.push(Case {
            class: "data",
            name: "train images path is a directory".into(),
            args: images_case(root, &id, &dir, &[]),
            action: Action::Run,
            expect: error(&[IMAGE_NAMES[0]]),
        });
        let id = next("images");
        let dir = root.join("data").join(&id);
        set.write(&dir, IMAGE_NAMES, 1, None);
        cases.push(Case {
            class: "data",
            name: "train labels missing".into(),
            args: images_case(root, &id, &dir, &[]),
            action: Action::Run,
            expect: error(&[IMAGE_NAMES[1]]),
        });
        // A gzip file that is not what it says, and one cut short.
        for (what, bytes) in [
            ("gzip of garbage", gzip(b"garbage, not idx")),
            ("gzip cut short", gzip(&set.train_x)[..200].to_vec()),
            ("not gzip at all", b"\x1f\x8bnot really gzip".to_vec()),
        ] {
            let id = next("images");
            let dir = root.join("data").join(&id);
            set.write(&dir, IMAGE_NAMES, 0, None);
            write(&dir.join(format!("{}.gz", IMAGE_NAMES[0])), bytes);
            cases.push(Case {
                class: "data",
                name: format!("train images: {what}"),
                args: images_case(root, &id, &dir, &[]),
                action: Action::Run,
                expect: error(&[IMAGE_NAMES[0]]),
            });
        }
        let id = next("images");
        cases.push(Case {
            class: "data",
            name: "data.dir does not exist".into(),
            args: images_case(root, &id, &root.join("data/nowhere"), &[]),
            action: Action::Run,
            expect: error(&["nowhere"]),
        });
    }

    // The MNIST layout under the data directory.
    for (which, what, bad) in [
        (0, "train images cut short", Some(set.train_x[..1000].to_vec())),
        (1, "train labels empty", Some(vec![])),
        (2, "test images missing", None),
        (3, "test labels of another count", Some(labels_file(&[1; 31]))),
    ] {
        let id = next("mnist");
        let dir = root.join("data").join(&id);
        set.write(&dir.join("mnist"), MNIST_NAMES, which, bad);
        cases.push(Case {
            class: "data",
            name: format!("MNIST: {what}"),
            args: train_args(
                root,
                &id,
                &["data.dataset=\"mnist\"".into(), format!("data.dir=\"{}\"", dir.display())],
            ),
            action: Action::Run,
            expect: error(&["mnist"]),
        });
    }

    // Text corpora.
    let good_text: String =
        (0..400).map(|i| format!("the cat number {} sat on mat {}\n", i % 7, i % 5)).collect();
    for (file, what, bytes) in [
        ("train.txt", "an empty training text", Vec::new()),
        ("train.txt", "only whitespace", b"   \n\n \t \n".to_vec()),
        ("train.txt", "invalid UTF-8", [0xffu8, 0xfe, 0x80, 0x81, b'\n'].repeat(50)),
        ("train.txt", "NUL bytes", vec![0u8; 4096]),
        ("test.txt", "a test text of three words", b"the cat sat\n".to_vec()),
        ("valid.txt", "an empty validation text", Vec::new()),
    ] {
        let id = next("text");
        let dir = root.join("data").join(&id);
        for f in ["train.txt", "valid.txt", "test.txt"] {
            write(&dir.join(f), if f == file { bytes.clone() } else { good_text.clone().into_bytes() });
        }
        cases.push(Case {
            class: "data",
            name: format!("text: {what}"),
            args: train_args(
                root,
                &id,
                &[
                    "data.dataset=\"text\"".into(),
                    format!("data.dir=\"{}\"", dir.display()),
                    "data.train_text=\"train.txt\"".into(),
                    "data.valid_text=\"valid.txt\"".into(),
                    "data.test_text=\"test.txt\"".into(),
                    "data.bptt=8".into(),
                    "data.batch_size=4".into(),
                    "model.name=\"lstm\"".into(),
                    "model.lstm={ embed = 8, hidden = 8 }".into(),
                ],
            ),
            action: Action::Run,
            expect: error(&[file]),
        });
    }
    {
        let id = next("text");
        cases.push(Case {
            class: "data",
            name: "text: the training file is missing".into(),
            args: train_args(
                root,
                &id,
                &[
                    "data.dataset=\"text\"".into(),
                    format!("data.dir=\"{}\"", root.join("data").join(&id).display()),
                    "data.train_text=\"absent.txt\"".into(),
                    "model.name=\"lstm\"".into(),
                ],
            ),
            action: Action::Run,
            expect: error(&["absent.txt"]),
        });
    }

    // Configuration values, each through `--set` on a valid config.
    let bad_calibration = root.join("bad-calibration.json");
    std::fs::create_dir_all(root).unwrap();
    std::fs::write(&bad_calibration, "{\"link_bps\": 1e8}").unwrap();
    let bad_calibration = format!("network.calibration=[\"{}\"]", bad_calibration.display());
    let lstm = ["data.dataset=\"synthetic-tokens\"", "model.name=\"lstm\""];
    let config_cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec!["workers=0"], vec!["workers"]),
        (vec!["workers=-1"], vec!["workers"]),
        (vec!["workers=100000"], vec!["workers"]),
        (vec!["workers=1.5"], vec!["workers"]),
        (vec!["workers=\"four\""], vec!["workers"]),
        (vec!["optimizer.lr=nan"], vec!["optimizer.lr"]),
        (vec!["optimizer.lr=inf"], vec!["optimizer.lr"]),
        (vec!["optimizer.lr=-1"], vec!["optimizer.lr"]),
        (vec!["optimizer.lr=0"], vec!["optimizer.lr"]),
        (vec!["optimizer.momentum=1.5"], vec!["optimizer.momentum"]),
        (vec!["optimizer.momentum=nan"], vec!["optimizer.momentum"]),
        (vec!["optimizer.weight_decay=-1"], vec!["optimizer.weight_decay"]),
        (vec!["optimizer.weight_decay=nan"], vec!["optimizer.weight_decay"]),
        (vec!["optimizer.name=\"lion\""], vec!["optimizer.name"]),
        (vec!["compressor.density=0"], vec!["compressor.density"]),
        (vec!["compressor.density=-0.1"], vec!["compressor.density"]),
        (vec!["compressor.density=nan"], vec!["compressor.density"]),
        (vec!["compressor.density=1.5"], vec!["compressor.density"]),
        (vec!["compressor.name=\"magic\""], vec!["compressor"]),
        (vec!["compressor={ name = \"qsgd\", levels = 0 }"], vec!["levels"]),
        (vec!["compressor={ name = \"qsgd\", bucket = 0 }"], vec!["bucket"]),
        (vec!["compressor={ name = \"terngrad\", c = -1.0 }"], vec!["compressor.c"]),
        (vec!["compressor={ name = \"terngrad\", c = nan }"], vec!["compressor.c"]),
        (vec!["compressor={ name = \"threshold\", threshold = -1.0 }"], vec!["threshold"]),
        (vec!["data.batch_size=0"], vec!["data.batch_size"]),
        (vec!["data.batch_size=1000000000000"], vec!["data.batch_size"]),
        (vec!["data.synthetic_size=0"], vec!["data.synthetic_size"]),
        (vec!["data.synthetic_size=1000000000000"], vec!["data.synthetic_size"]),
        (vec!["data.synthetic_shape=[0, 28, 28]"], vec!["data.synthetic_shape"]),
        (vec!["data.synthetic_shape=[1, 100000, 100000]"], vec!["data.synthetic_shape"]),
        (vec!["data.synthetic_classes=0"], vec!["data.synthetic_classes"]),
        (vec!["data.synthetic_classes=1"], vec!["data.synthetic_classes"]),
        (vec!["data.synthetic_classes=1000"], vec!["data.synthetic_classes"]),
        (vec!["data.dataset=\"cifar10\""], vec!["data.dataset"]),
        (vec!["data.bptt=0", lstm[0], lstm[1]], vec!["data.bptt"]),
        (vec!["model.lstm={ hidden = 0 }", lstm[0], lstm[1]], vec!["model.lstm.hidden"]),
        (vec!["model.lstm={ embed = 0 }", lstm[0], lstm[1]], vec!["model.lstm.embed"]),
        (vec!["model.lstm={ vocab = 0 }", lstm[0], lstm[1]], vec!["vocab"]),
        (vec!["model.lstm={ layers = 0 }", lstm[0], lstm[1]], vec!["layers"]),
        (vec!["model.lstm={ dropout = 1.0 }", lstm[0], lstm[1]], vec!["model.lstm.dropout"]),
        (vec!["model.lstm={ dropout = nan }", lstm[0], lstm[1]], vec!["model.lstm.dropout"]),
        (vec!["model.name=\"gpt\""], vec!["model.name"]),
        (vec!["model.name=\"lstm\""], vec!["model.name"]),
        (vec!["schedule.power=nan"], vec!["schedule.power"]),
        (vec!["schedule.power=-1"], vec!["schedule.power"]),
        (vec!["schedule.gamma=nan"], vec!["schedule.gamma"]),
        (vec!["schedule.warmup_epochs=-2"], vec!["schedule.warmup_epochs"]),
        (vec!["train.epochs=0"], vec!["train.epochs"]),
        (vec!["train.keep_checkpoints=-1"], vec!["keep_checkpoints"]),
        (vec!["schedule.step_epochs=0"], vec!["schedule.step_epochs"]),
        (vec!["network.alpha=nan"], vec!["network.alpha"]),
        (vec!["comm.topology=\"ring\""], vec!["comm.topology"]),
        (vec!["comm.timeout_seconds=0"], vec!["comm.timeout_seconds"]),
        (vec!["comm.timeout_seconds=nan"], vec!["comm.timeout_seconds"]),
        (vec!["comm.timeout_seconds=inf"], vec!["comm.timeout_seconds"]),
        (vec!["comm.heartbeat_seconds=-1"], vec!["comm.heartbeat_seconds"]),
        (vec!["comm.heartbeat_seconds=0.1"], vec!["comm.heartbeat_seconds"]),
        (vec!["strategy={ kind = \"celgc\", period = 0 }"], vec!["strategy.period"]),
        (vec!["strategy={ kind = \"celgc\", gamma = -1.0 }"], vec!["strategy.gamma"]),
        (vec!["compression.local_clip=nan"], vec!["compression.local_clip"]),
        (vec!["compression.dgc_momentum=2.0"], vec!["compression.dgc_momentum"]),
        (vec!["network.links_bps=[-1.0]"], vec!["network.links_bps"]),
        (vec!["network.allreduce=\"butterfly\""], vec!["network.allreduce"]),
        (
            vec!["network.calibration=[\"/nonexistent/link.json\"]"],
            vec!["network.calibration", "/nonexistent/link.json"],
        ),
        (vec![bad_calibration.as_str()], vec!["network.calibration", "not a calibration"]),
        (vec!["compression.bucket_mb=0"], vec!["compression.bucket_mb"]),
        (vec!["compression.bucket_mb=nan"], vec!["compression.bucket_mb"]),
        (vec!["compression.bucket_mb=-4"], vec!["compression.bucket_mb"]),
        (vec!["data.normalize={ mean = [0.1], std = [0.0] }"], vec!["data.normalize.std"]),
        (vec!["data.normalize={ mean = [nan], std = [1.0] }"], vec!["data.normalize.mean"]),
        (vec!["data.normalize={ mean = [0.1, 0.2], std = [1.0] }"], vec!["data.normalize"]),
        (vec!["data.normalize={ mean = [0.1, 0.2, 0.3], std = [1.0, 1.0, 1.0] }"], vec!["data.normalize"]),
        (vec!["strategy.average_at_epoch_end=true"], vec!["strategy.average_at_epoch_end"]),
        (vec!["data.variable_bptt=true"], vec!["data.variable_bptt"]),
        (vec!["data.augment={ crop_padding = 28 }"], vec!["data.augment.crop_padding"]),
        (vec!["data.augment={ crop = 4 }"], vec!["crop"]),
        (vec!["seed=-1"], vec!["seed"]),
        (vec!["nonsense_key=1"], vec!["nonsense_key"]),
        (vec!["data.nonsense=1"], vec!["nonsense"]),
        (vec!["workers"], vec!["workers"]),
        (vec!["workers=[1, 2"], vec!["workers"]),
    ];
    for (sets, needles) in config_cases {
        let id = next("config");
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        cases.push(Case {
            class: "config",
            name: sets.join(" "),
            args: train_args(root, &id, &sets),
            action: Action::Run,
            expect: error(&needles),
        });
    }
    // Configuration files.
    for (what, bytes) in [
        ("TOML syntax error", b"workers = [1, 2\n".to_vec()),
        ("binary garbage", (0..=255u8).cycle().take(4096).collect::<Vec<u8>>()),
        ("a duplicated key", b"workers = 2\nworkers = 3\n".to_vec()),
        ("a table where a value belongs", b"[workers]\nx = 1\n".to_vec()),
    ] {
        let id = next("config");
        let path = root.join("configs").join(format!("{id}.toml"));
        write(&path, bytes);
        cases.push(Case {
            class: "config",
            name: format!("config file: {what}"),
            args: vec!["train".into(), "--config".into(), path.display().to_string()],
            action: Action::Run,
            expect: error(&["config"]),
        });
    }
    {
        let id = next("config");
        let path = root.join("configs").join(&id);
        std::fs::create_dir_all(&path).unwrap();
        cases.push(Case {
            class: "config",
            name: "config file is a directory".into(),
            args: vec!["train".into(), "--config".into(), path.display().to_string()],
            action: Action::Run,
            expect: error(&["cannot read"]),
        });
    }
    checkpoint_cases(root, &mut cases);
    record_cases(root, &mut cases);
    signal_cases(root, &mut cases);
    cases
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// A finished two-worker run to damage; trained once per catalog.
fn base_run(root: &Path) -> std::path::PathBuf {
    let dir = root.join("base-run");
    if !dir.exists() {
        let mut args = train_args(
            root,
            "unused",
            &["workers=2".into(), "data.synthetic_size=512".into(), "train.epochs=1".into()],
        );
        args[5] = format!("run_dir=\"{}\"", dir.display());
        let (code, _, err) = run(&args, Duration::from_secs(300)).expect("the base run finishes");
        assert_eq!(code, Some(0), "the base run failed: {err}");
    }
    dir
}

/// The latest checkpoint directory of a run.
fn latest(run: &Path) -> std::path::PathBuf {
    let name = std::fs::read_to_string(run.join("checkpoints/latest")).unwrap();
    run.join("checkpoints").join(name.trim())
}

/// Damaged checkpoints, each tried by `--resume` and by `eval`.
fn checkpoint_cases(root: &Path, cases: &mut Vec<Case>) {
    let base = base_run(root);
    let state = std::fs::read(latest(&base).join("state.bin")).unwrap();
    let rank1 = std::fs::read(latest(&base).join("rank-1.bin")).unwrap();
    let flip = |mut b: Vec<u8>, at: usize| {
        b[at] ^= 0x10;
        b
    };
    type Damage = Box<dyn Fn(&Path)>;
    let file = |name: &'static str, bytes: Vec<u8>| -> Damage {
        Box::new(move |run: &Path| write(&latest(run).join(name), &bytes))
    };
    let damages: Vec<(&str, Damage, &[&str])> = vec![
        ("state.bin empty", file("state.bin", vec![]), &["state.bin"]),
        ("state.bin of 10 bytes", file("state.bin", state[..10].to_vec()), &["state.bin"]),
        ("state.bin cut in half", file("state.bin", state[..state.len() / 2].to_vec()), &["state.bin"]),
        ("state.bin short by one byte", file("state.bin", state[..state.len() - 1].to_vec()), &["state.bin"]),
        (
            "state.bin with a flipped bit",
            file("state.bin", flip(state.clone(), state.len() / 3)),
            &["state.bin"],
        ),
        (
            "state.bin with a flipped bit in its header",
            file("state.bin", flip(state.clone(), 9)),
            &["state.bin"],
        ),
        (
            "state.bin with trailing bytes",
            file("state.bin", [&state[..], b"trailing"].concat()),
            &["state.bin"],
        ),
        (
            "state.bin of random bytes",
            file("state.bin", (0..state.len()).map(|i| (i * 7919 % 251) as u8).collect()),
            &["state.bin"],
        ),
        (
            "state.bin missing",
            Box::new(|run: &Path| std::fs::remove_file(latest(run).join("state.bin")).unwrap()),
            &["state.bin"],
        ),
        ("rank-1.bin cut short", file("rank-1.bin", rank1[..rank1.len() / 2].to_vec()), &["rank-1.bin"]),
        (
            "rank-1.bin with a flipped bit",
            file("rank-1.bin", flip(rank1.clone(), rank1.len() / 2)),
            &["rank-1.bin"],
        ),
        ("latest empty", Box::new(|run: &Path| write(&run.join("checkpoints/latest"), "")), &["latest"]),
        (
            "latest names a missing step",
            Box::new(|run: &Path| write(&run.join("checkpoints/latest"), "step-000099999")),
            &["step-000099999"],
        ),
        (
            "latest climbs out of the run",
            Box::new(|run: &Path| write(&run.join("checkpoints/latest"), "../../../etc")),
            &["latest"],
        ),
        (
            "latest holds binary garbage",
            Box::new(|run: &Path| write(&run.join("checkpoints/latest"), [0xffu8, 0, 0xfe])),
            &["latest"],
        ),
        (
            "no checkpoints directory",
            Box::new(|run: &Path| std::fs::remove_dir_all(run.join("checkpoints")).unwrap()),
            &["checkpoint"],
        ),
    ];
    for (what, damage, needles) in damages {
        for how in ["resume", "eval"] {
            let id = format!("ckpt-{}-{how}", cases.len());
            let run_dir = root.join("runs").join(&id);
            copy_dir(&base, &run_dir);
            damage(&run_dir);
            let args = if how == "eval" {
                vec!["eval".into(), run_dir.display().to_string()]
            } else {
                resume_args(&run_dir, &[])
            };
            cases.push(Case {
                class: "checkpoint",
                name: format!("{how}: {what}"),
                args,
                action: Action::Run,
                expect: error(needles),
            });
        }
    }
    // Resumes that would change the run's meaning.
    for (set, needle) in [
        ("optimizer.lr=0.5", "optimizer.lr"),
        ("compressor={ name = \"topk\", density = 0.01 }", "compressor"),
        ("seed=99", "seed"),
        ("workers=3", "workers"),
        ("model.name=\"lenet5\"", "model"),
    ] {
        let id = format!("ckpt-{}-changed", cases.len());
        let run_dir = root.join("runs").join(&id);
        copy_dir(&base, &run_dir);
        cases.push(Case {
            class: "checkpoint",
            name: format!("resume with {set}"),
            args: resume_args(&run_dir, &[set]),
            action: Action::Run,
            expect: error(&[needle]),
        });
    }
}

/// `train --resume` of `run_dir` from its own config, for one more epoch.
fn resume_args(run_dir: &Path, sets: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "train".into(),
        "--quiet".into(),
        "--config".into(),
        run_dir.join("config.toml").display().to_string(),
        "--resume".into(),
        "--allow-change".into(),
        "--set".into(),
        format!("run_dir=\"{}\"", run_dir.display()),
        "--set".into(),
        "train.epochs=2".into(),
    ];
    for s in sets {
        a.push("--set".into());
        a.push(s.to_string());
    }
    a
}

/// Damaged records and configurations of a finished run, read by `report`.
fn record_cases(root: &Path, cases: &mut Vec<Case>) {
    let base = base_run(root);
    let steps = std::fs::read_to_string(base.join("steps.jsonl")).unwrap();
    let first = steps.lines().next().unwrap().to_string();
    // None: the file is removed.
    let damages: Vec<(&str, &str, Option<Vec<u8>>)> = vec![
        ("steps.jsonl cut mid-record", "steps.jsonl", Some(steps.as_bytes()[..steps.len() - 7].to_vec())),
        (
            "steps.jsonl with a garbage line",
            "steps.jsonl",
            Some(format!("{steps}not json at all\n").into_bytes()),
        ),
        (
            "steps.jsonl with a NaN",
            "steps.jsonl",
            Some(format!("{}\n", first.replacen(":", ":NaN,\"x\":", 1)).into_bytes()),
        ),
        ("steps.jsonl of binary bytes", "steps.jsonl", Some(vec![0xff, 0xfe, 0x00, 0x01])),
        ("epochs.jsonl with a garbage line", "epochs.jsonl", Some(b"{\"epoch\": [\n".to_vec())),
        ("config.toml of garbage", "config.toml", Some(b"workers = = 3".to_vec())),
        ("config.toml with an unknown key", "config.toml", Some(b"nonsense = 1\n".to_vec())),
        ("steps.jsonl missing", "steps.jsonl", None),
        ("config.toml missing", "config.toml", None),
    ];
    for (what, file, bytes) in damages {
        let id = format!("records-{}", cases.len());
        let run_dir = root.join("runs").join(&id);
        copy_dir(&base, &run_dir);
        match bytes {
            Some(b) => write(&run_dir.join(file), b),
            None => std::fs::remove_file(run_dir.join(file)).unwrap(),
        }
        cases.push(Case {
            class: "records",
            name: format!("report: {what}"),
            args: vec![
                "report".into(),
                run_dir.display().to_string(),
                "--out".into(),
                root.join("reports").join(&id).display().to_string(),
            ],
            action: Action::Run,
            expect: error(&[file]),
        });
    }
}

/// Signals during a run: the checkpoint is written and the exit code is
/// 128 + the signal's number; at start-up, or signalled twice, it still ends.
fn signal_cases(root: &Path, cases: &mut Vec<Case>) {
    for (signal, code, at_start, twice) in [
        ("TERM", 143, false, false),
        ("INT", 130, false, false),
        ("HUP", 129, false, false),
        ("TERM", 143, true, false),
        ("INT", 130, false, true),
    ] {
        let id = format!("signal-{}", cases.len());
        let run_dir = root.join("runs").join(&id);
        cases.push(Case {
            class: "signal",
            name: format!(
                "SIG{signal}{}{}",
                if at_start { " at start-up" } else { " while training" },
                if twice { ", twice" } else { "" }
            ),
            args: train_args(root, &id, &["train.epochs=500".into()]),
            action: Action::Signal { signal, at_start, twice, run_dir },
            expect: Expect::Signal(code),
        });
    }
}

/// Runs `args` (sending the signals `action` names) with a deadline; kills
/// it and reports a hang past it.
fn run_case(
    args: &[String],
    action: &Action,
    deadline: Duration,
) -> Result<(Option<i32>, String, String), String> {
    let mut child = Command::new(bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("RUST_BACKTRACE", "0")
        .spawn()
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    if let Action::Signal { signal, at_start, twice, run_dir } = action {
        let steps = run_dir.join("steps.jsonl");
        while !at_start && std::fs::metadata(&steps).map_or(true, |m| m.len() == 0) {
            if start.elapsed() > deadline || child.try_wait().map_err(|e| e.to_string())?.is_some() {
                child.kill().ok();
                return Err("the run never started training".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if *at_start {
            // Past exec, into start-up (configuration, data, model).
            std::thread::sleep(Duration::from_millis(100));
        }
        for _ in 0..if *twice { 2 } else { 1 } {
            let sent = Command::new("kill").args([format!("-{signal}"), child.id().to_string()]).status();
            if !sent.is_ok_and(|s| s.success()) {
                return Err(format!("kill -{signal} failed"));
            }
        }
    }
    // Drain the pipes while waiting, so a chatty child cannot block on them.
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out, &mut s).ok();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err, &mut s).ok();
        s
    });
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            // Killed by a signal: 128 + its number, as a shell reports it
            // (a signal before main installs its handlers ends a process so).
            let code = status
                .code()
                .or_else(|| std::os::unix::process::ExitStatusExt::signal(&status).map(|s| 128 + s));
            return Ok((code, out.join().unwrap(), err.join().unwrap()));
        }
        if start.elapsed() > deadline {
            child.kill().ok();
            child.wait().ok();
            return Err(format!("hung: still running after {deadline:?}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// [`run_case`] without signals.
fn run(args: &[String], deadline: Duration) -> Result<(Option<i32>, String, String), String> {
    run_case(args, &Action::Run, deadline)
}

/// Why a finished case is not clean, if it is not.
fn judge(expect: &Expect, code: Option<i32>, stderr: &str) -> Option<String> {
    if stderr.contains("panicked") || code == Some(101) {
        return Some(format!("panicked (exit {code:?})"));
    }
    match expect {
        Expect::Error(needles) => {
            match code {
                Some(0) => return Some("silently accepted (exit 0)".into()),
                Some(1 | 2) => {}
                other => return Some(format!("died (exit {other:?})")),
            }
            let lines: Vec<&str> = stderr.trim().lines().collect();
            if lines.len() != 1 || !lines[0].starts_with("error: ") {
                return Some(format!("not a one-line error: {stderr:?}"));
            }
            let lower = lines[0].to_lowercase();
            let missing: Vec<&String> =
                needles.iter().filter(|n| !lower.contains(&n.to_lowercase())).collect();
            (!missing.is_empty()).then(|| format!("the error does not name {missing:?}: {}", lines[0]))
        }
        Expect::Signal(want) => (code != Some(*want)).then(|| format!("exit {code:?}, want {want}")),
    }
}

#[test]
fn the_hostile_catalog_ends_cleanly() {
    let root = std::env::temp_dir().join(format!("gradcomp-catalog-{}", std::process::id()));
    std::fs::remove_dir_all(&root).ok();
    let cases = catalog(&root);
    assert!(cases.len() >= 100, "the catalog holds {} cases", cases.len());
    let mut failures = Vec::new();
    let mut by_class = std::collections::BTreeMap::<&str, usize>::new();
    for case in &cases {
        *by_class.entry(case.class).or_default() += 1;
        let verdict = match run_case(&case.args, &case.action, Duration::from_secs(120)) {
            Err(hang) => Some(hang),
            Ok((code, _, stderr)) => judge(&case.expect, code, &stderr).or_else(|| match &case.action {
                // One signal while training: the checkpoint must be there.
                Action::Signal { at_start: false, twice: false, run_dir, .. }
                    if !run_dir.join("checkpoints/latest").exists() =>
                {
                    Some("no checkpoint after the signal".into())
                }
                _ => None,
            }),
        };
        if let Some(why) = verdict {
            failures.push(format!(
                "[{}] {}: {why}\n    gradcomp {}",
                case.class,
                case.name,
                case.args.join(" ")
            ));
        }
    }
    eprintln!("catalog: {} cases {by_class:?}, {} not clean", cases.len(), failures.len());
    if std::env::var_os("GRADCOMP_CATALOG_KEEP").is_none() {
        std::fs::remove_dir_all(&root).ok();
    } else {
        eprintln!("catalog files kept in {}", root.display());
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases not clean:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
