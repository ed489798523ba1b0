#!/usr/bin/env bash
# Steps to the target against DDP's (issue #68): 4 gloo ranks of
# bench/peer/train.py on loopback (unshaped), one run at a time, each plan of
# local updates against DDP on the same seed. Steps decide here, not seconds:
# a run's steps and bytes do not depend on how fast the machine is.
#
#   bench/peer/steps.sh OUT MODEL SEED PLAN...     (MODEL: ptb-lstm-local, ptb-gpt, fashion-resnet18)
#   python3 bench/peer/steps.py OUT                 the table: steps ÷ DDP's, bytes ÷ DDP's
#
# A run writes OUT/peer-MODEL-PLAN-none[-sSEED]/ (table.py's names) and, once
# it ended well, OUT/NAME.done; a run done already is skipped, so the script
# resumes (a run cut short is run again). The plans (PLAN below):
#   ddp                 DDP's allreduce (the reference)
#   powersgd            gradcomp's PowerSGD hook (rank 2, from step 10) every step
#   auto-gG             LocalUpdates(plan="auto") for a link of G Gbit/s, from the run's
#                       own free step (timed before it trains) and length
#   local-hH            LocalUpdates, fp4 change, averaging (outer sgd), period H
#                       (local-h32: the raced plan)
#   ...-nesterov        the outer step DiLoCo's Nesterov instead of averaging
#   ...-owW             the outer step warmed up over W rounds (from averaging)
#   ...-olrX            the outer learning rate X/10 (sgd: lr > 1 extrapolates the average)
#   ...-yS              a synchronous phase of S steps first, dense (post-local SGD)
#   ...-ypS             the same through PowerSGD rank 2 (its error feedback; compressing
#                       from step 10, as the race's PowerSGD hook, not torch's default 1000)
#   ...-xA[_B...]       the period doubling at steps A, B, ...
#   ...-dD              each round overlapping D inner steps (Streaming's τ; its mix α = 0.5)
#   ...-e               eager outer steps: with -dD eager rounds per fragment (the fresh change
#                       in place of the one sent, no mix), without it the whole period's
#   ...-rs              the change by the reduce-scatter instead of the allgather
#   ...-iK              the inner optimizer's state (Adam's moments) averaged every K periods
# PEER_PYTHON: the Python with gradcomp and torch (default ~/.cache/gradcomp/py-venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:?usage: bench/peer/steps.sh OUT MODEL SEED PLAN...}"
model="${2:?usage: bench/peer/steps.sh OUT MODEL SEED PLAN...}"
seed="${3:?usage: bench/peer/steps.sh OUT MODEL SEED PLAN...}"
shift 3
py="${PEER_PYTHON:-$HOME/.cache/gradcomp/py-venv/bin/python}"
config="experiments/tta-$model.toml"
[ -f "$config" ] || { echo "error: no $config" >&2; exit 2; }
mkdir -p "$out"

# The train.py method and options of PLAN.
plan_args() {
    local p=$1 o=""
    case $p in
        ddp) echo "--method none --buckets ddp"; return ;;
        auto-g*) echo "--method gradcomp-local:auto --option plan=auto --option link_gbps=${p#auto-g}"; return ;;
        powersgd) echo "--method gradcomp:powersgd --buckets ddp --option matrix_approximation_rank=2 --option start_iter=10"; return ;;
        local-*) ;;
        *) echo "error: unknown plan $p" >&2; return 2 ;;
    esac
    [[ $p =~ -h([0-9]+) ]] && o+=" --option period=${BASH_REMATCH[1]}"
    [[ $p == *-nesterov* ]] || o+=" --option outer=sgd"
    [[ $p =~ -ow([0-9]+) ]] && o+=" --option outer_warmup_rounds=${BASH_REMATCH[1]}"
    [[ $p =~ -olr([0-9]+) ]] && o+=" --option outer_lr=$(awk "BEGIN{print ${BASH_REMATCH[1]}/10}")"
    if [[ $p =~ -yp([0-9]+) ]]; then
        o+=" --option sync_steps=${BASH_REMATCH[1]} --option sync_compressor=powersgd"
        o+=" --option sync_options={\"matrix_approximation_rank\":2,\"start_iter\":10}"
    elif [[ $p =~ -y([0-9]+) ]]; then
        o+=" --option sync_steps=${BASH_REMATCH[1]}"
    fi
    [[ $p =~ -x([0-9_]+) ]] && o+=" --option period_doubles_at=[${BASH_REMATCH[1]//_/,}]"
    [[ $p =~ -d([0-9]+) ]] && o+=" --option delay=${BASH_REMATCH[1]}"
    [[ $p =~ -e(-|$) ]] && o+=" --option overlap=eager"
    [[ $p =~ -rs(-|$) ]] && o+=" --option topology=reduce-scatter"
    [[ $p =~ -i([0-9]+) ]] && o+=" --option inner_state_every=${BASH_REMATCH[1]}"
    echo "--method gradcomp-local:fp4$o"
}

for plan in "$@"; do
    name="peer-$model-$plan-none$([ "$seed" = 1 ] || echo "-s$seed")"
    dir="$out/$name"
    if [ -f "$out/$name.done" ]; then
        echo "== $name: done already"
        continue
    fi
    args=$(plan_args "$plan")
    # The communication-free step is timed where a plan needs it (auto), else skipped.
    calibrate=--no-calibrate
    [[ $plan == auto-* ]] && calibrate=
    echo "== $name: $args"
    port=$((20000 + RANDOM % 20000))
    pids=()
    for r in 0 1 2 3; do
        # shellcheck disable=SC2086
        RANK=$r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
            "$py" bench/peer/train.py --config "$config" --seed "$seed" --out "$dir" $calibrate $args \
            >"$out/$name.rank$r.log" 2>&1 &
        pids+=($!)
    done
    status=0
    for p in "${pids[@]}"; do wait "$p" || status=1; done
    if [ $status -ne 0 ]; then
        echo "error: $name failed; its logs: $out/$name.rank*.log" >&2
        rm -rf "$dir.failed"; mv "$dir" "$dir.failed" 2>/dev/null || true
        continue
    fi
    touch "$out/$name.done"
    tail -1 "$dir/evals.jsonl"
done
