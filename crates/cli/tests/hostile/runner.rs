//! Running a case through the binary with a deadline, and judging how it ended.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::case::{Action, Expect};
use super::files::bin;

/// Runs `args` (sending the signals `action` names) with a deadline; kills
/// it and reports a hang past it.
pub fn run_case(
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
pub fn run(args: &[String], deadline: Duration) -> Result<(Option<i32>, String, String), String> {
    run_case(args, &Action::Run, deadline)
}

/// Why a finished case is not clean, if it is not.
pub fn judge(expect: &Expect, code: Option<i32>, stderr: &str) -> Option<String> {
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
