"""gradcomp's DDP hooks against PyTorch's own, in one run on one core.

    python crates/py/benches/hooks.py [--reps 10] [--device cpu|cuda] [--json OUT.jsonl]

1. Per-bucket cost on ResNet-18's tensors (CIFAR form, 11.2M parameters; DDP's
   25 MiB buckets): the time from the hook's call to its future's value, median
   over `--reps` steps after two warm-up steps, summed over the step's buckets.
   Compared: torch's `fp16_compress_hook` and `powerSGD_hook` (rank 2) with
   gradcomp's fp16 and PowerSGD rank 2; a GRACE-style Top-k with error feedback
   written in torch operations with gradcomp's Top-k (density 0.01).
2. Training steps/s of LeNet-5 (batch 64) with each hook, and with none.

One process, world size 1, one thread (`torch.set_num_threads(1)`; gradcomp's
compressors are single-threaded): what is measured is each hook's own work, not
the wire. PowerSGD starts compressing at step 2 in both libraries.

With `--device cuda` the buckets live on the GPU. torch's hooks and the
GRACE-style Top-k run there (NCCL for CUDA tensors, gloo for gradcomp's host
messages: the group is `cpu:gloo,cuda:nccl`); gradcomp's hooks copy each bucket
to pinned host memory and back, and the copies' share is reported. Part 2 also
trains ResNet-18 at batch 128, and part 3 times a bucket's round trip between
the GPU and pinned or pageable host memory.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import gradcomp.torch as gt

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench", "peer"))
import models  # noqa: E402  (the peer benchmark's ResNet-18, layer for layer gradcomp's)

torch.set_num_threads(1)


def resnet18_shapes():
    """ResNet-18's parameter shapes (CIFAR form, 10 classes), from the peer benchmark's model."""
    return [list(p.shape) for p in models.ResNet18().parameters()]


class Shapes(torch.nn.Module):
    """Parameters of the given shapes; the loss Σ⟨p, r⟩·x gives each a fixed random gradient."""

    def __init__(self, shapes):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(s)) for s in shapes])
        for i, s in enumerate(shapes):
            self.register_buffer(f"r{i}", torch.randn(s, generator=g) * 1e-3)

    def forward(self, x):
        return sum((p * getattr(self, f"r{i}")).sum() for i, p in enumerate(self.ps)) * x.sum()


class LeNet5(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = torch.nn.Conv2d(1, 20, 5), torch.nn.Conv2d(20, 50, 5)
        self.fc1, self.fc2 = torch.nn.Linear(800, 500), torch.nn.Linear(500, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(self.conv1(x), 2)
        x = torch.nn.functional.max_pool2d(self.conv2(x), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


class GraceTopK:
    """Top-k with error feedback in torch operations, as GRACE's TopKCompressor
    and Allgather communicator do it: residual added, top-k by magnitude,
    values and indices all-gathered, scattered back and averaged."""

    def __init__(self, density):
        self.density, self.residuals = density, {}

    def __call__(self, _state, bucket):
        world = dist.get_world_size()
        out = torch.zeros_like(bucket.buffer())
        offset = 0
        for p, g in zip(bucket.parameters(), bucket.gradients()):
            flat = g.reshape(-1)
            key = id(p)  # by tensor: DDP rebuilds its buckets after the first step
            acc = flat + self.residuals.get(key, 0)
            k = max(1, int(flat.numel() * self.density))
            _, idx = acc.abs().topk(k, sorted=False)
            vals = acc[idx]
            sent = torch.zeros_like(acc)
            sent[idx] = vals
            self.residuals[key] = acc - sent
            all_v = [torch.empty_like(vals) for _ in range(world)]
            all_i = [torch.empty_like(idx) for _ in range(world)]
            dist.all_gather(all_v, vals)
            dist.all_gather(all_i, idx)
            seg = out[offset:offset + flat.numel()]
            for v, i in zip(all_v, all_i):
                seg.index_add_(0, i, v / world)
            offset += flat.numel()
        fut = torch.futures.Future()
        fut.set_result(out)
        return fut


def grace_topk_hook(impl):
    """A plain function: DDP reads a hook's name."""
    def grace_topk(state, bucket):
        return impl(state, bucket)
    return grace_topk


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def timed(hook, times, device):
    """The hook's time from its call to its result on the device."""
    def wrapper(state, bucket):
        sync(device)
        t0 = time.perf_counter()
        fut = hook(state, bucket)
        fut.wait()
        sync(device)
        times.append(time.perf_counter() - t0)
        return fut
    return wrapper


