"""gradcomp's network model predicting PyTorch DDP's runs (issue #26, point 5).

    python bench/peer/predict.py BIN RECORDS [--config experiments/tta-mnist-lenet.toml]
        [--calibration docs/bench/calibration]

For each PyTorch run on a shaped link in RECORDS (`peer-MODEL-METHOD-RATE.evals.jsonl`, as
bench/peer/matrix.sh writes them) that has an unshaped twin (`…-none`), `BIN model
--peer-compute-ms C --peer-call …` prices its step on that link's calibration with gloo's
ring algorithms:

- C, the step without the wire: the unshaped run's measured ms per step (4 ranks sharing
  the machine's cores, as on the shaped links; it includes the loopback's own wire, a few
  ms on LeNet-5, so it errs high);
- the calls, one after another after the backward pass (one DDP bucket): what each method
  hands to gloo per step (`calls` below), from the model's parameter shapes.

It prints predicted against measured ms per step and seconds to the target.
"""
import argparse
import glob
import json
import math
import os
import subprocess
import sys
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import train  # noqa: E402  (torch_calls: what torch's hooks allreduce)

RATES = {"100mbit": 1e8, "1gbit": 1e9}


def calls(method, shapes, step, options):
    """The collective calls one worker makes in `step`, as (op, bytes)."""
    if method in ("none", "torch-fp16") or method.startswith("torch-powersgd-r"):
        return train.torch_calls(method, shapes, step)
    if method == "gradcomp-topk":
        # The non-finite agreement (4 bytes each), the size round, the messages.
        density = options.get("density", 0.01)
        k = sum(max(1, int(density * math.prod(s))) for s in shapes)
        return [("allgather", 4), ("allgather", 8), ("allgather", 16 * len(shapes) + 8 * k)]
    return None


def last(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return rows[-1] if rows else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bin")
    p.add_argument("records")
    p.add_argument("--config", default="experiments/tta-mnist-lenet.toml")
    p.add_argument("--calibration", default="docs/bench/calibration")
    a = p.parse_args()
    cfg = tomllib.load(open(a.config, "rb"))
    model, _ = models.build(cfg)
    shapes = [tuple(t.shape) for t in model.parameters()]
    name = cfg["name"].removeprefix("tta-")
    print("| method | link | steps | compute ms (unshaped) | predicted ms per step | measured | error | "
          "predicted s to target | measured s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for path in sorted(glob.glob(os.path.join(a.records, f"peer-{name}-*.evals.jsonl"))):
        stem = os.path.basename(path).removesuffix(".evals.jsonl").removeprefix(f"peer-{name}-")
        method, rate = stem.rsplit("-", 1)
        if rate not in RATES:
            continue
        twin = os.path.join(a.records, f"peer-{name}-{method}-none.evals.jsonl")
        shaped, unshaped = last(path), (last(twin) if os.path.exists(twin) else None)
        options = {"density": 0.01} if method == "gradcomp-topk" else {}
        if not shaped or not unshaped or calls(method, shapes, 10**9, options) is None:
            continue
        compute_ms = 1e3 * unshaped["wall_seconds"] / unshaped["steps"]
        steps = shaped["steps"]
        # Price the two kinds of step (PowerSGD's dense warm-up, then compressed) once each.
        kinds = {}
        for step in range(steps):
            key = tuple(calls(method, shapes, step, options))
            kinds[key] = kinds.get(key, 0) + 1
        total = 0.0
        for key, count in kinds.items():
            cal = os.path.abspath(os.path.join(a.calibration, f"n4-{rate}.json"))
            cmd = [a.bin, "model", "--config", a.config, "--set", f"network.links_bps=[{RATES[rate]}]",
                   "--set", f'network.calibration=["{cal}"]', "--set", "workers=4",
                   "--peer-compute-ms", str(compute_ms), "--json"]
            for op, b in key:
                cmd += ["--peer-call", f"{op}:{b}"]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"error: {' '.join(cmd)}\n{out.stderr}")
            total += count * json.loads(out.stdout.splitlines()[0])["step_seconds"]
        measured = shaped["wall_seconds"]
        print(f"| {method} | {rate} | {steps} | {compute_ms:.1f} | {1e3 * total / steps:.1f} | "
              f"{1e3 * measured / steps:.1f} | {100 * (total - measured) / measured:+.0f}% | {total:.1f} | "
              f"{measured:.1f} |")


if __name__ == "__main__":
    main()
