#!/usr/bin/env bash
# The overlap runs of issue #35 (docs/BENCHMARKS.md): bench/peer/overlap.py on 4 netsim hosts.
cd "$(dirname "$0")/../.."
py=$HOME/.cache/gradcomp/py-venv/bin/python
out=docs/bench/overlap
mkdir -p $out
run() { # NAME RATE CONFIG METHOD BUCKETS OPTIONS...
    local name=$1 rate=$2 config=$3 method=$4 buckets=$5; shift 5
    local burst=$([ "$rate" = 100mbit ] && echo 32kb || echo 256kb)
    echo "== $name $rate $buckets" >&2
    NETSIM_PREFIX=ovx NETSIM_BURST=$burst NETSIM_TIMEOUT=900 scripts/netsim.sh torch 4 $rate $py bench/peer/overlap.py \
        --config experiments/$config.toml --method $method --buckets $buckets --steps 10 --warmup 3 "$@" \
        2>&1 | grep '^{' > $out/$name-$rate-$buckets.jsonl
}
for rate in none 100mbit; do
    run lstm-topk $rate tta-ptb-lstm gradcomp:topk ddp --option density=0.01
    run resnet18-terngrad $rate tta-fashion-resnet18 gradcomp:terngrad ddp
    run resnet18-powersgd $rate tta-fashion-resnet18 gradcomp:powersgd ddp --option matrix_approximation_rank=2 --option start_iter=2
    run lstm-topk $rate tta-ptb-lstm gradcomp:topk one --option density=0.01
    run resnet18-terngrad $rate tta-fashion-resnet18 gradcomp:terngrad one
done
echo done >&2
