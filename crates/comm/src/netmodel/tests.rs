use super::*;

#[test]
fn textbook_values() {
    // 1 Gbit/s, no latency: 100 MB ring allreduce over 4 ranks moves 1.5 × 100 MB per link.
    let m = NetworkModel::from_bits_per_second(1e9, 0.0);
    assert!((m.allreduce(4, 100_000_000) - 1.2).abs() < 1e-9);
    let rd = m.clone().with_allreduce(AllreduceAlgorithm::RecursiveDoubling);
    assert!((rd.allreduce(4, 100_000_000) - 1.6).abs() < 1e-9);
    assert!((rd.allreduce(2, 100_000_000) - m.allreduce(2, 100_000_000)).abs() < 1e-9);
    // Not a power of two: 3 ranks pay a pre- and a post-step of M.
    assert!((rd.allreduce(3, 100_000_000) - 2.4).abs() < 1e-9);
    // Rabenseifner moves 2(N−1)/N·M in 2·log2 N rounds.
    let rab = m.clone().with_allreduce(AllreduceAlgorithm::Rabenseifner);
    assert!((rab.allreduce(4, 100_000_000) - 1.2).abs() < 1e-9);
    assert_eq!(m.allreduce(1, 1 << 20), 0.0);
    // Ring allgatherv: N − 1 exchange rounds of the mean block, after the length exchange.
    let lengths = 2.0 * 8.0 / m.bandwidth;
    assert!((m.allgatherv(&[10_000_000, 20_000_000, 30_000_000]) - 0.32 - lengths).abs() < 1e-9);
    // Alltoallv, pairwise: 4 ranks each sending 10 MB to each of 3 peers
    // take 3 rounds of 10 MB after 2 rounds of the length exchange; the
    // rank's own entry crosses no link.
    let a2a = m.alltoallv(&[0, 10_000_000, 10_000_000, 10_000_000]);
    assert!((a2a - 0.24 - lengths).abs() < 1e-9, "{a2a}");
    assert!((m.alltoallv_uniform(4, 10_000_000) - a2a).abs() < 1e-12);
    let call = CollectiveCall {
        op: OpKind::Alltoallv,
        sizes: vec![0, 10_000_000, 10_000_000, 10_000_000],
        download: 0,
        bucket: None,
    };
    assert!((m.price(&call, 4, ServerPlacement::CoLocated) - a2a).abs() < 1e-12);
    // 5 ranks, 125 MB: a chain of 4 messages, after 3 rounds of the 8-byte length.
    assert!((m.broadcast(5, 125_000_000) - 4.0 - 3.0 * 8.0 / m.bandwidth).abs() < 1e-9);
    assert!((m.broadcast(16, 125_000_000) - 4.0 - 4.0 * 8.0 / m.bandwidth).abs() < 1e-9);
    // Co-located server with 4 workers: 3 uploads in, 3 downloads out through one link.
    let ps = m.push_pull(4, ServerPlacement::CoLocated, 1_000_000, 2_000_000);
    assert!((ps - 3.0 * 3_000_000.0 * 8.0 / 1e9).abs() < 1e-9);
    let sizes = m.push_pull_sizes(ServerPlacement::CoLocated, &[1_000_000; 4], 2_000_000);
    assert!((sizes - ps).abs() < 1e-12);
    let latency = NetworkModel::from_bits_per_second(1e9, 1e-4);
    assert!((latency.allreduce(4, 0) - 6e-4).abs() < 1e-12);
}

#[test]
fn open_mpi_rules_pick_by_size_and_ranks() {
    let m = NetworkModel::from_bits_per_second(1e9, 1e-4).with_allreduce(AllreduceAlgorithm::OpenMpi);
    use AllreduceAlgorithm::*;
    assert_eq!(m.allreduce_algorithm(2, 4), Ring);
    assert_eq!(m.allreduce_algorithm(2, 1024), RecursiveDoubling);
    assert_eq!(m.allreduce_algorithm(2, 100_000), Ring);
    assert_eq!(m.allreduce_algorithm(2, 1 << 20), Rabenseifner);
    assert_eq!(m.allreduce_algorithm(4, 4096), RecursiveDoubling);
    assert_eq!(m.allreduce_algorithm(4, 8192), Rabenseifner);
    assert_eq!(m.allreduce_algorithm(100, 100_000), RecursiveDoubling);
    assert_eq!(m.allreduce_algorithm(300, 1000), Nonoverlapping);
    assert_eq!(m.allreduce_algorithm(5000, 20_000), RecursiveDoubling);
    // A pinned algorithm is used whatever the size.
    let pinned = m.clone().with_allreduce(Ring);
    assert_eq!(pinned.allreduce_algorithm(4, 1 << 20), Ring);
}

#[test]
fn messages_beyond_the_eager_limit_pay_the_handshake() {
    let mut m =
        NetworkModel::from_bits_per_second(1e9, 1e-4).with_allreduce(AllreduceAlgorithm::RecursiveDoubling);
    m.rendezvous = 1e-3;
    let below = m.allreduce(4, 64 << 10);
    let above = m.allreduce(4, (64 << 10) + 4);
    // Two rounds, each one handshake more.
    assert!((above - below - 2e-3 - 8.0 / m.bandwidth).abs() < 1e-9);
}

