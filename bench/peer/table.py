"""The head-to-head tables from the matrix's run directories (or their evals.jsonl).

    python3 bench/peer/table.py runs/peer [--svg FIGURE]   (or docs/bench/peer, docs/bench/race-38)

For each model and link: every method's time to its target (the measured
wall-clock of training, evaluation excluded, at the first evaluation that meets
the target of experiments/tta-MODEL.toml: `train.target_accuracy` or
`train.target_perplexity`), as the median over its seeds with their range,
steps, seconds per step, bytes a worker sends per step, and the metric there;
then gradcomp's best path (the burn trainer, a gradcomp hook in DDP or
gradcomp's LocalUpdates) against PyTorch's best (DDP's allreduce, its own hooks,
post-local SGD, torchft's DiLoCo). A summary of every model and link closes the
output, with the model's compute-bound time beside each cell.

- **Not reached**: a run that ended (its epochs, or the cap of bench/peer/matrix.sh,
  `capped_at_seconds`) short of the target. Its projection: its seconds so far
  plus the steps it still needed (the steps the same method and seed needed on
  another link: a method's curve is the same on every link, the link changes
  the time, not the arithmetic) at its last seconds per step (train.py's
  `recent_seconds_per_step` at the cap, else between its last two evaluations,
  so a warm-up's dense steps stay out; its mean with one evaluation); without a
  run that reached the target, none.
- **The compute-bound time** of a model: the fastest method's steps to target
  times its unshaped step time, i.e. the least unshaped time to target (median
  over seeds) of any method, either framework.

Run names: `tta-MODEL-METHOD-RATE[-sN]` (gradcomp's trainer),
`peer-MODEL-METHOD-RATE[-sN]` (the PyTorch peer; METHOD `gradcomp-…` for
gradcomp's hooks and LocalUpdates); N is the seed, 1 without the suffix.
"""
import json
import os
import re
import statistics
import sys
import tomllib

WORKERS = 4
RATES = ("10mbit", "100mbit", "1gbit", "none")
HERE = os.path.dirname(os.path.abspath(__file__))
NAME = re.compile(r"(tta|peer)-([a-z0-9]+-[a-z0-9]+(?:-local)?)-(.+)-(10mbit|100mbit|1gbit|none)"
                  r"(?:-s(\d+))?(\.evals\.jsonl)?$")


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
        run = parse_name(entry)
        if not run or not os.path.isfile(evals):
            continue
        rows = [json.loads(line) for line in open(evals) if line.strip()]
        if rows:
            runs.append({**run, "rows": rows})
    return runs


def parse_name(entry):
    """A run's name (a run directory or NAME.evals.jsonl), as matrix.sh and
    scripts/time-to-accuracy.sh write it: `peer|tta-MODEL-METHOD-RATE[-sSEED]`;
    None for anything else (logs, configs)."""
    m = NAME.match(entry)
    if not m:
        return None
    return {"kind": m.group(1), "model": m.group(2), "method": m.group(3), "rate": m.group(4),
            "seed": int(m.group(5) or 1), "name": entry.removesuffix(".evals.jsonl")}


def framework(run):
    if run["kind"] == "tta":
        return "gradcomp (burn)"
    if run["method"].startswith("gradcomp-local-"):
        return "gradcomp LocalUpdates"
    return "DDP + gradcomp hook" if run["method"].startswith("gradcomp-") else "PyTorch"


def side(run):
    return "torch" if framework(run) == "PyTorch" else "gradcomp"


def reached(run, goal):
    hit = [r for r in run["rows"] if goal.metric in r and goal.met(r[goal.metric])]
    return hit[0] if hit else None


def steps_to_target(runs, run, goal):
    """The steps the same method and seed needed on any link, or None."""
    for r in runs:
        if (r["model"], r["kind"], r["method"], r["seed"]) == (run["model"], run["kind"], run["method"], run["seed"]):
            e = reached(r, goal)
            if e:
                return e["steps"]
    return None


def outcome(runs, run, goal):
    """(seconds to target or None, steps, seconds per step, projection or None, last row)."""
    e = reached(run, goal)
    last = run["rows"][-1]
    if e:
        return e["wall_seconds"], e["steps"], e["wall_seconds"] / e["steps"], None, e
    per_step = last["wall_seconds"] / last["steps"]
    needed = steps_to_target(runs, run, goal)
    if not needed:
        return None, last["steps"], per_step, None, last
    # From the run's own curve: its last seconds per step (between its last two
    # evaluations; a warm-up's dense steps stay out of it), over the steps left.
    rate = per_step
    if "recent_seconds_per_step" in last:
        rate = last["recent_seconds_per_step"]
    elif len(run["rows"]) >= 2:
        prev = run["rows"][-2]
        rate = (last["wall_seconds"] - prev["wall_seconds"]) / max(1, last["steps"] - prev["steps"])
    return None, last["steps"], per_step, last["wall_seconds"] + max(0, needed - last["steps"]) * rate, last


