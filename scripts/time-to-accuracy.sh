#!/usr/bin/env bash
# Time to accuracy (issue #14, point 4): LeNet-5 on MNIST and the Fashion CNN
# on Fashion-MNIST, 4 MPI ranks in bandwidth-limited namespaces
# (scripts/netsim.sh) at 100 Mbit/s and 1 Gbit/s, for dense, TernGrad, Top-k
# with error feedback, DGC and QSGD (PowerSGD at rank 1, 2 or 4 when
# TTA_METHODS names powersgd-r1, -r2, -r4); each run stops at its config's
# train.target_accuracy and predicts its wall-clock with the link's
# calibration. Dense and Top-k also run without pipelining at 100 Mbit/s.
# TTA_MODELS, TTA_RATES, TTA_METHODS and TTA_NOPIPE_METHODS (empty: none)
# choose a subset (bench/peer/matrix.sh runs one run at a time this way); TTA_SEED
# the seed, TTA_SUFFIX a name's ending (-sN), TTA_CAP the seconds a run may take
# (default 1200: a run past it is stopped, its evaluations so far kept).
#
#   scripts/time-to-accuracy.sh BIN [OUT]        (root, Open MPI, the datasets)
#
# BIN is a gradcomp built with --features mpi. The calibrations come from
# scripts/calibrate-links.sh (TTA_CALIBRATION, default docs/bench/calibration).
# The table: gradcomp report --time-to-accuracy OUT/<runs>.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:?usage: scripts/time-to-accuracy.sh BIN [OUT]}"
out="${2:-runs/tta}"
cal="${TTA_CALIBRATION:-docs/bench/calibration}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

# The method table: the settings each method changes in the base configs.
method_sets() {
    case $1 in
        dense) sets=('compressor.name="dense"' 'comm.topology="allreduce"') ;;
        terngrad) sets=('compressor={ name = "terngrad", clipping = true, c = 2.5, share_scaler = true }'
                        'comm.topology="parameter-server"') ;;
        # The library's default for TernGrad (issue #23): codes summed by an i8 allreduce.
        terngrad-allreduce) sets=('compressor={ name = "terngrad", clipping = true, c = 2.5, share_scaler = true }'
                                  'comm.topology="allreduce"') ;;
        topk) sets=('compressor={ name = "topk", density = 0.01 }' 'compression.memory="error-feedback"'
                    'comm.topology="allgather"') ;;
        dgc) sets=('compressor={ name = "dgck", density = 0.001 }' 'compression.memory="dgc-momentum"'
                   'compression.warmup={ kind = "exp", epochs = 1 }' 'compression.local_clip=5.0'
                   'compression.exclude={ biases = true }' 'optimizer.momentum=0.0' 'comm.topology="allgather"') ;;
        qsgd) sets=('compressor.name="qsgd"' 'comm.topology="allgather"') ;;
        # PowerSGD (issue #24): rank r, compressing from step 10 (torch's
        # default start of 1000 is past these runs' targets).
        powersgd-r1|powersgd-r2|powersgd-r4)
            sets=("compressor={ name = \"powersgd\", rank = ${1#powersgd-r}, start_iter = 10 }" 'comm.topology="allreduce"') ;;
        # Local updates (issue #36): local-hH (DiLoCo: outer Nesterov every H steps, the change
        # dense), local-hH-topk (the change through Top-k 1% with error feedback),
        # streaming-hH-pP-dD (P fragments, each round's merge D steps after its start, on the
        # rounds' own thread and channel); streaming-sgd-...: the outer step is averaging.
        local-h*-topk) h=${1#local-h}; h=${h%-topk}
            sets=("strategy={ kind = \"local\", period = $h, compress_change = true }"
                  'compressor={ name = "topk", density = 0.01 }' 'comm.topology="allgather"') ;;
        local-h*) sets=("strategy={ kind = \"local\", period = ${1#local-h} }" 'compressor.name="dense"') ;;
        streaming-h*-p*-d*|streaming-sgd-h*-p*-d*)
            # streaming[-sgd]-hH-pP-dD[-COMPRESSOR]: the change dense or through COMPRESSOR
            # (its defaults; allgather, which every compressor of a change takes).
            [[ $1 =~ ^streaming-(sgd-)?h([0-9]+)-p([0-9]+)-d([0-9]+)(-([a-z0-9-]+))?$ ]] ||
                { echo "unknown method $1" >&2; exit 2; }
            local outer="" h=${BASH_REMATCH[2]} p=${BASH_REMATCH[3]} d=${BASH_REMATCH[4]} c=${BASH_REMATCH[6]}
            [ -n "${BASH_REMATCH[1]}" ] && outer=', outer = { name = "sgd" }'
            if [ -z "$c" ]; then
                sets=("strategy={ kind = \"local\", period = $h, fragments = $p, delay = $d$outer }" 'compressor.name="dense"')
            else
                sets=("strategy={ kind = \"local\", period = $h, fragments = $p, delay = $d$outer, compress_change = true }"
                      "compressor.name=\"$c\"" 'comm.topology="allgather"')
            fi ;;
        *) echo "unknown method $1" >&2; exit 2 ;;
    esac
}

run() { # MODEL RATE METHOD PIPELINE
    local model=$1 rate=$2 method=$3 pipeline=$4
    local bps name
    case $rate in 10mbit) bps=1e7 ;; 100mbit) bps=1e8 ;; *) bps=1e9 ;; esac
    # Unshaped (rate none), or a link without a calibration: the prediction is uncalibrated.
    local calibrate=(--set "network.calibration=[\"$PWD/$cal/n4-$rate.json\"]")
    [ -f "$cal/n4-$rate.json" ] || calibrate=()
    name="tta-$model-$method-$rate$([ "$pipeline" = true ] || echo -nopipe)${TTA_SUFFIX:-}"
    method_sets "$method"
    local args=()
    for s in "${sets[@]}"; do args+=(--set "$s"); done
    echo "== $name" >&2
    NETSIM_TIMEOUT=${TTA_CAP:-1200} scripts/netsim.sh run 4 "$rate" "$bin" train --backend mpi --quiet \
        --config "experiments/tta-$model.toml" --overwrite "${args[@]}" --set "seed=${TTA_SEED:-1}" \
        --set "name=\"$name\"" --set "run_dir=\"$out/$name\"" \
        --set "compression.pipeline=$pipeline" --set "network.links_bps=[$bps]" \
        "${calibrate[@]}" > "$out/$name.log" 2>&1 ||
        echo "   FAILED (see $out/$name.log)" >&2
}

for model in ${TTA_MODELS:-mnist-lenet fashion-cnn}; do
    for rate in ${TTA_RATES:-100mbit 1gbit}; do
        for method in ${TTA_METHODS:-dense terngrad topk dgc qsgd}; do
            run "$model" "$rate" "$method" true
        done
    done
    for method in ${TTA_NOPIPE_METHODS-dense topk}; do
        run "$model" 100mbit "$method" false
    done
done
