//! Every operation of the in-process backend, and its failure paths: a peer
//! that panics mid-collective, a peer that never arrives, mismatched calls,
//! oversized messages and a failing aggregation. Each failure test has a
//! time bound: nothing may hang.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use gradcomp_comm::{
    conformance, Collective, CommError, Gathered, InProcessCollective, InProcessGroup, ServerPlacement,
};

/// Runs `f(rank, handle)` on one thread per rank and returns the results in
/// rank order, failing the test if the group does not finish in `limit`.
fn run<R: Send + 'static>(
    group: InProcessGroup,
    limit: Duration,
    f: impl Fn(usize, &mut InProcessCollective) -> R + Send + Sync + Clone + 'static,
) -> Vec<thread::Result<R>> {
    let handles = group.build().unwrap();
    let (tx, rx) = mpsc::channel();
    let n = handles.len();
    for (rank, mut h) in handles.into_iter().enumerate() {
        let (tx, f) = (tx.clone(), f.clone());
        thread::spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(rank, &mut h)));
            drop(h);
            tx.send((rank, r)).ok();
        });
    }
    let deadline = Instant::now() + limit;
    let mut out: Vec<Option<thread::Result<R>>> = (0..n).map(|_| None).collect();
    for _ in 0..n {
        let left = deadline.saturating_duration_since(Instant::now());
        let (rank, r) = rx.recv_timeout(left).expect("a worker hung past the time bound");
        out[rank] = Some(r);
    }
    out.into_iter().map(Option::unwrap).collect()
}

fn ok<R>(results: Vec<thread::Result<R>>) -> Vec<R> {
    results.into_iter().map(|r| r.unwrap_or_else(|_| panic!("a worker panicked"))).collect()
}

#[test]
fn every_operation_over_group_sizes() {
    for n in 1..=5 {
        let out = ok(run(InProcessGroup::new(n), Duration::from_secs(20), |_, c| conformance::check_all(c)));
        for (rank, r) in out.into_iter().enumerate() {
            r.unwrap_or_else(|e| panic!("n={n} rank {rank}: {e}"));
        }
    }
}

#[test]
fn reductions_are_bitwise_identical_on_every_rank() {
    // Values whose float sum depends on the order of addition.
    let out = ok(run(InProcessGroup::new(3), Duration::from_secs(20), |rank, c| {
        let mut v: Vec<f32> =
            (0..5000).map(|i| ((i * 7 + rank * 13) % 101) as f32 * 1e-3 + 1e4 * rank as f32).collect();
        c.allreduce_sum_f32(&mut v).unwrap();
        v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>()
    }));
    assert!(out.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn a_panicking_worker_fails_every_peer_promptly() {
    let start = Instant::now();
    let results = run(InProcessGroup::new(4), Duration::from_secs(10), |rank, c| {
        let mut buf = vec![1.0f32; 1000];
        c.allreduce_sum_f32(&mut buf).unwrap();
        if rank == 2 {
            panic!("worker 2 crashes mid-training");
        }
        c.allreduce_sum_f32(&mut buf)
    });
    assert!(start.elapsed() < Duration::from_secs(5), "failure took {:?}", start.elapsed());
    for (rank, r) in results.into_iter().enumerate() {
        match r {
            Err(_) => assert_eq!(rank, 2),
            Ok(res) => assert_eq!(res.unwrap_err(), CommError::PeerFailed { rank: 2 }),
        }
    }
}

#[test]
fn a_worker_that_returns_early_fails_its_peers() {
    let results = ok(run(InProcessGroup::new(3), Duration::from_secs(10), |rank, c| {
        if rank == 0 {
            return Ok(());
        }
        c.barrier()
    }));
    assert!(results[0].is_ok());
    assert_eq!(results[1], Err(CommError::PeerFailed { rank: 0 }));
    assert_eq!(results[2], Err(CommError::PeerFailed { rank: 0 }));
}

#[test]
fn a_stalled_worker_times_out_with_its_rank_named() {
    let group = InProcessGroup::new(3).timeout(Duration::from_millis(300));
    let results = ok(run(group, Duration::from_secs(10), |rank, c| {
        if rank == 1 {
            thread::sleep(Duration::from_millis(1500));
        }
        c.barrier()
    }));
    let timeouts = results
        .iter()
        .filter(|r| matches!(r, Err(CommError::Timeout { waiting_for, .. }) if waiting_for == &[1]))
        .count();
    assert!(timeouts >= 1, "{results:?}");
    assert!(results.iter().all(|r| r.is_err()), "{results:?}");
}

#[test]
fn mismatched_calls_and_lengths_are_errors_on_every_rank() {
    let results = ok(run(InProcessGroup::new(3), Duration::from_secs(10), |rank, c| {
        let mut a = vec![0.0f32; 10 + rank];
        let e1 = c.allreduce_sum_f32(&mut a).unwrap_err();
        let e2 =
            if rank == 0 { c.barrier().unwrap_err() } else { c.allreduce_max_f32(&mut [1.0]).unwrap_err() };
        // The group still works after a rejected call.
        c.barrier().unwrap();
        (e1, e2)
    }));
    for (e1, e2) in results {
        assert!(matches!(e1, CommError::Mismatch { .. }), "{e1}");
        assert!(e2.to_string().contains("rank 0 called barrier"), "{e2}");
    }
}

#[test]
fn oversized_messages_and_aggregation_errors_reach_every_rank() {
    let group = InProcessGroup::new(2).max_message_bytes(8);
    let results = ok(run(group, Duration::from_secs(10), |_, c| {
        let mut g = Gathered::default();
        let e1 = c.allgatherv(&[0u8; 9], &mut g).unwrap_err();
        let mut agg = |_: &Gathered, _: &mut Vec<u8>| Err("bad upload".to_string());
        let e2 = c.push_pull(ServerPlacement::CoLocated, &[1], &mut agg, &mut Vec::new()).unwrap_err();
        let mut fine = |_: &Gathered, out: &mut Vec<u8>| {
            out.push(7);
            Ok(())
        };
        let mut down = Vec::new();
        c.push_pull(ServerPlacement::CoLocated, &[1], &mut fine, &mut down).unwrap();
        (e1, e2, down)
    }));
    for (e1, e2, down) in results {
        assert!(matches!(e1, CommError::TooLarge { bytes: 9, limit: 8, .. }), "{e1}");
        assert_eq!(e2, CommError::Aggregate("bad upload".into()));
        assert_eq!(down, [7]);
    }
}

#[test]
fn a_mean_among_contributors_leaves_the_others_out_and_reaches_every_rank() {
    // Rank 1 sits out (a replica healed into the round): it sends zeros and
    // takes the mean of ranks 0 and 2, as they do.
    let out = ok(run(InProcessGroup::new(3), Duration::from_secs(20), |rank, c| {
        let mut v = vec![rank as f32 * 2.0, 10.0 + rank as f32];
        let n = c.allreduce_mean_among_f32(&mut v, rank != 1).unwrap();
        (n, v)
    }));
    for (n, v) in out {
        assert_eq!((n, v), (2, vec![2.0, 11.0]));
    }
    // Nobody contributing has no mean: an error on every rank, not zeros.
    let out = ok(run(InProcessGroup::new(2), Duration::from_secs(20), |_, c| {
        c.allreduce_mean_among_f32(&mut [1.0], false).map_err(|e| e.to_string())
    }));
    for r in out {
        assert!(r.unwrap_err().contains("no contributing rank"));
    }
}
