//! Every operation of the in-process backend, and its failure paths: a peer
//! that panics mid-collective, a peer that never arrives, mismatched calls,
//! oversized messages and a failing aggregation. Each failure test has a
//! time bound: nothing may hang.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use gradcomp_comm::{
    Collective, CommError, Gathered, InProcessCollective, InProcessGroup, OpKind, ServerPlacement,
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
fn allreduce_sum_max_and_integers_over_group_sizes() {
    for n in 1..=5 {
        let out = ok(run(InProcessGroup::new(n), Duration::from_secs(20), move |rank, c| {
            assert_eq!((c.rank(), c.world_size()), (rank, n));
            let len = 3001;
            let mut f: Vec<f32> = (0..len).map(|i| (i * (rank + 1)) as f32).collect();
            c.allreduce_sum_f32(&mut f).unwrap();
            let mut m: Vec<f32> = (0..len).map(|i| ((i + rank * 7) % 13) as f32).collect();
            c.allreduce_max_f32(&mut m).unwrap();
            let mut z: Vec<i32> = (0..len).map(|i| if (i + rank) % 3 == 0 { 1 } else { -1 }).collect();
            c.allreduce_sum_i32(&mut z).unwrap();
            let mut empty: [f32; 0] = [];
            c.allreduce_sum_f32(&mut empty).unwrap();
            (f, m, z)
        }));
        let tri = (n * (n + 1) / 2) as f32;
        for (f, m, z) in &out {
            for i in 0..3001 {
                assert_eq!(f[i], i as f32 * tri);
                let want_max = (0..n).map(|r| ((i + r * 7) % 13) as f32).fold(f32::MIN, f32::max);
                assert_eq!(m[i], want_max);
                let want_sum: i32 = (0..n).map(|r| if (i + r) % 3 == 0 { 1 } else { -1 }).sum();
                assert_eq!(z[i], want_sum);
            }
        }
        // Bitwise identical on every rank.
        assert!(out.windows(2).all(|w| w[0] == w[1]));
    }
}

#[test]
fn allgatherv_broadcast_barrier_and_meter() {
    let n = 4;
    let out = ok(run(InProcessGroup::new(n), Duration::from_secs(20), move |rank, c| {
        let msg = vec![rank as u8; rank * 10];
        let mut g = Gathered::default();
        c.allgatherv(&msg, &mut g).unwrap();
        let got: Vec<Vec<u8>> = g.iter().map(<[u8]>::to_vec).collect();
        let mut b = if rank == 2 { b"hello".to_vec() } else { vec![9; 100] };
        c.broadcast(&mut b, 2).unwrap();
        c.barrier().unwrap();
        let step = c.meter_mut().take_step();
        (got, b, step)
    }));
    for (rank, (got, b, step)) in out.iter().enumerate() {
        for (r, m) in got.iter().enumerate() {
            assert_eq!(m, &vec![r as u8; r * 10]);
        }
        assert_eq!(b, b"hello");
        let ag = step.get(OpKind::Allgatherv);
        assert_eq!((ag.calls, ag.sent, ag.received), (1, rank as u64 * 10, 60 - rank as u64 * 10));
        let bc = step.get(OpKind::Broadcast);
        assert_eq!((bc.sent, bc.received), if rank == 2 { (5, 0) } else { (0, 5) });
        assert_eq!(step.get(OpKind::Barrier).calls, 1);
    }
}

#[test]
fn parameter_server_colocated_and_dedicated() {
    for placement in [ServerPlacement::CoLocated, ServerPlacement::Dedicated] {
        let n = 4;
        let server = placement.server_rank(n);
        let out = ok(run(InProcessGroup::new(n), Duration::from_secs(20), move |rank, c| {
            let upload = if placement == ServerPlacement::Dedicated && rank == server {
                vec![]
            } else {
                vec![rank as u8 + 1; 3]
            };
            let mut down = Vec::new();
            let mut calls = 0;
            let mut agg = |ups: &Gathered, out: &mut Vec<u8>| {
                calls += 1;
                out.push(ups.len() as u8);
                for u in ups.iter() {
                    out.push(u.iter().map(|&b| u32::from(b)).sum::<u32>() as u8);
                }
                Ok(())
            };
            c.push_pull(placement, &upload, &mut agg, &mut down).unwrap();
            (down, calls, c.meter_mut().take_step())
        }));
        let workers: Vec<u8> = (0..n as u8)
            .filter(|&r| !(placement == ServerPlacement::Dedicated && r as usize == server))
            .collect();
        let mut want = vec![workers.len() as u8];
        want.extend(workers.iter().map(|r| 3 * (r + 1)));
        for (rank, (down, calls, step)) in out.iter().enumerate() {
            assert_eq!(down, &want, "{placement:?}");
            assert_eq!(*calls, usize::from(rank == server));
            let push = step.get(OpKind::PsPush);
            let pull = step.get(OpKind::PsPull);
            if rank == server {
                assert_eq!(push.received, 3 * (n as u64 - 1));
                assert_eq!(pull.sent, want.len() as u64 * (n as u64 - 1));
            } else {
                assert_eq!((push.sent, pull.received), (3, want.len() as u64));
            }
        }
    }
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
