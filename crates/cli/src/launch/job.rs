//! One `mpirun` job: started in a process group of its own (a terminal's
//! Ctrl-C reaches the supervisor, which asks the job for a checkpoint,
//! instead of mpirun, which would kill the ranks), its stderr passed
//! through and its last lines kept, and what they say about which host
//! failed.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

/// How many of the job's last stderr lines are kept to find the fault in.
const TAIL: usize = 400;

pub struct Job {
    child: Child,
    tail: Arc<Mutex<VecDeque<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Job {
    pub fn start(command: &[OsString]) -> Result<Self> {
        let (program, args) = command.split_first().context("an empty mpirun command")?;
        let mut cmd = Command::new(program);
        // SAFETY: prctl(2) only, between fork and exec: mpirun gets SIGTERM
        // when the supervisor dies (even by SIGKILL), instead of running on
        // as an orphan no one watches.
        #[cfg(target_os = "linux")]
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let mut child = cmd
            .args(args)
            .process_group(0)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| {
            format!("starting {} (is Open MPI installed? --mpirun names another)", program.to_string_lossy())
        })?;
        let stderr = child.stderr.take().context("mpirun's stderr")?;
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL)));
        let kept = Arc::clone(&tail);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = writeln!(std::io::stderr(), "{line}");
                let mut t = kept.lock().unwrap_or_else(|e| e.into_inner());
                if t.len() == TAIL {
                    t.pop_front();
                }
                t.push_back(line);
            }
        });
        Ok(Self { child, tail, reader: Some(reader) })
    }

    /// The exit status once mpirun has ended, its stderr read to the end
    /// (or for at most 2 s: a launch agent that outlives mpirun holds it open).
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        let status = self.child.try_wait().context("waiting on mpirun")?;
        if status.is_some() {
            if let Some(r) = self.reader.take() {
                let start = std::time::Instant::now();
                while !r.is_finished() && start.elapsed() < std::time::Duration::from_secs(2) {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
        }
        Ok(status)
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends `signal` to mpirun, which forwards SIGUSR1 to every rank.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, signal);
        }
    }

    /// Sends `signal` to mpirun's process group: mpirun and the launch
    /// agents it started (ssh), whose end ends the daemons they reach.
    pub fn signal_group(&self, signal: i32) {
        // SAFETY: kill(2) on the group our child leads (process_group(0)).
        unsafe {
            libc::kill(-(self.child.id() as libc::pid_t), signal);
        }
    }

    pub fn tail(&self) -> Vec<String> {
        self.tail.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }
}

impl Drop for Job {
    /// A supervisor that ends (an error of its own) takes its job along.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.signal(libc::SIGTERM);
            self.child.wait().ok();
        }
    }
}

/// The host a job's last lines blame first, with the line that does, given
/// the hosts of its ranks in rank order (mpirun places rank i on the i-th
/// host of `--host`): a rank the heartbeat found silent, a rank that died
/// of a signal, a daemon mpirun lost. Only the first: what follows is the
/// job coming down (mpirun wakes stopped ranks with SIGCONT before it ends
/// them, and a woken rank then finds its peers gone and names one of
/// them). Other dead hosts are found by probing.
pub fn blamed(lines: &[String], hosts: &[String]) -> Option<(String, String)> {
    lines.iter().find_map(|line| {
        let host = after(line, "MPI rank ")
            .filter(|rest| rest.contains(" stopped responding"))
            .and_then(|rest| word(rest).parse::<usize>().ok())
            .and_then(|rank| hosts.get(rank).cloned())
            .or_else(|| {
                after(line, " on node ")
                    .filter(|_| line.contains("exited on signal"))
                    .map(|r| word(r).to_string())
            })
            .or_else(|| {
                after(line, "Remote daemon:").and_then(|r| after(r, " on node ")).map(|r| word(r).to_string())
            });
        host.filter(|h| hosts.contains(h)).map(|h| (h, line.trim().to_string()))
    })
}

fn after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|i| &line[i + marker.len()..])
}

/// The leading word of `s`, without trailing punctuation.
fn word(s: &str) -> &str {
    let w = s.split_whitespace().next().unwrap_or("");
    w.trim_end_matches([',', '.', ':', ';', ')'])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts() -> Vec<String> {
        ["h1", "h2", "h3"].map(String::from).to_vec()
    }

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(String::from).collect()
    }

    #[test]
    fn the_heartbeat_names_a_rank_and_its_host_follows_the_order() {
        let l = lines("error: MPI rank 2 stopped responding: no heartbeat for 10.0 s (bound 10 s, comm.heartbeat_seconds) while rank 1 waited in allreduce_sum_f32; it is stopped, dead or cut off; ending the job");
        let (host, line) = blamed(&l, &hosts()).unwrap();
        assert_eq!(host, "h3");
        assert!(line.contains("rank 2 stopped responding"));
    }

    #[test]
    fn mpirun_names_a_killed_rank_or_a_lost_daemon_by_node() {
        let killed =
            lines("mpirun noticed that process rank 1 with PID 0 on node h2 exited on signal 9 (Killed).");
        assert_eq!(blamed(&killed, &hosts()).unwrap().0, "h2");
        let lost = lines(
            "ORTE has lost communication with a remote daemon.\n\n  HNP daemon   : [[4333,0],0] on node head\n  Remote daemon: [[4333,0],2] on node h3\n",
        );
        let b = blamed(&lost, &hosts());
        assert_eq!(
            b.iter().map(|(h, _)| h.as_str()).collect::<Vec<_>>(),
            ["h3"],
            "the HNP's node is not blamed"
        );
    }

    #[test]
    fn unrelated_lines_and_unknown_hosts_blame_nobody() {
        let l = lines("error: worker 1: gradient holds NaN\nRemote daemon: [[1,0],2] on node elsewhere\nMPI rank 7 stopped responding\n");
        assert!(blamed(&l, &hosts()).is_none());
    }

    #[test]
    fn only_the_first_blame_counts() {
        // A stopped rank 1, named; then rank 1, woken by mpirun's SIGCONT, names rank 0, already gone.
        let l = lines("error: MPI rank 1 stopped responding: no heartbeat for 2.4 s\nSIGTERM: checkpointing\nerror: MPI rank 0 stopped responding: no heartbeat for 2.4 s");
        assert_eq!(blamed(&l, &hosts()).unwrap().0, "h2");
    }
}
