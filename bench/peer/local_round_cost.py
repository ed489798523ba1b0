"""The outer round's cost per inner step of `gradcomp.torch.LocalUpdates` (issue #36).

    python bench/peer/local_round_cost.py --world 2 [--device cuda] [--embed 768 --layers 12]

Starts `--world` gloo ranks on this machine (one process each; on one GPU
they share it), each with the peer's GPT (bench/peer/models.py) on random
tokens and AdamW, and times `--steps` inner steps three ways: without rounds,
with `LocalUpdates` blocking (`delay` 0), and with its rounds overlapped
(`delay` τ). The extra seconds per inner step over the plain steps, and as a
share of one, are printed as one JSON line per setting. The default model is
the 5.75M-parameter GPT of experiments/tta-ptb-gpt.toml; `--embed 768
--layers 12 --heads 12` is GPT-2 small's shape (about 124M parameters with a
50k vocabulary, 85M with PTB's 10k).
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402


def run(rank, a, port):
    import gradcomp.torch as gt
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.world)
    device = torch.device(a.device)
    torch.manual_seed(1)
    model = models.Gpt(a.vocab, layers=a.layers, heads=a.heads, embed=a.embed, context=a.context).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(rank)
    tokens = torch.randint(0, a.vocab, (a.batch, a.context + 1), generator=g).to(device)
    x, y = tokens[:, :-1], tokens[:, 1:].reshape(-1)

    def inner():
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, a.vocab), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    def timed(local):
        if device.type == "cuda":
            torch.cuda.synchronize()
        dist.barrier()
        t = time.perf_counter()
        for _ in range(a.steps):
            inner()
            if local is not None:
                local.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if local is not None:
            local.close()
        return (time.perf_counter() - t) / a.steps

    for _ in range(3):
        inner()
    plain = timed(None)
    steps = {}
    for delay in (0, a.delay):
        steps[delay] = timed(gt.LocalUpdates(model, opt, period=a.period, fragments=a.fragments, delay=delay))
    # The plain steps again: the faster of the two runs, so warm-up is not counted as the rounds' gain.
    plain = min(plain, timed(None))
    rows = []
    for delay, step in steps.items():
        rows.append({"delay": delay, "fragments": a.fragments, "period": a.period, "step_seconds": step,
                     "plain_step_seconds": plain, "round_cost_per_step": step - plain,
                     "share_of_a_step": (step - plain) / plain,
                     "parameters": sum(p.numel() for p in model.parameters()), "world": a.world,
                     "device": str(device)})
    if rank == 0:
        for r in rows:
            print(json.dumps(r), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--embed", type=int, default=256)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--period", type=int, default=32)
    p.add_argument("--fragments", type=int, default=4)
    p.add_argument("--delay", type=int, default=2)
    p.add_argument("--steps", type=int, default=64)
    a = p.parse_args()
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // a.world))
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(a, port), nprocs=a.world)


if __name__ == "__main__":
    main()
