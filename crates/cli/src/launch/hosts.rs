//! The hosts a job may run on: the file that lists them, read again at
//! every probe (so a host may be added while the job runs), and the probe
//! that says whether one answers.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::user_error::UserError;

/// `--hosts FILE`: one host name per line, one rank per host; blank lines
/// and `#` comments are skipped.
pub struct HostsFile {
    path: PathBuf,
}

impl HostsFile {
    pub fn new(path: &Path) -> Self {
        Self { path: path.to_path_buf() }
    }

    pub fn read(&self) -> Result<Vec<String>, UserError> {
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| UserError(format!("--hosts {}: {e}", self.path.display())))?;
        parse(&text).map_err(|e| UserError(format!("--hosts {}: {e}", self.path.display())))
    }
}

fn parse(text: &str) -> Result<Vec<String>, String> {
    let mut hosts: Vec<String> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if line.split_whitespace().count() > 1 {
            return Err(format!(
                "line {} holds `{line}`: one host name per line (gradcomp runs one rank per host, which uses the host's cores)",
                i + 1
            ));
        }
        if hosts.iter().any(|h| h == line) {
            return Err(format!("line {}: host {line} is listed twice", i + 1));
        }
        hosts.push(line.to_string());
    }
    if hosts.is_empty() {
        return Err("no hosts: list one host name per line".into());
    }
    Ok(hosts)
}

/// Whether a host answers: `AGENT HOST true`, with the agent mpirun uses
/// to start its daemons there, within a time bound.
#[derive(Clone)]
pub struct Prober {
    agent: Vec<String>,
    limit: Duration,
}

/// ssh that never asks for a password and gives up on a silent host.
pub const DEFAULT_AGENT: &str = "ssh -o BatchMode=yes -o ConnectTimeout=5";

impl Prober {
    pub fn new(agent: &str) -> Self {
        Self { agent: agent.split_whitespace().map(String::from).collect(), limit: Duration::from_secs(10) }
    }

    /// Probes `hosts` at once (a silent host costs the bound, not the
    /// bound times the hosts); true for each that answers.
    pub fn alive(&self, hosts: &[String]) -> Vec<bool> {
        std::thread::scope(|s| {
            let probes: Vec<_> = hosts.iter().map(|h| s.spawn(move || self.answers(h))).collect();
            probes.into_iter().map(|p| p.join().unwrap_or(false)).collect()
        })
    }

    /// The hosts of `hosts` that answer, in their order.
    pub fn answering(&self, hosts: &[String]) -> Vec<String> {
        hosts.iter().zip(self.alive(hosts)).filter(|(_, a)| *a).map(|(h, _)| h.clone()).collect()
    }

    fn answers(&self, host: &str) -> bool {
        let Some((program, args)) = self.agent.split_first() else { return false };
        let child = Command::new(program)
            .args(args)
            .args([host, "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let Ok(mut child) = child else { return false };
        let start = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) if start.elapsed() < self.limit => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    child.kill().ok();
                    child.wait().ok();
                    return false;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hosts_file_is_names_comments_and_blank_lines() {
        let text = "# the cluster\nnode1\n\n  node2  # rack 2\nnode3\n";
        assert_eq!(parse(text).unwrap(), ["node1", "node2", "node3"]);
    }

    #[test]
    fn bad_hosts_files_say_what_is_wrong() {
        assert!(parse("").unwrap_err().contains("no hosts"));
        assert!(parse("# only a comment\n").unwrap_err().contains("no hosts"));
        assert!(parse("a\nb slots=2\n")
            .unwrap_err()
            .contains("line 2 holds `b slots=2`: one host name per line"));
        assert!(parse("a\nb\na\n").unwrap_err().contains("line 3: host a is listed twice"));
    }

    #[test]
    fn a_probe_answers_for_a_host_that_runs_true_and_not_for_one_that_fails() {
        // `env HOST true` runs `true` with HOST=… set: "reachable".
        let ok = Prober::new("env");
        assert_eq!(ok.alive(&["X=1".into(), "Y=2".into()]), [true, true]);
        // `false HOST true` fails: unreachable, as ssh exits 255.
        assert_eq!(Prober::new("false").alive(&["h".into()]), [false]);
        // An agent that cannot be started answers for no host.
        assert_eq!(Prober::new("/nonexistent/agent").alive(&["h".into()]), [false]);
    }

    #[test]
    fn a_host_that_hangs_is_dead_after_the_bound() {
        let p = Prober {
            agent: vec!["sh".into(), "-c".into(), "sleep 30".into()],
            limit: Duration::from_millis(300),
        };
        let start = Instant::now();
        assert_eq!(p.alive(&["h".into()]), [false]);
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
