"""DDP over gloo with every compressor's hook, at 2 and 4 processes.

Every case trains the same MLP (ddp_worker.py) from the same start on the same
data, and is checked against DDP's own allreduce run in the same process group:
the loss falls, the replicas end bit-identical, the held-out accuracy is within
the stated bound of DDP's, and the bytes each worker sends per step equal the
compressor's formula (docs/ALGORITHMS.md §7) exactly.
"""
from typing import Any
import math

import pytest

from ddp_worker import CLASSES, FEATURES, HIDDEN

STEPS = 40
# The MLP's tensors, in DDP's bucket order (the reverse of the model's).
SHAPES = [[HIDDEN, FEATURES], [HIDDEN], [HIDDEN, HIDDEN], [HIDDEN], [CLASSES, HIDDEN], [CLASSES]]
DENSITY = 0.05
POWERSGD_START = 2

# name, options, learning rate, accuracy bound below DDP's
CASES = [
    ("dense", {}, 0.1, 0.02),
    ("fp16", {}, 0.1, 0.02),
    ("terngrad", {}, 0.1, 0.10),
    ("qsgd", {}, 0.1, 0.10),
    ("onebit", {}, 0.1, 0.15),
    ("topk", {"density": DENSITY}, 0.1, 0.15),
    ("gaussiank", {"density": DENSITY}, 0.1, 0.15),
    ("dgck", {"density": DENSITY}, 0.02, 0.15),
    ("trimmedk", {"density": DENSITY}, 0.1, 0.15),
    ("randk", {"density": DENSITY}, 0.1, 0.25),
    ("threshold", {"threshold": 0.02}, 0.1, 0.15),
    ("powersgd", {"matrix_approximation_rank": 2, "start_iter": POWERSGD_START}, 0.1, 0.10),
    ("signsgd", {}, 0.001, 0.15),
    ("signum", {}, 0.001, 0.15),
    ("efsignsgd", {}, 0.1, 0.15),
    ("natural", {}, 0.1, 0.05),
    ("eightbit", {}, 0.1, 0.05),
    ("fp4", {}, 0.1, 0.05),
    ("sparseloco", {}, 0.1, 0.15),
    ("dct-topk", {}, 0.02, 0.25),
]


def k_of(d: Any) -> Any:
    return max(1, math.floor(DENSITY * d))


def chunk_for(size: int, target: int = 64) -> int:
    """A dimension's tile side (ALGORITHMS.md §9.8): its largest divisor up to the target."""
    if size <= target:
        return max(size, 1)
    d = max(d for d in range(1, target + 1) if size % d == 0)
    return d if 4 * d >= target else target


def chunked_bytes(shape: list[int], k: int, bits: int) -> int:
    """A chunked message's bytes: 12 + 24 + 4·2^b + ⌈E·p/8⌉ + ⌈E·b/8⌉ (ALGORITHMS.md §7)."""
    d = math.prod(shape)
    if len(shape) >= 2 and shape[0] > 1:
        rows, cols = shape[0], d // shape[0]
        tr, tc = chunk_for(rows), chunk_for(cols)
    else:
        rows, cols, tr, tc = 1, d, 1, chunk_for(d)
    heights = [min(tr, rows - r) for r in range(0, rows, tr)]
    widths = [min(tc, cols - c) for c in range(0, cols, tc)]
    entries = sum(min(k, h * w) for h in heights for w in widths)
    p = max(1, (tr * tc - 1).bit_length())
    return 12 + 24 + 4 * (1 << bits) + math.ceil(entries * p / 8) + math.ceil(entries * bits / 8)


def bytes_formula(name: Any, step: Any) -> Any:
    """What one worker sends per step for the MLP's tensors (ALGORITHMS.md §7)."""
    ds = [math.prod(s) for s in SHAPES]
    per_unit = {
        "dense": lambda d: 4 * d,
        "fp16": lambda d: 2 * d,
        "terngrad": lambda d: d + 4,
        "qsgd": lambda d: 20 + 4 * math.ceil(d / 512) + math.ceil(10 * d / 8),
        "onebit": lambda d: 12 + 8 + math.ceil(d / 8),
        "topk": lambda d: 16 + 8 * k_of(d),
        "trimmedk": lambda d: 16 + 8 * k_of(d),
        "randk": lambda d: 16 + 8 * k_of(d),
        "signsgd": lambda d: 12 + 8 + math.ceil(d / 8),
        "signum": lambda d: 12 + 8 + math.ceil(d / 8),
        "efsignsgd": lambda d: 12 + 8 + math.ceil(d / 8),
        "natural": lambda d: 12 + d,
        "eightbit": lambda d: 12 + 4 + 4 * math.ceil(d / 4096) + d,
        "fp4": lambda d: 12 + 4 + 4 * math.ceil(d / 32) + math.ceil(d / 2),
    }
    if name in ("sparseloco", "dct-topk"):
        k, bits = (64, 2) if name == "sparseloco" else (32, 1)
        return sum(chunked_bytes(s, k, bits) for s in SHAPES)
    if name == "powersgd":
        if step < POWERSGD_START:
            return sum(4 * d for d in ds)
        total = 0
        for s in SHAPES:
            rows, cols = s[0], math.prod(s[1:])
            r = min(2, rows, cols)
            compressed = len(s) >= 2 and (rows + cols) * r * 2 < rows * cols
            total += 4 * (rows + cols) * r if compressed else 4 * rows * cols
        return total
    if name not in per_unit:
        return None  # data-dependent counts: checked against the bound below
    return sum(per_unit[name](d) for d in ds)


