#!/usr/bin/env bash
# Issue #35: the head-to-head rows that used gradcomp's hooks, re-run with the
# asynchronous hook (DDP's default buckets), each beside PyTorch's best of that cell.
cd "$(dirname "$0")/../.."
out=docs/bench/peer-35
mkdir -p $out
m() { MATRIX_BURN=" " MATRIX_MODELS=$1 MATRIX_RATES=$2 MATRIX_PEER="$3" bench/peer/matrix.sh none $out; }
m fashion-resnet18 100mbit "torch-powersgd-r2 gradcomp:powersgd gradcomp:terngrad"
m fashion-resnet18 1gbit "torch-fp16 gradcomp:terngrad"
m fashion-resnet18 none "none gradcomp:terngrad"
m ptb-lstm 100mbit "torch-powersgd-r4 gradcomp:topk"
m ptb-lstm 1gbit "torch-powersgd-r4 gradcomp:topk"
m ptb-lstm none "none gradcomp:topk"
echo matrix-done >&2
