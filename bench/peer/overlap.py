"""How much of a gradcomp hook's exchange hides behind DDP's backward pass.

One DDP model of a gradcomp recipe (bench/peer/models.py), run three ways in
the same processes, each for --steps steps after --warmup:

  compute   DDP's no_sync(): the forward and backward passes and the
            optimizer with no communication at all (the compute-bound limit)
  sync      the hook made synchronous: it waits for its own future before
            returning, so the backward pass stops at every bucket (the
            hook before issue #35)
  async     the hook as it is: it returns the pending future at once and the
            exchange runs on its communication thread during the backward pass

Rank 0 prints one JSON line per way (mean seconds per step and per backward()
call, and the hook's own exchange seconds) and then the summary: the
communication a step pays beyond compute, sync − compute, and the share of it
the asynchronous hook hides, (sync − async) / (sync − compute).

    scripts/netsim.sh torch 4 100mbit PY bench/peer/overlap.py \\
        --config experiments/tta-ptb-lstm.toml --method gradcomp:topk --option density=0.01
"""
import argparse
import json
import os
import sys
import time
import tomllib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
from train import Batches, hook_for, optimizer, option  # noqa: E402


def synchronous(hook):
    """The hook, waiting for its exchange before it returns (no overlap)."""
    def wait(state, bucket):
        fut = hook(state, bucket)
        fut.wait()
        return fut
    return wait


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--method", required=True, help="a gradcomp hook: gradcomp:NAME")
    p.add_argument("--option", type=option, action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--buckets", default="ddp",
                   help="ddp: DDP's default buckets (a 1 MiB first bucket, then 25 MiB); one: a single "
                        "bucket, which only the end of the backward pass completes; a number: bucket_cap_mb")
    a = p.parse_args()
    cfg = tomllib.load(open(a.config, "rb"))
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    rows = {}
    for way in ("compute", "sync", "async"):
        # A fresh model, DDP and hook per way: each starts from the same
        # weights and state (a module keeps the hooks of every DDP built on it).
        torch.manual_seed(cfg.get("seed", 1))
        model, task = models.build(cfg)
        batches = Batches(cfg, task, rank, world)
        ddp = DDP(model) if a.buckets == "ddp" else \
            DDP(model, bucket_cap_mb=1e4 if a.buckets == "one" else float(a.buckets))
        state, hook = hook_for(a.method, dict(a.option))
        ddp.register_comm_hook(state, synchronous(hook) if way == "sync" else hook)
        opt = optimizer(cfg["optimizer"], ddp.parameters())
        step_s = backward_s = exchange_s = 0.0
        for step in range(a.warmup + a.steps):
            x, y = batches.get(step % batches.per_epoch)
            dist.barrier()
            t0 = time.perf_counter()
            opt.zero_grad()
            if way == "compute":
                with ddp.no_sync():
                    loss = torch.nn.functional.cross_entropy(ddp(x), y)
                    t1 = time.perf_counter()
                    loss.backward()
            else:
                loss = torch.nn.functional.cross_entropy(ddp(x), y)
                t1 = time.perf_counter()
                loss.backward()
            t2 = time.perf_counter()
            opt.step()
            t3 = time.perf_counter()
            if step >= a.warmup:
                step_s += t3 - t0
                backward_s += t2 - t1
                if way != "compute":
                    exchange_s += state.last_step()["wall_seconds"]
        row = {"way": way, "step_seconds": step_s / a.steps, "backward_seconds": backward_s / a.steps,
               "exchange_seconds": exchange_s / a.steps}
        # The slowest rank sets the pace: report the mean over ranks.
        t = torch.tensor([row["step_seconds"], row["backward_seconds"], row["exchange_seconds"]],
                         dtype=torch.float64)
        dist.all_reduce(t)
        row.update(step_seconds=t[0].item() / world, backward_seconds=t[1].item() / world,
                   exchange_seconds=t[2].item() / world)
        rows[way] = row
        if rank == 0:
            print(json.dumps(row), flush=True)
    if rank == 0:
        comm = rows["sync"]["step_seconds"] - rows["compute"]["step_seconds"]
        hidden = (rows["sync"]["step_seconds"] - rows["async"]["step_seconds"]) / comm if comm > 0 else None
        print(json.dumps({"summary": True, "config": a.config, "method": a.method, "options": dict(a.option),
                          "buckets": a.buckets, "world": world, "buckets_seen": len(state.last_step()["buckets"]), "communication_seconds": comm, "hidden_share": hidden,
                          **{f"{w}_step_seconds": r["step_seconds"] for w, r in rows.items()}}), flush=True)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
