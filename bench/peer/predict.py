"""gradcomp's network model predicting the peer's runs (issues #26 point 5, #38 point 6).

    python bench/peer/predict.py BIN RECORDS --config experiments/tta-MODEL.toml
        [--calibration docs/bench/calibration-gloo]

For each PyTorch-peer run on a shaped link in RECORDS (`peer-MODEL-METHOD-RATE`,
a run directory or `….evals.jsonl`, as bench/peer/matrix.sh writes them) that
has an unshaped twin (`…-none`), gradcomp's model prices its steps on that
link's calibration (`BIN model --peer-compute-ms 0 --peer-call …` per
collective: gloo's ring algorithms on a curve measured with gloo,
bench/peer/calibrate-gloo.sh; the Open MPI curves of docs/bench/calibration
served before issue #38) and adds the step without the wire:

- C, the unshaped twin's measured seconds per step (4 ranks sharing the
  machine's cores, as on the shaped links; it includes the loopback's own wire
  and a local-update method's rounds there, so it errs high); a local-update
  run without its own twin takes its framework's (`unshaped_twin`);
- per-step methods (DDP's allreduce, torch's fp16 and PowerSGD hooks,
  gradcomp's Top-k hook): every step's calls one after another after the
  backward pass (no overlap with it);
- local updates, both frameworks: a round per fragment every H steps (P
  fragments: contiguous whole tensors of about equal size), exposed where it
  outlasts the τ inner steps it overlaps:
  step = C + Σ_fragments max(0, round − τ·C) / H.
  gradcomp's LocalUpdates (`gradcomp-local-…`): a dense change in one
  allreduce, a compressed one in an allgather of its messages (their bytes are
  the run's own, `bytes_sent`, shared among fragments by size) after an
  allgather of the sizes. torchft's DiLoCo (`torchft-diloco-…`): an allreduce
  per tensor of the fragment (torchft without bucketization). torch's
  post-local SGD (`torch-postlocal-…`): the warm-up's steps allreduce the
  gradients, then every H steps one allreduce of all parameters, blocking.

It prints predicted against measured seconds per step and to the end of the run,
and counts a prediction only where the priced wire is at least 5% of it: below
that the prediction is the twin's measured step (`summary`).
"""
import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import torch_local  # noqa: E402
import table  # noqa: E402  (parse_name: the runs' names)
import train  # noqa: E402  (torch_calls: what torch's hooks allreduce)

RATES = {"10mbit": 1e7, "100mbit": 1e8, "1gbit": 1e9}
# A prediction counts where the model priced at least this share of it (`summary`).
PRICED_SHARE = 0.05


class Wire:
    """Seconds of one collective call on a link, from `BIN model` (cached)."""

    def __init__(self, bin_, config, calibration):
        self.bin, self.config, self.calibration, self.cache = bin_, config, calibration, {}

    def __call__(self, rate, calls):
        key = (rate, tuple(calls))
        if key not in self.cache:
            cal = os.path.abspath(os.path.join(self.calibration, f"n4-{rate}.json"))
            cmd = [self.bin, "model", "--config", self.config, "--set", f"network.links_bps=[{RATES[rate]}]",
                   "--set", f'network.calibration=["{cal}"]', "--set", "workers=4",
                   "--peer-compute-ms", "0", "--json"]
            for op, b in calls:
                cmd += ["--peer-call", f"{op}:{int(b)}"]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"error: {' '.join(cmd)}\n{out.stderr}")
            self.cache[key] = json.loads(out.stdout.splitlines()[0])["wire_seconds"]
        return self.cache[key]


def per_step_calls(method, shapes, step, options):
    """The collective calls one worker makes in `step` with a per-step method, as (op, bytes)."""
    if method in ("none", "torch-fp16") or method.startswith("torch-powersgd-r"):
        return train.torch_calls(method, shapes, step)
    if method == "gradcomp-topk":
        # The non-finite agreement (4 bytes each), the size round, the messages.
        density = options.get("density", 0.01)
        k = sum(max(1, int(density * math.prod(s))) for s in shapes)
        return [("allgather", 4), ("allgather", 8), ("allgather", 16 * len(shapes) + 8 * k)]
    return None


def local_settings(method):
    """(kind, period, fragments, delay, compressor) of a local-update method, or None."""
    m = re.fullmatch(r"gradcomp-local-(?:sgd-)?h(\d+)(?:-p(\d+))?(?:-d(\d+))?(?:-([a-z0-9]+))?", method)
    if m:
        return "gradcomp", int(m.group(1)), int(m.group(2) or 1), int(m.group(3) or 0), m.group(4) or "dense"
    parsed = torch_local.parse(method)
    if parsed and parsed[0] == "torchft":
        s = parsed[1]
        return "torchft", s["period"], s["fragments"], s["delay"], "dense"
    if parsed:
        return "postlocal", parsed[1]["period"], 1, 0, parsed[1]["warmup"]
    return None


