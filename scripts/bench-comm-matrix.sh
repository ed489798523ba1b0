#!/usr/bin/env bash
# Runs `gradcomp bench comm --backend mpi` across bandwidth-limited
# namespaces for N = 2, 4 and links unshaped, 1 Gbit/s and 100 Mbit/s, plus
# the in-process backend; writes JSON lines to docs/bench/comm-*.jsonl.
# Needs root and an MPI build: cargo build --release -p gradcomp-cli --features mpi
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$PWD/target/release/gradcomp"
out=docs/bench
mkdir -p "$out"
for n in 2 4; do
    "$bin" bench comm --backend in-process --workers "$n" --json > "$out/comm-in-process-n$n.jsonl"
    for rate in none 1gbit 100mbit; do
        case $rate in
            none) link=() ;;
            1gbit) link=(--link-bits-per-second 1e9) ;;
            100mbit) link=(--link-bits-per-second 1e8) ;;
        esac
        echo "== N=$n link=$rate" >&2
        # 256kb at every rate, the bucket docs/bench/comm-*.jsonl were measured with.
        NETSIM_BURST=${NETSIM_BURST:-256kb} NETSIM_TIMEOUT=3000 scripts/netsim.sh run "$n" "$rate" "$bin" bench comm --backend mpi --json --min-time 0.2 \
            --allreduce-algorithm recursive-doubling "${link[@]}" \
            > "$out/comm-mpi-n$n-$rate.jsonl"
    done
done
