"""The peer: PyTorch DDP (gloo, CPU) on one of gradcomp's time-to-accuracy configs.

    RANK=r WORLD_SIZE=n MASTER_ADDR=… MASTER_PORT=… \\
        python bench/peer/train.py --config experiments/tta-mnist-lenet.toml --method METHOD --out DIR

One process per rank (scripts/netsim.sh torch starts them on the shaped links).
The model, data, batch per worker, optimizer, evaluation cadence and target are
read from the gradcomp configuration, so both frameworks run one recipe. METHOD:

- `none`: DDP's own allreduce
- `isolated`: no exchange at all, each rank training its own replica on its own
  batches (4 ranks sharing the cores, as in every run): the communication-free
  step of bench/peer/table.py's lower bound; evaluated on the replicas' average
- `torch-fp16`, `torch-powersgd-rR[-sS]`, `torch-batched-powersgd-rR[-sS]`: torch's
  hooks (PowerSGD of rank R from step S, `start_powerSGD_iter`; without it from
  step 10, as gradcomp's time-to-accuracy runs start it)
- `gradcomp:NAME` with `--option key=value`: gradcomp's hook
- `gradcomp-local:NAME` with `--option key=value` (`period`, `outer`, `fragments`,
  `delay`, `mix`, the compressor's own): no DDP, `gradcomp.torch.LocalUpdates`
  around the config's optimizer, the change sent through compressor NAME;
  evaluated on the replicas' average, as gradcomp's trainer evaluates local steps.
  With `--option plan=auto --option link_gbps=G` the plan is the core's rule's
  (`LocalUpdates(plan="auto")`) from this run's own free step and length
- `torch-postlocal-hH[-wW]`, `torchft-diloco-hH[-pP][-dD][-nesterov]`: PyTorch's
  own local updates, torch's post-local SGD and torchft's DiLoCo
  (bench/peer/torch_local.py); evaluated on the replicas' average too

Rank 0 writes a gradcomp run directory: `config.toml` (the configuration with the
method recorded) and `evals.jsonl` with gradcomp's fields, so
`gradcomp report --time-to-accuracy` reads both frameworks' runs. Bytes are
summed over the workers: the payload (`bytes_sent`) measured by gradcomp's hooks
and LocalUpdates; for DDP's allreduce and torch's hooks computed from the tensors
each allreduces (`torch_bytes` below), since torch counts none. Beside it, the
bytes on the wire (`wire_bytes_sent`): the interfaces' own count during the
training steps (`wire_sent`), evaluations excluded. And the run's own
communication-free step (`free_step_seconds`, `free_step`), timed before it
trains: bench/peer/table.py counts the tuning's times in it.

Models (bench/peer/models.py, layer for layer gradcomp's): `lenet5` and
`resnet18` on MNIST or Fashion-MNIST (SGD with the config's momentum and weight
decay, test accuracy), the `lstm` and the `gpt` (a decoder-only transformer,
segments of `data.bptt` ≤ `model.gpt.context` tokens) on Penn Treebank (the
config's optimizer, SGD or Adam; test perplexity over gradcomp's 10 evaluation
rows of the first `data.test_examples` test tokens, all without it).
"""
import argparse
import collections
import json
import math
import os
import re
import statistics
import sys
import time
import tomllib

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import torch_local  # noqa: E402

POWERSGD_START = 10
RECENT_STEPS = 1024
# The run's own communication-free step, timed before it trains (`free_step`): after
# the steps that warm the allocator and the kernels up, enough steps for this many
# seconds (the machine's noise comes in bursts of seconds: 10 LSTM steps, 2 s, read
# 193 and 217 ms in two runs of one session), and at least CALIBRATION_STEPS.
CALIBRATION_WARMUP, CALIBRATION_SECONDS, CALIBRATION_STEPS = 2, 8.0, 10


def powersgd_settings(method):
    """(rank, start_powerSGD_iter) of `torch-[batched-]powersgd-rR[-sS]`."""
    m = re.fullmatch(r"torch-(?:batched-)?powersgd-r(\d+)(?:-s(\d+))?", method)
    if not m:
        sys.exit(f"error: {method!r} is not torch-[batched-]powersgd-rR[-sS]")
    return int(m.group(1)), int(m.group(2)) if m.group(2) else POWERSGD_START


