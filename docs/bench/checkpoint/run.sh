#!/bin/bash
# Cost of background checkpoints every 50 steps on ResNet-18 (dense, 2 in-process workers, 150 steps).
B=~/.cache/gradcomp/release-target/release/gradcomp
cd /work/main
for round in 1 2; do
  for every in 0 50; do
    d=/tmp/ckpt/r$round-e$every; rm -rf $d
    s=$(date +%s.%N)
    $B train --config experiments/powersgd-resnet18.toml --set workers=2 --set train.eval=false --set train.checkpoint_every_epochs=0 --set train.checkpoint_every_steps=$every --set run_dir=\"$d\" --quiet > $d.log 2>&1
    rc=$?
    e=$(date +%s.%N)
    echo "{\"round\": $round, \"every\": $every, \"rc\": $rc, \"elapsed_s\": $(echo "$e - $s" | bc)}"
  done
done
