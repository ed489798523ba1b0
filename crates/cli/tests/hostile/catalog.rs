//! The catalog: every case and its files, generated into a scratch directory.

use std::path::Path;

use gradcomp_train::data::{images_file, labels_file, synthetic};

use super::case::{error, Action, Case};
use super::checkpoints::{checkpoint_cases, record_cases, signal_cases};
use super::files::*;

/// Every case, with its files written under `root`.
pub fn catalog(root: &Path) -> Vec<Case> {
    let mut cases = Vec::new();
    let set = ImageSet::new();
    let mut ids = Ids::default();
    image_file_cases(root, &set, &mut ids, &mut cases);
    image_set_cases(root, &set, &mut ids, &mut cases);
    image_path_cases(root, &set, &mut ids, &mut cases);
    mnist_cases(root, &set, &mut ids, &mut cases);
    text_cases(root, &mut ids, &mut cases);
    config_value_cases(root, &mut ids, &mut cases);
    config_file_cases(root, &mut ids, &mut cases);
    checkpoint_cases(root, &mut cases);
    record_cases(root, &mut cases);
    signal_cases(root, &mut cases);
    cases
}

/// Case ids, numbered in catalog order across every category: `{class}-{n}`.
#[derive(Default)]
struct Ids(usize);

impl Ids {
    fn next(&mut self, class: &str) -> String {
        self.0 += 1;
        format!("{class}-{}", self.0)
    }
}