def torch_calls(method, shapes, step):
    """The allreduces one worker makes in `step` with DDP's own allreduce or
    torch's hooks, as ("allreduce", bytes), one after another: the tensors
    each hook hands to `all_reduce`. PowerSGD: the uncompressed tensors in
    one, then every compressed matrix's P, then every Q (torch's
    `_should_compress` rule); dense before `POWERSGD_START`."""
    params = sum(math.prod(s) for s in shapes)
    if method == "torch-fp16":
        return [("allreduce", 2 * params)]
    if method == "none":
        return [("allreduce", 4 * params)]
    rank, start = powersgd_settings(method)
    if step < start:
        return [("allreduce", 4 * params)]
    dense = p = q = 0
    for s in shapes:
        if len(s) < 2:
            dense += math.prod(s)
            continue
        n, m = s[0], math.prod(s[1:])
        r = min(n, m, rank)
        if (n + m) * r * 2 < n * m:
            p, q = p + n * r, q + m * r
        else:
            dense += n * m
    return [("allreduce", 4 * dense), ("allreduce", 4 * p), ("allreduce", 4 * q)]


def torch_bytes(method, model, step):
    """What one worker's allreduces carry per step with torch's hooks (`torch_calls`)."""
    return sum(b for _, b in torch_calls(method, [p.shape for p in model.parameters()], step))


def hook_for(method, options):
    if method == "none":
        return None
    if method == "torch-fp16":
        return None, default_hooks.fp16_compress_hook
    if method.startswith("torch-powersgd-r") or method.startswith("torch-batched-powersgd-r"):
        rank, start = powersgd_settings(method)
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=rank,
                                            start_powerSGD_iter=start)
        fn = powerSGD_hook.batched_powerSGD_hook if "batched" in method else powerSGD_hook.powerSGD_hook
        return state, fn
    if method.startswith("gradcomp:"):
        import gradcomp.torch as gt
        return gt.hook(method.split(":", 1)[1], **options)
    sys.exit(f"error: unknown method {method!r}")


def free_step(model, make_optimizer, batches, world):
    """This run's communication-free step: the mean over the ranks of each rank's
    median seconds per training step of a copy of the model (its own optimizer, the
    first batch, no exchange), every rank at once as in the run, over about
    CALIBRATION_SECONDS (rank 0's warm-up steps set the count for all).
    It is what the run's steps would cost without the exchange on this machine
    now: bench/peer/table.py ranks the tuning by time ÷ this step, so points run in
    sessions whose machine speed differs compare (RESULTS, "The race a skeptic
    accepts"). The model, its buffers and the random stream are left as they were."""
    import copy
    rng = torch.get_rng_state()
    twin = copy.deepcopy(model)
    opt = make_optimizer(twin.parameters())
    x, y = batches.get(0)

    def timed(n):
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            opt.zero_grad()
            torch.nn.functional.cross_entropy(twin(x), y).backward()
            opt.step()
            times.append(time.perf_counter() - t0)
        return times
    dist.barrier()
    warm = timed(CALIBRATION_WARMUP)
    n = torch.tensor([max(CALIBRATION_STEPS, math.ceil(CALIBRATION_SECONDS / max(warm[-1], 1e-3)))])
    dist.broadcast(n, 0)
    mine = torch.tensor([statistics.median(timed(int(n)))], dtype=torch.float64)
    dist.barrier()
    torch.set_rng_state(rng)
    dist.all_reduce(mine)
    return float(mine) / world


def averaged(model, world):
    """A copy of `model` holding the replicas' average (local updates' replicas
    differ between rounds; gradcomp's trainer evaluates this average too).
    Floating-point buffers (BatchNorm's running statistics) are averaged with
    the parameters: only LocalUpdates with `average_buffers` exchanges them (at
    rounds), so each replica's own would make the evaluated model a mix of the
    average and one rank."""
    import copy
    avg = copy.deepcopy(model)
    with torch.no_grad():
        tensors = list(avg.parameters()) + [b for b in avg.buffers() if b.is_floating_point()]
        for t in tensors:
            dist.all_reduce(t.data)
            t.data /= world
    return avg


def optimizer(o, params):
    """The config's optimizer: SGD (momentum, weight decay) or Adam, as gradcomp's."""
    if o.get("name", "sgd") == "adam":
        return torch.optim.Adam(params, lr=o["lr"], weight_decay=o.get("weight_decay", 0.0))
    return torch.optim.SGD(params, lr=o["lr"], momentum=o.get("momentum", 0.0),
                           weight_decay=o.get("weight_decay", 0.0))


