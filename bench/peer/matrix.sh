#!/usr/bin/env bash
# gradcomp against PyTorch DDP on the same shaped links: 4 workers in the
# netsim hosts (scripts/netsim.sh), one recipe (experiments/tta-MODEL.toml),
# every run to the config's target accuracy. The two frameworks' runs are
# interleaved, one run at a time, so machine noise hits both alike:
#
#   burn       gradcomp's own trainer, MPI ranks (scripts/time-to-accuracy.sh's methods)
#   peer       PyTorch DDP over gloo (bench/peer/train.py): DDP's allreduce, torch's hooks,
#              gradcomp's hooks
#
#   bench/peer/matrix.sh BIN OUT     (root, Open MPI, MNIST, bench/peer/install.sh done)
#
# BIN is gradcomp built with --features mpi (release). PEER_PYTHON is the peer's
# Python (default ~/.cache/gradcomp/py-venv/bin/python); MATRIX_MODELS,
# MATRIX_RATES (10mbit 100mbit 1gbit none), MATRIX_BURN and MATRIX_PEER choose a
# subset (MATRIX_BURN=" ": none); MATRIX_SEEDS the seeds (names end -sN past seed 1);
# MATRIX_CAP a run's cap in seconds of training (default 900). The burn trainer runs with its config's buckets; DDP's buckets are
# peer_options' below. The table:
# gradcomp report --time-to-accuracy OUT/*/
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="${1:?usage: bench/peer/matrix.sh BIN OUT}"
out="${2:?usage: bench/peer/matrix.sh BIN OUT}"
py="${PEER_PYTHON:-$HOME/.cache/gradcomp/py-venv/bin/python}"
# A run stops once it has trained this long (evaluation excluded), evaluated there and
# reported as not reached (bench/peer/table.py projects its time to the target).
cap="${MATRIX_CAP:-900}"
. scripts/lib/until.sh
until_check MATRIX_UNTIL
mkdir -p "$out"
out="$(cd "$out" && pwd)"
burn=(${MATRIX_BURN:-dense topk terngrad powersgd-r2})
peer=(${MATRIX_PEER:-none torch-fp16 torch-powersgd-r1 torch-powersgd-r2 torch-powersgd-r4 torch-batched-powersgd-r2 gradcomp:topk gradcomp:terngrad gradcomp:powersgd})

# gradcomp's hooks at the settings of gradcomp's own time-to-accuracy runs.
# The buckets: torch's PowerSGD in one (the two-bucket pitfall, docs/RESULTS.md);
# every other method in DDP's default buckets, where a bucket's exchange can
# overlap the rest of the backward pass (gradcomp's hooks since issue #35;
# before it, every method ran in one bucket).
peer_options() {
    case $1 in
        gradcomp:topk) echo "--option density=0.01 --buckets ddp" ;;
        gradcomp:powersgd) echo "--option matrix_approximation_rank=2 --option start_iter=10 --buckets ddp" ;;
        torch-powersgd-*|torch-batched-powersgd-*) echo "--buckets one" ;;
        # gradcomp's LocalUpdates (issues #36, #37, #50):
        # gradcomp-local[-sgd]-hH[-pP-dD][-eager|-delayed][-wS][-bn][-rs][-COMPRESSOR], no DDP
        # (outer Nesterov, or sgd: averaging); eager or delayed outer steps (a round through
        # the whole next period); S synchronous warm-up steps; BatchNorm's statistics
        # averaged at rounds; the reduce-scatter; the change dense or through COMPRESSOR
        # with its defaults (topk: density 0.01).
        gradcomp-local-*)
            local m=$1 o=""
            [[ $m == gradcomp-local-sgd-* ]] && o+=" --option outer=sgd"
            [[ $m =~ -h([0-9]+) ]] && o+=" --option period=${BASH_REMATCH[1]}"
            [[ $m =~ -p([0-9]+) ]] && o+=" --option fragments=${BASH_REMATCH[1]}"
            [[ $m =~ -d([0-9]+) ]] && o+=" --option delay=${BASH_REMATCH[1]}"
            [[ $m =~ -(eager|delayed)(-|$) ]] && o+=" --option overlap=${BASH_REMATCH[1]}"
            [[ $m =~ -w([0-9]+) ]] && o+=" --option warmup_steps=${BASH_REMATCH[1]}"
            [[ $m =~ -bn(-|$) ]] && o+=" --option average_buffers=true"
            [[ $m =~ -rs(-|$) ]] && o+=" --option topology=reduce-scatter"
            [[ $m == *-topk ]] && o+=" --option density=0.01"
            echo "$o" ;;
        # plan = "auto" (issue #68): the core's rule from the run's own free step and the link
        # its probe round measures (gradcomp-auto), or a link given in Gbit/s (gradcomp-auto-gG).
        gradcomp-auto) echo "--option plan=auto" ;;
        gradcomp-auto-g*) echo "--option plan=auto --option link_gbps=${1#gradcomp-auto-g}" ;;
        # PyTorch's own local updates (bench/peer/torch_local.py): the name says it all.
        torch-postlocal-*|torchft-diloco-*) echo "" ;;
        *) echo "--buckets ddp" ;;
    esac
}

