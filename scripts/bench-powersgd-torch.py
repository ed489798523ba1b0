#!/usr/bin/env python3
"""PyTorch's `powerSGD_hook` on a model's layer shapes, one step timed: the
PyTorch side of `scripts/bench-powersgd.sh` (gradcomp's side is
`gradcomp bench compress --model MODEL --compressors powersgd`).

One process, gloo, world size 1, one thread: DistributedDataParallel over a
module whose parameters have the given shapes and whose gradients are fixed
N(0, 1) draws, the hook at rank RANK, error feedback and warm start on (its
defaults). The hook's time is measured inside a wrapper around it, from the
call to the completion of its future, summed over the step's buckets: error
feedback, both products, orthogonalization, the two allreduces (of one
worker: no wire) and the decompression into the bucket. The backward pass
that fills the buckets is not counted.

    python3 scripts/bench-powersgd-torch.py SHAPES.json [--rank 2] [--steps 20]

prints one JSON object: the torch version, the median seconds per step and
the parameter count.
"""
import argparse
import json
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
from torch.nn.parallel import DistributedDataParallel as DDP


class Fixed(torch.nn.Module):
    """Parameters of the given shapes; the loss sum(p * G) makes G the gradient."""

    def __init__(self, shapes):
        super().__init__()
        self.ps = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(s)) for s in shapes)

    def forward(self, grads):
        return sum((p * g).sum() for p, g in zip(self.ps, grads))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes")
    ap.add_argument("--rank", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(1)
    shapes = json.load(open(args.shapes))
    with tempfile.NamedTemporaryFile() as f:
        dist.init_process_group("gloo", init_method=f"file://{f.name}", rank=0, world_size=1)
        model = DDP(Fixed(shapes))
        # start_powerSGD_iter must exceed 1 with error feedback or warm start;
        # the first two steps are the vanilla allreduce and are not timed.
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.rank, start_powerSGD_iter=2)
        spent = [0.0]

        def timed(state, bucket):
            t0 = time.perf_counter()
            out = psgd.powerSGD_hook(state, bucket).wait()
            spent[0] += time.perf_counter() - t0
            fut = torch.futures.Future()
            fut.set_result(out)
            return fut

        model.register_comm_hook(state, timed)
        g = torch.Generator().manual_seed(1)
        grads = [torch.randn(s, generator=g) for s in shapes]
        per_step = []
        for step in range(args.steps + 2):
            spent[0] = 0.0
            model.zero_grad()
            model(grads).backward()
            if step >= 2:
                per_step.append(spent[0])
        dist.destroy_process_group()
    print(json.dumps({
        "torch": torch.__version__,
        "rank": args.rank,
        "parameters": sum(int(torch.tensor(s).prod()) for s in shapes),
        "seconds": statistics.median(per_step),
        "steps": len(per_step),
    }))


if __name__ == "__main__":
    main()