def predict_local(wire, rate, settings, sizes, compute, steps, bytes_per_worker):
    """Predicted seconds of `steps` inner steps of a local-update run."""
    kind, period, parts, delay, extra = settings
    total = sum(sizes)
    if kind == "postlocal":
        warmup = extra
        grads = wire(rate, [("allreduce", 4 * total)])
        averages = sum(1 for s in range(warmup, steps) if (s - warmup) % period == 0)
        return steps * compute + min(warmup, steps) * grads + averages * grads
    rounds = steps / period
    exposed = 0.0
    for group in torch_local.partition(sizes, parts):
        values = sum(sizes[i] for i in group)
        if kind == "torchft":
            seconds = sum(wire(rate, [("allreduce", 4 * sizes[i])]) for i in group)
        elif extra == "dense":
            seconds = wire(rate, [("allreduce", 4 * values)])
        else:
            message = bytes_per_worker / max(rounds, 1e-9) * values / total
            seconds = wire(rate, [("allgather", 8), ("allgather", message)])
        exposed += max(0.0, seconds - delay * compute)
    return steps * compute + rounds * exposed


def unshaped_twin(records, name, method, seed=1):
    """The unshaped run whose step stands for `method`'s compute: its own (the
    same seed first), else (local updates) one of the same framework's
    local-update runs (gradcomp's LocalUpdates with another τ; torchft's DiLoCo
    for torch's post-local SGD: both are an inner step of the same model with no
    per-step exchange)."""
    kin = [method]
    if method.startswith("gradcomp-local-"):
        kin.append("gradcomp-local-*")
    elif method.startswith(("torchft-diloco-", "torch-postlocal-")):
        kin += ["torchft-diloco-*", "torch-postlocal-*"]
    suffixes = ([f"-s{seed}"] if seed != 1 else []) + ["", "-s*"]
    for k in kin:
        for suffix in suffixes:
            found = sorted(glob.glob(os.path.join(records, f"peer-{name}-{k}-none{suffix}"))) + \
                sorted(glob.glob(os.path.join(records, f"peer-{name}-{k}-none{suffix}.evals.jsonl")))
            if found:
                return found[0]
    return None


def last(path):
    path = os.path.join(path, "evals.jsonl") if os.path.isdir(path) else path
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return rows[-1] if rows else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bin")
    p.add_argument("records")
    p.add_argument("--config", default="experiments/tta-mnist-lenet.toml")
    p.add_argument("--calibration", default="docs/bench/calibration-gloo")
    a = p.parse_args()
    cfg = tomllib.load(open(a.config, "rb"))
    model, _ = models.build(cfg)
    shapes = [tuple(t.shape) for t in model.parameters()]
    sizes = [math.prod(s) for s in shapes]
    name = cfg["name"].removeprefix("tta-")
    wire = Wire(a.bin, a.config, a.calibration)
    print("| method | link | steps | compute ms (unshaped) | predicted ms per step | measured | error | "
          "predicted s | measured s | priced share |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    errors = []
    for path in sorted(glob.glob(os.path.join(a.records, f"peer-{name}-*"))):
        run = table.parse_name(os.path.basename(path))
        if not run or run["model"] != name or run["rate"] not in RATES:
            continue
        method, rate, seed = run["method"], run["rate"], run["seed"]
        twin = unshaped_twin(a.records, name, method, seed)
        shaped, unshaped = last(path), (last(twin) if twin else None)
        if not shaped or not unshaped:
            continue
        compute = unshaped["wall_seconds"] / unshaped["steps"]
        steps = shaped["steps"]
        settings = local_settings(method)
        if settings:
            total = predict_local(wire, rate, settings, sizes, compute, steps, shaped["bytes_sent"] / 4)
        else:
            options = {"density": 0.01} if method == "gradcomp-topk" else {}
            if per_step_calls(method, shapes, 10**9, options) is None:
                continue
            total = sum(compute + wire(rate, per_step_calls(method, shapes, s, options)) for s in range(steps))
        measured = shaped["wall_seconds"]
        err = (total - measured) / measured
        priced = (total - steps * compute) / total
        counted = priced >= PRICED_SHARE
        errors.append((method, rate, err, counted))
        label = method if seed == 1 else f"{method} (seed {seed})"
        print(f"| {label} | {rate} | {steps} | {1e3 * compute:.1f} | {1e3 * total / steps:.1f} | "
              f"{1e3 * measured / steps:.1f} | {100 * err:+.0f}% | {total:.1f} | {measured:.1f} | "
              f"{100 * priced:.0f}%{'' if counted else ' (not counted)'} |")
    print(summary(errors))


def summary(errors):
    """The count of predictions within 15%, over the runs where the model priced
    something it did not measure: the priced wire at least PRICED_SHARE of the
    prediction. Below it the prediction is the unshaped twin's measured step
    (a local-update run whose rounds hide behind its steps), and its error the
    twin's, not the model's (issue #51)."""
    counted = [e for e in errors if e[3]]
    if not counted:
        return f"\nno run's prediction priced at least {PRICED_SHARE:.0%} of it ({len(errors)} runs)."
    worst = max(counted, key=lambda e: abs(e[2]))
    within = sum(1 for e in counted if abs(e[2]) <= 0.15)
    return (f"\n{within} of {len(counted)} predictions within 15% (runs whose priced wire is at least "
            f"{PRICED_SHARE:.0%} of the prediction; {len(errors) - len(counted)} more are their twin's measured "
            f"step, not counted); the largest error {100 * worst[2]:+.0f}% ({worst[0]}, {worst[1]}).")


if __name__ == "__main__":
    main()
