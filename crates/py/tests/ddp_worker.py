"""One rank of a DDP run over gloo with gradcomp's hooks, for the tests.

    python ddp_worker.py SPEC.json OUT_DIR   (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set)

SPEC holds a list of cases; each trains the same small MLP on the same
synthetic data from the same start, with one hook (or DDP's own allreduce),
and this rank writes what it saw to OUT_DIR/rank{R}.json: losses, bytes per
step, held-out accuracy, a digest of the final parameters, and, when asked,
every bucket's input and output (for the replay test) or a checkpoint.
"""
from typing import Any
import hashlib
import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import gradcomp.torch as gt

torch.set_num_threads(1)

FEATURES, CLASSES, HIDDEN = 32, 4, 64


def data(n: Any, seed: Any) -> Any:
    """A separable task: the class is the argmax of a fixed linear map."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(FEATURES, CLASSES, generator=torch.Generator().manual_seed(7))
    x = torch.randn(n, FEATURES, generator=g)
    return x, (x @ w).argmax(1)


def net() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, CLASSES))


def digest(model: Any) -> Any:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


def recorder(hook: Any, calls: Any) -> Any:
    """Wraps the hook: keeps every bucket's input and output in `calls`."""

    # DDP checks a hook's annotations: exactly these.
    def recording_hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:  # type: ignore[name-defined]
        grad = bucket.buffer().detach().clone().numpy().tolist()
        keys = state._key_of(bucket.parameters())
        shapes = [list(p.shape) for p in bucket.parameters()]
        step = state.iteration
        fut = hook(state, bucket)

        def keep(f: Any) -> Any:
            calls.append({"keys": keys, "shapes": shapes, "step": step, "grad": grad,
                          "out": f.value().numpy().tolist()})
            return f.value()
        chained: torch.futures.Future[torch.Tensor] = fut.then(keep)
        return chained
    return recording_hook


def train(case: Any, rank: Any, world: Any, out_dir: Any) -> Any:
    steps, batch = case.get("steps", 40), case.get("batch", 16)
    x, y = data(4096, seed=1)
    xt, yt = data(1024, seed=2)
    model = net()
    ddp = DDP(model, bucket_cap_mb=case.get("bucket_cap_mb", 25))
    state: Any = None
    calls: Any = []
    if case["name"] != "ddp":
        state, hook = gt.hook(case["name"], stats_every=case.get("stats_every", 0),
                              on_nonfinite=case.get("on_nonfinite", "stop"), **case.get("options", {}))
        if case.get("record"):
            hook = recorder(hook, calls)
        ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=case.get("lr", 0.1), momentum=0.9)
    start = 0
    if case.get("resume_from"):
        ck = torch.load(os.path.join(case["resume_from"], f"ck{rank}.pt"), weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        state.load_state_dict(ck["hook"])
        start = ck["step"]
    losses, bytes_per_step, stats = [], [], []
    for step in range(start, steps):
        i = (step * world + rank) * batch % (len(x) - batch)
        xb, yb = x[i:i + batch], y[i:i + batch]
        if case.get("nan_at") == step and rank == case.get("nan_rank", 0):
            xb = xb.clone()
            xb[0, 0] = float("nan")
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(xb), yb)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        losses.append(loss.item())
        if state is not None:
            last: Any = state.last_step()
            bytes_per_step.append(last["bytes_sent"])
            stats.append({k: v for k, v in last.items() if k != "buckets"})
        if case.get("checkpoint_at") == step + 1:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                        "hook": state.state_dict(), "step": step + 1},
                       os.path.join(out_dir, f"ck{rank}.pt"))
    with torch.no_grad():
        acc = (model(xt).argmax(1) == yt).float().mean().item()
    return {"losses": losses, "bytes_per_step": bytes_per_step, "stats": stats, "accuracy": acc,
            "digest": digest(model), "calls": calls,
            "shapes": [list(p.shape) for p in model.parameters()],
            "skipped_steps": state.skipped_steps if state else 0}


def main() -> Any:
    spec, out_dir = json.load(open(sys.argv[1])), sys.argv[2]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    results = {}
    failed = None
    for case in spec["cases"]:
        if failed:
            # The group may be out of step after a failure: run nothing more.
            results[case["id"]] = {"error": f"not run: case {failed} failed before it"}
            continue
        try:
            results[case["id"]] = train(case, rank, world, out_dir)
        except Exception as e:  # noqa: BLE001 - the test reads the message
            results[case["id"]] = {"error": f"{type(e).__name__}: {e}"}
            failed = case["id"]
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)
    # gloo can abort at interpreter exit after DDP; leave once everyone is done.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
