//! The hostile-input catalog (issue #12): bad data files, bad
//! configurations, damaged checkpoints and records, and signals, each run
//! through the `gradcomp` binary. Every case must end, within a deadline,
//! in a clean outcome: a one-line `error:` naming the problem (exit 1 or 2)
//! for bad input, never a panic, an abort, a hang or a silent success; a
//! signal's checkpoint and exit code for signals.
//!
//! `catalog` generates the cases and their files into a scratch directory;
//! `GRADCOMP_CATALOG_KEEP=1` keeps that directory to inspect or replay a case
//! (each case prints its command line on failure).

mod case;
mod catalog;
mod checkpoints;
mod files;
mod runner;

use std::time::Duration;

use case::Action;
use catalog::catalog;
use runner::{judge, run_case};

/// The cases the catalog holds, as docs/RELIABILITY.md counts them.
const CATALOG_CASES: usize = 238;

#[test]
fn the_hostile_catalog_ends_cleanly() {
    let root = std::env::temp_dir().join(format!("gradcomp-catalog-{}", std::process::id()));
    std::fs::remove_dir_all(&root).ok();
    let cases = catalog(&root);
    assert!(
        cases.len() >= CATALOG_CASES,
        "the catalog holds {} cases, the docs {CATALOG_CASES}",
        cases.len()
    );
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