def hooks():
    return {
        "torch allreduce": lambda: None,
        "torch fp16": lambda: (None, default_hooks.fp16_compress_hook),
        "gradcomp fp16": lambda: gt.hook("fp16"),
        "torch powersgd r2": lambda: (powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                                                  start_powerSGD_iter=2),
                                      powerSGD_hook.powerSGD_hook),
        "gradcomp powersgd r2": lambda: gt.hook("powersgd", matrix_approximation_rank=2, start_iter=2),
        "GRACE-style topk (torch ops)": lambda: (None, grace_topk_hook(GraceTopK(0.01))),
        "gradcomp topk": lambda: gt.hook("topk", density=0.01),
    }


def wrap(module, device):
    module = module.to(device)
    return DDP(module, device_ids=[0] if device == "cuda" else None)


def per_bucket(name, make, reps, device):
    ddp = wrap(Shapes(resnet18_shapes()), device)
    made = make()
    times, per_step = [], []
    if made is not None:
        state, hook = made
        ddp.register_comm_hook(state, timed(hook, times, device))
    ours = made is not None and isinstance(made[0], gt.GradcompState)
    x = torch.ones(1, device=device)
    for step in range(reps + 2):
        times.clear()
        sync(device)
        t0 = time.perf_counter()
        ddp(x).backward()
        sync(device)
        wall = time.perf_counter() - t0
        if step >= 2:
            per_step.append((sum(times), wall, made[0].last_step()["device_copy_seconds"] if ours else 0.0))
    return {"bench": "per_bucket", "device": device, "hook": name, "buckets": len(times),
            "hook_seconds": statistics.median(t for t, _, _ in per_step),
            "backward_seconds": statistics.median(w for _, w, _ in per_step),
            "device_copy_seconds": statistics.median(c for _, _, c in per_step)}


def steps_per_second(name, make, steps, device, model):
    torch.manual_seed(0)
    if model == "lenet":
        ddp, batch, shape = wrap(LeNet5(), device), 64, (1, 28, 28)
    else:
        ddp, batch, shape = wrap(models.ResNet18(), device), 128, (3, 32, 32)
    made = make()
    if made is not None:
        ddp.register_comm_hook(*made)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(batch, *shape, device=device), torch.randint(0, 10, (batch,), device=device)
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    sync(device)
    row = {"bench": f"{model}_steps", "device": device, "hook": name, "batch": batch,
           "steps_per_second": steps / (time.perf_counter() - t0)}
    if made is not None and isinstance(made[0], gt.GradcompState):
        last = made[0].last_step()
        row["device_copy_seconds"] = last["device_copy_seconds"]
        row["hook_wall_seconds"] = last["wall_seconds"]
    return row


def copy_round_trip(reps):
    """A 25 MiB bucket to the host and back: pinned against pageable memory."""
    buf = torch.randn(25 * 2**20 // 4, device="cuda")
    pinned = torch.empty(buf.numel(), pin_memory=True)
    rows = []
    for kind in ("pageable", "pinned"):
        samples = []
        for _ in range(reps + 2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            host = buf.to("cpu") if kind == "pageable" else pinned.copy_(buf)
            back = host.to("cuda") if kind == "pageable" else buf.copy_(host)
            torch.cuda.synchronize()
            samples.append(time.perf_counter() - t0)
        del back
        t = statistics.median(samples[2:])
        rows.append({"bench": "copy_round_trip", "device": "cuda", "memory": kind, "bytes": 4 * buf.numel(),
                     "seconds": t, "gb_per_s": 2 * 4 * buf.numel() / t / 1e9})
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--json")
    a = p.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("cpu:gloo,cuda:nccl" if a.device == "cuda" else "gloo", rank=0, world_size=1)
    rows = []

    def out(new):
        for r in new:
            print(json.dumps(r), flush=True)
        rows.extend(new)

    if a.device == "cuda":
        out(copy_round_trip(a.reps))
    out([per_bucket(n, m, a.reps, a.device) for n, m in hooks().items()])
    out([steps_per_second(n, m, a.steps, a.device, "lenet") for n, m in hooks().items()])
    if a.device == "cuda":
        out([steps_per_second(n, m, a.steps // 3, a.device, "resnet18") for n, m in hooks().items()])
    if a.json:
        with open(a.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    os._exit(0)


if __name__ == "__main__":
    main()