def summarize(runs, group, goal):
    """One method in one cell over its seeds: the median time (projections stand in
    for capped seeds, marked), its range, and the per-step figures of the median seed."""
    outs = [outcome(runs, r, goal) for r in group]
    times = [o[0] if o[0] is not None else o[3] for o in outs]
    if any(t is None for t in times):
        times = None
    some_projected = any(o[0] is None for o in outs)
    med = statistics.median(times) if times else None
    return {"method": group[0]["method"], "framework": framework(group[0]), "side": side(group[0]),
            "seeds": len(group), "median": med, "range": (min(times), max(times)) if times else None,
            "projected": some_projected, "outs": outs,
            "reached": all(o[0] is not None for o in outs)}


def cell_methods(runs, model, rate, goal):
    groups = {}
    for r in runs:
        if r["model"] == model and r["rate"] == rate:
            groups.setdefault((r["kind"], r["method"]), []).append(r)
    return [summarize(runs, sorted(g, key=lambda r: r["seed"]), goal) for g in groups.values()]


def fmt_time(s):
    if s["median"] is None:
        return "not reached"
    t = f"{s['median']:.1f}"
    if s["projected"]:
        t = f"not reached (projected {t})" if not any(o[0] for o in s["outs"]) else f"{t}*"
    if s["seeds"] > 1:
        t += f" [{s['range'][0]:.1f}–{s['range'][1]:.1f}]"
    return t