class Batches:
    """Worker `rank`'s minibatches: a seeded shard of the images, or its
    contiguous share of the text cut into rows (gradcomp's token loader)."""

    def __init__(self, cfg, task, rank, world):
        self.task, self.batch = task[0], cfg["data"]["batch_size"]
        if self.task == "images":
            x, y = task[1], task[2]
            g = torch.Generator().manual_seed(cfg.get("seed", 1))
            self.shard = torch.randperm(len(x), generator=g)[rank::world]
            self.x, self.y = x, y
            self.per_epoch = len(self.shard) // self.batch
        else:
            self.grid = models.token_grid(task[1], rank, world, self.batch)
            self.bptt = cfg["data"].get("bptt", 35)
            self.per_epoch = (self.grid.shape[1] - 1) // self.bptt

    def get(self, i):
        if self.task == "images":
            idx = self.shard[i * self.batch:(i + 1) * self.batch]
            return self.x[idx], self.y[idx]
        s = i * self.bptt
        return self.grid[:, s:s + self.bptt], self.grid[:, s + 1:s + self.bptt + 1].reshape(-1)


EVAL_TOKEN_ROWS = 10  # gradcomp's rows per evaluation batch of a text


def evaluate(model, cfg, task):
    """Test accuracy and loss (images) or perplexity (text), as gradcomp records them."""
    model.eval()
    with torch.no_grad():
        if task[0] == "images":
            xt, yt = task[3], task[4]
            correct, loss = 0, 0.0
            for s in range(0, len(xt), 500):
                out = model(xt[s:s + 500])
                correct += (out.argmax(1) == yt[s:s + 500]).sum().item()
                loss += torch.nn.functional.cross_entropy(out, yt[s:s + 500], reduction="sum").item()
            model.train()
            return {"test_accuracy": correct / len(xt), "test_loss": loss / len(xt)}
        bptt = cfg["data"].get("bptt", 35)
        grid = models.token_grid(task[2], 0, 1, EVAL_TOKEN_ROWS)
        loss, n = 0.0, 0
        for s in range(0, grid.shape[1] - 1, bptt):
            length = min(bptt, grid.shape[1] - 1 - s)
            out = model(grid[:, s:s + length])
            loss += torch.nn.functional.cross_entropy(out, grid[:, s + 1:s + 1 + length].reshape(-1),
                                                      reduction="sum").item()
            n += EVAL_TOKEN_ROWS * length
    model.train()
    return {"test_loss": loss / n, "test_perplexity": math.exp(loss / n)}


def write_run_dir(a, cfg_text):
    """A gradcomp run directory that `gradcomp report` reads: the configuration
    named after the run (the method in a comment), no step records (torch keeps
    none), and epochs.jsonl, which the evaluations stand in for."""
    os.makedirs(a.out, exist_ok=True)
    name = os.path.basename(os.path.normpath(a.out))
    text = re.sub(r'(?m)^name = ".*"$', f'name = "{name}"', cfg_text, count=1)
    if a.seed is not None:
        text = re.sub(r'(?m)^seed = .*$', f'seed = {a.seed}', text, count=1)
    with open(os.path.join(a.out, "config.toml"), "w") as f:
        f.write(text)
        f.write(f"\n# peer: PyTorch {torch.__version__} DDP over gloo, method {a.method} {dict(a.option)}\n")
        baseline = torch_local.parse(a.method)
        if baseline:
            f.write(f"# peer baseline: {torch_local.describe(*baseline)}\n")
    for records in ("epochs.jsonl", "steps.jsonl"):
        open(os.path.join(a.out, records), "w").close()


def wire_sent():
    """This rank's bytes sent on its network interfaces, loopback excluded, or
    None off Linux. /proc/self/net/dev is the process's own network namespace:
    a netsim host's eth0, so the count is what crossed its link (the payload
    with its framing, padding, size rounds, TCP/IP headers and ACKs)."""
    try:
        with open("/proc/self/net/dev") as f:
            lines = f.readlines()[2:]
    except OSError:
        return None
    # Per interface: eight receive counters, then the bytes transmitted.
    return sum(int(data.split()[8]) for name, data in (line.split(":", 1) for line in lines) if name.strip() != "lo")


