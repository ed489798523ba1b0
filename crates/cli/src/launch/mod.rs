//! `gradcomp launch`: a training job under `mpirun` across the hosts of a
//! file, kept going when hosts are lost (issue #27).
//!
//! The supervisor runs `mpirun -np N --host h1,…,hN gradcomp train
//! --backend mpi …` with one rank per host that answers, and watches it.
//! When the job fails and its output or a probe blames hosts (a rank the
//! heartbeat found silent, a rank killed by a signal, a daemon mpirun lost,
//! a host that no longer answers), it resumes the run from the latest
//! complete checkpoint on the hosts that remain, as long as at least
//! `--min-workers` do; the trainer re-shards the data and folds or drops the
//! lost ranks' memories (`[elastic]`), or, for local updates (`kind =
//! "local"`), restarts every worker from the shared model θ_outer with its
//! memories reset, from checkpoints taken at outer rounds (a multiple of
//! the period: checked here). A failure that blames no host (a bad
//! configuration, a diverged run) ends the launch with the job's exit code:
//! a restart would only repeat it.
//!
//! Hosts outside the job (lost ones, or lines added to the hosts file) are
//! probed every `--probe-seconds`. One that answers joins at the next
//! checkpoint: once a checkpoint is committed after it answered, the
//! supervisor sends the job SIGUSR1 (the ranks agree on a step and
//! checkpoint again; nothing is lost) and restarts it with the host. Every
//! restart is a line of the run's `membership.jsonl`: its cause, the hosts,
//! the steps lost and the seconds it took.
//!
//! Modules: `hosts` (the file and the probe), `job` (one mpirun and what its
//! output blames), `progress` (the steps the job reports, and restart records).

mod hosts;
mod job;
mod progress;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args as ClapArgs;
use gradcomp_train::trainer::latest_checkpoint_step;

use crate::train::TrainArgs;
use crate::user_error::UserError;
use hosts::{HostsFile, Prober, DEFAULT_AGENT};
use job::Job;
use progress::{Pending, Progress};

#[derive(ClapArgs)]
pub struct LaunchArgs {
    /// The hosts: one name per line (one rank each), `#` comments. Read
    /// again at every probe, so hosts may be added while the job runs.
    #[arg(long)]
    hosts: PathBuf,
    /// Go on while at least this many hosts remain (default: the
    /// configuration's elastic.min_workers).
    #[arg(long)]
    min_workers: Option<usize>,
    /// How to reach a host, as ssh is called: mpirun's `plm_rsh_agent`, and
    /// the probe `AGENT HOST true` [default: ssh -o BatchMode=yes -o ConnectTimeout=5].
    #[arg(long)]
    agent: Option<String>,
    /// The mpirun command with its own options, split at spaces.
    #[arg(long, default_value = "mpirun")]
    mpirun: String,
    /// Seconds between probes of the hosts outside the job.
    #[arg(long, default_value_t = 5.0)]
    probe_seconds: f64,
    /// Give up after this many restarts after failures (a fault that keeps coming back).
    #[arg(long, default_value_t = 10)]
    max_restarts: usize,
    /// The longest a job may take to report its first step (loading data
    /// and checkpoint included) before it is ended and started again: a
    /// daemon that never came up, a host that accepts a login and hangs.
    #[arg(long, default_value_t = 600.0)]
    start_seconds: f64,
    #[command(flatten)]
    train: TrainArgs,
}

