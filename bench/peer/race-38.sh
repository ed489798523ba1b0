#!/usr/bin/env bash
# Issue #38: the race on slow links. Each phase is one bench/peer/matrix.sh call
# (one model, one link, the candidates interleaved: gradcomp's and PyTorch's
# alternate), so a phase is a cell and can be run, repeated or resumed alone:
#
#   bench/peer/race-38.sh OUT PHASE...        e.g. OUT=runs/race38, PHASE lstm-100mbit
#   MATRIX_SEEDS="2 3" bench/peer/race-38.sh OUT lstm-100mbit   (repeats of a cell)
#
# The candidates, per framework:
#   gradcomp  its PyTorch front's LocalUpdates: Streaming (H = 32, P = 4, averaging,
#             τ = 1 or 4; on ResNet-18 H = 8, P = 1 or 4) with the change in fp4 (the best
#             compressor of issue #37 at the dense change's perplexity) or dense; its per-step
#             Top-k hook in DDP (TernGrad on ResNet-18); the burn trainer (BIN) where named
#   PyTorch   DDP's allreduce (fast links), torch's PowerSGD r = 4 hook (its best per-step
#             method on the language models in issues #26 and #36; r = 2 on ResNet-18),
#             torch's post-local SGD (H = 8, 32), torchft 0.2.0's DiLoCo (Streaming: H = 32,
#             P = 4, τ = 1, averaging; on ResNet-18 H = 8, P = 1 or 4)
# Caps (seconds of training): 300 at 10 Mbit/s, 600 elsewhere (the burn jobs': below); a
# capped run is reported as not reached, with its projection (bench/peer/table.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:?usage: bench/peer/race-38.sh OUT PHASE...}"
shift
bin="${RACE_BIN:-target/release/gradcomp}"
m() { # MODEL RATE CAP "PEER…" ["BURN…"]
    MATRIX_BURN="${5:- }" MATRIX_MODELS=$1 MATRIX_RATES=$2 MATRIX_CAP=$3 MATRIX_PEER="$4" \
        bench/peer/matrix.sh "$bin" "$out"
}
fp4="gradcomp-local-sgd-h32-p4-d1-fp4 gradcomp-local-sgd-h32-p4-d4-fp4"
for phase in "$@"; do
    echo "=== phase $phase $(date -u +%FT%TZ)" >&2
    case $phase in
        lstm-100mbit) m ptb-lstm-local 100mbit 600 "torch-powersgd-r4 ${fp4% *} torchft-diloco-h32-p4-d1 ${fp4#* } torch-postlocal-h32 gradcomp:topk torch-postlocal-h8" ;;
        lstm-10mbit) m ptb-lstm-local 10mbit 300 "torchft-diloco-h32-p4-d1 ${fp4#* } torch-postlocal-h32 ${fp4% *} torch-powersgd-r4" ;;
        gpt-100mbit) m ptb-gpt 100mbit 600 "torch-powersgd-r4 ${fp4% *} torchft-diloco-h32-p4-d1 ${fp4#* } torch-postlocal-h32 gradcomp:topk torch-postlocal-h8" ;;
        gpt-10mbit) m ptb-gpt 10mbit 300 "torchft-diloco-h32-p4-d1 ${fp4#* } torch-postlocal-h32 ${fp4% *} torch-powersgd-r4" ;;
        lstm-none) m ptb-lstm-local none 600 "none ${fp4% *} torchft-diloco-h32-p4-d1 gradcomp-local-sgd-h32-p4-d1 torch-postlocal-h32 torch-postlocal-h8" ;;
        gpt-none) m ptb-gpt none 600 "none ${fp4% *} torchft-diloco-h32-p4-d1 gradcomp-local-sgd-h32-p4-d1 torch-postlocal-h32 torch-postlocal-h8" ;;
        # At 1 Gbit/s the language models run the three methods that were best unshaped and at
        # 100 Mbit/s (post-local SGD and PowerSGD took 1.5-1.6x torchft's time at 100 Mbit/s).
        lstm-1gbit) m ptb-lstm-local 1gbit 600 "none ${fp4% *} torchft-diloco-h32-p4-d1" ;;
        gpt-1gbit) m ptb-gpt 1gbit 600 "none ${fp4% *} torchft-diloco-h32-p4-d1" ;;
        resnet-100mbit) m fashion-resnet18 100mbit 600 "torch-powersgd-r2 gradcomp:terngrad torch-postlocal-h8 gradcomp-local-sgd-h8-fp4 torchft-diloco-h8 gradcomp-local-sgd-h8-p4-d1-fp4 torchft-diloco-h8-p4-d1" ;;
        # Left out at 10 Mbit/s, capped for sure: TernGrad's hook (11.2 MB a worker-step, 10 s
        # on this wire) and post-local SGD (its 10 dense warm-up steps allreduce 44.7 MB each:
        # about a minute a step here, 10 minutes before its first local step).
        resnet-10mbit) m fashion-resnet18 10mbit 300 "torchft-diloco-h8 gradcomp-local-sgd-h8-p4-d1-fp4 torch-powersgd-r2 gradcomp-local-sgd-h8-fp4" ;;
        resnet-1gbit) m fashion-resnet18 1gbit 600 "torch-fp16 gradcomp:terngrad none gradcomp-local-sgd-h8-fp4 torchft-diloco-h8 torch-postlocal-h8" ;;
        resnet-none) m fashion-resnet18 none 600 "none gradcomp:terngrad torchft-diloco-h8 gradcomp-local-sgd-h8-fp4 torch-postlocal-h8 gradcomp-local-sgd-h8-p4-d1-fp4 torchft-diloco-h8-p4-d1" ;;
        # The burn trainer (MPI ranks, the model in burn): the local-update candidate the
        # PyTorch front found best on the model (H = 32, P = 4, tau = 1 on the language
        # models; H = 8, one fragment, no overlap on ResNet-18), the change in fp4, averaged.
        # The burn job's cap counts its start and evaluations too; ResNet-18's first step at
        # 10 Mbit/s (the initial parameters broadcast, 44.7 MB) takes 76 s of it, and 300 s
        # ended before its first evaluation: 600 s there.
        burn-lstm|burn-gpt|burn-resnet)
            case $phase in
                burn-lstm) model=ptb-lstm-local method=streaming-sgd-h32-p4-d1-fp4 cap10=300 ;;
                burn-gpt) model=ptb-gpt method=streaming-sgd-h32-p4-d1-fp4 cap10=300 ;;
                *) model=fashion-resnet18 method=streaming-sgd-h8-p1-d0-fp4 cap10=600 ;;
            esac
            m "$model" 10mbit "$cap10" " " "$method"
            m "$model" "100mbit none" 600 " " "$method" ;;
        # The burn trainer with per-step compression: Top-k 1% with error feedback (allgather),
        # its front's per-step hook on the LSTM.
        burn-lstm-topk) m ptb-lstm-local 100mbit 600 " " topk ;;
        # MODEL/RATE/CAP/METHOD,METHOD…: a cell's candidates run again (a run disturbed by
        # other work on the machine, or a method added to a cell).
        */*/*/*) IFS=/ read -r model rate cap methods <<< "$phase"; m "$model" "$rate" "$cap" "${methods//,/ }" ;;
        *) echo "unknown phase $phase" >&2; exit 2 ;;
    esac
done
echo "race phases done: $*" >&2
