"""The head-to-head table from the matrix's run directories (or their evals.jsonl).

    python3 bench/peer/table.py runs/peer        (or docs/bench/peer)

For each model and link: every run's time to its target accuracy (the measured
wall-clock of training, evaluation excluded, at the first evaluation at or above
the target), steps, seconds per step, bytes a worker sends per step, and the
accuracy there; then gradcomp's best path (the burn trainer or a gradcomp hook in
DDP) against PyTorch DDP's best built-in method (its allreduce or its own hooks).
Run names: `tta-MODEL-METHOD-RATE` (gradcomp's trainer), `peer-MODEL-METHOD-RATE`
(PyTorch DDP; METHOD `gradcomp-…` for gradcomp's hooks).
"""
import json
import os
import re
import sys

TARGET = {"mnist-lenet": 0.97}
WORKERS = 4


def load(root):
    runs = []
    for entry in sorted(os.listdir(root)):
        path = os.path.join(root, entry)
        evals = os.path.join(path, "evals.jsonl") if os.path.isdir(path) else path
        m = re.match(r"(tta|peer)-(mnist-lenet)-(.+)-(100mbit|1gbit|none)(\.evals\.jsonl)?$", entry)
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


def reached(run):
    target = TARGET[run["model"]]
    hit = [r for r in run["rows"] if r.get("test_accuracy", 0) >= target]
    return hit[0] if hit else None


def main():
    runs = load(sys.argv[1] if len(sys.argv) > 1 else "runs/peer")
    for model in sorted({r["model"] for r in runs}):
        for rate in ("100mbit", "1gbit", "none"):
            rs = [r for r in runs if r["model"] == model and r["rate"] == rate]
            if not rs:
                continue
            print(f"\n**{model}, 4 workers, {rate}** (target {TARGET[model]:.0%})\n")
            print("| framework | method | seconds to target | steps | ms per step | bytes per worker-step | accuracy |")
            print("|---|---|---:|---:|---:|---:|---:|")
            best = {}
            for r in sorted(rs, key=lambda r: (reached(r) or {"wall_seconds": 1e9})["wall_seconds"]):
                e = reached(r)
                fw = framework(r)
                if e is None:
                    last = r["rows"][-1] if r["rows"] else {"steps": 0, "test_accuracy": 0}
                    print(f"| {fw} | {r['method']} | not reached | {last['steps']} | | | best {max(x['test_accuracy'] for x in r['rows']) if r['rows'] else 0:.4f} |")
                    continue
                per_step = e["bytes_sent"] / e["steps"] / WORKERS
                print(f"| {fw} | {r['method']} | {e['wall_seconds']:.1f} | {e['steps']} | "
                      f"{1e3 * e['wall_seconds'] / e['steps']:.0f} | {per_step:,.0f} | {e['test_accuracy']:.4f} |")
                side = "torch" if fw == "PyTorch DDP" else "gradcomp"
                if side not in best or e["wall_seconds"] < best[side][1]:
                    best[side] = (r["method"] + " (" + fw + ")", e["wall_seconds"])
            if len(best) == 2:
                g, t = best["gradcomp"], best["torch"]
                print(f"\ngradcomp's best, {g[0]}: {g[1]:.1f} s; PyTorch DDP's best, {t[0]}: {t[1]:.1f} s; "
                      f"ratio {t[1] / g[1]:.2f}× ({'gradcomp sooner' if g[1] < t[1] else 'PyTorch sooner'}).")


if __name__ == "__main__":
    main()
