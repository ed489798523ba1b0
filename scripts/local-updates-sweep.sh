#!/usr/bin/env bash
# Local updates against synchronous training at equal tokens (issue #36, point 8):
# the same model, data and inner optimizer for every setting (the file's
# recipe: 4 in-process workers, its epochs, no early stop), only [strategy]
# and [compressor] differ. Each run's final test perplexity and the bytes its
# workers sent go to scripts/local-updates-table.py.
#
#   scripts/local-updates-sweep.sh CONFIG OUT [NAME ...]
#
# CONFIG: experiments/tta-ptb-lstm.toml or experiments/tta-ptb-gpt.toml; OUT: a
# directory for the runs (one per setting); NAME: only these settings.
# SWEEP_SEED=N: the file's seed replaced by N, each run named NAME-seedN (the
# repeats of a setting whose difference is within the spread).
set -euo pipefail
config=${1:?usage: local-updates-sweep.sh CONFIG OUT [NAME ...]}
out=${2:?usage: local-updates-sweep.sh CONFIG OUT [NAME ...]}
shift 2
bin=${GRADCOMP:-target/release/gradcomp}
[ -x "$bin" ] || cargo build --release -p gradcomp-cli
mkdir -p "$out"

topk='compressor={ name = "topk", density = 0.01 }'
# name | strategy | compressor | extra --set
settings=(
  "sync-dense|{ kind = \"sync\" }||"
  "local-sgd-h8|{ kind = \"local\", period = 8, outer = { name = \"sgd\" } }||"
  "local-nesterov-h8|{ kind = \"local\", period = 8 }||"
  "local-sgd-h32|{ kind = \"local\", period = 32, outer = { name = \"sgd\" } }||"
  "local-nesterov-h32|{ kind = \"local\", period = 32 }||"
  "local-sgd-h128|{ kind = \"local\", period = 128, outer = { name = \"sgd\" } }||"
  "local-nesterov-h128|{ kind = \"local\", period = 128 }||"
  # The change compressed, and Streaming, with the outer optimizer that did
  # better at this scale (sgd averaging, lr 1: the rounds of post-local SGD).
  "local-sgd-h32-topk|{ kind = \"local\", period = 32, outer = { name = \"sgd\" }, compress_change = true }|$topk|comm.topology=\"allgather\""
  "local-sgd-h32-terngrad|{ kind = \"local\", period = 32, outer = { name = \"sgd\" }, compress_change = true }|compressor={ name = \"terngrad\" }|"
  "local-sgd-h32-eightbit|{ kind = \"local\", period = 32, outer = { name = \"sgd\" }, compress_change = true }|compressor={ name = \"eightbit\" }|comm.topology=\"allgather\""
  "streaming-sgd-h32-p4-d1|{ kind = \"local\", period = 32, outer = { name = \"sgd\" }, fragments = 4, delay = 1 }||"
  "streaming-sgd-h32-p4-d2|{ kind = \"local\", period = 32, outer = { name = \"sgd\" }, fragments = 4, delay = 2 }||"
  "streaming-sgd-h32-p4-d1-eightbit|{ kind = \"local\", period = 32, outer = { name = \"sgd\" }, fragments = 4, delay = 1, compress_change = true }|compressor={ name = \"eightbit\" }|comm.topology=\"allgather\""
  # The compressors for the change (issue #37): SparseLoCo at 1% and 3% of each 64×64
  # tile (k = 41, 123; Templar's error feedback with decay 0.95 stands in for outer momentum, so
  # the outer step is sgd at lr 1 as Templar's), DeMo's DCT top-k, 4-bit floats.
  "local-sgd-h32-sparseloco-1pct|{ kind = \"local\", period = 32, outer = { name = \"sgd\" }, compress_change = true }|compressor={ name = \"sparseloco\", k = 41 }|comm.topology=\"allgather\""
  "local-sgd-h32-sparseloco-3pct|{ kind = \"local\", period = 32, outer = { name = \"sgd\" }, compress_change = true }|compressor={ name = \"sparseloco\", k = 123 }|comm.topology=\"allgather\""
  "local-sgd-h128-sparseloco-3pct|{ kind = \"local\", period = 128, outer = { name = \"sgd\" }, compress_change = true }|compressor={ name = \"sparseloco\", k = 123 }|comm.topology=\"allgather\""
  "local-sgd-h32-dct-topk|{ kind = \"local\", period = 32, outer = { name = \"sgd\" }, compress_change = true }|compressor={ name = \"dct-topk\" }|comm.topology=\"allgather\""
  "local-sgd-h32-fp4|{ kind = \"local\", period = 32, outer = { name = \"sgd\" }, compress_change = true }|compressor={ name = \"fp4\" }|comm.topology=\"allgather\""
  "streaming-sgd-h32-p4-d1-fp4|{ kind = \"local\", period = 32, outer = { name = \"sgd\" }, fragments = 4, delay = 1, compress_change = true }|compressor={ name = \"fp4\" }|comm.topology=\"allgather\""
  # DiLoCo's Nesterov with a smaller step, for its 17 rounds here.
  "local-nesterov-h32-lr0.5-m0.5|{ kind = \"local\", period = 32, outer = { name = \"nesterov\", lr = 0.5, momentum = 0.5 } }||"
)
for s in "${settings[@]}"; do
  IFS='|' read -r name strategy compressor extra <<<"$s"
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name"; then continue; fi
  if [ -n "${SWEEP_SEED:-}" ]; then name="$name-seed$SWEEP_SEED"; fi
  args=(train --config "$config" --overwrite --quiet --set "run_dir=\"$out/$name\""
        --set "strategy=$strategy" --set "train.target_perplexity=1.0001" --set "train.eval_every=0")
  [ -n "$compressor" ] && args+=(--set "$compressor")
  [ -n "$extra" ] && args+=(--set "$extra")
  [ -n "${SWEEP_SEED:-}" ] && args+=(--set "seed=$SWEEP_SEED")
  echo "== $name" >&2
  start=$(date +%s)
  "$bin" "${args[@]}" > "$out/$name.log" 2>&1 || { echo "   failed: see $out/$name.log" >&2; continue; }
  echo "   $(( $(date +%s) - start )) s" >&2
done
