#!/usr/bin/env bash
# What becomes of a lost worker's error-feedback residuals (issue #27,
# `elastic.lost_state`): LeNet-5 on MNIST with Top-k (ρ = 0.01) and error
# feedback, 4 in-process workers, 2 epochs; for each seed, one uninterrupted
# run, and runs stopped at step 600 (mid-epoch 2) and resumed with 3 workers,
# the lost worker's residuals folded into the survivors' or dropped. Prints
# one JSON line per run with its final test accuracy.
#
#   scripts/elastic-lost-state.sh BIN OUT [SEEDS...]     (default seeds 1 2 3)
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:?usage: scripts/elastic-lost-state.sh BIN OUT [SEEDS...]}"
out="${2:?usage: scripts/elastic-lost-state.sh BIN OUT [SEEDS...]}"
shift 2
seeds=("${@:-1 2 3}")
[ $# -gt 0 ] || seeds=(1 2 3)
mkdir -p "$out"
common=(--config experiments/tta-mnist-lenet.toml --quiet --set 'compressor={ name = "topk", density = 0.01 }'
        --set 'comm.topology="allgather"' --set train.epochs=2 --set train.eval_every=0 --set 'train.target_accuracy=1.0')
final() { # RUN_DIR: the last epoch's test accuracy
    python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["test_accuracy"])' "$1/epochs.jsonl"
}
for seed in "${seeds[@]}"; do
    d="$out/seed$seed-uninterrupted"
    "$bin" train "${common[@]}" --set seed="$seed" --set run_dir="\"$d\"" --overwrite > "$d.log" 2>&1
    echo "{\"seed\": $seed, \"run\": \"4 workers throughout\", \"accuracy\": $(final "$d")}"
    for lost in fold drop; do
        d="$out/seed$seed-$lost"
        "$bin" train "${common[@]}" --set seed="$seed" --set run_dir="\"$d\"" --set train.max_steps=600 \
            --set train.checkpoint_every_epochs=1 --overwrite > "$d.log" 2>&1
        "$bin" train "${common[@]}" --set seed="$seed" --set run_dir="\"$d\"" --set train.max_steps=0 \
            --set train.checkpoint_every_epochs=1 --set workers=3 --set "elastic.lost_state=\"$lost\"" \
            --resume --allow-change >> "$d.log" 2>&1
        echo "{\"seed\": $seed, \"run\": \"4 to 3 workers at step 600, $lost\", \"accuracy\": $(final "$d")}"
    done
done