def table(runs, model, rate, goal):
    """Prints one model and link's table; returns (gradcomp's best, PyTorch's best), each a summary or None."""
    methods = cell_methods(runs, model, rate, goal)
    print(f"\n**{model}, 4 workers, {rate}** (target {goal.label})\n")
    print(f"| framework | method | seeds | seconds to target (median [range]) | steps | ms per step | "
          f"bytes per worker-step | {goal.name} |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for s in sorted(methods, key=lambda s: (not s["reached"], s["median"] if s["median"] is not None else 1e18)):
        t, steps, per_step, _, row = s["outs"][len(s["outs"]) // 2]
        capped = " (capped)" if "capped_at_seconds" in row and t is None else ""
        metric = row.get(goal.metric)
        print(f"| {s['framework']} | {s['method']} | {s['seeds']} | {fmt_time(s)}{capped} | {steps} | "
              f"{1e3 * per_step:,.0f} | {row['bytes_sent'] / row['steps'] / WORKERS:,.0f} | "
              f"{goal.show(metric) if metric is not None else ''} |")
    best = {}
    for s in methods:
        if s["reached"] and (s["side"] not in best or s["median"] < best[s["side"]]["median"]):
            best[s["side"]] = s
    g, t = best.get("gradcomp"), best.get("torch")
    if g and t:
        print(f"\ngradcomp's best, {g['method']} ({g['framework']}): {g['median']:.1f} s; PyTorch's best, "
              f"{t['method']}: {t['median']:.1f} s; ratio {t['median'] / g['median']:.2f}× "
              f"({'gradcomp sooner' if g['median'] < t['median'] else 'PyTorch sooner'}).")
    # Where a side reached nothing, its best projection stands in (marked in the summary).
    for name in ("gradcomp", "torch"):
        if name not in best:
            proj = [s for s in methods if s["side"] == name and s["median"] is not None]
            if proj:
                best[name] = min(proj, key=lambda s: s["median"])
    return best.get("gradcomp"), best.get("torch")


def compute_bound(runs, model, goal):
    """(seconds, method) of the least unshaped median time to target, or None."""
    reached_ = [s for s in cell_methods(runs, model, "none", goal) if s["reached"]]
    if not reached_:
        return None
    s = min(reached_, key=lambda s: s["median"])
    return s["median"], s["method"]


def targets(rate, ratio, g_over_limit):
    """Whether a cell meets issue #38's targets: at 10 (100) Mbit/s gradcomp's best
    ≥ 3× (1.5×) sooner than PyTorch's and within 1.15× of the compute-bound time;
    at 1 Gbit/s and unshaped PyTorch's best no more than 1.05× sooner."""
    if ratio is None:
        return ""
    if rate in ("10mbit", "100mbit"):
        need = 3.0 if rate == "10mbit" else 1.5
        ok = ratio >= need and g_over_limit is not None and g_over_limit <= 1.15
        return "met" if ok else "missed"
    return "met" if ratio >= 1 / 1.05 else "missed"


def svg(summary):
    """The summary as a figure: per model and link, gradcomp's best and PyTorch's
    best as bars (seconds to target, hatched where projected), the compute-bound
    time as a tick."""
    rows = [(m, r, lim, g, t) for m, r, lim, g, t in summary if g or t]
    top = max([s["median"] for *_, g, t in rows for s in (g, t) if s and s["median"]] + [1.0])
    left, bar, gap, width = 190, 11, 10, 460
    h = 40 + len(rows) * (2 * bar + gap) + 30
    x = lambda v: left + width * v / top  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 80}" height="{h}" '
           'font-family="sans-serif" font-size="11">',
           '<defs><pattern id="proj" width="6" height="6" patternUnits="userSpaceOnUse" '
           'patternTransform="rotate(45)"><rect width="3" height="6" fill="#999"/></pattern></defs>',
           f'<text x="{left}" y="14">seconds to target: gradcomp&#8217;s best (blue), PyTorch&#8217;s best '
           '(orange), hatched: projected; black tick: compute-bound</text>']
    y = 30
    for model, rate, lim, g, t in rows:
        out.append(f'<text x="{left - 6}" y="{y + bar + 4}" text-anchor="end">{model}, {rate}</text>')
        for i, (s, colour) in enumerate(((g, "#3b6fb6"), (t, "#e07b39"))):
            if not s or not s["median"]:
                continue
            fill = "url(#proj)" if not s["reached"] else colour
            out.append(f'<rect x="{left}" y="{y + i * bar}" width="{x(s["median"]) - left:.1f}" height="{bar - 1}" '
                       f'fill="{fill}" stroke="{colour}"/>')
            out.append(f'<text x="{x(s["median"]) + 3:.1f}" y="{y + i * bar + bar - 2}">{s["median"]:.0f}</text>')
        if lim:
            out.append(f'<line x1="{x(lim[0]):.1f}" x2="{x(lim[0]):.1f}" y1="{y - 2}" y2="{y + 2 * bar + 1}" '
                       'stroke="black" stroke-width="2"/>')
        y += 2 * bar + gap
    out.append(f'<line x1="{left}" x2="{left + width}" y1="{y}" y2="{y}" stroke="#444"/>')
    for k in range(6):
        v = top * k / 5
        out.append(f'<text x="{x(v):.1f}" y="{y + 14}" text-anchor="middle">{v:.0f}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    args = sys.argv[1:]
    figure = None
    if "--svg" in args:
        i = args.index("--svg")
        figure = args[i + 1]
        del args[i:i + 2]
    runs = load(args[0] if args else "runs/peer")
    summary = []
    for model in sorted({r["model"] for r in runs}):
        goal = Goal(model)
        limit = compute_bound(runs, model, goal)
        for rate in RATES:
            if any(r["model"] == model and r["rate"] == rate for r in runs):
                summary.append((model, rate, limit) + table(runs, model, rate, goal))
    print("\n**Summary: time to target, gradcomp's best path against PyTorch's best, and the compute-bound "
          "time** (seconds, median over seeds [range]; * a capped seed's projection counted; "
          "'projected': nothing reached the target)\n")
    print("| model | link | gradcomp's best | s | PyTorch's best | s | PyTorch / gradcomp | "
          "compute-bound s | gradcomp / bound | PyTorch / bound | targets |")
    print("|---|---|---|---:|---|---:|---:|---:|---:|---:|---|")
    for model, rate, limit, g, t in summary:
        def cell(s):
            if not s:
                return "none | "
            where = {"gradcomp (burn)": "burn", "DDP + gradcomp hook": "hook",
                     "gradcomp LocalUpdates": "LocalUpdates", "PyTorch": ""}[s["framework"]]
            return f"{s['method']}{f' ({where})' if where else ''} | {fmt_time(s)}"
        ratio = t["median"] / g["median"] if g and t and g["median"] and t["median"] else None
        lim = limit[0] if limit else None
        g_lim = g["median"] / lim if g and lim and g["median"] else None
        t_lim = t["median"] / lim if t and lim and t["median"] else None
        print(f"| {model} | {rate} | {cell(g)} | {cell(t)} | {f'{ratio:.2f}' if ratio else ''} | "
              f"{f'{lim:.1f}' if lim else ''} | {f'{g_lim:.2f}' if g_lim else ''} | "
              f"{f'{t_lim:.2f}' if t_lim else ''} | {targets(rate, ratio, g_lim)} |")
    if figure:
        with open(figure, "w") as f:
            f.write(svg(summary))


if __name__ == "__main__":
    main()