@pytest.fixture(scope="module", params=[2, 4], ids=["2 workers", "4 workers"])
def runs(request: Any, tmp_path_factory: Any) -> Any:
    from conftest import run_ddp
    world = request.param
    cases = [{"id": "ddp", "name": "ddp", "steps": STEPS}]
    cases += [{"id": n, "name": n, "options": o, "lr": lr, "steps": STEPS} for n, o, lr, _ in CASES]
    for lr in sorted({lr for _, _, lr, _ in CASES} - {0.1}):
        cases.append({"id": f"ddp@{lr}", "name": "ddp", "lr": lr, "steps": STEPS})
    return world, run_ddp(cases, world, tmp_path_factory.mktemp(f"ddp{world}"))


@pytest.mark.parametrize("name,options,lr,bound", CASES, ids=[c[0] for c in CASES])
def test_hook_trains_like_ddp(runs: Any, name: Any, options: Any, lr: Any, bound: Any) -> None:
    world, ranks = runs
    for r in ranks:
        assert "error" not in r[name], r[name].get("error")
    mine = ranks[0][name]
    losses = mine["losses"]
    assert sum(losses[-5:]) < sum(losses[:5]), f"{name}: the loss did not fall: {losses}"
    assert len({r[name]["digest"] for r in ranks}) == 1, f"{name}: the replicas differ"
    base = ranks[0]["ddp" if lr == 0.1 else f"ddp@{lr}"]["accuracy"]
    assert mine["accuracy"] >= base - bound, f"{name}: accuracy {mine['accuracy']:.3f}, DDP's {base:.3f}"


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_bytes_per_step_equal_the_formula(runs: Any, name: Any) -> None:
    world, ranks = runs
    for rank, r in enumerate(ranks):
        sent = r[name]["bytes_per_step"]
        assert len(sent) == STEPS
        for step, b in enumerate(sent):
            want = bytes_formula(name, step)
            if want is not None:
                assert b == want, f"{name}: rank {rank} step {step} sent {b} bytes, the formula says {want}"
            else:
                # Gaussian-k, DGC-k and threshold send what their threshold passes: at most dense's.
                assert 0 < b < sum(4 * math.prod(s) for s in SHAPES), (name, step, b)
        stats = r[name]["stats"][-1]
        assert stats["padding_bytes_sent"] >= 0 and stats["size_bytes_sent"] in (0, 8)


def test_statistics_per_step(ddp: Any) -> None:
    """`last_step()` carries the contraction on measured steps (stats_every), with
    Top-k's exact density and the phase times."""
    case = {"id": "topk", "name": "topk", "options": {"density": DENSITY}, "steps": 10, "stats_every": 5}
    ranks = ddp([case], 2)
    stats = ranks[0]["topk"]["stats"]
    # Top-k's contraction bound (1 − k/d), at its loosest over the tensors.
    bound = 1 - min(k_of(math.prod(x)) / math.prod(x) for x in SHAPES)
    for step, s in enumerate(stats):
        if step % 5 == 0:
            assert 0 < s["contraction"] <= bound, (step, s["contraction"])
        else:
            assert s["contraction"] is None
        assert s["density"] == sum(k_of(math.prod(x)) for x in SHAPES) / sum(math.prod(x) for x in SHAPES)
        assert s["compress_seconds"] > 0 and s["wall_seconds"] >= s["compress_seconds"]
        assert s["residual_norm"] > 0


PENDING = r'''
import os, sys, time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import gradcomp.torch as gt
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=rank, world_size=2)
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 256)), bucket_cap_mb=0.1)
state, hook = gt.hook("topk", density=0.1)
pending = []
def watching(state, bucket):
    fut = hook(state, bucket)
    pending.append(not fut.done())
    return fut
model.register_comm_hook(state, watching)
for step in range(3):
    loss = model(torch.randn(4, 256)).pow(2).sum()
    if rank == 1:
        time.sleep(0.3)  # rank 0's exchanges wait for this worker's collectives
    loss.backward()
print("pending", rank, pending, state.iteration)
'''


def test_the_hook_returns_a_pending_future() -> None:
    from conftest import free_port, run_ranks
    script = PENDING % free_port()
    outs = run_ranks(script, 2, timeout=180)
    line = next((l for l in outs[0].out.splitlines() if l.startswith("pending 0")), None)
    assert line is not None, outs
    assert "False" not in line and line.endswith(" 3"), line  # every bucket's future pending on return
