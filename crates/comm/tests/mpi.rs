//! The MPI backend under `mpirun` (feature `mpi`): every operation at 2 and 4
//! ranks, and the failure paths, each within a time bound.
#![cfg(feature = "mpi")]

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Outcome {
    code: Option<i32>,
    output: String,
    elapsed: Duration,
}

/// `mpirun -np N gradcomp-mpi-selftest ARGS`, killed if it outlives `limit`.
/// Each launch gets its own session directory: the tests run in parallel,
/// and concurrent `mpirun`s racing to create the shared `/tmp/ompi.<host>.<uid>`
/// fail at start-up ("mkdir ... File exists").
fn mpirun(np: usize, args: &[&str], limit: Duration) -> Outcome {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static LAUNCH: AtomicUsize = AtomicUsize::new(0);
    let session = std::env::temp_dir().join(format!(
        "gradcomp-mpi-test-{}-{}",
        std::process::id(),
        LAUNCH.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&session).expect("a session directory for mpirun");
    let start = Instant::now();
    let mut child = Command::new("mpirun")
        .args(["--oversubscribe", "-np", &np.to_string(), env!("CARGO_BIN_EXE_gradcomp-mpi-selftest")])
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_orte_tmpdir_base", &session)
        .env("TMPDIR", &session)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun is on PATH (install openmpi-bin)");
    let code = loop {
        if let Some(status) = child.try_wait().expect("waiting on mpirun") {
            break status.code();
        }
        if start.elapsed() > limit {
            child.kill().ok();
            child.wait().ok();
            std::fs::remove_dir_all(&session).ok();
            panic!("mpirun {args:?} hung past {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut output = String::new();
    child.stdout.take().unwrap().read_to_string(&mut output).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut output).unwrap();
    std::fs::remove_dir_all(&session).ok();
    Outcome { code, output, elapsed: start.elapsed() }
}

#[test]
fn every_operation_at_two_and_four_ranks() {
    for np in [2, 4] {
        let o = mpirun(np, &["ops"], Duration::from_secs(60));
        assert_eq!(o.code, Some(0), "{}", o.output);
        for r in 0..np {
            assert!(o.output.contains(&format!("rank {r} of {np}: ok")), "{}", o.output);
        }
    }
}

/// Round four's overlap: a duplicate of the world (MPI_Comm_dup under
/// MPI_THREAD_MULTIPLE) runs every operation on a thread of its own while
/// the world runs them on the main thread.
#[test]
fn a_duplicate_channel_works_beside_the_world_at_two_and_four_ranks() {
    for np in [2, 4] {
        let o = mpirun(np, &["duplicate"], Duration::from_secs(60));
        assert_eq!(o.code, Some(0), "{}", o.output);
        for r in 0..np {
            assert!(o.output.contains(&format!("rank {r} of {np}: both channels ok")), "{}", o.output);
        }
    }
}

/// Each channel has its own deadline: the world's calls returning do not
/// clear the second channel's, so a peer stalled there still ends the job.
#[test]
fn a_stall_on_the_duplicate_channel_times_out_while_the_world_works() {
    let o = mpirun(2, &["duplicate-stall"], Duration::from_secs(60));
    assert_ne!(o.code, Some(0), "{}", o.output);
    assert!(o.output.contains("MPI rank 0 timed out in allreduce"), "{}", o.output);
    assert!(!o.output.contains("unexpectedly finished"), "{}", o.output);
    assert!(o.elapsed < Duration::from_secs(30), "took {:?}", o.elapsed);
}

#[test]
fn mismatched_calls_are_errors_on_every_rank() {
    let o = mpirun(2, &["mismatch"], Duration::from_secs(60));
    assert_eq!(o.code, Some(0), "{}", o.output);
    assert!(o.output.contains("rank 0: error: workers disagree"), "{}", o.output);
    assert!(o.output.contains("rank 1: error: workers disagree"), "{}", o.output);
}

#[test]
fn a_rank_that_exits_ends_the_job_promptly() {
    let o = mpirun(2, &["exit"], Duration::from_secs(60));
    assert_ne!(o.code, Some(0));
    assert!(!o.output.contains("unexpectedly finished"), "{}", o.output);
    assert!(o.elapsed < Duration::from_secs(30), "took {:?}", o.elapsed);
}

#[test]
fn a_rank_that_panics_aborts_the_job_naming_it() {
    let o = mpirun(2, &["panic"], Duration::from_secs(60));
    assert_ne!(o.code, Some(0));
    assert!(o.output.contains("MPI rank 1 panicked"), "{}", o.output);
    assert!(o.elapsed < Duration::from_secs(30), "took {:?}", o.elapsed);
}

#[test]
fn a_stalled_rank_makes_its_peers_time_out() {
    let o = mpirun(2, &["stall"], Duration::from_secs(60));
    assert_ne!(o.code, Some(0));
    assert!(o.output.contains("MPI rank 0 timed out in allreduce"), "{}", o.output);
    // 3 s timeout plus start-up and teardown; far below the 60 s stall.
    assert!(o.elapsed < Duration::from_secs(30), "took {:?}", o.elapsed);
}

/// Issue #12: a rank stopped by SIGSTOP keeps its sockets and its MPI
/// connections open, so only the heartbeat's silence can tell; its peer
/// names it within the default bound (10 s) plus a beat, with the
/// per-operation timeout set to 120 s.
#[test]
fn a_stopped_rank_is_named_within_the_heartbeat_bound() {
    let o = mpirun(2, &["sigstop"], Duration::from_secs(100));
    assert_ne!(o.code, Some(0), "{}", o.output);
    assert!(o.output.contains("MPI rank 1 stopped responding: no heartbeat"), "{}", o.output);
    assert!(!o.output.contains("timed out in"), "{}", o.output);
    assert!(o.elapsed < Duration::from_secs(30), "took {:?}", o.elapsed);
}

/// A rank killed by SIGKILL: the job ends within the bound, the dead rank
/// named (by the heartbeat or by mpirun, whichever notices first).
#[test]
fn a_killed_rank_ends_the_job_naming_it() {
    let o = mpirun(2, &["sigkill"], Duration::from_secs(100));
    assert_ne!(o.code, Some(0), "{}", o.output);
    assert!(
        o.output.contains("MPI rank 1 stopped responding") || o.output.contains("rank 1 with PID"),
        "{}",
        o.output
    );
    assert!(!o.output.contains("unexpectedly finished"), "{}", o.output);
    assert!(o.elapsed < Duration::from_secs(30), "took {:?}", o.elapsed);
}

#[test]
fn a_wrong_world_size_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_gradcomp-mpi-selftest"))
        .args(["expect", "4"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has 1 rank(s) but 4 workers were configured"), "{err}");
}
