#!/usr/bin/env bash
# Validates the performance model against real multi-process training: dense,
# TernGrad and Gaussian-k on MNIST LeNet-5 with MPI across 2 and 4
# bandwidth-limited namespaces at 100 Mbit/s and 1 Gbit/s (scripts/netsim.sh).
# Each run predicts its own step time at its link speed; the table compares
# the median measured step time with the median prediction.
#
#   scripts/validate-model.sh [STEPS]        (needs root, Open MPI, MNIST)
#   NETSIM_BURST=256kb VALIDATION_OUT=runs/validation-256kb scripts/validate-model.sh
#
# VALIDATION_BIN: a gradcomp already built with --features mpi (else this
# builds one). VALIDATION_CALIBRATION: a directory of link calibrations
# (scripts/calibrate-links.sh): each run then predicts with its N and link's.
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-60}"
bin="${VALIDATION_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release -p gradcomp-cli --features mpi >&2
    bin="$PWD/target/release/gradcomp"
fi
out="${VALIDATION_OUT:-runs/validation}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
dirs=()
for n in 2 4; do
    for rate in 100mbit 1gbit; do
        bps=$([ $rate = 100mbit ] && echo 1e8 || echo 1e9)
        # The tbf bucket: netsim.sh's default, about 2.5 ms of traffic at either rate. A
        # larger one lets messages that fit in it cross at veth speed after an idle gap
        # (TernGrad's 108–162 KB at 100 Mbit/s with 256kb: 4× the line rate).
        for method in dense terngrad gaussiank; do
            cfg=experiments/mnist-lenet-dense-n4.toml
            extra=()
            if [ -n "${VALIDATION_CALIBRATION:-}" ]; then
                extra+=(--set "network.calibration=[\"$PWD/$VALIDATION_CALIBRATION/n$n-$rate.json\"]")
            fi
            case $method in
                terngrad) cfg=experiments/mnist-lenet-terngrad-n4.toml ;;
                gaussiank) extra+=(--set 'compressor.name="gaussiank"' --set compressor.density=0.001 --set 'comm.topology="allgather"') ;;
            esac
            name="val-$method-n$n-$rate"
            echo "== $name" >&2
            NETSIM_TIMEOUT=900 scripts/netsim.sh run "$n" "$rate" "$bin" train --backend mpi --quiet --config "$cfg" \
                --set workers=$n --set "name=\"$name\"" --set "run_dir=\"$out/$name\"" \
                --set train.max_steps="$steps" --set train.eval=false --set train.checkpoint_every_epochs=0 \
                --set train.checksum_every=0 --set train.stats_every=0 \
                --set "network.links_bps=[$bps]" --set network.alpha=0.0001 \
                --set 'network.allreduce="recursive-doubling"' "${extra[@]}" > "$out/$name.log" 2>&1 ||
                { echo "   FAILED (see $out/$name.log)" >&2; continue; }
            dirs+=("$out/$name")
        done
    done
done
"$bin" report --validation --out "$out/report" --title "Performance model validation" "${dirs[@]}"
