#!/usr/bin/env bash
# PowerSGD at rank 1, 2 and 4 against dense, Top-k with error feedback and
# TernGrad, the same budget each (issue #24, point 4): ResNet-18 on the image
# stand-in and the LSTM language model, 4 in-process workers
# (experiments/powersgd-{resnet18,lstm}.toml). PR_MODELS and PR_METHODS
# choose a subset. About an hour on 2 cores.
#
#   scripts/powersgd-ranks.sh BIN [OUT]
#
# The tables: gradcomp report OUT/powersgd-<model>-* --out DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:?usage: scripts/powersgd-ranks.sh BIN [OUT]}"
out="${2:-runs/powersgd}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

method_sets() {
    case $1 in
        dense) sets=('compressor.name="dense"') ;;
        topk) sets=('compressor={ name = "topk", density = 0.01 }' 'compression.memory="error-feedback"'
                    'comm.topology="allgather"') ;;
        terngrad) sets=('compressor.name="terngrad"') ;;
        powersgd-r1|powersgd-r2|powersgd-r4)
            sets=("compressor={ name = \"powersgd\", rank = ${1#powersgd-r}, start_iter = 10 }") ;;
        *) echo "unknown method $1" >&2; exit 2 ;;
    esac
}

for model in ${PR_MODELS:-resnet18 lstm}; do
    for method in ${PR_METHODS:-dense topk terngrad powersgd-r1 powersgd-r2 powersgd-r4}; do
        method_sets "$method"
        args=()
        for s in "${sets[@]}"; do args+=(--set "$s"); done
        name="powersgd-$model-$method"
        echo "== $name" >&2
        "$bin" train --quiet --config "experiments/powersgd-$model.toml" --overwrite "${args[@]}" \
            --set "name=\"$name\"" --set "run_dir=\"$out/$name\"" > "$out/$name.log" 2>&1 ||
            echo "   FAILED (see $out/$name.log)" >&2
    done
done
