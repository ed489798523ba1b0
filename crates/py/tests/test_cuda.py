"""CUDA buckets: the hook stages them through pinned host memory, and its
result is bit for bit the one the same gradients give on the CPU.

Skipped where torch sees no GPU (CI has none; the GPU machine runs it, see
docs/BENCHMARKS.md). The gradients are exact on both devices: the loss
Σ⟨p, r⟩·x with x = 1 gives each parameter the gradient r.
"""
from typing import Any
import os

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import gradcomp.torch as gt

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")

SHAPES = [[64, 3, 3, 3], [64], [128, 64, 3, 3], [128], [10, 512], [10]]
CASES = [("topk", {"density": 0.05}), ("terngrad", {}), ("powersgd", {"matrix_approximation_rank": 2, "start_iter": 2}),
         ("fp16", {})]


class Shapes(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(s)) for s in SHAPES])
        for i, s in enumerate(SHAPES):
            self.register_buffer(f"r{i}", torch.randn(s, generator=g))

    def forward(self, x: Any) -> Any:
        return sum((p * getattr(self, f"r{i}")).sum() for i, p in enumerate(self.ps)) * x.sum()


@pytest.fixture(scope="module")
def world_of_one() -> Any:
    from conftest import free_port
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def run(device: Any, name: Any, options: Any, steps: Any = 4) -> Any:
    model = Shapes().to(device)
    ddp = DDP(model, device_ids=[0] if device == "cuda" else None, bucket_cap_mb=0.1)
    state, hook = gt.hook(name, **options)
    ddp.register_comm_hook(state, hook)
    grads, copies = [], []
    x = torch.ones(1, device=device)
    for _ in range(steps):
        ddp.zero_grad()
        ddp(x).backward()
        grads.append([p.grad.detach().cpu().clone() for p in model.ps])
        copies.append(state.last_step()["device_copy_seconds"])  # type: ignore[index]
    return grads, copies, state.last_step()["buckets"]  # type: ignore[index]


@pytest.mark.parametrize("name,options", CASES, ids=[c[0] for c in CASES])
def test_a_cuda_bucket_gives_the_cpu_result(world_of_one: Any, name: Any, options: Any) -> None:
    cpu, cpu_copies, _ = run("cpu", name, options)
    gpu, gpu_copies, buckets = run("cuda", name, options)
    assert len(buckets) > 1, "the model should be cut in several buckets"
    for step, (a, b) in enumerate(zip(cpu, gpu)):
        for i, (ga, gb) in enumerate(zip(a, b)):
            assert torch.equal(ga, gb), f"{name}: step {step}, parameter {i}"
    assert all(c == 0 for c in cpu_copies)
    assert all(c > 0 for c in gpu_copies), "a CUDA bucket's copies should be timed"


NCCL = r'''
import sys, torch, torch.distributed as dist
sys.path.insert(0, %r)
from test_cuda import CASES, Shapes
from torch.nn.parallel import DistributedDataParallel as DDP
import gradcomp.torch as gt
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d", rank=0, world_size=1)
gloo = dist.new_group(backend="gloo")
torch.cuda.set_device(0)
def run(device, group, name, options):
    model = Shapes().to(device)
    ddp = DDP(model, device_ids=[0] if device == "cuda" else None, bucket_cap_mb=0.1, process_group=group)
    state, hook = gt.hook(name, process_group=group, **options)
    ddp.register_comm_hook(state, hook)
    grads = []
    for _ in range(4):
        ddp.zero_grad()
        ddp(torch.ones(1, device=device)).backward()
        grads.append([p.grad.detach().cpu().clone() for p in model.ps])
    return grads, state._comm.device
for name, options in CASES:
    cpu, _ = run("cpu", gloo, name, options)
    gpu, device = run("cuda", None, name, options)
    assert device is not None and device.type == "cuda", device
    for a, b in zip(cpu, gpu):
        for ga, gb in zip(a, b):
            assert torch.equal(ga, gb), name
print("ok")
'''


def test_an_nccl_group_moves_the_payloads_as_cuda_tensors() -> None:
    """Over a pure NCCL group the hook's own group is NCCL too and its payloads cross as
    CUDA tensors (compression on the host); the result is the gloo CPU run's, bit for bit."""
    from conftest import free_port, run_ranks
    here = os.path.dirname(os.path.abspath(__file__))
    out = run_ranks(NCCL % (here, free_port()), 1)[0]
    assert out.out.strip().endswith("ok"), out.out + out.err


LOCAL_NCCL = r'''
import torch, torch.distributed as dist
import gradcomp.torch as gt
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d", rank=0, world_size=1)
torch.cuda.set_device(0)
gloo = dist.new_group(backend="gloo")
def run(device, group):
    torch.manual_seed(0)
    m = torch.nn.Linear(8, 2).to(device)
    o = torch.optim.SGD(m.parameters(), lr=0.1)
    lu = gt.LocalUpdates(m, o, period=2, compressor="topk", density=0.5, process_group=group)
    for step in range(6):
        x = torch.ones(4, 8, device=device) * (step + 1)
        m(x).pow(2).sum().backward(); o.step(); o.zero_grad(); lu.step()
    return [p.detach().cpu() for p in m.parameters()], lu._comm.device
cpu, _ = run("cpu", gloo)
gpu, device = run("cuda", None)
assert device is not None and device.type == "cuda", device
assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(cpu, gpu)), (cpu, gpu)
print("ok")
'''


def test_local_updates_over_nccl() -> None:
    """`LocalUpdates` over a pure NCCL group: the rounds' payloads cross as CUDA tensors; the
    model ends where the gloo CPU run does (the inner steps differ only by the devices'
    arithmetic, so to f32 tolerance)."""
    from conftest import free_port, run_ranks
    out = run_ranks(LOCAL_NCCL % free_port(), 1)[0]
    assert out.out.strip().endswith("ok"), out.out + out.err
