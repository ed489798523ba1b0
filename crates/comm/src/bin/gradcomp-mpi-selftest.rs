//! Exercises the MPI backend under `mpirun`; used by the comm crate's MPI
//! tests (`tests/mpi.rs`) and by hand:
//!
//! ```text
//! mpirun -np 4 gradcomp-mpi-selftest ops        # every operation, checked
//! mpirun -np 2 gradcomp-mpi-selftest exit       # rank 1 exits mid-run
//! mpirun -np 2 gradcomp-mpi-selftest panic      # rank 1 panics mid-run
//! mpirun -np 2 gradcomp-mpi-selftest stall      # rank 1 stalls past the timeout
//! mpirun -np 2 gradcomp-mpi-selftest mismatch   # ranks call different operations
//! mpirun -np 4 gradcomp-mpi-selftest duplicate  # every operation on two channels at once
//! mpirun -np 2 gradcomp-mpi-selftest duplicate-stall  # rank 1 stalls on the second channel
//! gradcomp-mpi-selftest expect 4                # world size 1, 4 expected
//! ```

use std::process::ExitCode;
use std::time::Duration;

use gradcomp_comm::mpi::MpiCollective;
use gradcomp_comm::{conformance, Collective};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let scenario = args.first().map(String::as_str).unwrap_or("ops");
    let mut c = match connect(scenario, &args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match scenario {
        "ops" => check_ops(&mut c),
        "duplicate" => check_both_channels(&mut c),
        "duplicate-stall" => stall_second_channel(&mut c),
        "sigstop" | "sigkill" => signal_rank_one(&mut c, scenario),
        "exit" | "panic" | "stall" => fail_rank_one(&mut c, scenario),
        "mismatch" => mismatch(&mut c),
        other => {
            eprintln!("unknown scenario {other}");
            ExitCode::from(2)
        }
    }
}

/// The MPI backend as `scenario` needs it: `expect N` names the world size
/// expected, `sig*` leaves the ending to the heartbeat, `duplicate*` asks for
/// a second channel.
fn connect(scenario: &str, args: &[String]) -> Result<MpiCollective, gradcomp_comm::CommError> {
    let expected = if scenario == "expect" { args.get(1).and_then(|s| s.parse().ok()) } else { None };
    // Heartbeat scenarios give the per-operation timeout no chance to fire
    // first: whatever ends the job there is the heartbeat (default bound).
    let timeout = if scenario.starts_with("sig") { Duration::from_secs(120) } else { Duration::from_secs(3) };
    let concurrent = scenario.starts_with("duplicate");
    MpiCollective::init_with(expected, timeout, concurrent)
}

/// `ops`: every operation, checked.
fn check_ops(c: &mut MpiCollective) -> ExitCode {
    let rank = c.rank();
    if let Err(e) = conformance::check_all(c) {
        eprintln!("rank {rank}: FAILED: {e}");
        return ExitCode::from(1);
    }
    println!("rank {rank} of {}: ok", c.world_size());
    ExitCode::SUCCESS
}

/// `duplicate`: the world and its duplicate, each checked on a thread of its
/// own at the same time (MPI_THREAD_MULTIPLE).
fn check_both_channels(c: &mut MpiCollective) -> ExitCode {
    let rank = c.rank();
    let mut dup = c.duplicate().expect("MPI_Comm_dup").expect("a second channel under Multiple");
    let other = std::thread::spawn(move || conformance::check_all(&mut dup));
    let here = conformance::check_all(c);
    let there = other.join().expect("the second channel's thread");
    if let Err(e) = here.and(there) {
        eprintln!("rank {rank}: FAILED: {e}");
        return ExitCode::from(1);
    }
    println!("rank {rank} of {}: both channels ok", c.world_size());
    ExitCode::SUCCESS
}

/// `duplicate-stall`: rank 1 never calls on the second channel: rank 0's
/// thread waits there while its world keeps working, and the watchdog ends
/// the job for the second channel's deadline.
fn stall_second_channel(c: &mut MpiCollective) -> ExitCode {
    let rank = c.rank();
    let mut buf = vec![1.0f32; 1000];
    let mut dup = c.duplicate().expect("MPI_Comm_dup").expect("a second channel under Multiple");
    let other = std::thread::spawn(move || {
        if rank == 0 {
            let mut b = vec![1.0f32; 10];
            let _ = dup.allreduce_sum_f32(&mut b);
        }
        dup
    });
    for _ in 0..60 {
        c.allreduce_sum_f32(&mut buf).expect("the world's allreduce");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(other);
    println!("rank {rank}: unexpectedly finished");
    ExitCode::SUCCESS
}

/// `sigstop`, `sigkill`: rank 1 stops or kills itself between two
/// allreduces; the heartbeat ends the job.
fn signal_rank_one(c: &mut MpiCollective, scenario: &str) -> ExitCode {
    let rank = c.rank();
    let mut buf = vec![1.0f32; 1000];
    c.allreduce_sum_f32(&mut buf).expect("first allreduce");
    if rank == 1 {
        let signal = if scenario == "sigstop" { "-STOP" } else { "-KILL" };
        eprintln!("rank 1: sending itself SIG{}", &signal[1..]);
        let _ = std::process::Command::new("kill").args([signal, &std::process::id().to_string()]).status();
        std::thread::sleep(Duration::from_secs(120));
    }
    c.allreduce_sum_f32(&mut buf).expect("second allreduce");
    println!("rank {rank}: unexpectedly finished");
    ExitCode::SUCCESS
}

/// `exit`, `panic`, `stall`: rank 1 exits, panics or stalls between two
/// allreduces.
fn fail_rank_one(c: &mut MpiCollective, scenario: &str) -> ExitCode {
    let rank = c.rank();
    let mut buf = vec![1.0f32; 1000];
    c.allreduce_sum_f32(&mut buf).expect("first allreduce");
    if rank == 1 {
        match scenario {
            "exit" => {
                eprintln!("rank 1: exiting on purpose");
                std::process::exit(3);
            }
            "panic" => panic!("rank 1 panics on purpose"),
            _ => std::thread::sleep(Duration::from_secs(60)),
        }
    }
    c.allreduce_sum_f32(&mut buf).expect("second allreduce");
    println!("rank {rank}: unexpectedly finished");
    ExitCode::SUCCESS
}

/// `mismatch`: rank 0 calls a barrier and a sum, the others a max.
fn mismatch(c: &mut MpiCollective) -> ExitCode {
    let rank = c.rank();
    let mut buf = vec![1.0f32; 1000];
    let r = if rank == 0 {
        c.barrier().and_then(|_| c.allreduce_sum_f32(&mut buf))
    } else {
        c.allreduce_max_f32(&mut buf)
    };
    match r {
        Err(e) => println!("rank {rank}: error: {e}"),
        Ok(()) => println!("rank {rank}: no error"),
    }
    ExitCode::SUCCESS
}
