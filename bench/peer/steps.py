"""Steps to the target against DDP's, from bench/peer/steps.sh's runs (issue #68).

    python3 bench/peer/steps.py OUT [OUT...]

For each model, plan and seed: the steps to the target of
experiments/tta-MODEL.toml, interpolated linearly in the metric between the
last evaluation short of it and the first that meets it (table.py's
`interpolated_steps`), and the bytes every worker sent until then (summed over
the workers, interpolated alike); then each plan's ratios to DDP's run of the
same seed, their median over the seeds with the range. The issue's target:
median steps ≤ 1.15 × DDP's with at most 1/10 of DDP's bytes.
"""
import collections
import os
import statistics
import sys

import table


def at_target(run, goal):
    """(steps, bytes sent by all workers) where the run met the target,
    interpolated between evaluations as table.py interpolates steps; None
    when it never did."""
    steps = table.interpolated_steps(run, goal)
    if steps is None:
        return None
    rows = [r for r in run["rows"] if goal.metric in r]
    after = next(r for r in rows if r["steps"] >= steps)
    before = [r for r in rows if r["steps"] < steps]
    if not before:
        return steps, float(after["bytes_sent"])
    b = before[-1]
    f = (steps - b["steps"]) / (after["steps"] - b["steps"])
    return steps, b["bytes_sent"] + f * (after["bytes_sent"] - b["bytes_sent"])


def own_model(run):
    """table.py's names read `peer-ptb-gpt-local-h16-…` as the model `ptb-gpt-local`; a
    model without a config of its own (`ptb-lstm-local` has one) is the shorter one, and
    `local-` begins the plan."""
    path = os.path.join(table.HERE, "..", "..", "experiments", f"tta-{run['model']}.toml")
    if run["model"].endswith("-local") and not os.path.isfile(path):
        return {**run, "model": run["model"][:-len("-local")], "method": "local-" + run["method"]}
    return run


def rows_of(runs):
    """{model: {plan: {seed: (steps, bytes) or None}}}."""
    got = collections.defaultdict(lambda: collections.defaultdict(dict))
    for run in runs:
        got[run["model"]][run["method"]][run["seed"]] = at_target(run, table.Goal(run["model"]))
    return got


def spread(values, digits=2):
    if not values:
        return "—"
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}–{max(values):.{digits}f}]"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    runs = [own_model(r) for root in sys.argv[1:] for r in table.load(root)]
    for model, plans in sorted(rows_of(runs).items()):
        goal = table.Goal(model)
        ddp = plans.get("ddp", {})
        print(f"## {model}: steps to {goal.label} (4 ranks, unshaped)")
        print("| plan | seeds | steps (each seed) | ÷ DDP's steps | ÷ DDP's bytes |")
        print("|---|---:|---|---:|---:|")
        for plan, seeds in sorted(plans.items(), key=lambda kv: (kv[0] != "ddp", kv[0])):
            each = ", ".join(f"s{s}: {v[0]:.0f}" if v else f"s{s}: not met" for s, v in sorted(seeds.items()))
            steps = [v[0] / ddp[s][0] for s, v in seeds.items() if v and ddp.get(s)]
            sent = [v[1] / ddp[s][1] for s, v in seeds.items() if v and ddp.get(s)]
            print(f"| {plan} | {len(seeds)} | {each} | {spread(steps)} | {spread(sent, 3)} |")
        print()


if __name__ == "__main__":
    main()
