"""The peer: PyTorch DDP (gloo, CPU) on one of gradcomp's time-to-accuracy configs.

    RANK=r WORLD_SIZE=n MASTER_ADDR=… MASTER_PORT=… \\
        python bench/peer/train.py --config experiments/tta-mnist-lenet.toml --method METHOD --out DIR

One process per rank (scripts/netsim.sh torch starts them on the shaped links).
The model, data, batch per worker, optimizer, evaluation cadence and target are
read from the gradcomp configuration, so both frameworks run one recipe. METHOD:

- `none`: DDP's own allreduce
- `torch-fp16`, `torch-powersgd-rR`, `torch-batched-powersgd-rR`: torch's hooks
  (PowerSGD from step 10, as gradcomp's time-to-accuracy runs start it)
- `gradcomp:NAME` with `--option key=value`: gradcomp's hook

Rank 0 writes a gradcomp run directory: `config.toml` (the configuration with the
method recorded) and `evals.jsonl` with gradcomp's fields, so
`gradcomp report --time-to-accuracy` reads both frameworks' runs. Bytes are a
worker's per step: measured by gradcomp's hooks; for DDP's allreduce and torch's
hooks computed from the tensors each allreduces (`torch_bytes` below), since torch
counts none.

Models so far: `lenet5` on MNIST (Caffe's LeNet-5, layer for layer gradcomp's).
"""
import argparse
import json
import math
import os
import re
import sys
import time
import tomllib

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

POWERSGD_START = 10


def read_idx(path):
    data = open(path, "rb").read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def mnist(split):
    root = os.path.join(os.environ.get("GRADCOMP_DATA", os.path.expanduser("~/.cache/gradcomp/data")), "mnist")
    path = os.path.join(root, f"{split}-images-idx3-ubyte")
    if not os.path.exists(path):
        sys.exit(f"error: MNIST is not in {root}: run scripts/fetch-data.sh mnist")
    x = torch.from_numpy(read_idx(path).astype(np.float32) / 255.0).unsqueeze(1)
    y = torch.from_numpy(read_idx(os.path.join(root, f"{split}-labels-idx1-ubyte")).astype(np.int64))
    return x, y


class LeNet5(torch.nn.Module):
    """Caffe's LeNet-5, as gradcomp's `lenet5`: conv 20@5×5, pool 2, conv 50@5×5, pool 2, fc 500, ReLU, fc 10."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1, self.conv2 = torch.nn.Conv2d(1, 20, 5), torch.nn.Conv2d(20, 50, 5)
        self.fc1, self.fc2 = torch.nn.Linear(800, 500), torch.nn.Linear(500, classes)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(self.conv1(x), 2)
        x = torch.nn.functional.max_pool2d(self.conv2(x), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


MODELS = {("lenet5", "mnist"): (LeNet5, mnist)}


def torch_bytes(method, model, step):
    """What one worker's allreduces carry per step with torch's hooks: the
    tensors each hook hands to `all_reduce` (PowerSGD: P and Q of each matrix it
    compresses, the rest uncompressed; torch's `_should_compress` rule)."""
    shapes = [p.shape for p in model.parameters()]
    if method == "none":
        return 4 * sum(math.prod(s) for s in shapes)
    if method == "torch-fp16":
        return 2 * sum(math.prod(s) for s in shapes)
    rank = int(method.rsplit("-r", 1)[1])
    if step < POWERSGD_START:
        return 4 * sum(math.prod(s) for s in shapes)
    total = 0
    for s in shapes:
        if len(s) < 2:
            total += 4 * math.prod(s)
            continue
        n, m = s[0], math.prod(s[1:])
        r = min(n, m, rank)
        total += 4 * (n + m) * r if (n + m) * r * 2 < n * m else 4 * n * m
    return total


def hook_for(method, options):
    if method == "none":
        return None
    if method == "torch-fp16":
        return None, default_hooks.fp16_compress_hook
    if method.startswith("torch-powersgd-r") or method.startswith("torch-batched-powersgd-r"):
        rank = int(method.rsplit("-r", 1)[1])
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=rank,
                                            start_powerSGD_iter=POWERSGD_START)
        fn = powerSGD_hook.batched_powerSGD_hook if "batched" in method else powerSGD_hook.powerSGD_hook
        return state, fn
    if method.startswith("gradcomp:"):
        import gradcomp.torch as gt
        return gt.hook(method.split(":", 1)[1], **options)
    sys.exit(f"error: unknown method {method!r}")


