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
