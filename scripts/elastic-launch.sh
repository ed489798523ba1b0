#!/usr/bin/env bash
# Issue #27's "done when": LeNet-5 on MNIST with Top-k (ρ = 0.01) and error
# feedback on 4 netsim hosts at 100 Mbit/s under `gradcomp launch`, a
# checkpoint every 50 steps, 2 epochs. One run goes uninterrupted; in the
# other, host KILL (default 2) is killed when the job reports step AT
# (default 725, mid-epoch 2: 468 steps an epoch at 4 workers; between the
# checkpoints of steps 700 and 750) and the
# supervisor goes on with 3. Prints one JSON line per run: final accuracy,
# and for the killed run the seconds from the kill to the first step on 3
# hosts, the steps lost and the supervisor's record.
#
#   scripts/elastic-launch.sh BIN OUT [KILL] [AT]      (root, Open MPI, MNIST)
#
# STRATEGY (a TOML table) runs another strategy, e.g. local updates (issue #49):
#   STRATEGY='{ kind = "local", period = 50, compress_change = true }' scripts/elastic-launch.sh …
# (the checkpoint interval, 50, must be a multiple of its period).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:?usage: scripts/elastic-launch.sh BIN OUT [KILL] [AT]}"
out="${2:?usage: scripts/elastic-launch.sh BIN OUT [KILL] [AT]}"
kill_host="${3:-2}"
at="${4:-725}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
common=(--min-workers 3 --config experiments/tta-mnist-lenet.toml --quiet
        --set 'compressor={ name = "topk", density = 0.01 }' --set 'compression.memory="error-feedback"'
        --set 'comm.topology="allgather"' --set train.epochs=2 --set train.eval_every=0
        --set train.target_accuracy=1.0 --set train.checkpoint_every_steps=50)
[ -n "${STRATEGY:-}" ] && common+=(--set "strategy=$STRATEGY")
steps_done() { # RUN_DIR: the job's step count, written every step (steps.jsonl comes in batches)
    local s
    s=$(tr -cd '0-9' 2>/dev/null < "$1/launch-progress" || true)
    echo "${s:-0}"
}
final() { # RUN_DIR: the last epoch's test accuracy
    python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["test_accuracy"])' "$1/epochs.jsonl"
}

d="$out/uninterrupted"   # run once per OUT
[ -s "$d/epochs.jsonl" ] ||
    scripts/netsim.sh launch 4 100mbit "$bin" "${common[@]}" --set run_dir="\"$d\"" --overwrite > "$d.log" 2>&1
echo "{\"run\": \"4 hosts throughout\", \"accuracy\": $(final "$d")}"

d="$out/killed-h$kill_host"
NETSIM_PREFIX=gcel scripts/netsim.sh launch 4 100mbit "$bin" "${common[@]}" --set run_dir="\"$d\"" --overwrite > "$d.log" 2>&1 &
job=$!
while [ "$(steps_done "$d")" -lt "$at" ]; do
    kill -0 $job 2>/dev/null || { echo "the run ended before step $at: $d.log" >&2; exit 1; }
    sleep 0.05
done
killed=$(date +%s.%N)
NETSIM_PREFIX=gcel scripts/netsim.sh kill-host "$kill_host"
wait $job
python3 - "$d" "$killed" "$(final "$d")" <<'PY'
import json, sys
d, killed, acc = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
lines = [json.loads(l) for l in open(d + "/membership.jsonl")]
lost = [l for l in lines if l.get("event") == "hosts lost"][0]
trainer = [l for l in lines if l.get("from") == 4 and l.get("to") == 3]
print(json.dumps({"run": "host killed, 3 go on", "accuracy": acc,
                  "kill_to_first_step_on_3_s": round(lost["unix_time"] - killed, 2),
                  "steps_lost": lost["steps_lost"], "record": lost,
                  "trainer": trainer[0] if trainer else None}))
PY