def write_run_dir(a, cfg_text):
    """A gradcomp run directory that `gradcomp report` reads: the configuration
    named after the run (the method in a comment), no step records (torch keeps
    none), and epochs.jsonl, which the evaluations stand in for."""
    os.makedirs(a.out, exist_ok=True)
    name = os.path.basename(os.path.normpath(a.out))
    text = re.sub(r'(?m)^name = ".*"$', f'name = "{name}"', cfg_text, count=1)
    with open(os.path.join(a.out, "config.toml"), "w") as f:
        f.write(text)
        f.write(f"\n# peer: PyTorch {torch.__version__} DDP over gloo, method {a.method} {dict(a.option)}\n")
    for records in ("epochs.jsonl", "steps.jsonl"):
        open(os.path.join(a.out, records), "w").close()


def option(text):
    key, _, value = text.partition("=")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--method", default="none")
    p.add_argument("--option", type=option, action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", required=True, help="the run directory (rank 0 writes it)")
    p.add_argument("--buckets", choices=["ddp", "one"], default="one",
                   help="one: a single bucket (bucket_cap_mb large); ddp: DDP's default 25 MiB")
    a = p.parse_args()
    cfg = tomllib.load(open(a.config, "rb"))
    model_name, dataset = cfg["model"]["name"], cfg["data"]["dataset"]
    if (model_name, dataset) not in MODELS:
        sys.exit(f"error: the peer trains {sorted(MODELS)} so far, not {model_name} on {dataset}")
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    make_model, load = MODELS[(model_name, dataset)]
    x, y = load("train")
    xt, yt = load("t10k")
    torch.manual_seed(cfg.get("seed", 1))
    model = make_model()
    ddp = DDP(model, bucket_cap_mb=1e4 if a.buckets == "one" else 25)
    made = hook_for(a.method, dict(a.option))
    state = None
    if made is not None:
        state, fn = made
        ddp.register_comm_hook(state, fn)
    o = cfg["optimizer"]
    opt = torch.optim.SGD(ddp.parameters(), lr=o["lr"], momentum=o.get("momentum", 0.0),
                          weight_decay=o.get("weight_decay", 0.0))
    t = cfg["train"]
    batch, every, target = cfg["data"]["batch_size"], t["eval_every"], t.get("target_accuracy")
    shard = torch.randperm(len(x), generator=torch.Generator().manual_seed(cfg.get("seed", 1)))[rank::world]
    per_epoch = len(shard) // batch
    if rank == 0:
        write_run_dir(a, cfg_text=open(a.config).read())
        evals = open(os.path.join(a.out, "evals.jsonl"), "w")
    # As gradcomp records them: the wall-clock summed over training steps
    # (evaluation excluded), and the bytes summed over all workers.
    sent = received = 0
    wall = 0.0
    loss_sum, loss_n = 0.0, 0
    for step in range(t["epochs"] * per_epoch):
        epoch, i = divmod(step, per_epoch)
        idx = shard[i * batch:(i + 1) * batch]
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x[idx]), y[idx])
        loss.backward()
        opt.step()
        loss_sum, loss_n = loss_sum + loss.item(), loss_n + 1
        wall += time.perf_counter() - t0
        if a.method.startswith("gradcomp:"):
            last = state.last_step()
            sent, received = sent + last["bytes_sent"], received + last["bytes_received"]
        else:
            b = torch_bytes(a.method, model, step)
            sent, received = sent + b, received + b
        if (step + 1) % every:
            continue
        totals = torch.tensor([sent, received], dtype=torch.float64)
        dist.all_reduce(totals)
        with torch.no_grad():
            out = model(xt)
            acc = (out.argmax(1) == yt).float().mean().item()
            test_loss = torch.nn.functional.cross_entropy(out, yt).item()
        if rank == 0:
            rec = {"epoch": epoch, "steps": step + 1, "train_loss": loss_sum / loss_n, "test_accuracy": acc,
                   "test_loss": test_loss, "bytes_sent": int(totals[0]), "bytes_received": int(totals[1]),
                   "wall_seconds": wall,
                   "predicted_wall_seconds": {}}
            evals.write(json.dumps(rec) + "\n")
            evals.flush()
            print(json.dumps({"steps": step + 1, "accuracy": round(acc, 4), "seconds": round(wall, 2)}), flush=True)
        loss_sum, loss_n = 0.0, 0
        # Every rank evaluates the same replica, so every rank stops together.
        if target is not None and acc >= target:
            break
    dist.barrier()
    sys.stdout.flush()
    # gloo can abort at interpreter exit after DDP; leave once everyone is done.
    os._exit(0)


if __name__ == "__main__":
    main()