#[test]
fn fit_recovers_the_model_that_made_the_times() {
    let mut truth =
        NetworkModel::from_bits_per_second(1e8, 2e-4).with_allreduce(AllreduceAlgorithm::RecursiveDoubling);
    truth.rendezvous = 3e-3;
    let sizes = [4u64 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20];
    let samples: Vec<(u64, f64)> = sizes.iter().map(|&s| (s, truth.allreduce(4, s))).collect();
    let start =
        NetworkModel::from_bits_per_second(1e9, 0.0).with_allreduce(AllreduceAlgorithm::RecursiveDoubling);
    let fitted = start.fit(4, &samples).unwrap();
    assert!((fitted.alpha / truth.alpha - 1.0).abs() < 1e-6, "{fitted:?}");
    assert!((fitted.bandwidth / truth.bandwidth - 1.0).abs() < 1e-6);
    assert!((fitted.rendezvous / truth.rendezvous - 1.0).abs() < 1e-6);
    // Too few samples, and times that do not grow, are errors.
    assert!(start.fit(4, &samples[..2]).is_err());
    assert!(start.fit(4, &[(4096, 1.0), (1 << 20, 0.5), (16 << 20, 0.1)]).is_err());
}

#[test]
fn calibrated_curves_price_rounds_by_what_was_measured() {
    let m =
        NetworkModel::from_bits_per_second(1e9, 1e-4).with_allreduce(AllreduceAlgorithm::RecursiveDoubling);
    // 4 ranks: recursive doubling is two exchange rounds; the server's link
    // carries 3 uploads in and 3 downloads out.
    let allreduce = [(1000, 0.02), (3000, 0.04)];
    let push_pull = [(1000, 0.006), (2000, 0.010)];
    let c = m.clone().with_curves(4, &allreduce, &push_pull);
    assert_eq!(c.exchange, vec![(1000, 0.01), (3000, 0.02)]);
    assert_eq!(c.send, vec![(3000, 0.003), (6000, 0.005)]);
    assert!((c.allreduce(4, 1000) - 0.02).abs() < 1e-12);
    assert!((c.allreduce(4, 2000) - 0.03).abs() < 1e-12, "linear between samples");
    assert!((c.allreduce(4, 5000) - 0.06).abs() < 1e-12, "the last slope beyond them");
    assert!((c.push_pull(4, ServerPlacement::CoLocated, 1500, 1500) - 0.008).abs() < 1e-12);
    // Below the first sample, down to α at zero bytes.
    assert!((c.allreduce(4, 500) - 2.0 * (1e-4 + 0.5 * (0.01 - 1e-4))).abs() < 1e-12);
    // Ring allreduce samples say nothing of exchange rounds of whole buffers.
    let ring = m.with_allreduce(AllreduceAlgorithm::Ring).with_curves(4, &allreduce, &push_pull);
    assert!(ring.exchange.is_empty() && !ring.send.is_empty());
}

#[test]
fn the_pipeline_hides_all_but_the_first_compress_and_last_wire_and_decode() {
    // Wire-bound: 3 buckets of 1 s wire, 0.1 s compress and decode each.
    let stages = [[0.1, 1.0, 0.1]; 3];
    let span = NetworkModel::pipelined_span(&stages);
    assert!((span - (0.1 + 3.0 + 0.1)).abs() < 1e-12, "{span}");
    // Compute-bound: wire hides behind compression.
    let stages = [[1.0, 0.1, 0.5]; 3];
    let t = NetworkModel::pipelined_timeline(&stages);
    // compress 0, 1 | decode 0 | compress 2 | decode 1 | decode 2
    assert_eq!(t[1][0], [1.0, 2.0]);
    assert_eq!(t[0][2], [2.0, 2.5]);
    assert_eq!(t[2][0], [2.5, 3.5]);
    assert!((NetworkModel::pipelined_span(&stages) - 4.5).abs() < 1e-12);
    assert_eq!(NetworkModel::pipelined_span(&[]), 0.0);
}

#[test]
fn a_staged_backward_pass_lets_the_wire_start_before_it_ends() {
    // Two stages of 3 s of backward pass; bucket 0 is complete after the
    // first, bucket 1 after the second. Compress 1, wire 4, decode 1 each.
    let stages = [[1.0, 4.0, 1.0]; 2];
    let t = NetworkModel::staged_timeline(&[3.0, 3.0], &[1, 2], &stages);
    // Bucket 0: compress [3, 4], wire [4, 8]; the second stage runs
    // [4, 7]; bucket 1: compress [7, 8], wire [8, 12]; decodes [8, 9], [12, 13].
    assert_eq!(t[0], [[3.0, 4.0], [4.0, 8.0], [8.0, 9.0]]);
    assert_eq!(t[1], [[7.0, 8.0], [8.0, 12.0], [12.0, 13.0]]);
    // Whole, after the same 6 s of backward pass: 6 + 10 = 16 s against 13.
    let whole = NetworkModel::pipelined_span(&stages);
    assert!((6.0 + whole - 16.0).abs() < 1e-12, "{whole}");
    // With no stages the staged timeline is the pipelined one.
    let t = NetworkModel::staged_timeline(&[], &[0, 0], &stages);
    assert_eq!(t, NetworkModel::pipelined_timeline(&stages));
}