# The method train.py runs: gradcomp-local-… is LocalUpdates with the change dense or
# through the compressor its name ends with.
peer_method() {
    case $1 in
        gradcomp-auto*) echo "gradcomp-local:auto" ;;
        gradcomp-local-*)
            local last=${1##*-}
            if [[ $last =~ ^[hpdw][0-9]+$ || $last =~ ^(sgd|local|eager|delayed|bn|rs)$ ]]; then
                echo "gradcomp-local:dense"
            else
                echo "gradcomp-local:$last"
            fi ;;
        *) echo "$1" ;;
    esac
}

# MATRIX_RESUME=1: a run that finished before (OUT/NAME.done, written when it exits 0) or
# whose record is in OUT (NAME.evals.jsonl, as committed: copy a records directory into a
# fresh OUT) is not run again, so a phase cut short (a session's end) resumes where it
# stopped, on this machine or another. MATRIX_RECORDS=DIR: each run that finishes leaves its
# record there at once (DIR/NAME.evals.jsonl, DIR/NAME.config.toml), ready to commit.
# MATRIX_NETSIM: the netsim script (default scripts/netsim.sh; bench/peer/test_peer.py fakes it).
run_peer() { # MODEL RATE METHOD
    local name="peer-$1-${3/:/-}-$2$suffix"
    if [ -n "${MATRIX_RESUME:-}" ] && { [ -e "$out/$name.done" ] || [ -e "$out/$name.evals.jsonl" ]; }; then
        [ -n "${counting:-}" ] || echo "== $name (done before, skipped)" >&2
        return
    fi
    if [ -n "${counting:-}" ]; then pending=$((pending + 1)); return; fi
    echo "== $name" >&2
    rm -f "$out/$name.done"
    # shellcheck disable=SC2046
    if NETSIM_TIMEOUT=$((cap + 900)) "${MATRIX_NETSIM:-scripts/netsim.sh}" torch 4 "$2" "$py" bench/peer/train.py \
        --config "experiments/tta-$1.toml" --method "$(peer_method "$3")" $(peer_options "$3") --out "$out/$name" \
        --cap-seconds "$cap" --seed "$seed" > "$out/$name.log" 2>&1; then
        touch "$out/$name.done"
        if [ -n "${MATRIX_RECORDS:-}" ]; then
            mkdir -p "$MATRIX_RECORDS"
            cp "$out/$name/evals.jsonl" "$MATRIX_RECORDS/$name.evals.jsonl"
            cp "$out/$name/config.toml" "$MATRIX_RECORDS/$name.config.toml"
        fi
    else
        echo "   FAILED (see $out/$name.log)" >&2
    fi
}

run_burn() { # MODEL RATE METHOD
    if [ -n "${counting:-}" ]; then pending=$((pending + 1)); return; fi
    TTA_SEED=$seed TTA_SUFFIX=$suffix TTA_CAP=$cap TTA_MODELS="$1" TTA_RATES="$2" TTA_METHODS="$3" \
        TTA_NOPIPE_METHODS="" scripts/time-to-accuracy.sh "$bin" "$out"
}

# One seed's runs, the frameworks interleaved (with counting=1: only counted, into pending).
seed_runs() {
    for model in ${MATRIX_MODELS:-mnist-lenet}; do
        for rate in ${MATRIX_RATES:-100mbit 1gbit}; do
            n=$(( ${#burn[@]} > ${#peer[@]} ? ${#burn[@]} : ${#peer[@]} ))
            for i in $(seq 0 $((n - 1))); do
                if [ "$i" -lt "${#peer[@]}" ]; then run_peer "$model" "$rate" "${peer[$i]}"; fi
                if [ "$i" -lt "${#burn[@]}" ]; then run_burn "$model" "$rate" "${burn[$i]}"; fi
            done
        done
    done
}

# MATRIX_UNTIL=EPOCH-SECONDS (a session's end): a seed's runs start only if all those still to
# run fit before then, each at its cap plus MATRIX_RUN_OVERHEAD seconds (start-up and
# evaluations, off the cap's clock: default 300), and once started they all run. A seed's runs
# are the pairs a cell's ratios compare, and this machine's speed moves between sessions, so a
# seed is never split between two; the seeds that do not fit are skipped, to be resumed.
overhead="${MATRIX_RUN_OVERHEAD:-300}"
[[ $overhead =~ ^[0-9]+$ ]] || { echo "error: MATRIX_RUN_OVERHEAD must be whole seconds, not '$overhead'" >&2; exit 2; }
for seed in ${MATRIX_SEEDS:-1}; do
    suffix=$([ "$seed" = 1 ] || echo "-s$seed")
    pending=0
    counting=1 seed_runs
    if [ "$pending" -gt 0 ] && ! until_fits MATRIX_UNTIL $((pending * (cap + overhead))); then
        echo "== seed $seed: not started, its $pending run(s) at ${cap}+${overhead} s each would end past MATRIX_UNTIL" >&2
        continue
    fi
    seed_runs
done
echo "done: gradcomp report --time-to-accuracy $out/*/" >&2
