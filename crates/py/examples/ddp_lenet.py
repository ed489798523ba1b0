"""LeNet-5 on MNIST with PyTorch DDP over gloo and a gradcomp hook, until 97%.

    scripts/fetch-data.sh mnist
    python crates/py/examples/ddp_lenet.py --hook topk --option density=0.01 --workers 4

Starts `--workers` processes on this machine (one thread each), trains Caffe's
LeNet-5 (gradcomp's `lenet5`) with SGD at batch 16 per worker, lr 0.01, momentum
0.9, weight decay 5e-4 (gradcomp's MNIST settings), evaluates on the 10,000 test
images every `--eval-every` steps, and stops at `--target`. `--hook ddp` runs
DDP's own allreduce. Prints one JSON line per evaluation (rank 0) and a summary:
steps and seconds to the target, bytes per step per worker.
"""
import argparse
import json
import os
import socket
import sys
import time

from typing import Any, Tuple

import numpy as np
import numpy.typing as npt
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

import gradcomp.torch as gt


def read_idx(path: str) -> npt.NDArray[np.uint8]:
    data = open(path, "rb").read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def mnist(data_dir: str, split: str) -> Tuple[torch.Tensor, torch.Tensor]:
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte"))
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))


class LeNet5(torch.nn.Module):
    """Caffe's LeNet-5: conv 20@5×5, pool, conv 50@5×5, pool, fc 500, ReLU, fc 10."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 20, 5)
        self.conv2 = torch.nn.Conv2d(20, 50, 5)
        self.fc1 = torch.nn.Linear(800, 500)
        self.fc2 = torch.nn.Linear(500, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.max_pool2d(self.conv1(x), 2)
        x = torch.nn.functional.max_pool2d(self.conv2(x), 2)
        out: torch.Tensor = self.fc2(torch.relu(self.fc1(x.flatten(1))))
        return out


def option(text: str) -> Tuple[str, Any]:
    key, _, value = text.partition("=")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def worker(rank: int, args: argparse.Namespace, port: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.workers)
    x, y = mnist(args.data, "train")
    xt, yt = mnist(args.data, "t10k")
    torch.manual_seed(args.seed)
    model = LeNet5()
    ddp = DDP(model, bucket_cap_mb=args.bucket_cap_mb)
    state = None
    if args.hook != "ddp":
        state, hook = gt.hook(args.hook, **dict(args.option))
        ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    g = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(len(x), generator=g)
    shard = order[rank::args.workers]
    start, step, sent = time.perf_counter(), 0, []
    result = None
    while step < args.max_steps:
        i = (step * args.batch) % (len(shard) - args.batch)
        idx = shard[i:i + args.batch]
        opt.zero_grad()
        loss: torch.Tensor = torch.nn.functional.cross_entropy(ddp(x[idx]), y[idx])
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        step += 1
        last = state.last_step() if state is not None else None
        if last is not None:
            sent.append(last["bytes_sent"])
        if step % args.eval_every == 0:
            with torch.no_grad():
                acc = (model(xt).argmax(1) == yt).float().mean().item()
            seconds = time.perf_counter() - start
            if rank == 0:
                print(json.dumps({"step": step, "accuracy": acc, "seconds": round(seconds, 2)}), flush=True)
            if acc >= args.target:
                result = {"hook": args.hook, "options": dict(args.option), "workers": args.workers,
                          "steps": step, "seconds": round(seconds, 2), "accuracy": acc,
                          "bytes_per_step": sent[-1] if sent else 4 * sum(p.numel() for p in model.parameters()),
                          "bytes_per_step_measured": bool(sent)}
                break
    if rank == 0:
        print(json.dumps(result or {"hook": args.hook, "reached": False, "steps": step}), flush=True)
    dist.barrier()
    sys.stdout.flush()
    # gloo can abort at interpreter exit after DDP; leave once everyone is done.
    os._exit(0 if result else 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hook", default="topk", help="a gradcomp compressor, or ddp for DDP's allreduce")
    p.add_argument("--option", type=option, action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--target", type=float, default=0.97)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--max-steps", type=int, default=3000)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", default=os.path.join(os.environ.get("GRADCOMP_DATA", os.path.expanduser(
        "~/.cache/gradcomp/data")), "mnist"))
    args = p.parse_args()
    if not os.path.exists(os.path.join(args.data, "train-images-idx3-ubyte")):
        sys.exit(f"error: MNIST is not in {args.data}: run scripts/fetch-data.sh mnist")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(worker, args=(args, port), nprocs=args.workers, start_method="fork")  # type: ignore[attr-defined,no-untyped-call]


if __name__ == "__main__":
    main()
