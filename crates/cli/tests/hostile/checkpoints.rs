//! Cases on a real run: damaged checkpoints and records, resumes, signals.

use std::path::Path;
use std::time::Duration;

use super::case::{error, Action, Case, Expect};
use super::files::*;
use super::runner::run;

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
pub fn checkpoint_cases(root: &Path, cases: &mut Vec<Case>) {
    let base = base_run(root);
    let damages = [file_damages(&base), pointer_damages()].into_iter().flatten();
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
        ("data.batch_size=8", "data.batch_size"),
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

/// Damage done to a copy of a run, given its directory.
type Damage = Box<dyn Fn(&Path)>;

/// A damage's name, the damage, and what the error must name.
type NamedDamage = (&'static str, Damage, &'static [&'static str]);

/// The checkpoint's files damaged: cut, extended, flipped, replaced or
/// missing, from the latest checkpoint of `base`.
fn file_damages(base: &Path) -> Vec<NamedDamage> {
    let state = std::fs::read(latest(base).join("state.bin")).unwrap();
    let rank1 = std::fs::read(latest(base).join("rank-1.bin")).unwrap();
    let flip = |mut b: Vec<u8>, at: usize| {
        b[at] ^= 0x10;
        b
    };
    let file = |name: &'static str, bytes: Vec<u8>| -> Damage {
        Box::new(move |run: &Path| write(&latest(run).join(name), &bytes))
    };
    vec![
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
    ]
}

/// The `latest` pointer damaged, and the checkpoints directory missing.
fn pointer_damages() -> Vec<NamedDamage> {
    vec![
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
    ]
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
pub fn record_cases(root: &Path, cases: &mut Vec<Case>) {
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
pub fn signal_cases(root: &Path, cases: &mut Vec<Case>) {
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
