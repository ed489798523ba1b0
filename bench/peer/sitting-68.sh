#!/usr/bin/env bash
# Issue #68's sitting at 100 Mbit/s: plan = "auto" against the raced plan and torchft's
# pick on the LSTM, written before its first run and not moved after.
#
#   bench/peer/sitting-68.sh OUT      (root, netsim; bench/peer/install.sh done)
#   python3 bench/peer/table.py OUT   the table (time to target, steps, bytes)
#
# THE CELLS  the LSTM of experiments/tta-ptb-lstm-local.toml (perplexity 350), 4 workers on
#            netsim hosts at 100 Mbit/s (scripts/netsim.sh), seeds 1, 2, 3, cap 600 s of
#            training a run (race-51's), one run at a time, in one sitting.
# THE PLANS  gradcomp-auto: LocalUpdates(plan="auto"), its inputs the run's own free step
#            (timed before it trains) and the link its probe round measures (nothing given);
#            gradcomp-local-sgd-h32-fp4: the plan race-51 raced (H 32, fp4, averaging);
#            torchft-diloco-h32-p4-d4: torchft 0.2.0's pick in race-51 (H 32, 4 fragments, τ 4).
#            Per seed the three in that order; seeds in order.
# THE BOUND  isolated (PyTorch's communication-free step, unshaped, 120 s) first, in this
#            sitting: the bound of a seed is the fewest steps to the target of any run of
#            that seed (this sitting's, and DDP's unshaped in docs/bench/steps-68: its steps
#            do not depend on the link) × this sitting's free step.
# STRIKES    a run that fails (netsim or a crash) is struck with the reason in OUT/struck.txt
#            and the seed's three runs are run again; nothing else is struck.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:?usage: bench/peer/sitting-68.sh OUT}"
run() { # SEEDS RATE CAP "PEER…"
    MATRIX_RESUME=1 MATRIX_SEEDS="$1" MATRIX_BURN=" " MATRIX_MODELS=ptb-lstm-local MATRIX_RATES=$2 \
        MATRIX_CAP=$3 MATRIX_PEER="$4" bench/peer/matrix.sh "${RACE_BIN:-target/release/gradcomp}" "$out"
}
run 1 none 120 isolated
for seed in 1 2 3; do
    run "$seed" 100mbit 600 "gradcomp-auto gradcomp-local-sgd-h32-fp4 torchft-diloco-h32-p4-d4"
done
