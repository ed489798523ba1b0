"""A gloo calibration of gradcomp's network model (issue #38, point 6).

    scripts/netsim.sh torch 4 RATE PYTHON bench/peer/gloo_calibrate.py --link-bps BPS --out FILE

Each rank (one per netsim host) times torch.distributed's gloo `all_reduce` of
float32 buffers from 4 KB to `--max-bytes` per rank (the median of `--repeats`
after one warm-up), and `all_gather_into_tensor` at the same sizes. gloo's
allreduce of large buffers is a ring: 2(N − 1) exchange rounds of 1/N of the
buffer, every rank sending and receiving at once. Rank 0 writes a
`network.calibration` file (the format `gradcomp bench comm --calibrate-out`
writes for Open MPI):

- `model.allreduce` = `allgatherv` = "ring";
- `model.exchange`: the measured seconds of one round at each round size (an
  allreduce's time / 2(N − 1) at size/N), which the model interpolates;
- α and B fitted to those rounds by least squares on the relative error;
- `samples`: the allreduce times, and (beside them, under `allgather`) the
  allgather times, which the model does not see: predict.py checks them out of
  sample.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def timed(op, repeats):
    op()
    dist.barrier()
    times = []
    for _ in range(repeats):
        dist.barrier()
        t = time.perf_counter()
        op()
        times.append(time.perf_counter() - t)
    # The slowest rank's time is the collective's.
    worst = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return statistics.median(worst.tolist())


def fit(rounds):
    """α and B from (round bytes, round seconds), weighted by 1/t² (relative error)."""
    sw = sxx = sx = s1 = sxy = sy = 0.0
    for b, t in rounds:
        w = 1.0 / (t * t)
        s1, sx, sxx = s1 + w, sx + w * b, sxx + w * b * b
        sy, sxy = sy + w * t, sxy + w * b * t
        sw += w
    det = s1 * sxx - sx * sx
    alpha = (sy * sxx - sx * sxy) / det
    beta = (s1 * sxy - sx * sy) / det
    if alpha < 0:  # keep α ≥ 0: refit through the origin
        alpha, beta = 0.0, sxy / sxx
    return alpha, 1.0 / beta


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--link-bps", type=float, required=True, help="the link's nominal rate, e.g. 1e8")
    p.add_argument("--max-bytes", type=int, default=16 << 20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    sizes, s = [], 4096
    while s <= a.max_bytes:
        sizes.append(s)
        s *= 4
    allreduce, allgather = [], []
    for size in sizes:
        x = torch.ones(size // 4)
        allreduce.append((size, timed(lambda: dist.all_reduce(x), a.repeats)))
        out = torch.empty(world * (size // 4))
        allgather.append((size, timed(lambda: dist.all_gather_into_tensor(out, x), a.repeats)))
        if rank == 0:
            print(json.dumps({"bytes": size, "allreduce": allreduce[-1][1], "allgather": allgather[-1][1]}),
                  flush=True)
    steps = 2 * (world - 1)
    rounds = [(b // world, t / steps) for b, t in allreduce]
    alpha, bandwidth = fit(rounds)
    if rank == 0:
        cal = {"link_bps": a.link_bps, "workers": world,
               "model": {"alpha": alpha, "bandwidth": bandwidth, "rendezvous": 0.0, "eager_limit": 65536,
                         "allreduce": "ring", "allgatherv": "ring", "exchange": rounds},
               "samples": allreduce}
        with open(a.out, "w") as f:
            json.dump(cal, f, indent=2)
        with open(a.out.removesuffix(".json") + ".allgather.json", "w") as f:
            json.dump({"link_bps": a.link_bps, "workers": world, "allgather": allgather}, f, indent=2)
    dist.barrier()
    os._exit(0)


if __name__ == "__main__":
    main()
