//! A conformance check every backend must pass: each operation with known
//! inputs per rank, the expected results, and the byte meter's counts. The
//! in-process tests run it on threads; the MPI self-test binary runs it under
//! `mpirun`. Every rank must call [`check_all`] at the same time.

use crate::collective::{Collective, Gathered, ServerPlacement};
use crate::meter::Metered;
use crate::op::OpKind;

fn ensure(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

/// Runs every operation on `c` and checks the results, and the counts of a
/// [`Metered`] around it; returns a description of the first discrepancy.
pub fn check_all(c: &mut dyn Collective) -> Result<(), String> {
    let c = &mut Metered::new(c);
    // Reductions, on a length that does not divide evenly among ranks.
    let len = 3001;
    check_float_reductions(c, len)?;
    check_integer_reductions(c, len)?;
    check_half_reduction(c, len)?;
    let root = c.world_size() - 1;
    check_gather_and_broadcast(c, root)?;
    check_push_pull(c)?;
    check_bytes(c, len, root)
}

fn err(e: crate::CommError) -> String {
    e.to_string()
}

/// `allreduce_sum_f32` (three times: once whole, twice framed in place) and
/// `allreduce_max_f32` on `len` elements.
fn check_float_reductions(c: &mut dyn Collective, len: usize) -> Result<(), String> {
    let (rank, n) = (c.rank(), c.world_size());
    let mut f: Vec<f32> = (0..len).map(|i| (i * (rank + 1)) as f32).collect();
    c.allreduce_sum_f32(&mut f).map_err(err)?;
    let tri = (n * (n + 1) / 2) as f32;
    ensure(f.iter().enumerate().all(|(i, &v)| v == i as f32 * tri), || "allreduce_sum_f32 result".into())?;
    // In place inside a larger buffer, twice with the same signature (the
    // MPI backend agrees on a signature once, then reduces in place): the
    // elements around the slice stay untouched.
    let mut framed = vec![-1.0f32; len + 2];
    for round in 1..=2 {
        framed[1..=len].iter_mut().enumerate().for_each(|(i, v)| *v = (i * (rank + round)) as f32);
        c.allreduce_sum_f32(&mut framed[1..=len]).map_err(err)?;
        let want = (n * (n + 1) / 2 + n * (round - 1)) as f32;
        ensure(
            framed[0] == -1.0
                && framed[len + 1] == -1.0
                && framed[1..=len].iter().enumerate().all(|(i, &v)| v == i as f32 * want),
            || format!("allreduce_sum_f32 in a framed buffer, round {round}"),
        )?;
    }
    let mut m: Vec<f32> = (0..len).map(|i| ((i + rank * 7) % 13) as f32).collect();
    c.allreduce_max_f32(&mut m).map_err(err)?;
    ensure(
        m.iter()
            .enumerate()
            .all(|(i, &v)| v == (0..n).map(|r| ((i + r * 7) % 13) as f32).fold(f32::MIN, f32::max)),
        || "allreduce_max_f32 result".into(),
    )?;
    Ok(())
}

/// `allreduce_sum_i32`, and the narrow `i8` and `i16` sums TernGrad's codes
/// travel in, on `len` elements.
fn check_integer_reductions(c: &mut dyn Collective, len: usize) -> Result<(), String> {
    let (rank, n) = (c.rank(), c.world_size());
    let mut z: Vec<i32> = (0..len).map(|i| if (i + rank) % 3 == 0 { 1 } else { -1 }).collect();
    c.allreduce_sum_i32(&mut z).map_err(err)?;
    ensure(
        z.iter()
            .enumerate()
            .all(|(i, &v)| v == (0..n).map(|r| if (i + r) % 3 == 0 { 1 } else { -1 }).sum::<i32>()),
        || "allreduce_sum_i32 result".into(),
    )?;
    // The narrow sums TernGrad's codes travel in.
    let code = |i: usize, r: usize| if (i + r).is_multiple_of(3) { 1i32 } else { -1 };
    let want = |i: usize| (0..n).map(|r| code(i, r)).sum::<i32>();
    let mut z8: Vec<i8> = (0..len).map(|i| code(i, rank) as i8).collect();
    c.allreduce_sum_i8(&mut z8).map_err(err)?;
    ensure(z8.iter().enumerate().all(|(i, &v)| i32::from(v) == want(i)), || {
        "allreduce_sum_i8 result".into()
    })?;
    let mut z16: Vec<i16> = (0..len).map(|i| (code(i, rank) * 300) as i16).collect();
    c.allreduce_sum_i16(&mut z16).map_err(err)?;
    ensure(z16.iter().enumerate().all(|(i, &v)| i32::from(v) == 300 * want(i)), || {
        "allreduce_sum_i16 result".into()
    })?;
    Ok(())
}

/// `allreduce_sum_f16` on `len` elements.
fn check_half_reduction(c: &mut dyn Collective, len: usize) -> Result<(), String> {
    let (rank, n) = (c.rank(), c.world_size());
    // Halves whose sums are exact in half precision, and one that rounds
    // (1025 on every rank: past 2048 halves are 2 apart, so each addition
    // rounds, to even, the same whatever the order of equal terms).
    let half = crate::f16::from_f32;
    let mut h: Vec<crate::f16> = (0..len).map(|i| half(((i % 64) * (rank + 1)) as f32)).collect();
    h[len - 1] = half(1025.0);
    c.allreduce_sum_f16(&mut h).map_err(err)?;
    let rounded = (1..n).fold(half(1025.0), |acc, _| half(acc.to_f32() + 1025.0));
    ensure(
        h[..len - 1].iter().enumerate().all(|(i, &v)| v.to_f32() == ((i % 64) * n * (n + 1) / 2) as f32)
            && h[len - 1] == rounded,
        || format!("allreduce_sum_f16 result (last: {} against {rounded})", h[len - 1]),
    )?;
    Ok(())
}

/// Rank `from`'s message to rank `to` in the alltoallv check: lengths 0
/// to 4, so some are empty.
fn peer_message(from: usize, to: usize) -> Vec<u8> {
    vec![(from * 16 + to) as u8; (from + 2 * to) % 5]
}

/// `allgatherv` of messages of different lengths, `alltoallv` of
/// [`peer_message`]s, `broadcast` from `root`, then a `barrier`.
fn check_gather_and_broadcast(c: &mut dyn Collective, root: usize) -> Result<(), String> {
    let (rank, n) = (c.rank(), c.world_size());
    // Messages of different lengths, including an empty one.
    let msg = vec![rank as u8; rank * 10];
    let mut g = Gathered::default();
    c.allgatherv(&msg, &mut g).map_err(err)?;
    ensure(g.len() == n, || format!("allgatherv returned {} messages", g.len()))?;
    for r in 0..n {
        ensure(g.get(r) == vec![r as u8; r * 10].as_slice(), || format!("allgatherv message of rank {r}"))?;
    }
    let mut send = Gathered::default();
    (0..n).for_each(|j| send.push(&peer_message(rank, j)));
    c.alltoallv(&send, &mut g).map_err(err)?;
    ensure(g.len() == n, || format!("alltoallv returned {} messages", g.len()))?;
    for r in 0..n {
        ensure(g.get(r) == peer_message(r, rank).as_slice(), || format!("alltoallv message from rank {r}"))?;
    }
    let mut b = if rank == root { b"hello".to_vec() } else { vec![9; 100] };
    c.broadcast(&mut b, root).map_err(err)?;
    ensure(b == b"hello", || "broadcast result".into())?;
    c.barrier().map_err(err)?;
    Ok(())
}

/// `push_pull` with a co-located and with a dedicated server.
fn check_push_pull(c: &mut dyn Collective) -> Result<(), String> {
    let (rank, n) = (c.rank(), c.world_size());
    for placement in [ServerPlacement::CoLocated, ServerPlacement::Dedicated] {
        let server = placement.server_rank(n);
        let dedicated_server = placement == ServerPlacement::Dedicated && rank == server;
        let upload = if dedicated_server { vec![] } else { vec![rank as u8 + 1; 3] };
        let mut down = Vec::new();
        let mut calls = 0;
        let mut agg = |ups: &Gathered, out: &mut Vec<u8>| {
            calls += 1;
            out.push(ups.len() as u8);
            out.extend(ups.iter().map(|u| u.iter().map(|&b| u32::from(b)).sum::<u32>() as u8));
            Ok(())
        };
        c.push_pull(placement, &upload, &mut agg, &mut down).map_err(err)?;
        let workers: Vec<u8> = (0..n as u8)
            .filter(|&r| !(placement == ServerPlacement::Dedicated && r as usize == server))
            .collect();
        let mut want = vec![workers.len() as u8];
        want.extend(workers.iter().map(|r| 3 * (r + 1)));
        ensure(down == want, || format!("{placement:?} push_pull download {down:?}, want {want:?}"))?;
        ensure(calls == usize::from(rank == server), || "aggregate ran off the server".into())?;
    }
    Ok(())
}

/// The byte meter's counts for everything the other checks ran since
/// [`check_all`] began.
fn check_bytes(c: &mut Metered<&mut dyn Collective>, len: usize, root: usize) -> Result<(), String> {
    let (rank, n) = (c.rank(), c.world_size());
    // Bytes: logical message sizes.
    let s = c.meter_mut().take_step();
    let ag = s.get(OpKind::Allgatherv);
    let total: usize = (0..n).map(|r| r * 10).sum();
    ensure(ag.sent == (rank * 10) as u64 && ag.received == (total - rank * 10) as u64, || {
        format!("allgatherv bytes {ag:?}")
    })?;
    let a2a = s.get(OpKind::Alltoallv);
    let others = || (0..n).filter(|&r| r != rank);
    let (sent, received) = (
        others().map(|j| peer_message(rank, j).len() as u64).sum::<u64>(),
        others().map(|i| peer_message(i, rank).len() as u64).sum::<u64>(),
    );
    ensure(a2a.sent == sent && a2a.received == received, || format!("alltoallv bytes {a2a:?}"))?;
    ensure(s.get(OpKind::AllreduceSumF32).sent == 3 * len as u64 * 4, || "allreduce bytes".into())?;
    let bc = s.get(OpKind::Broadcast);
    ensure((bc.sent, bc.received) == if rank == root { (5, 0) } else { (0, 5) }, || {
        format!("broadcast bytes {bc:?}")
    })?;
    ensure(s.get(OpKind::PsPush).calls == 2 && s.get(OpKind::PsPull).calls == 2, || {
        "push_pull calls".into()
    })?;
    Ok(())
}
