#!/usr/bin/env bash
# gloo's calibration of the network model (issue #38, point 6): 4 torch ranks on
# each netsim link (the tbf buckets of bench/peer/matrix.sh), gloo's allreduce and
# allgather timed by bench/peer/gloo_calibrate.py, one network.calibration file
# per link beside Open MPI's (docs/bench/calibration).
#
#   bench/peer/calibrate-gloo.sh [OUT]      (root; default docs/bench/calibration-gloo)
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-docs/bench/calibration-gloo}"
py="${PEER_PYTHON:-$HOME/.cache/gradcomp/py-venv/bin/python}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
for rate in ${CALIBRATE_RATES:-10mbit 100mbit 1gbit}; do
    case $rate in
        10mbit) bps=1e7 max=$((4 << 20)) ;;
        100mbit) bps=1e8 max=$((16 << 20)) ;;
        *) bps=1e9 max=$((16 << 20)) ;;
    esac
    echo "== gloo n4 $rate" >&2
    NETSIM_TIMEOUT=900 scripts/netsim.sh torch 4 "$rate" "$py" bench/peer/gloo_calibrate.py \
        --link-bps "$bps" --max-bytes "${CALIBRATE_MAX:-$max}" --out "$out/n4-$rate.json" > "$out/n4-$rate.log" 2>&1
done
