//! The job's progress as its rank 0 reports it: the steps done, rewritten
//! after every step in a file the supervisor gives the job
//! (`train --progress-file`; `steps.jsonl` is written in batches, at
//! checkpoints and evaluations, so it trails the run), and the record of a
//! restart, written once the restarted job trains again.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};

pub struct Progress {
    path: PathBuf,
    /// Steps done, as last read.
    steps: Option<u64>,
    /// When `steps` last changed.
    changed: Instant,
}

impl Progress {
    /// The progress file of a run: in its directory, which every host shares.
    pub fn new(run_dir: &Path) -> Self {
        Self { path: run_dir.join("launch-progress"), steps: None, changed: Instant::now() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Before a job starts: its steps are its own to report (and the run
    /// directory, which holds the file, exists).
    pub fn clear(&mut self) -> Result<()> {
        self.steps = None;
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("removing {}", self.path.display()))
            }
            _ => Ok(()),
        }
    }

    pub fn poll(&mut self) {
        // A read that catches a write half done does not parse: the last value stands.
        let read = std::fs::read_to_string(&self.path).ok().and_then(|t| t.trim().parse::<u64>().ok());
        if read.is_some() && read != self.steps {
            self.steps = read;
            self.changed = Instant::now();
        }
    }

    /// Whether the running job has reported a step.
    pub fn reported(&self) -> bool {
        self.steps.is_some()
    }

    /// Steps done as the job last reported them.
    pub fn steps_done(&self) -> u64 {
        self.steps.unwrap_or(0)
    }

    pub fn since_last_step(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.changed).as_secs_f64()
    }
}

/// A restart's record, kept until the restarted job trains again.
pub struct Pending {
    line: serde_json::Value,
    ended: Instant,
    resume_from: u64,
}

impl Pending {
    pub fn new(line: serde_json::Value, ended: Instant, resume_from: u64) -> Self {
        Self { line, ended, resume_from }
    }

    /// Whether the new job has done a step past its checkpoint.
    pub fn resumed(&self, p: &Progress) -> bool {
        p.changed > self.ended && p.steps_done() > self.resume_from
    }

    /// Appends the record to `membership.jsonl`, with the seconds from the
    /// old job's end to the new one's first step (null if it never trained).
    pub fn write(mut self, run_dir: &Path, resumed: bool) -> Result<()> {
        let seconds = resumed.then(|| self.ended.elapsed().as_secs_f64());
        self.line["restart_seconds"] = serde_json::json!(seconds);
        self.line["unix_time"] = serde_json::json!(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()));
        gradcomp_train::records::append_membership(run_dir, &self.line)
            .with_context(|| format!("writing {}", run_dir.join("membership.jsonl").display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_the_last_number_written_and_a_restart_waits_for_a_new_one() {
        let dir = std::env::temp_dir().join(format!("gradcomp-launch-progress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut p = Progress::new(&dir);
        p.poll();
        assert_eq!(p.steps_done(), 0, "nothing reported yet");
        std::fs::write(p.path(), format!("{:>20}\n", 42)).unwrap();
        p.poll();
        assert_eq!(p.steps_done(), 42);
        std::fs::write(p.path(), "   4").unwrap(); // a write caught half done
        p.poll();
        assert_eq!(p.steps_done(), 4, "a shorter number is still a number");
        std::fs::write(p.path(), "garbage").unwrap();
        p.poll();
        assert_eq!(p.steps_done(), 4, "what does not parse leaves the last value");
        // The job ends at step 42 with a checkpoint at 40; the new job reports 41.
        std::fs::write(p.path(), "42\n").unwrap();
        p.poll();
        let pending = Pending::new(serde_json::json!({}), Instant::now(), 40);
        p.clear().unwrap();
        p.poll();
        assert!(!pending.resumed(&p), "the old job's count is not the new job's");
        std::thread::sleep(std::time::Duration::from_millis(5));
        std::fs::write(p.path(), "41\n").unwrap();
        p.poll();
        assert!(pending.resumed(&p));
        pending.write(&dir, true).unwrap();
        let line: serde_json::Value =
            serde_json::from_str(std::fs::read_to_string(dir.join("membership.jsonl")).unwrap().trim())
                .unwrap();
        assert!(line["restart_seconds"].as_f64().is_some());
        std::fs::remove_dir_all(&dir).ok();
    }
}
