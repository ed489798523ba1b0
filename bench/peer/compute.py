"""Compute apart (issue #26, point 3): one worker's forward and backward pass,
single process, PyTorch against burn on the same cores in the same run.

    python bench/peer/compute.py BIN CONFIG... [--threads 1,2] [--rounds 3] [--steps 20]
        [--burn-devices cpu,ndarray] [--out FILE.jsonl]

BIN is `gradcomp` (release; with `--features ndarray` or `openblas` for the
ndarray backend). For each configuration (experiments/*.toml: its model, data
and batch per worker), each thread count and each round, PyTorch's pass and
`BIN bench compute` (every burn backend) run one after another, so drift hits
both alike; medians over `--steps` timed steps after 3 untimed. PyTorch runs
`torch.set_num_threads(T)`, burn `RAYON_NUM_THREADS=T`. Each record is one JSON
line (framework, backend, model, batch, threads, round, forward_seconds, backward_seconds,
step_seconds); the summary table takes the median over rounds.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import tomllib

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

WARM = 3


def batches(cfg, task, steps):
    """Worker 0's first batches of a `workers`-way run, as gradcomp's loaders cut them."""
    workers, b = cfg.get("workers", 1), cfg["data"]["batch_size"]
    if task[0] == "images":
        x, y = task[1], task[2]
        shard = torch.arange(len(x))[0::workers]
        return [(x[shard[i * b:(i + 1) * b]], y[shard[i * b:(i + 1) * b]]) for i in range(steps)]
    grid = models.token_grid(task[1], 0, workers, b)
    bptt = cfg["data"].get("bptt", 35)
    return [(grid[:, i * bptt:(i + 1) * bptt], grid[:, i * bptt + 1:(i + 1) * bptt + 1].reshape(-1))
            for i in range(steps)]


def torch_pass(model, data):
    """Median forward, backward and total seconds of `model` over `data`."""
    model.train()
    fwd, bwd = [], []
    for x, y in data:
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        loss.item()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        fwd.append(t1 - t0)
        bwd.append(t2 - t1)
    fwd, bwd = fwd[WARM:], bwd[WARM:]
    return statistics.median(fwd), statistics.median(bwd), statistics.median([a + b for a, b in zip(fwd, bwd)])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bin")
    p.add_argument("configs", nargs="+")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--burn-devices", default="cpu")
    p.add_argument("--out", help="append the JSON records to this file")
    a = p.parse_args()
    out = open(a.out, "a") if a.out else None
    records = []

    def emit(rec):
        records.append(rec)
        line = json.dumps(rec)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    for path in a.configs:
        cfg = tomllib.load(open(path, "rb"))
        torch.manual_seed(cfg.get("seed", 1))
        model, task = models.build(cfg)
        data = batches(cfg, task, WARM + a.steps)
        params = sum(p.numel() for p in model.parameters())
        for threads in [int(t) for t in a.threads.split(",")]:
            torch.set_num_threads(threads)
            for rnd in range(a.rounds):
                f, b, s = torch_pass(model, data)
                emit({"framework": "pytorch", "backend": f"torch {torch.__version__}", "config": cfg["name"],
                      "model": cfg["model"]["name"], "batch": cfg["data"]["batch_size"], "threads": threads,
                      "round": rnd, "params": params, "forward_seconds": f, "backward_seconds": b, "step_seconds": s})
                env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
                run = subprocess.run([a.bin, "bench", "compute", "--config", path, "--json", "--steps", str(a.steps),
                                      "--device", a.burn_devices], env=env, capture_output=True, text=True)
                if run.returncode:
                    sys.exit(f"error: {a.bin} bench compute failed:\n{run.stderr}")
                for line in run.stdout.splitlines():
                    rec = json.loads(line)
                    rec["round"] = rnd
                    emit(rec)
    summary(records)


def summary(records):
    """A Markdown table: median over rounds, burn's time over PyTorch's."""
    keys = sorted({(r["model"], r["batch"], r["threads"]) for r in records})
    print("\n| model | batch | threads | framework | forward ms | backward ms | forward + backward ms | over PyTorch |")
    print("|---|---:|---:|---|---:|---:|---:|---:|")
    for model, batch, threads in keys:
        rows = [r for r in records if (r["model"], r["batch"], r["threads"]) == (model, batch, threads)]
        by = {}
        for r in rows:
            by.setdefault(r["backend"] if r["framework"] == "burn" else "pytorch", []).append(r)
        base = statistics.median(r["step_seconds"] for r in by["pytorch"])
        for name, rs in by.items():
            keys = ("forward_seconds", "backward_seconds", "step_seconds")
            med = {k: statistics.median(r[k] for r in rs) * 1e3 for k in keys}
            label = "PyTorch" if name == "pytorch" else f"burn {name}"
            print(f"| {model} | {batch} | {threads} | {label} | {med['forward_seconds']:.1f} | {med['backward_seconds']:.1f} | "
                  f"{med['step_seconds']:.1f} | {med['step_seconds'] / 1e3 / base:.2f}× |")


if __name__ == "__main__":
    main()
