#!/usr/bin/env bash
# PowerSGD's compress + decode at rank 2 over ResNet-18's layers, gradcomp
# against PyTorch's powerSGD_hook, one after the other on the same CPU core
# (issue #24): one step each, error feedback and warm start on, one worker.
#
#   scripts/bench-powersgd.sh BIN [PYTHON] [OUT.jsonl]
#
# BIN is a release gradcomp; PYTHON one with torch (default python3). Writes
# gradcomp's row and torch's object to OUT (default
# docs/bench/powersgd-resnet18.jsonl) and prints the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:?usage: scripts/bench-powersgd.sh BIN [PYTHON] [OUT.jsonl]}"
py="${2:-python3}"
out="${3:-docs/bench/powersgd-resnet18.jsonl}"
core="${BENCH_CORE:-0}"
shapes="$(mktemp)"
trap 'rm -f "$shapes"' EXIT
"$bin" bench compress --model resnet18 --print-shapes > "$shapes"
{
    taskset -c "$core" "$bin" bench compress --model resnet18 --compressors powersgd --min-time 3 --json
    taskset -c "$core" "$py" scripts/bench-powersgd-torch.py "$shapes" --rank 2 --steps 30
} | tee "$out"
"$py" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ours, torch = rows[0]["seconds"], rows[1]["seconds"]
print(f"gradcomp {ours * 1e3:.1f} ms, torch {torch * 1e3:.1f} ms per step: gradcomp {torch / ours:.2f}x torch's speed")
PY
