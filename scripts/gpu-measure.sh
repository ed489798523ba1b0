#!/usr/bin/env bash
# The figures and checks that need a CUDA GPU, in one run (docs/BENCHMARKS.md,
# "GPUs"): the Python hook's CUDA test, its per-bucket and training benchmark on
# CUDA buckets, and, given a gradcomp binary built with `--features cuda`, the
# device kernels' throughput and the burn trainer's steps/s on the GPU.
#
#   scripts/gpu-measure.sh OUT [GRADCOMP_CUDA_BIN]
#
# Needs python3 with torch (CUDA), numpy and pytest, and `gradcomp` importable
# (pip install ./crates/py, or its wheel unpacked on PYTHONPATH). Each part has
# its own time limit, and a part that fails does not stop the others: the exit
# status says whether any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/gpu-measure.sh OUT [GRADCOMP_CUDA_BIN]}"
bin="${2:-}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
failed=0
part() { # NAME SECONDS COMMAND...: runs, logs to OUT/NAME.log, notes a failure
    local name=$1 limit=$2
    shift 2
    echo "== $name" >&2
    local t0=$SECONDS
    timeout "$limit" "$@" > >(tee "$out/$name.log") 2>&1 || { echo "   FAILED: $name (status $?)" >&2; failed=1; }
    echo "   $name: $((SECONDS - t0)) s" >&2
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())' | tee -a "$out/gpu.txt"

part test-cuda 180 python3 -m pytest -q -p no:cacheprovider crates/py/tests/test_cuda.py
part hooks-cuda 240 python3 crates/py/benches/hooks.py --device cuda --reps 10 --steps 30 \
    --json "$out/hooks-cuda.jsonl"
# Issue #36: LocalUpdates' outer round per inner step on a CUDA GPT (GPT-2 small's shape).
part local-round-cuda 240 python3 bench/peer/local_round_cost.py --world 2 --device cuda --embed 768 \
    --layers 12 --heads 12 --batch 8 --period 32 --fragments 4 --delay 2 --steps 96

if [ -n "$bin" ]; then
    part compress-cuda 180 "$bin" bench compress --device cuda --elements 25000000 --min-time 0.3 --json
    part train-lenet-cuda 120 "$bin" bench train --device cuda --batch 64 --steps 200 --rounds 2 \
        --memory-workers 0
    part train-resnet18-cuda 180 "$bin" bench train --device cuda --model resnet18 --batch 128 \
        --compressor terngrad --steps 30 --rounds 2 --memory-workers 0
fi
exit $failed
