#!/usr/bin/env bash
# The rounds of issue #50's point 4 on netsim: one outer round's exchange of
# the race's LSTM and GPT changes (shapes-*.json, from bench/peer/models.py),
# dense, fp4 allgather and fp4 reduce-scatter, at N = 4 and 8; release build
# with MPI. At 100 Mbit/s priced with the calibration of docs/bench/calibration
# (α, B fitted to allreduce at N = 4), at 10 Mbit/s with the nominal rate
# (no calibration exists there). Writes round-MODEL-nN-RATE.jsonl here.
set -u
cd "$(dirname "$0")/../../.."
OUT=docs/bench/scale
B=./target/release/gradcomp
for n in 4 8; do
  for model in lstm gpt; do
    echo "== $model N=$n 100mbit" >&2
    NETSIM_PREFIX=gcsc scripts/netsim.sh run $n 100mbit $B bench round --backend mpi --shapes $OUT/shapes-$model.json \
      --calibration docs/bench/calibration/n4-100mbit.json --json \
      > $OUT/round-$model-n$n-100mbit.jsonl 2> $OUT/round-$model-n$n-100mbit.log
  done
done
[ "${SKIP_10MBIT:-}" ] && exit 0
for n in 4 8; do
  echo "== lstm N=$n 10mbit" >&2
  NETSIM_PREFIX=gcsc scripts/netsim.sh run $n 10mbit $B bench round --backend mpi --shapes $OUT/shapes-lstm.json \
    --link-bits-per-second 1e7 --min-time 1 --cases fp4:allgather,fp4:reduce-scatter --json \
    > $OUT/round-lstm-n$n-10mbit.jsonl 2> $OUT/round-lstm-n$n-10mbit.log
done
echo done >&2
