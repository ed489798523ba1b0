"""The #68 sitting's table (bench/peer/sitting-68.sh's rules): the LSTM at 100 Mbit/s.

    python3 bench/peer/sitting.py SITTING STEPS

SITTING holds the sitting's records (`peer-ptb-lstm-local-METHOD-100mbit[-sSEED]` and
the `isolated` run), STEPS bench/peer/steps.sh's (DDP's unshaped runs). For each seed
and plan: the time to the target (table.py's: the training wall-clock at the first
evaluation that meets it), the steps to it (interpolated), the bytes a worker sent a
step until then, and the time over the seed's bound: the fewest steps of any run of
that seed (the sitting's, and DDP's unshaped: its steps do not depend on the link) ×
the sitting's communication-free step (its `isolated` run, table.py's reading). The
medians over the seeds close each plan's row.
"""
import statistics
import sys

import table

MODEL, RATE = "ptb-lstm-local", "100mbit"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sitting, steps = table.load(sys.argv[1]), table.load(sys.argv[2])
    goal = table.Goal(MODEL)
    free = table.free_step([r for r in sitting if r["method"] == "isolated"], MODEL)
    if free is None:
        sys.exit("error: no isolated run in the sitting")
    runs = [r for r in sitting if r["model"] == MODEL and r["rate"] == RATE]
    ddp = {r["seed"]: table.interpolated_steps(r, goal) for r in steps
           if r["model"] == MODEL and r["method"] == "ddp" and r["rate"] == "none"}
    seeds = sorted({r["seed"] for r in runs})
    bound = {}
    for seed in seeds:
        counted = [table.interpolated_steps(r, goal) for r in runs if r["seed"] == seed] + [ddp.get(seed)]
        counted = [s for s in counted if s is not None]
        bound[seed] = min(counted) * free[0] if counted else None
    print(f"free step {free[0]:.4f} s ({free[1]}); bound per seed: "
          + ", ".join(f"s{s}: {b:.1f} s" for s, b in bound.items() if b))
    print("| plan | seed | time to target (s) | steps | bytes a worker-step | ÷ bound |")
    print("|---|---:|---:|---:|---:|---:|")
    for method in sorted({r["method"] for r in runs}):
        ratios, times = [], []
        for r in sorted((r for r in runs if r["method"] == method), key=lambda r: r["seed"]):
            hit = table.reached(r, goal)
            steps_at = table.interpolated_steps(r, goal)
            if hit is None:
                print(f"| {method} | {r['seed']} | not met in {r['rows'][-1]['wall_seconds']:.0f} | — | — | — |")
                continue
            per_step = hit["bytes_sent"] / hit["steps"]
            ratio = hit["wall_seconds"] / bound[r["seed"]]
            ratios.append(ratio)
            times.append(hit["wall_seconds"])
            print(f"| {method} | {r['seed']} | {hit['wall_seconds']:.1f} | {steps_at:.0f} | {per_step / 1e6:.2f} MB | {ratio:.2f} |")
        if times:
            print(f"| **{method}** | median | {statistics.median(times):.1f} | | | {statistics.median(ratios):.2f} |")


if __name__ == "__main__":
    main()