/// Image files, through `data.dataset = "images"` with our own names: each
/// of the four files damaged in every way [`idx_damage`] knows.
fn image_file_cases(root: &Path, set: &ImageSet, ids: &mut Ids, cases: &mut Vec<Case>) {
    for (which, role) in [(0, "train images"), (1, "train labels"), (2, "test images"), (3, "test labels")] {
        let good = [&set.train_x, &set.train_y, &set.test_x, &set.test_y][which];
        for (what, bad) in idx_damage(good, which % 2 == 0) {
            let id = ids.next("images");
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
}

/// Image sets whose files are each sound but do not fit together or the
/// model: shapes, labels past the classes.
fn image_set_cases(root: &Path, set: &ImageSet, ids: &mut Ids, cases: &mut Vec<Case>) {
    let id = ids.next("images");
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
    let id = ids.next("images");
    let dir = root.join("data").join(&id);
    set.write(&dir, IMAGE_NAMES, 3, Some(labels_file(&[200; 32])));
    cases.push(Case {
        class: "data",
        name: "test labels outside the training classes".into(),
        args: images_case(root, &id, &dir, &[]),
        action: Action::Run,
        expect: error(&["label", "200"]),
    });
    // Issue #27: labels far past the labels present (one class, all 200)
    // would train a 201-way classifier; refused unless data.classes says so.
    let id = ids.next("images");
    let dir = root.join("data").join(&id);
    set.write(&dir, IMAGE_NAMES, 1, Some(labels_file(&[200; 64])));
    cases.push(Case {
        class: "data",
        name: "train labels all 200: 201 classes from 1 distinct label".into(),
        args: images_case(root, &id, &dir, &[]),
        action: Action::Run,
        expect: error(&[IMAGE_NAMES[1], "1 distinct", "201 outputs", "data.classes"]),
    });
    let id = ids.next("images");
    let dir = root.join("data").join(&id);
    set.write(
        &dir,
        IMAGE_NAMES,
        1,
        Some([vec![3; 10], vec![12], vec![3; 53]].concat()).map(|l| labels_file(&l)),
    );
    cases.push(Case {
        class: "data",
        name: "a train label past data.classes".into(),
        args: images_case(root, &id, &dir, &["data.classes=10"]),
        action: Action::Run,
        expect: error(&[IMAGE_NAMES[1], "label 12 of example 10", "data.classes = 10"]),
    });
    let id = ids.next("images");
    let dir = root.join("data").join(&id);
    let tiny = |n, split| images_file(&synthetic::images(n, 1, split, [1, 8, 8], 10).pixels, n, [1, 8, 8]);
    set.write(&dir, IMAGE_NAMES, 0, Some(tiny(64, 0)));
    write(&dir.join(IMAGE_NAMES[2]), tiny(32, 1));
    cases.push(Case {
        class: "data",
        name: "8×8 images for LeNet-5".into(),
        args: images_case(root, &id, &dir, &["model.name=\"lenet5\""]),
        action: Action::Run,
        expect: error(&["16×16", "8×8"]),
    });
}

/// Image files that are not there, not files, or not the gzip they claim
/// to be; a data directory that does not exist.
fn image_path_cases(root: &Path, set: &ImageSet, ids: &mut Ids, cases: &mut Vec<Case>) {
    let id = ids.next("images");
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
    let id = ids.next("images");
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
        let id = ids.next("images");
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
    let id = ids.next("images");
    cases.push(Case {
        class: "data",
        name: "data.dir does not exist".into(),
        args: images_case(root, &id, &root.join("data/nowhere"), &[]),
        action: Action::Run,
        expect: error(&["nowhere"]),
    });
}

/// The MNIST layout under the data directory: files damaged, missing, or
/// with labels past MNIST's classes.
fn mnist_cases(root: &Path, set: &ImageSet, ids: &mut Ids, cases: &mut Vec<Case>) {
    for (which, what, bad) in [
        (0, "train images cut short", Some(set.train_x[..1000].to_vec())),
        (1, "train labels empty", Some(vec![])),
        (2, "test images missing", None),
        (3, "test labels of another count", Some(labels_file(&[1; 31]))),
    ] {
        let id = ids.next("mnist");
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
    // Issue #27: MNIST's training labels all 200 used to train a 201-class
    // model to 0.00% with no warning; MNIST has 10 classes.
    let id = ids.next("mnist");
    let dir = root.join("data").join(&id);
    set.write(&dir.join("mnist"), MNIST_NAMES, 1, Some(labels_file(&[200; 64])));
    cases.push(Case {
        class: "data",
        name: "MNIST: every training label 200".into(),
        args: train_args(
            root,
            &id,
            &["data.dataset=\"mnist\"".into(), format!("data.dir=\"{}\"", dir.display())],
        ),
        action: Action::Run,
        expect: error(&[MNIST_NAMES[1], "label 200 of example 0", "MNIST's 10 classes"]),
    });
}

/// Text corpora: empty, blank, not UTF-8, too short or missing files.
fn text_cases(root: &Path, ids: &mut Ids, cases: &mut Vec<Case>) {
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
        let id = ids.next("text");
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
    let id = ids.next("text");
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

/// Configuration values, each through `--set` on a valid config.
fn config_value_cases(root: &Path, ids: &mut Ids, cases: &mut Vec<Case>) {
    let bad_calibration = root.join("bad-calibration.json");
    std::fs::create_dir_all(root).unwrap();
    std::fs::write(&bad_calibration, "{\"link_bps\": 1e8}").unwrap();
    let bad_calibration = format!("network.calibration=[\"{}\"]", bad_calibration.display());
    let config_cases = [
        worker_and_optimizer_values(),
        compressor_values(),
        data_and_model_values(),
        schedule_comm_and_network_values(&bad_calibration),
        option_key_and_syntax_values(),
    ]
    .concat();
    for (sets, needles) in config_cases {
        let id = ids.next("config");
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        cases.push(Case {
            class: "config",
            name: sets.join(" "),
            args: train_args(root, &id, &sets),
            action: Action::Run,
            expect: error(&needles),
        });
    }
}

/// A configuration case: the `--set` values, and what its error must name.
type ConfigCase<'a> = (Vec<&'a str>, Vec<&'static str>);

/// Workers and the optimizer.
fn worker_and_optimizer_values() -> Vec<ConfigCase<'static>> {
    vec![
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
    ]
}

/// The compressor, alone and against the topology it needs.
fn compressor_values() -> Vec<ConfigCase<'static>> {
    vec![
        (vec!["compressor.density=0"], vec!["compressor.density"]),
        (vec!["compressor.density=-0.1"], vec!["compressor.density"]),
        (vec!["compressor.density=nan"], vec!["compressor.density"]),
        (vec!["compressor.density=1.5"], vec!["compressor.density"]),
        (vec!["compressor.name=\"magic\""], vec!["compressor"]),
        (vec!["compressor={ name = \"qsgd\", levels = 0 }"], vec!["levels"]),
        (vec!["compressor={ name = \"qsgd\", block = 0 }"], vec!["compressor.block"]),
        // QSGD's old option name reads, and its error names the new one.
        (vec!["compressor={ name = \"qsgd\", bucket = 0 }"], vec!["compressor.block"]),
        (vec!["compressor={ name = \"terngrad\", c = -1.0 }"], vec!["compressor.c"]),
        (vec!["compressor={ name = \"terngrad\", c = nan }"], vec!["compressor.c"]),
        (vec!["compressor={ name = \"threshold\", threshold = -1.0 }"], vec!["threshold"]),
        (vec!["compressor={ name = \"signum\", momentum = 1.0 }"], vec!["compressor.momentum", "[0, 1)"]),
        (vec!["compressor={ name = \"eightbit\", block = 0 }"], vec!["compressor.block"]),
        (vec!["compressor={ name = \"powersgd\", rank = 0 }"], vec!["compressor.rank"]),
        (vec!["compressor={ name = \"powersgd\", start_iter = 1 }"], vec!["compressor.start_iter"]),
        (
            vec!["compressor={ name = \"signsgd\" }", "comm.topology=\"allreduce\""],
            vec!["comm.topology", "allgather"],
        ),
        (
            vec!["compressor={ name = \"powersgd\" }", "comm.topology=\"allgather\""],
            vec!["comm.topology", "allreduce"],
        ),
    ]
}

/// The data set's sizes and the models.
fn data_and_model_values() -> Vec<ConfigCase<'static>> {
    let lstm = ["data.dataset=\"synthetic-tokens\"", "model.name=\"lstm\""];
    vec![
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
    ]
}

/// The schedule, training, communication, strategy, compression and the
/// network model (`bad_calibration`: a `--set` naming a file that is not a calibration).
fn schedule_comm_and_network_values(bad_calibration: &str) -> Vec<ConfigCase<'_>> {
    vec![
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
        (
            vec!["strategy={ kind = \"celgc\", outer = { name = \"nesterov\", lr = 0.0 } }"],
            vec!["strategy.outer.lr"],
        ),
        (
            vec!["strategy={ kind = \"celgc\", outer = { name = \"nesterov\", momentum = 1.0 } }"],
            vec!["strategy.outer.momentum"],
        ),
        (
            vec!["strategy={ kind = \"celgc\", outer = { name = \"adam\" } }"],
            vec!["strategy", "outer", "adam"],
        ),
        (vec!["strategy={ outer = { name = \"nesterov\" } }"], vec!["strategy.outer"]),
        // Local updates and Streaming DiLoCo (issue #36).
        (vec!["strategy={ kind = \"local\", period = 0 }"], vec!["strategy.period"]),
        (vec!["strategy={ kind = \"local\", period = 8, delay = 8 }"], vec!["strategy.delay"]),
        (vec!["strategy={ kind = \"local\", period = 8, delay = 1, mix = 1.5 }"], vec!["strategy.mix"]),
        (vec!["strategy={ kind = \"local\", period = 8, fragments = 0 }"], vec!["strategy.fragments"]),
        (
            vec!["strategy={ kind = \"local\", period = 64, fragments = 40, compress_change = true }"],
            vec!["strategy.fragments", "tensors"],
        ),
        (
            vec!["strategy={ kind = \"local\", outer = { name = \"adam\" } }"],
            vec!["strategy", "outer", "adam"],
        ),
        (
            vec![
                "compressor={ name = \"signsgd\" }",
                "strategy={ kind = \"local\", compress_change = true }",
            ],
            vec!["compressor.name", "majority vote"],
        ),
        (vec!["strategy={ fragments = 2 }"], vec!["strategy.fragments"]),
        (vec!["compression.local_clip=nan"], vec!["compression.local_clip"]),
        (vec!["compression.dgc_momentum=2.0"], vec!["compression.dgc_momentum"]),
        (vec!["network.links_bps=[-1.0]"], vec!["network.links_bps"]),
        (vec!["network.allreduce=\"butterfly\""], vec!["network.allreduce"]),
        (
            vec!["network.calibration=[\"/nonexistent/link.json\"]"],
            vec!["network.calibration", "/nonexistent/link.json"],
        ),
        (vec![bad_calibration], vec!["network.calibration", "not a calibration"]),
        (vec!["compression.bucket_mb=0"], vec!["compression.bucket_mb"]),
        (vec!["compression.bucket_mb=nan"], vec!["compression.bucket_mb"]),
        (vec!["compression.bucket_mb=-4"], vec!["compression.bucket_mb"]),
    ]
}

/// Data options (normalization, BPTT, augmentation), unknown keys and
/// values that are not TOML.
fn option_key_and_syntax_values() -> Vec<ConfigCase<'static>> {
    vec![
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
    ]
}

/// Configuration files that are not TOML, not a configuration, or not a file.
fn config_file_cases(root: &Path, ids: &mut Ids, cases: &mut Vec<Case>) {
    for (what, bytes) in [
        ("TOML syntax error", b"workers = [1, 2\n".to_vec()),
        ("binary garbage", (0..=255u8).cycle().take(4096).collect::<Vec<u8>>()),
        ("a duplicated key", b"workers = 2\nworkers = 3\n".to_vec()),
        ("a table where a value belongs", b"[workers]\nx = 1\n".to_vec()),
    ] {
        let id = ids.next("config");
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
    let id = ids.next("config");
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
