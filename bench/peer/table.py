"""The head-to-head tables from the matrix's run directories (or their evals.jsonl).

    python3 bench/peer/table.py runs/peer        (or docs/bench/peer)

For each model and link: every run's time to its target (the measured
wall-clock of training, evaluation excluded, at the first evaluation that meets
the target of experiments/tta-MODEL.toml: `train.target_accuracy` or
`train.target_perplexity`), steps, seconds per step, bytes a worker sends per
step, and the metric there; then gradcomp's best path (the burn trainer or a
gradcomp hook in DDP) against PyTorch DDP's best built-in method (its allreduce
or its own hooks). A summary of every model and link closes the output.
Run names: `tta-MODEL-METHOD-RATE` (gradcomp's trainer), `peer-MODEL-METHOD-RATE`
(PyTorch DDP; METHOD `gradcomp-…` for gradcomp's hooks).
"""
import json
import os
import re
import sys
import tomllib

WORKERS = 4
RATES = ("100mbit", "1gbit", "none")
HERE = os.path.dirname(os.path.abspath(__file__))


class Goal:
    """What a model races to, from its time-to-accuracy config: a test accuracy
    reached from below, or a test perplexity reached from above."""

    def __init__(self, model):
        path = os.path.join(HERE, "..", "..", "experiments", f"tta-{model}.toml")
        with open(path, "rb") as f:
            train = tomllib.load(f)["train"]
        self.lower = "target_perplexity" in train
        if self.lower:
            self.metric, self.name, self.value = "test_perplexity", "perplexity", train["target_perplexity"]
            self.label = f"perplexity ≤ {self.value:g}"
        else:
            self.metric, self.name, self.value = "test_accuracy", "accuracy", train["target_accuracy"]
            self.label = f"{self.value:.0%}"

    def met(self, x):
        return x <= self.value if self.lower else x >= self.value

    def best(self, seen):
        return min(seen) if self.lower else max(seen)

    def show(self, v):
        return f"{v:.1f}" if self.lower else f"{v:.4f}"


def load(root):
    runs = []
    for entry in sorted(os.listdir(root)):
        path = os.path.join(root, entry)
        evals = os.path.join(path, "evals.jsonl") if os.path.isdir(path) else path
        m = re.match(r"(tta|peer)-([a-z0-9]+-[a-z0-9]+)-(.+)-(100mbit|1gbit|none)(\.evals\.jsonl)?$", entry)
        if not m or not os.path.isfile(evals):
            continue
        kind, model, method, rate = m.group(1), m.group(2), m.group(3), m.group(4)
        rows = [json.loads(line) for line in open(evals) if line.strip()]
        runs.append({"kind": kind, "model": model, "method": method, "rate": rate, "rows": rows,
                     "name": entry.removesuffix(".evals.jsonl")})
    return runs


def framework(run):
    if run["kind"] == "tta":
        return "gradcomp (burn)"
    return "DDP + gradcomp hook" if run["method"].startswith("gradcomp-") else "PyTorch DDP"


def reached(run, goal):
    hit = [r for r in run["rows"] if goal.metric in r and goal.met(r[goal.metric])]
    return hit[0] if hit else None


def table(model, rate, rs, goal):
    """Prints one model and link's table; returns (gradcomp's best, PyTorch's best)."""
    print(f"\n**{model}, 4 workers, {rate}** (target {goal.label})\n")
    print(f"| framework | method | seconds to target | steps | ms per step | bytes per worker-step | {goal.name} |")
    print("|---|---|---:|---:|---:|---:|---:|")
    best = {}
    for r in sorted(rs, key=lambda r: (reached(r, goal) or {"wall_seconds": 1e9})["wall_seconds"]):
        e = reached(r, goal)
        fw = framework(r)
        if e is None:
            seen = [x[goal.metric] for x in r["rows"] if goal.metric in x]
            steps = r["rows"][-1]["steps"] if r["rows"] else 0
            print(f"| {fw} | {r['method']} | not reached | {steps} | | | "
                  f"best {goal.show(goal.best(seen)) if seen else 'none'} |")
            continue
        per_step = e["bytes_sent"] / e["steps"] / WORKERS
        print(f"| {fw} | {r['method']} | {e['wall_seconds']:.1f} | {e['steps']} | "
              f"{1e3 * e['wall_seconds'] / e['steps']:.0f} | {per_step:,.0f} | {goal.show(e[goal.metric])} |")
        side = "torch" if fw == "PyTorch DDP" else "gradcomp"
        if side not in best or e["wall_seconds"] < best[side][2]:
            best[side] = (fw, r["method"], e["wall_seconds"])
    g, t = best.get("gradcomp"), best.get("torch")
    if g and t:
        print(f"\ngradcomp's best, {g[1]} ({g[0]}): {g[2]:.1f} s; PyTorch DDP's best, {t[1]}: {t[2]:.1f} s; "
              f"ratio {t[2] / g[2]:.2f}× ({'gradcomp sooner' if g[2] < t[2] else 'PyTorch sooner'}).")
    return g, t


def main():
    runs = load(sys.argv[1] if len(sys.argv) > 1 else "runs/peer")
    summary = []
    for model in sorted({r["model"] for r in runs}):
        goal = Goal(model)
        for rate in RATES:
            rs = [r for r in runs if r["model"] == model and r["rate"] == rate]
            if rs:
                summary.append((model, rate) + table(model, rate, rs, goal))
    print("\n**Summary: time to target, gradcomp's best path against PyTorch DDP's best built-in method**\n")
    print("| model | link | gradcomp's best | s | PyTorch's best | s | PyTorch's time / gradcomp's |")
    print("|---|---|---|---:|---|---:|---:|")
    for model, rate, g, t in summary:
        gs = f"{g[1]} ({'hook' if g[0] == 'DDP + gradcomp hook' else 'burn'}) | {g[2]:.1f}" if g else "none reached |"
        ts = f"{t[1]} | {t[2]:.1f}" if t else "none reached |"
        ratio = f"{t[2] / g[2]:.2f}" if g and t else ""
        print(f"| {model} | {rate} | {gs} | {ts} | {ratio} |")


if __name__ == "__main__":
    main()