def option(text):
    key, _, value = text.partition("=")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def run_steps(cfg, batches):
    """The run's steps: its epochs' batches, at most `train.max_steps`."""
    t = cfg["train"]
    steps = t["epochs"] * batches.per_epoch
    return min(steps, t["max_steps"]) if t.get("max_steps") else steps


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--method", default="none")
    p.add_argument("--option", type=option, action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", required=True, help="the run directory (rank 0 writes it)")
    p.add_argument("--buckets", default="one",
                   help="one: a single bucket (bucket_cap_mb large); ddp: DDP's default 25 MiB; "
                        "a number: that bucket_cap_mb (e.g. 1 gives LeNet-5 two buckets)")
    p.add_argument("--seed", type=int, help="the config's seed replaced (the model's initialization, "
                   "the images' shards, dropout, the compressors' draws)")
    p.add_argument("--cap-seconds", type=float, default=0.0,
                   help="stop once training has taken this long (evaluation excluded), evaluating there "
                        "(a record marked capped); 0: no cap")
    p.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                   help="skip timing the run's own communication-free step before training "
                        "(`free_step_seconds` in its records)")
    a = p.parse_args()
    cfg = tomllib.load(open(a.config, "rb"))
    if a.seed is not None:
        cfg["seed"] = a.seed
    torch.set_num_threads(1)
    os.environ.setdefault("RUST_LOG", "warn")  # torchft's per-quorum INFO lines
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(cfg.get("seed", 1))
    model, task = models.build(cfg)
    batches = Batches(cfg, task, rank, world)
    make_optimizer = lambda params: optimizer(cfg["optimizer"], params)  # noqa: E731
    free = free_step(model, make_optimizer, batches, world) if a.calibrate else None
    local = postlocal = diloco = None
    baseline = torch_local.parse(a.method)
    if baseline and baseline[0] == "postlocal":
        postlocal = torch_local.PostLocal(model, make_optimizer, baseline[1]["period"], baseline[1]["warmup"])
        ddp, opt = postlocal.ddp, postlocal.optimizer
    elif baseline:
        s = baseline[1]
        diloco = torch_local.TorchftDiLoCo(model, make_optimizer, rank, world, s["period"], s["fragments"],
                                           s["delay"], s["nesterov"])
        ddp, opt = model, diloco.optimizer
        diloco.__enter__()
    elif a.method == "isolated":
        ddp = model
        opt = optimizer(cfg["optimizer"], model.parameters())
    elif a.method.startswith("gradcomp-local:"):
        import gradcomp.torch as gt
        ddp = model
        opt = optimizer(cfg["optimizer"], model.parameters())
        options = dict(a.option)
        if options.get("plan") == "auto":
            # The plan's inputs: this run's own communication-free step (timed above)
            # and length; the link is the option's (`link_gbps`).
            if free is None:
                sys.exit("error: plan=auto needs the run's communication-free step: leave out --no-calibrate")
            options.setdefault("step_seconds", free)
            options.setdefault("total_steps", run_steps(cfg, batches))
            local = gt.LocalUpdates(model, opt, **options)
        else:
            local = gt.LocalUpdates(model, opt, compressor=a.method.split(":", 1)[1], **options)
    else:
        cap = {"one": 1e4, "ddp": 25}.get(a.buckets)
        ddp = DDP(model, bucket_cap_mb=cap if cap is not None else float(a.buckets))
        made = hook_for(a.method, dict(a.option))
        state = None
        if made is not None:
            state, fn = made
            ddp.register_comm_hook(state, fn)
        opt = optimizer(cfg["optimizer"], ddp.parameters())
    t = cfg["train"]
    every, target, target_ppl = t.get("eval_every", 0), t.get("target_accuracy"), t.get("target_perplexity")
    cap_check = max(1, (every or batches.per_epoch) // 5)
    steps = run_steps(cfg, batches)
    if rank == 0:
        write_run_dir(a, cfg_text=open(a.config).read())
        evals = open(os.path.join(a.out, "evals.jsonl"), "w")
    # As gradcomp records them: the wall-clock summed over training steps
    # (evaluation excluded), and the bytes summed over all workers.
    sent = received = 0
    wall = exposed = 0.0
    # The last steps' seconds, for a capped run's projection over whole periods
    # (bench/peer/table.py `pace`): recorded at the cap.
    recent = collections.deque(maxlen=RECENT_STEPS)
    loss_sum, loss_n = 0.0, 0
    # The wire's bytes during training steps: counted up to each evaluation, from after it.
    wire, wire_mark = 0, wire_sent()
    for step in range(steps):
        epoch, i = divmod(step, batches.per_epoch)
        x, y = batches.get(i)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        if local is not None:
            # What a LocalUpdates step waits for: blocking rounds, merges whose round is
            # still in flight, and the merges themselves (rank 0's, in its records).
            t1 = time.perf_counter()
            local.step()
            exposed += time.perf_counter() - t1
        loss_sum, loss_n = loss_sum + loss.item(), loss_n + 1
        recent.append(time.perf_counter() - t0)
        wall += recent[-1]
        if step < 15 and rank == 0 and os.environ.get("PEER_SHOW_BUCKETS"):
            # DDP rebuilds its buckets after the first step: from then on they are the ones that run.
            print(json.dumps({"step_done": step, "bucket_sizes": ddp._get_ddp_logging_data().get("bucket_sizes")}),
                  flush=True)
        if local is not None:
            sent, received = local.bytes_sent, local.bytes_received
        elif diloco is not None:
            sent = received = diloco.sent
        elif postlocal is not None:
            sent, received = sent + postlocal.step_bytes(step), received + postlocal.step_bytes(step)
        elif a.method == "isolated":
            pass
        elif a.method.startswith("gradcomp:"):
            last = state.last_step()
            sent, received = sent + last["bytes_sent"], received + last["bytes_received"]
        else:
            b = torch_bytes(a.method, model, step)
            sent, received = sent + b, received + b
        # The cap: rank 0's clock decides for all, every few steps, outside the timed step.
        capped = False
        if a.cap_seconds and (step + 1) % cap_check == 0:
            flag = torch.tensor([1 if wall >= a.cap_seconds else 0])
            dist.broadcast(flag, 0)
            capped = bool(flag.item())
        # Evaluate every `eval_every` steps (at each epoch's end without it), at the end and at the cap.
        due = step + 1 == steps or (every and (step + 1) % every == 0) or \
            (not every and i + 1 == batches.per_epoch) or capped
        if not due:
            continue
        if wire_mark is not None:
            wire += wire_sent() - wire_mark
        totals = torch.tensor([sent, received, wire], dtype=torch.float64)
        dist.all_reduce(totals)
        replicas_differ = local is not None or diloco is not None or postlocal is not None or \
            a.method == "isolated"
        evaluated = averaged(model, world) if replicas_differ else model
        # Only rank 0's metric is recorded and decides (below): the others wait rather
        # than share the cores with it.
        metric = evaluate(evaluated, cfg, task) if rank == 0 else {}
        if rank == 0:
            rec = {"epoch": epoch, "steps": step + 1, "train_loss": loss_sum / loss_n, **metric,
                   "bytes_sent": int(totals[0]), "bytes_received": int(totals[1]),
                   "wall_seconds": wall, "predicted_wall_seconds": {}}
            if capped:
                rec["capped_at_seconds"] = a.cap_seconds
                rec["step_seconds"] = [round(x, 6) for x in recent]
            if wire_mark is not None:
                rec["wire_bytes_sent"] = int(totals[2])
            if diloco is not None and diloco.fp8_sent is not None:
                # Every rank allreduces the same tensors: the workers' sum is world × rank 0's.
                rec["fp8_bytes_sent"] = diloco.fp8_sent * world
            if local is not None:
                rec["exposed_round_seconds"] = exposed
            if free is not None:
                rec["free_step_seconds"] = round(free, 6)
            evals.write(json.dumps(rec) + "\n")
            evals.flush()
            print(json.dumps({"steps": step + 1, **{k: round(v, 4) for k, v in metric.items()},
                              "seconds": round(wall, 2)}), flush=True)
        loss_sum, loss_n = 0.0, 0
        # Rank 0's evaluation (the one recorded) decides for every rank. The
        # replicas' parameters agree, but BatchNorm's running statistics do
        # not: DDP broadcasts them before each forward pass, which then updates
        # them with each rank's own batch. Deciding on each rank's own metric
        # let ResNet-18's ranks disagree at a target's edge (69.6% against
        # 70%): some stopped at the final barrier while the others trained on,
        # and the run hung.
        done = (target is not None and metric.get("test_accuracy", 0.0) >= target) or \
            (target_ppl is not None and metric.get("test_perplexity", math.inf) <= target_ppl)
        stop = torch.tensor([1 if done else 0])
        dist.broadcast(stop, 0)
        wire_mark = wire_sent() if wire_mark is not None else None
        if stop.item() or capped:
            break
    if local is not None:
        local.close()
    if diloco is not None:
        diloco.__exit__(None, None, None)
    dist.barrier()
    sys.stdout.flush()
    # gloo can abort at interpreter exit after DDP; leave once everyone is done.
    os._exit(0)


if __name__ == "__main__":
    main()
