#!/usr/bin/env bash
# Issue #49, point 7: faults under membership on netsim (root). An interleaved pair per
# framework (the same seed without and with faults), then the GPT's heal alone:
#
#   bench/peer/faults.sh OUT [PHASE...]     PHASE: gradcomp torchft heal (default: all three)
#   FAULTS_SEEDS="1 2 3" bench/peer/faults.sh OUT gradcomp torchft   a pair per seed (NAME-sN)
#   FAULTS_RESUME=1 …                       keeps the runs that ended before (a phase outlasts a session)
#   FAULTS_RECORDS=DIR …                    each run's record (.jsonl files) left in DIR/NAME as it ends
#   FAULTS_UNTIL=EPOCH-SECONDS …            no run starts whose limit (with its faulted twin's,
#                                           for a run without faults) would end past then
#
# bench/peer/faults.py says what a run does; its `table` prints the results.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:?usage: bench/peer/faults.sh OUT [PHASE...]}"
shift
py="${PEER_PYTHON:-$HOME/.cache/gradcomp/py-venv/bin/python}"
steps="${FAULTS_STEPS:-600}"
limit=900
[ $# -gt 0 ] || set -- gradcomp torchft heal
. scripts/lib/until.sh
until_check FAULTS_UNTIL
# One run of a pair, then worker 1's saved models evaluated (off the run's clock). With
# FAULTS_RESUME=1 a run whose driver recorded its end is kept, and only evaluated if it was not:
# the race's phase outlasts a session. A run stopped part-way is made again from the start.
pair() { # FRAMEWORK SEED NAME [faults.py run ARGS...]   (the run's directory: OUT/FRAMEWORK-NAME; 1: not started, 2: failed)
    local name="$1-$3"
    local dir="$out/$name"
    if [ -n "${FAULTS_RESUME:-}" ] && grep -q '"kind": "done"' "$dir/driver.jsonl" 2>/dev/null; then
        echo "== $dir (done before, kept)" >&2
    else
        # A session's end (FAULTS_UNTIL): a run without faults starts only if its faulted twin
        # can follow it, so the two run on the same machine, back to back.
        local need=$limit
        [[ $3 == nofaults* ]] && need=$((2 * limit))
        if ! until_fits FAULTS_UNTIL "$need"; then
            echo "== $dir (not started: its limit would end past FAULTS_UNTIL)" >&2
            return 1
        fi
        # (`set -e` does not hold in a function called under `||`: each failure returns by hand.)
        "$py" bench/peer/faults.py run --framework "$1" --out "$dir" --steps "$steps" --limit "$limit" --seed "$2" "${@:4}" ||
            { echo "== $dir: the run failed (its logs: $dir/*.log)" >&2; return 2; }
    fi
    [ -e "$dir/evals.jsonl" ] || "$py" bench/peer/faults.py eval "$dir" || { echo "== $dir: its evaluation failed" >&2; return 2; }
    # FAULTS_RECORDS=DIR: the run's record (its .jsonl files, not the saved models) in DIR/NAME,
    # ready to commit; copied back into a fresh OUT, FAULTS_RESUME keeps the run.
    if [ -n "${FAULTS_RECORDS:-}" ]; then
        mkdir -p "$FAULTS_RECORDS/$name"
        cp "$dir"/*.jsonl "$FAULTS_RECORDS/$name/" || return 2
    fi
}
failed=0
for phase in "$@"; do
    echo "=== $phase $(date -u +%FT%TZ)" >&2
    case $phase in
        gradcomp|torchft)
            for seed in ${FAULTS_SEEDS:-1}; do
                sfx=$([ "$seed" = 1 ] || echo "-s$seed")
                # The faulted run takes its schedule from its twin: no twin, no faulted run. A run
                # that failed leaves the next seeds to run, and the script's status to say so.
                pair "$phase" "$seed" "nofaults$sfx" || { [ $? = 1 ] || failed=1; continue; }
                pair "$phase" "$seed" "faults$sfx" --faults --schedule-from "$out/$phase-nofaults$sfx" ||
                    { [ $? = 1 ] || failed=1; continue; }
            done ;;
        # The race's GPT (5.75M parameters): one worker trains, a second joins 30 s later and
        # heals from it at 100 Mbit/s: θ_outer, the outer momentum (Nesterov) and the model.
        heal)
            "$py" bench/peer/faults.py run --framework gradcomp --out "$out/gpt-heal" --config experiments/tta-ptb-gpt.toml \
                --workers 2 --world 2 --min-replicas 1 --outer nesterov --steps 2000 --save-every 0 --join-late 30 --limit 600 ;;
        *) echo "unknown phase $phase" >&2; exit 2 ;;
    esac
done
[ $failed = 0 ] || { echo "faults.sh: a run failed (== lines above)" >&2; exit 1; }
