#!/usr/bin/env bash
# Calibrates the network model per link (issue #14, point 3): for N = 2 and 4
# ranks at 100 Mbit/s and 1 Gbit/s (scripts/netsim.sh, the tbf bucket of
# scripts/validate-model.sh), `gradcomp bench comm` fits α, B and the
# rendezvous cost to allreduce times (recursive doubling, as netsim pins it)
# and checks allgatherv, broadcast and the parameter server out of sample.
#
#   scripts/calibrate-links.sh BIN [OUT]     (root, Open MPI; OUT default docs/bench/calibration)
#
# Writes OUT/n{2,4}-{100mbit,1gbit}.json (network.calibration files) and the
# measured rows beside them (.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:?usage: scripts/calibrate-links.sh BIN [OUT]}"
out="${2:-docs/bench/calibration}"
mkdir -p "$out"
sizes=4096,16384,65536,262144,1048576,4194304,16777216
for n in 2 4; do
    for rate in 100mbit 1gbit; do
        bps=$([ "$rate" = 100mbit ] && echo 1e8 || echo 1e9)
        echo "== N=$n $rate" >&2
        NETSIM_TIMEOUT=900 scripts/netsim.sh run "$n" "$rate" "$bin" bench comm --backend mpi \
            --json --skip-raw --min-time 0.2 --sizes "$sizes" --allreduce-algorithm recursive-doubling \
            --allgatherv-algorithm open-mpi --calibrate-out "$PWD/$out/n$n-$rate.json" --nominal-bps "$bps" \
            > "$out/n$n-$rate.jsonl"
    done
done
