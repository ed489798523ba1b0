//! The run's progress as the job records it: the last step in
//! `steps.jsonl` (rank 0 appends one line a step), and the record of a
//! restart, written once the restarted job trains again.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};

/// How much of the end of `steps.jsonl` is read to find its last record.
const TAIL_BYTES: u64 = 256 * 1024;

pub struct Progress {
    path: PathBuf,
    /// The file's inode and length when last read: a resume rewrites it
    /// (dropping the steps after its checkpoint), then appends.
    version: (u64, u64),
    last_step: Option<u64>,
    /// When the last step changed.
    changed: Instant,
}

impl Progress {
    pub fn new(run_dir: &Path) -> Self {
        let mut p = Self {
            path: run_dir.join("steps.jsonl"),
            version: (0, 0),
            last_step: None,
            changed: Instant::now(),
        };
        p.poll();
        p
    }

    pub fn poll(&mut self) {
        let version = std::fs::metadata(&self.path).map_or((0, 0), |m| (m.ino(), m.len()));
        if version == self.version {
            return;
        }
        self.version = version;
        let step = last_step(&self.path);
        if step != self.last_step {
            self.last_step = step;
            self.changed = Instant::now();
        }
    }

    /// Steps done as far as the records say.
    pub fn steps_done(&self) -> u64 {
        self.last_step.map_or(0, |s| s + 1)
    }

    pub fn since_last_step(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.changed).as_secs_f64()
    }
}

/// The `step` of the file's last complete line.
fn last_step(path: &Path) -> Option<u64> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES))).ok()?;
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    let complete = &text[..text.rfind('\n')?];
    complete
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?.get("step")?.as_u64())
}

/// A restart's record, kept until the restarted job trains again.
pub struct Pending {
    line: serde_json::Value,
    ended: Instant,
    resume_from: u64,
    /// The records' version when the old job ended.
    stale: (u64, u64),
}

impl Pending {
    pub fn new(line: serde_json::Value, ended: Instant, resume_from: u64, progress: &Progress) -> Self {
        Self { line, ended, resume_from, stale: progress.version }
    }

    /// Whether the new job has recorded a step: the records changed since
    /// the old job ended and reach past the checkpoint (a resume first cuts
    /// them back to it).
    pub fn resumed(&self, p: &Progress) -> bool {
        p.version != self.stale && p.last_step.is_some_and(|s| s >= self.resume_from)
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
    fn the_last_complete_line_gives_the_step() {
        let dir = std::env::temp_dir().join(format!("gradcomp-launch-progress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let steps = dir.join("steps.jsonl");
        assert_eq!(Progress::new(&dir).steps_done(), 0, "no records yet");
        std::fs::write(&steps, "{\"step\":0}\n{\"step\":1}\n{\"step\":2,\"lo").unwrap();
        let mut p = Progress::new(&dir);
        assert_eq!(p.steps_done(), 2, "a line being written is not a step done");
        // A resume cuts the records back to its checkpoint, then appends.
        let pending = Pending::new(serde_json::json!({}), Instant::now(), 1, &p);
        std::fs::write(&steps, "{\"step\":0}\n").unwrap();
        p.poll();
        assert!(!pending.resumed(&p));
        std::fs::write(&steps, "{\"step\":0}\n{\"step\":1}\n").unwrap();
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