pub fn run(a: &LaunchArgs) -> Result<()> {
    let job_pid = Arc::new(AtomicI32::new(0));
    let signal = watch_signals(&job_pid)?;
    if let Some(b) = a.train.backend().filter(|b| *b != "mpi") {
        return Err(UserError(format!(
            "--backend {b}: gradcomp launch runs the MPI backend; leave --backend out"
        ))
        .into());
    }
    if a.train.progress_file().is_some() {
        return Err(UserError(
            "--progress-file: gradcomp launch gives the job its own (in the run directory)".into(),
        )
        .into());
    }
    if !(a.probe_seconds.is_finite() && a.probe_seconds > 0.0) {
        return Err(UserError(format!(
            "--probe-seconds {}: must be a number of seconds > 0",
            a.probe_seconds
        ))
        .into());
    }
    let cfg = a.train.load_config()?;
    if let Some(why) = cfg.fixed_workers_reason() {
        return Err(UserError(format!(
            "gradcomp launch changes the number of workers as hosts are lost and return, and this run's may not change: {why}; run it with mpirun instead"
        ))
        .into());
    }
    if let Some(why) = local_checkpoints_off_rounds(&cfg) {
        return Err(UserError(format!("gradcomp launch with local updates (kind = \"local\"): {why}")).into());
    }
    let min_workers = a.min_workers.unwrap_or(cfg.elastic.min_workers);
    if min_workers == 0 {
        return Err(UserError(
            "gradcomp launch needs the fewest hosts to go on with: pass --min-workers K (or set elastic.min_workers)".into(),
        )
        .into());
    }
    let run_dir = cfg.run_dir();
    Supervisor {
        a,
        min_workers,
        hosts: HostsFile::new(&a.hosts),
        prober: Prober::new(a.agent.as_deref().unwrap_or(DEFAULT_AGENT)),
        exe: std::env::current_exe()?,
        signal,
        job_pid,
        restarts: 0,
        progress: Progress::new(&run_dir),
        run_dir,
        pending: None,
    }
    .run()
}

/// Why a local-update run's periodic checkpoints would fall between outer
/// rounds, if they would. A restart with another number of workers goes on
/// from θ_outer and discards the local steps since the last round
/// (docs/RELIABILITY.md); the trainer runs the round due at a checkpoint's
/// step before writing it, so checkpoints every multiple of the period H
/// discard nothing (one fragment).
fn local_checkpoints_off_rounds(cfg: &gradcomp_train::config::TrainConfig) -> Option<String> {
    let (every, period) = (cfg.train.checkpoint_every_steps, cfg.strategy.period);
    (cfg.restarts_from_outer_model() && every > 0 && !every.is_multiple_of(period.max(1))).then(|| {
        format!(
            "train.checkpoint_every_steps = {every} is not a multiple of strategy.period = {period}: a restart with fewer or more hosts goes on from the shared model θ_outer and would discard the local steps since the last outer round; checkpoint at outer rounds (a multiple of {period})"
        )
    })
}

/// How a job starts: as the user asked (the first), from the latest
/// checkpoint, or over a run that has none yet.
#[derive(Clone, Copy)]
enum Start {
    AsAsked,
    Resume,
    Fresh,
}

/// How a job ended.
enum End {
    Finished,
    /// The supervisor was signalled: the job checkpointed and stopped.
    Interrupted(i32),
    /// The job stopped at a checkpoint so that these hosts could join.
    Joining(Vec<String>),
    /// The job failed; `stalled`: it was ended for reporting no step in time.
    Failed {
        status: ExitStatus,
        stalled: bool,
    },
}

struct Supervisor<'a> {
    a: &'a LaunchArgs,
    min_workers: usize,
    hosts: HostsFile,
    prober: Prober,
    exe: PathBuf,
    signal: Arc<AtomicI32>,
    /// The running mpirun's pid, for a second signal to end it.
    job_pid: Arc<AtomicI32>,
    restarts: usize,
    run_dir: PathBuf,
    progress: Progress,
    /// The record of the last restart, written once the job trains again.
    pending: Option<Pending>,
}

