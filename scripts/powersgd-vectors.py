#!/usr/bin/env python3
"""Test vectors from PyTorch's own PowerSGD hook, for gradcomp's PowerSGD.

Two processes (gloo, CPU) train a module whose gradients are fixed numbers
(the loss is sum(p * G) over its parameters, so p's gradient is G), wrapped
in DistributedDataParallel with `powerSGD_hook` registered, for a few steps.
Per step it records each worker's input gradients, the hook's output (the
gradient every worker applies) and, on compressed steps, every compressed
tensor's P (summed and orthogonalized) and Q (averaged). It also records the
random starting Q the hook drew (before orthogonalization), which gradcomp's
test gives its PowerSGD instead of its own draw.

    python3 scripts/powersgd-vectors.py RANK OUT.json   (needs torch)

The committed vectors (crates/compress/tests/vectors/) were made with the
torch version each file names; the options are PowerSGDState's defaults
except start_powerSGD_iter = 2 (the earliest error feedback and warm start
allow), so steps 0 and 1 are the plain allreduce warm-up and steps 2..5
compress.
"""
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
from torch.nn.parallel import DistributedDataParallel as DDP

WORKERS = 2
STEPS = 6
START = 2
# name -> shape: a linear layer's weight and bias, a convolution's kernel
# (6 × 27 as PowerSGD sees it), and a matrix too small to compress.
SHAPES = {"fc.weight": (16, 12), "fc.bias": (16,), "conv.weight": (6, 3, 3, 3), "tiny": (2, 3)}


class Fixed(torch.nn.Module):
    """Parameters whose gradient is whatever `forward` is given."""

    def __init__(self):
        super().__init__()
        for name, shape in SHAPES.items():
            self.register_parameter(name.replace(".", "_"), torch.nn.Parameter(torch.zeros(shape)))

    def forward(self, grads):
        return sum((getattr(self, n.replace(".", "_")) * grads[n]).sum() for n in SHAPES)


def gradient(step, rank, name):
    g = torch.Generator().manual_seed(1000 * step + 100 * rank + list(SHAPES).index(name))
    return torch.randn(SHAPES[name], generator=g)


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def worker(rank, rank_r, init_file, out_path):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORKERS)
    torch.manual_seed(0)
    model = DDP(Fixed())
    state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=rank_r, start_powerSGD_iter=START)
    names = {id(p): n for n, p in zip(SHAPES, model.module.parameters())}
    record = {"order": [], "q0": []}
    real_randn = torch.randn

    def randn(*shape, **kw):
        t = real_randn(*shape, **kw)
        record["q0"].append(flat(t))
        return t

    def hook(state, bucket):
        record["order"] = [names[id(p)] for p in bucket.parameters()]
        torch.randn = randn
        try:
            return psgd.powerSGD_hook(state, bucket)
        finally:
            torch.randn = real_randn

    model.register_comm_hook(state, hook)
    steps = []
    for step in range(STEPS):
        model.zero_grad()
        grads = {n: gradient(step, rank, n) for n in SHAPES}
        model(grads).backward()
        entry = {"outputs": {n: flat(p.grad) for n, p in zip(SHAPES, model.module.parameters())}}
        if step >= START:
            entry["p"], entry["q"] = factors(state, record["order"], rank_r)
        steps.append(entry)
    if rank == 0:
        inputs = [[{n: flat(gradient(s, r, n)) for n in SHAPES} for r in range(WORKERS)] for s in range(STEPS)]
        for s, entry in enumerate(steps):
            entry["inputs"] = inputs[s]
        compressed = [n for n in record["order"] if compresses(SHAPES[n], rank_r)]
        q0 = dict(zip(compressed, record["q0"]))
        doc = {
            "reference": f"torch {torch.__version__} torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook",
            "rank": rank_r,
            "workers": WORKERS,
            "start_iter": START,
            "shapes": {n: list(s) for n, s in SHAPES.items()},
            "compressed": compressed,
            "q0": q0,
            "steps": steps,
        }
        with open(out_path, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
    dist.destroy_process_group()


def compresses(shape, rank_r):
    if len(shape) < 2:
        return False
    n, m = shape[0], 1
    for d in shape[1:]:
        m *= d
    return psgd._should_compress(n, m, min(n, m, rank_r), 2)[0]


def factors(state, order, rank_r):
    """Each compressed tensor's P and Q, sliced from the hook's memory (one
    bucket; tensors in bucket order, grouped by shape as the hook groups them)."""
    p_mem, q_mem = state.p_memory_dict[0], state.q_memory_dict[0]
    by_shape = {}
    for n in order:
        shape = SHAPES[n]
        if compresses(shape, rank_r):
            rows = shape[0]
            cols = 1
            for d in shape[1:]:
                cols *= d
            by_shape.setdefault((rows, cols), []).append(n)
    p, q, pi, qi = {}, {}, 0, 0
    for (rows, cols), tensors in by_shape.items():
        r = min(rows, cols, rank_r)
        for n in tensors:
            p[n] = flat(p_mem[pi : pi + rows * r])
            q[n] = flat(q_mem[qi : qi + cols * r])
            pi += rows * r
            qi += cols * r
    return p, q


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rank_r, out = int(sys.argv[1]), os.path.abspath(sys.argv[2])
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(worker, args=(rank_r, os.path.join(d, "init"), out), nprocs=WORKERS, join=True)


if __name__ == "__main__":
    main()
