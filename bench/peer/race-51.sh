#!/usr/bin/env bash
# Issue #51: the race, measured so a skeptic accepts it. Written before its runs: the grid,
# the rule that picks each framework's candidate from it, and the cells. Each phase is one
# or more bench/peer/matrix.sh calls, so a phase can be run, repeated or resumed alone:
#
#   bench/peer/race-51.sh OUT PHASE...      (root, netsim; bench/peer/install.sh done)
#   RACE_DRY=1 bench/peer/race-51.sh OUT PHASE...    what a phase would run
#   (a phase cut short resumes: the runs that finished, OUT/NAME.done, are not run again;
#   on a fresh machine, copy the committed records in first, `cp docs/bench/race-51/*.* OUT/`:
#   a run with OUT/NAME.evals.jsonl is not run again either)
#   MATRIX_RECORDS=docs/bench/race-51: each run leaves its record there as it finishes (the
#   faults phase's in its faults/; a fresh OUT takes them back: `cp -r docs/bench/race-51/faults OUT/`)
#   MATRIX_UNTIL=EPOCH-SECONDS: a seed's runs start only if all fit before then, each at its cap
#   plus MATRIX_RUN_OVERHEAD (default 300 s), so no seed's pairs are split between sessions
#   (bench/peer/matrix.sh; the faults phase: no pair starts past it)
#   RACE_CHECK=1 bench/peer/race-51.sh OUT PHASE...  every run a phase lists is in OUT, or
#                         struck in OUT/struck.txt ("RUN-NAME: the reason", a line each)
#
# PHASES
#   isolated              the lower bound's communication-free step: `isolated` on every
#                         model, unshaped, 120 s (bench/peer/table.py). Run it in the same
#                         session as the cells it bounds: this machine's speed drifts between
#                         sessions (docs/RESULTS.md, issue #50). The burn trainer's pass is
#                         2-3x PyTorch's on this CPU (RESULTS, "Compute apart"), so PyTorch's
#                         step is the faster of the two frameworks' and the only one run.
#   faults                the column under faults: bench/peer/faults.sh's pairs (the same seed
#                         without and with the faults) for gradcomp and torchft, seeds 1-3, the
#                         LSTM at 100 Mbit/s, 1000 steps (its cell needs 594-634 without
#                         faults, a faulted run about 780: more than faults.sh's 600; faults.py's
#                         schedule: a host lost at 25% and revived at 50%, another stopped 60 s
#                         at 75%), in OUT/faults; resumed
#                         run by run (faults.sh's FAULTS_RESUME), each evaluated when it ends
#   tune-MODEL            (MODEL: lstm, gpt, resnet) the grid at 100 Mbit/s on TUNE_SEED
#   MODEL-RATE            (RATE: 10mbit, 100mbit, 1gbit, none) a cell: the candidates the
#                         tuning picked (RACE_GRADCOMP, RACE_TORCHFT, RACE_POSTLOCAL, named as
#                         below; unset: read per cell from tune-MODEL's records in OUT, the
#                         tuning seed's alone, which must be complete, by `bench/peer/table.py
#                         OUT --pick-env`) with PyTorch's per-step best, seeds 1-3
#
# THE GRID (the same for both frameworks' local updates, 8 points each)
#   language models  (H, P, tau) in (32, 1, 0), (32, 4, 1), (32, 4, 4), (16, 4, 1)
#   ResNet-18        (H, P, tau) in (8, 1, 0), (8, 4, 1), (16, 1, 0), (4, 1, 0)
#   x the outer optimizer: averaging (SGD lr 1) or DiLoCo's Nesterov (lr 0.7, momentum 0.9)
#   gradcomp: LocalUpdates, the change in fp4; torchft 0.2.0: DiLoCo, the change in fp32
#   (its fp8 path needs CUDA and Triton: bench/peer/table.py shows its bytes by formula).
#   Neither has a warm-up in the grid: torchft's DiLoCo has none to tune.
# TORCH'S OWN, SET AS ITS DOCS ADVISE
#   PowerSGD (`start_powerSGD_iter`: "start with 10% of total training steps"): rank 4 on the
#   language models, 2 on ResNet-18 (the ranks of issues #26 and #36), from 10% of the
#   recipe's steps: 80 (LSTM, 801 steps), 30 (GPT, 292), 30 (ResNet-18, 300).
#   Post-local SGD: its docs say only to tune `start_localSGD_iter`; the warm-up is 10% of the
#   recipe's steps as PowerSGD's, H in {8, 32} (ResNet-18: {4, 8}), picked by the rule.
# THE RULE
#   At 100 Mbit/s, seed TUNE_SEED (9: never raced), cap 600 s: the point with the least
#   time to target; where none of a framework's points reached it, the least projection
#   (bench/peer/table.py's rule); within 2% of each other, the fewer bytes per worker-step.
#   The times are counted in each run's own communication-free steps (train.py times them
#   before it trains: `free_step_seconds`), so a phase may span sessions whose machine speed
#   differs; points recorded without them are ranked in seconds (table.py says which).
#   The pick races every link of that model. `python3 bench/peer/table.py OUT --pick` on the tuning
#   records ranks the points and names each family's pick.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:?usage: bench/peer/race-51.sh OUT PHASE...}"
shift
bin="${RACE_BIN:-target/release/gradcomp}"
missing=0
m() { # MODEL RATE CAP SEEDS "PEER…"   (RACE_DRY=1: print the runs; RACE_CHECK=1: check them)
    if [ -n "${RACE_DRY:-}" ]; then echo "$1 $2 cap $3 s, seeds $4:$5"; return; fi
    if [ -n "${RACE_CHECK:-}" ]; then
        local seed method name
        for seed in $4; do
            for method in $5; do
                name="peer-$1-${method/:/-}-$2$([ "$seed" = 1 ] || echo "-s$seed")"
                [ -e "$out/$name" ] || [ -e "$out/$name.evals.jsonl" ] && continue
                grep -q "^$name:" "$out/struck.txt" 2>/dev/null && continue
                echo "missing: $name (neither in $out nor struck in $out/struck.txt)"
                missing=$((missing + 1))
            done
        done
        return
    fi
    MATRIX_RESUME=1 MATRIX_SEEDS="$4" MATRIX_BURN=" " MATRIX_MODELS=$1 MATRIX_RATES=$2 MATRIX_CAP=$3 MATRIX_PEER="$5" \
        bench/peer/matrix.sh "$bin" "$out"
}
model_of() {
    case $1 in lstm) echo ptb-lstm-local ;; gpt) echo ptb-gpt ;; resnet) echo fashion-resnet18 ;;
        *) echo "unknown model $1" >&2; exit 2 ;; esac
}
# The grid's 8 points for one framework: PREFIX and SUFFIX around -hH[-pP-dD].
grid() { # MODEL FRAMEWORK
    local shapes points="" s
    if [ "$1" = resnet ]; then shapes="h8 h8-p4-d1 h16 h4"; else shapes="h32 h32-p4-d1 h32-p4-d4 h16-p4-d1"; fi
    for s in $shapes; do
        case $2 in
            gradcomp) points+=" gradcomp-local-sgd-$s-fp4 gradcomp-local-$s-fp4" ;;
            torchft) points+=" torchft-diloco-$s torchft-diloco-$s-nesterov" ;;
        esac
    done
    echo "$points"
}
postlocal() { # MODEL
    case $1 in lstm) echo "torch-postlocal-h8-w80 torch-postlocal-h32-w80" ;;
        gpt) echo "torch-postlocal-h8-w30 torch-postlocal-h32-w30" ;;
        resnet) echo "torch-postlocal-h4-w30 torch-postlocal-h8-w30" ;; esac
}
powersgd() { # MODEL
    case $1 in lstm) echo torch-powersgd-r4-s80 ;; gpt) echo torch-powersgd-r4-s30 ;; resnet) echo torch-powersgd-r2-s30 ;; esac
}
# The tuning phase's runs of one model (THE GRID, post-local SGD) through m.
tune() { # MODEL
    m "$(model_of "$1")" 100mbit 600 "${TUNE_SEED:-9}" "$(zip "$(grid "$1" gradcomp)" "$(grid "$1" torchft) $(postlocal "$1")")"
}
# Interleaves two lists, so drift over the phase hits both frameworks alike.
zip() { # "A…" "B…"
    local -a a=($1) b=($2); local i n=$(( ${#a[@]} > ${#b[@]} ? ${#a[@]} : ${#b[@]} )) r=""
    for ((i = 0; i < n; i++)); do r+=" ${a[i]:-} ${b[i]:-}"; done
    echo $r
}
# The picks the caller gave, if any: each cell starts from these, not from the picks an
# earlier cell of this call read for its own model.
given=("${RACE_GRADCOMP:-}" "${RACE_TORCHFT:-}" "${RACE_POSTLOCAL:-}")
for phase in "$@"; do
    echo "=== phase $phase $(date -u +%FT%TZ)" >&2
    case $phase in
        isolated) for k in lstm gpt resnet; do m "$(model_of $k)" none 120 1 isolated; done ;;
        faults)
            if [ -n "${RACE_DRY:-}${RACE_CHECK:-}" ]; then echo "faults: bench/peer/faults.sh $out/faults"; continue; fi
            FAULTS_RECORDS="${MATRIX_RECORDS:+$MATRIX_RECORDS/faults}" FAULTS_UNTIL="${MATRIX_UNTIL:-}" \
                FAULTS_RESUME=1 FAULTS_SEEDS="1 2 3" FAULTS_STEPS="${FAULTS_STEPS:-1000}" \
                bench/peer/faults.sh "$out/faults" gradcomp torchft ;;
        tune-*)
            tune "${phase#tune-}" ;;
        *-10mbit|*-100mbit|*-1gbit|*-none)
            k=${phase%-*} rate=${phase##*-}
            RACE_GRADCOMP=${given[0]} RACE_TORCHFT=${given[1]} RACE_POSTLOCAL=${given[2]}
            cap=600; [ "$rate" = 10mbit ] && cap=300
            if [ -z "${RACE_GRADCOMP:-}${RACE_TORCHFT:-}${RACE_POSTLOCAL:-}" ]; then
                # The picks of this model's tuning phase in OUT, once every one of its points
                # is there (or struck).
                before=$missing
                RACE_CHECK=1 RACE_DRY="" tune "$k"
                if [ "$missing" != "$before" ]; then
                    echo "error: tune-$k is not complete in $out (above); run it first" >&2; exit 2
                fi
                picks=$(python3 bench/peer/table.py "$out" --pick-env "$(model_of "$k")")
                echo "picks of tune-$k: $picks" >&2
                eval "export $picks"
            fi
            : "${RACE_GRADCOMP:?the tuning pick for gradcomp}" "${RACE_TORCHFT:?and for torchft}"
            : "${RACE_POSTLOCAL:?and for post-local SGD}"
            fast=""; [[ $rate == 1gbit || $rate == none ]] && fast=none
            m "$(model_of "$k")" "$rate" "$cap" "1 2 3" \
                "$(zip "$RACE_GRADCOMP" "$RACE_TORCHFT $RACE_POSTLOCAL $(powersgd "$k") $fast")" ;;
        *) echo "unknown phase $phase" >&2; exit 2 ;;
    esac
done
if [ -n "${RACE_CHECK:-}" ]; then
    echo "$missing run(s) missing" >&2
    [ "$missing" = 0 ]
else
    echo "race phases done: $*" >&2
fi