impl Supervisor<'_> {
    fn run(&mut self) -> Result<()> {
        let listed = self.hosts.read()?;
        let mut active = self.prober.answering(&listed);
        if active.len() < self.min_workers {
            return Err(UserError(format!(
                "{} of the {} hosts in {} answer ({}), fewer than --min-workers {}: check them with `{} HOST true`",
                active.len(),
                listed.len(),
                self.a.hosts.display(),
                if active.is_empty() { "none".into() } else { active.join(", ") },
                self.min_workers,
                self.a.agent.as_deref().unwrap_or(DEFAULT_AGENT)
            ))
            .into());
        }
        let mut start = Start::AsAsked;
        loop {
            eprintln!("launch: {} worker(s) on {}", active.len(), active.join(", "));
            self.progress.clear()?;
            let mut job = Job::start(&self.command(&active, start))?;
            self.job_pid.store(job.pid(), Ordering::SeqCst);
            let end = self.watch(&mut job, &active)?;
            let ended = Instant::now();
            match end {
                End::Finished => {
                    self.flush_pending(false)?;
                    return Ok(());
                }
                End::Interrupted(code) => {
                    eprintln!(
                        "launch: stopped by a signal; the checkpoint is written: run again with --resume"
                    );
                    std::process::exit(code);
                }
                End::Joining(joined) => {
                    self.flush_pending(false)?;
                    active.extend(joined.iter().cloned());
                    let cause = format!("{} answered again", joined.join(", "));
                    self.begin_restart("hosts joined", &cause, &joined, &active, ended)?;
                }
                End::Failed { status, stalled } => {
                    self.flush_pending(false)?;
                    active = self.survivors(&job, status, stalled, &active, ended)?;
                }
            }
            start =
                if latest_checkpoint_step(&self.run_dir).is_some() { Start::Resume } else { Start::Fresh };
        }
    }

    /// `mpirun … gradcomp train --backend mpi …` on `active`, one rank per host.
    fn command(&self, active: &[String], start: Start) -> Vec<OsString> {
        let mut c: Vec<OsString> = self.a.mpirun.split_whitespace().map(OsString::from).collect();
        c.extend(["-np".into(), active.len().to_string().into(), "--host".into(), active.join(",").into()]);
        if let Some(agent) = &self.a.agent {
            c.extend(["--mca".into(), "plm_rsh_agent".into(), agent.into()]);
        }
        c.extend([self.exe.clone().into(), "train".into()]);
        c.extend(self.a.train.what_to_train());
        c.extend([
            "--backend".into(),
            "mpi".into(),
            "--set".into(),
            format!("workers={}", active.len()).into(),
            "--progress-file".into(),
            self.progress.path().into(),
        ]);
        let (resume, overwrite, allow_change) = self.a.train.start_flags();
        let flags: &[(&str, bool)] = match start {
            Start::AsAsked => {
                &[("--resume", resume), ("--overwrite", overwrite), ("--allow-change", allow_change)]
            }
            Start::Resume => &[("--resume", true), ("--allow-change", true)],
            Start::Fresh => &[("--overwrite", true)],
        };
        c.extend(flags.iter().filter(|(_, on)| *on).map(|(f, _)| OsString::from(f)));
        c
    }

    /// Waits for the job to end, meanwhile writing the last restart's
    /// record once it trains, forwarding a signal as a checkpoint request,
    /// and probing the hosts outside it.
    fn watch(&mut self, job: &mut Job, active: &[String]) -> Result<End> {
        let every = Duration::from_secs_f64(self.a.probe_seconds);
        let mut probe: Option<JoinHandle<Vec<String>>> = None;
        let mut next_probe = Instant::now() + every;
        let mut joining = Joining::default();
        let mut forwarded = None;
        let started = Instant::now();
        let mut stalled: Option<Instant> = None;
        loop {
            if let Some(status) = job.try_wait()? {
                return Ok(self.ending(status, forwarded, joining, stalled.is_some()));
            }
            if let Some(since) = stalled {
                if since.elapsed() > Duration::from_secs(30) {
                    job.signal_group(libc::SIGKILL); // mpirun did not end on SIGTERM
                }
            } else if !self.progress.reported() && started.elapsed().as_secs_f64() > self.a.start_seconds {
                eprintln!(
                    "launch: the job reported no step in {} s (--start-seconds): ending it",
                    self.a.start_seconds
                );
                job.signal_group(libc::SIGTERM);
                stalled = Some(Instant::now());
            }
            let sig = self.signal.load(Ordering::SeqCst);
            if sig > 0 && forwarded.is_none() {
                eprintln!("launch: asking the job to checkpoint and stop (SIGUSR1)");
                job.signal(libc::SIGUSR1);
                forwarded = Some(sig);
            }
            self.progress.poll();
            if self.pending.as_ref().is_some_and(|p| p.resumed(&self.progress)) {
                self.flush_pending(true)?;
            }
            let latest = latest_checkpoint_step(&self.run_dir);
            if probe.as_ref().is_some_and(|p| p.is_finished()) {
                let answering = probe.take().and_then(|p| p.join().ok()).unwrap_or_default();
                joining.saw(answering, latest);
            }
            if probe.is_none() && Instant::now() >= next_probe {
                probe = Some(self.probe_outside(active));
                next_probe = Instant::now() + every;
            }
            if forwarded.is_none() && !joining.asked && joining.due(latest) {
                eprintln!(
                    "launch: {} answer(s) again and a checkpoint is committed: stopping the job to let them join",
                    joining.hosts.join(", ")
                );
                job.signal(libc::SIGUSR1);
                joining.asked = true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn ending(&self, status: ExitStatus, forwarded: Option<i32>, joining: Joining, stalled: bool) -> End {
        if let Some(sig) = forwarded {
            End::Interrupted(128 + sig)
        } else if status.success() {
            End::Finished
        } else if joining.asked && joining.due(latest_checkpoint_step(&self.run_dir)) {
            End::Joining(joining.hosts)
        } else {
            End::Failed { status, stalled }
        }
    }

    /// The listed hosts outside `active` that answer, probed in the background.
    fn probe_outside(&self, active: &[String]) -> JoinHandle<Vec<String>> {
        let listed = self.hosts.read();
        let prober = self.prober.clone();
        let active = active.to_vec();
        std::thread::spawn(move || {
            let outside: Vec<String> = match listed {
                Ok(l) => l.into_iter().filter(|h| !active.contains(h)).collect(),
                Err(e) => {
                    eprintln!("launch: {e} (keeping the hosts read before)");
                    Vec::new()
                }
            };
            prober.answering(&outside)
        })
    }

    /// After a failure: the hosts to go on with, or why not.
    fn survivors(
        &mut self,
        job: &Job,
        status: ExitStatus,
        stalled: bool,
        active: &[String],
        ended: Instant,
    ) -> Result<Vec<String>> {
        let mut lost: Vec<(String, String)> = job::blamed(&job.tail(), active).into_iter().collect();
        let answering = self.prober.alive(active);
        for (h, ok) in active.iter().zip(answering) {
            if !ok && !lost.iter().any(|(l, _)| l == h) {
                lost.push((h.clone(), format!("{h} does not answer")));
            }
        }
        if lost.is_empty() && !stalled {
            eprintln!("launch: the job failed ({status}) and blames no host: not restarting (the error above says why)");
            std::process::exit(status.code().unwrap_or(1));
        }
        if lost.is_empty() {
            // Every host answers: a start that hung is tried again on all of them.
            let cause =
                format!("no step in {} s (--start-seconds), every host answers", self.a.start_seconds);
            self.count_restart(&cause)?;
            self.begin_restart("job restarted", &cause, &[], active, ended)?;
            return Ok(active.to_vec());
        }
        let names: Vec<String> = lost.iter().map(|(h, _)| h.clone()).collect();
        let cause = lost.iter().map(|(_, why)| why.as_str()).collect::<Vec<_>>().join("; ");
        let left: Vec<String> = active.iter().filter(|h| !names.contains(h)).cloned().collect();
        self.count_restart(&format!("lost {} ({cause})", names.join(", ")))?;
        if left.len() < self.min_workers {
            anyhow::bail!(
                "lost {} ({cause}): {} host(s) remain, fewer than --min-workers {}; once hosts are back, continue with the same command and --resume --allow-change",
                names.join(", "),
                left.len(),
                self.min_workers
            );
        }
        self.begin_restart("hosts lost", &cause, &names, &left, ended)?;
        Ok(left)
    }

    /// Counts a restart after a failure, refusing past --max-restarts.
    fn count_restart(&mut self, what: &str) -> Result<()> {
        self.restarts += 1;
        if self.restarts > self.a.max_restarts {
            anyhow::bail!(
                "{what}, and that would be restart {} (--max-restarts {}): stopping",
                self.restarts,
                self.a.max_restarts
            );
        }
        Ok(())
    }

    /// Says what the restart does and keeps its record for when the job trains again.
    fn begin_restart(
        &mut self,
        event: &str,
        cause: &str,
        changed: &[String],
        hosts: &[String],
        ended: Instant,
    ) -> Result<()> {
        let resume_from = latest_checkpoint_step(&self.run_dir);
        let done = self.progress.steps_done().max(resume_from.unwrap_or(0));
        let lost = done.saturating_sub(resume_from.unwrap_or(0));
        eprintln!(
            "launch: {event}: {cause}; going on with {} worker(s) from {} ({lost} step(s) to run again)",
            hosts.len(),
            resume_from.map_or("the start".to_string(), |s| format!("the checkpoint of step {s}"))
        );
        let line = serde_json::json!({
            "event": event, "cause": cause, "hosts_changed": changed, "hosts": hosts, "workers": hosts.len(),
            "steps_done": done, "resume_from": resume_from, "steps_lost": lost,
            "seconds_since_last_step": self.progress.since_last_step(ended),
        });
        self.pending = Some(Pending::new(line, ended, resume_from.unwrap_or(0)));
        Ok(())
    }

    /// Writes the last restart's record: with the seconds from the old job's
    /// end to the new one's first step when it `resumed`.
    fn flush_pending(&mut self, resumed: bool) -> Result<()> {
        if let Some(p) = self.pending.take() {
            p.write(&self.run_dir, resumed)?;
        }
        Ok(())
    }
}

/// Hosts outside the job that answered, waiting for a checkpoint to join at.
#[derive(Default)]
struct Joining {
    hosts: Vec<String>,
    /// The latest checkpoint when they answered: they join at a later one.
    since: Option<Option<u64>>,
    asked: bool,
}

impl Joining {
    fn saw(&mut self, answering: Vec<String>, checkpoint: Option<u64>) {
        if self.asked {
            return;
        }
        if answering.is_empty() {
            *self = Self::default();
        } else {
            if answering != self.hosts {
                self.since = Some(checkpoint);
            }
            self.hosts = answering;
        }
    }

    /// Whether a checkpoint was committed since the hosts answered.
    fn due(&self, checkpoint: Option<u64>) -> bool {
        matches!(self.since, Some(seen) if checkpoint > seen)
    }
}

/// SIGINT, SIGTERM, SIGHUP and SIGUSR1 reach the supervisor (mpirun has a
/// process group of its own), which asks the job for a checkpoint; a second
/// signal ends the job (SIGTERM to mpirun, `job`'s pid) and exits at once.
fn watch_signals(job: &Arc<AtomicI32>) -> Result<Arc<AtomicI32>> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
    let first = Arc::new(AtomicI32::new(0));
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP, SIGUSR1])?;
    let (seen, job) = (Arc::clone(&first), Arc::clone(job));
    std::thread::spawn(move || {
        for sig in signals.forever() {
            if seen.swap(sig, Ordering::SeqCst) > 0 {
                let pid = job.load(Ordering::SeqCst);
                if pid > 0 {
                    // SAFETY: kill(2) on mpirun's pid; no memory is involved.
                    unsafe { libc::kill(pid, libc::SIGTERM) };
                }
                std::process::exit(128 + sig);
            }
        }
    });
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_join_only_at_a_checkpoint_committed_after_they_answered() {
        let mut j = Joining::default();
        assert!(!j.due(Some(10)));
        j.saw(vec!["h3".into()], Some(10));
        assert!(!j.due(Some(10)), "the checkpoint they answered at is not a later one");
        assert!(j.due(Some(20)));
        // A host that stops answering before the checkpoint waits again.
        j.saw(Vec::new(), Some(10));
        assert!(!j.due(Some(20)));
        // Before the run's first checkpoint, the first one counts.
        let mut j = Joining::default();
        j.saw(vec!["h3".into()], None);
        assert!(j.due(Some(5)));
        // Another host answering starts the wait over.
        j.saw(vec!["h3".into(), "h4".into()], Some(5));
        assert!(!j.due(Some(5)) && j.due(Some(6)));
    }
}
