"""The head-to-head tables from the matrix's run directories (or their evals.jsonl).

    python3 bench/peer/table.py runs/peer [--svg FIGURE]   (or docs/bench/peer, docs/bench/race-38)
    python3 bench/peer/table.py OUT --pick     the tuning's pick per family (bench/peer/race-51.sh)
    python3 bench/peer/table.py OUT --pick-env MODEL   the picks as race-51.sh's cells read them

For each model and link: every method's time to its target (the measured
wall-clock of training, evaluation excluded, at the first evaluation that meets
the target of experiments/tta-MODEL.toml: `train.target_accuracy` or
`train.target_perplexity`), as the median over its seeds with their range,
steps, seconds per step, bytes a worker sends per step, and the metric there;
then gradcomp's best path (the burn trainer, a gradcomp hook in DDP or
gradcomp's LocalUpdates) against PyTorch's best (DDP's allreduce, its own hooks,
post-local SGD, torchft's DiLoCo). A summary of every model and link closes the
output. The definitions (issue #51):

- **Best**: each side's method with the least median time over its seeds.
- **Paired ratio**: PyTorch's best ÷ gradcomp's best, seed by seed (the two
  runs of one seed share the model's initialization and the data's order); the
  cell reports the pairs' median and range. A verdict needs three pairs, and no
  pair may hold a projection or two runs whose own free steps differ by more than
  25% (`DRIFT`: the machine's speed moved between them, a cell split over sessions).
- **Lower bound**: the fewest steps to the target of any run of the model (any
  method, link or seed; interpolated linearly in the metric between the last
  evaluation short of the target and the first that meets it) × the fastest
  communication-free step of the cell: the least `free_step_seconds` of its runs
  (each run's own, timed before it trained with 4 ranks on the machine's cores
  as in the race, no exchange at all), so a cell's bound is of the machine as it
  ran that cell (its speed drifts between sessions); for records without it,
  the `isolated` runs (bench/peer/train.py: the same, over a whole run), of either
  framework, each run's mean seconds per step after its first evaluation. No
  method can beat both factors at once, so no run beats the bound by more than
  the step time's noise; without a step timed there is none.
- **Own steps**: a run's time ÷ (its own steps × the communication-free step):
  how much of its time the wire and the exchange's arithmetic add. The step is
  the run's own where it has one (`free_step_seconds`: train.py times about 8 s of steps of
  a copy of the model without exchange, all ranks at once, before training),
  else the bound's.
- **Tuning** (`--pick`, bench/peer/race-51.sh's rule): time in each run's own
  free steps (time ÷ `free_step_seconds`), so points run in sessions whose
  machine speed differs compare; in seconds where a point lacks the field. The
  tuning seed's runs (`TUNE_SEED`) are left out of every cell and bound.
- **Not reached**: a run that ended (its epochs, or the cap of bench/peer/matrix.sh,
  `capped_at_seconds`) short of the target. Its projection: its seconds so far
  plus the steps it still needed (the steps the same method and seed needed on
  another link: a method's curve is the same on every link, the link changes
  the time, not the arithmetic) at its pace, read over whole periods H of its
  exchange after its warm-up, at least two rounds (`pace`): from the cap's
  `step_seconds` (the last steps' seconds, train.py), else between two of its
  evaluations that far apart. A run without such a window, or without a run of
  its method that reached the target, is not projected. Projected cells are
  marked and never carry a verdict.

Run names: `tta-MODEL-METHOD-RATE[-sN]` (gradcomp's trainer),
`peer-MODEL-METHOD-RATE[-sN]` (the PyTorch peer; METHOD `gradcomp-…` for
gradcomp's hooks and LocalUpdates); N is the seed, 1 without the suffix.
"""
import glob
import json
import os
import re
import statistics
import sys
import tomllib

WORKERS = 4
# train.POWERSGD_START and torch_local.POSTLOCAL_WARMUP (test_peer.py checks they
# agree): the steps before torch's PowerSGD compresses and post-local SGD's default
# warm-up, both dense allreduces.
POWERSGD_START = 10
POSTLOCAL_WARMUP = 10
MIN_WINDOW = 25  # the fewest steps a per-step method's pace is read over
RATES = ("10mbit", "100mbit", "1gbit", "none")
HERE = os.path.dirname(os.path.abspath(__file__))
NAME = re.compile(r"(tta|peer)-([a-z0-9]+-[a-z0-9]+(?:-local)?)-(.+)-(10mbit|100mbit|1gbit|none)"
                  r"(?:-s(\d+))?(\.evals\.jsonl)?$")


class Goal:
    """What a model races to, from its time-to-accuracy config: a test accuracy
    reached from below, or a test perplexity reached from above."""

    def __init__(self, model):
        path = os.path.join(HERE, "..", "..", "experiments", f"tta-{model}.toml")
        if not os.path.isfile(path):
            sys.exit(f"error: no model {model!r}: experiments/tta-{model}.toml does not exist")
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
    if not os.path.isdir(root):
        sys.exit(f"error: {root} is not a directory of run records (bench/peer/matrix.sh's OUT, or docs/bench/…)")
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


def schedule(method):
    """(H, warm-up steps) of a method's exchange: a local-update method rounds
    every H steps (`-hH` in its name), a per-step method every step (H = 1);
    the warm-up's steps (`-wW`; post-local SGD's default, PowerSGD's dense
    steps) run at another pace."""
    period = re.search(r"(?:^|-)h(\d+)(?:-|$)", method)
    warmup = re.search(r"(?:^|-)w(\d+)(?:-|$)", method)
    if warmup:
        w = int(warmup.group(1))
    elif method.startswith("torch-postlocal-"):
        w = POSTLOCAL_WARMUP
    elif re.match(r"torch-(?:batched-)?powersgd-", method):
        start = re.search(r"-s(\d+)$", method)
        w = int(start.group(1)) if start else POWERSGD_START
    else:
        w = 0
    return int(period.group(1)) if period else 1, w


def pace(run):
    """(seconds per step, steps read) of a run's last stretch: whole periods H after
    its warm-up, at least two rounds and MIN_WINDOW steps; from the last record's
    `step_seconds` (the most whole periods it holds), else between the earliest
    evaluation after the warm-up that leaves whole periods to the last one.
    None without such a window: a pace read over part of a period would hold too
    many or too few rounds."""
    period, warmup = schedule(run["method"])
    last = run["rows"][-1]
    need = -(-max(2 * period, MIN_WINDOW) // period) * period
    recent = last.get("step_seconds")
    if recent:
        n = min(len(recent), last["steps"] - warmup)
        n -= n % period
        if n >= need:
            return sum(recent[-n:]) / n, n
    for r in run["rows"][:-1]:
        span = last["steps"] - r["steps"]
        if r["steps"] >= warmup and span >= need and span % period == 0:
            return (last["wall_seconds"] - r["wall_seconds"]) / span, span
    return None


def outcome(runs, run, goal):
    """(seconds to target or None, steps, seconds per step, projection or None, last row)."""
    e = reached(run, goal)
    last = run["rows"][-1]
    if e:
        return e["wall_seconds"], e["steps"], e["wall_seconds"] / e["steps"], None, e
    per_step = last["wall_seconds"] / last["steps"]
    needed = steps_to_target(runs, run, goal)
    read = pace(run)
    if not needed or read is None:
        return None, last["steps"], per_step, None, last
    return None, last["steps"], per_step, last["wall_seconds"] + max(0, needed - last["steps"]) * read[0], last


def interpolated_steps(run, goal):
    """The steps at which a run met the target, linear in the metric between the
    last evaluation short of it and the first that meets it (that evaluation's
    steps when it is the first); None when it never did."""
    before = None
    for r in run["rows"]:
        if goal.metric not in r:
            continue
        if goal.met(r[goal.metric]):
            if before is None:
                return float(r["steps"])
            a, b = before[goal.metric], r[goal.metric]
            return before["steps"] + (a - goal.value) / (a - b) * (r["steps"] - before["steps"])
        before = r
    return None


def free_step(runs, model, rate=None):
    """(seconds, run name) of the fastest communication-free step of `model`: where
    the cell (`model` at `rate`) has runs that timed their own (`free_step_seconds`,
    train.py, before training), the least of those: they ran on the machine as it
    was for that cell. Else over its `isolated` runs (either framework, any seed),
    each run's mean seconds per step after its first evaluation (its first steps
    hold the start). None without either."""
    own = [(r["rows"][-1]["free_step_seconds"], r["name"]) for r in runs
           if r["model"] == model and r["rate"] == rate and r["rows"][-1].get("free_step_seconds")]
    if own:
        return min(own)
    best = None
    for r in runs:
        if r["model"] != model or r["method"] != "isolated":
            continue
        first, last = r["rows"][0], r["rows"][-1]
        span = last["steps"] - first["steps"]
        step = (last["wall_seconds"] - first["wall_seconds"]) / span if span else last["wall_seconds"] / last["steps"]
        if best is None or step < best[0]:
            best = (step, r["name"])
    return best


def lower_bound(runs, model, goal, rate=None):
    """{seconds, steps, steps_run, step, step_run} of the lower bound of `model` (at
    `rate`: its cell's free step, `free_step`): the fewest interpolated steps to the
    target of any run of the model × the fastest communication-free step; None
    without either."""
    fewest = None
    for r in runs:
        if r["model"] != model or r["method"] == "isolated":
            continue
        s = interpolated_steps(r, goal)
        if s is not None and (fewest is None or s < fewest[0]):
            fewest = (s, r["name"])
    free = free_step(runs, model, rate)
    if fewest is None or free is None:
        return None
    return {"seconds": fewest[0] * free[0], "steps": fewest[0], "steps_run": fewest[1],
            "step": free[0], "step_run": free[1]}


def time_of(o):
    """An outcome's seconds: reached, else its projection (None without one)."""
    return o[0] if o[0] is not None else o[3]


# Two runs of a pair whose communication-free steps differ by more than this ran on a
# machine whose speed had moved between them (a cell split over sessions: the speed moved by
# 1.5× and 2.4× between sessions, RESULTS). Within one session the step read ±5% in one
# (tune-lstm) and ±12% in another (lstm-10mbit, 0.278-0.352 s), so a tighter line would mark
# pairs run back to back.
DRIFT = 1.25


def pairs(g, t):
    """[(seed, PyTorch's time ÷ gradcomp's, marks)] over the seeds both sides ran,
    each side's time reached or projected (None where neither). The marks: "*" a side
    was projected, "†" the two runs' own free steps (`free_step_seconds`) differ by
    more than `DRIFT` (the pair compares machines as much as methods: run that seed's
    pair again in one session); "" neither. A marked pair carries no verdict."""
    by_seed = {r["seed"]: o for r, o in zip(t["runs"], t["outs"])}
    out = []
    for r, go in zip(g["runs"], g["outs"]):
        to = by_seed.get(r["seed"])
        if to is not None and time_of(go) and time_of(to):
            steps = [o[4].get("free_step_seconds") for o in (go, to)]
            drift = all(steps) and max(steps) / min(steps) > DRIFT
            marks = ("*" if go[0] is None or to[0] is None else "") + ("†" if drift else "")
            out.append((r["seed"], time_of(to) / time_of(go), marks))
    return out


def marks_of(ps):
    """The marks `pairs` gave a cell's pairs, each once ("", "*", "†" or "*†")."""
    return "".join(sorted(set("".join(p for *_, p in ps))))


def own_steps(s, free):
    """The median over a method's seeds of its time ÷ (its steps × the
    communication-free step): each run's own (`free_step_seconds`, timed by
    train.py before it trained, on the machine as it was then), else `free`;
    None without either or without a reached seed."""
    xs = [o[0] / (o[1] * step) for o in s["outs"]
          if o[0] is not None and (step := o[4].get("free_step_seconds") or free)]
    return statistics.median(xs) if xs else None


def in_free_steps(outs):
    """The median over seeds of each time (reached or projected) ÷ its run's own
    communication-free step (`free_step_seconds`): the time in steps the machine
    made without exchange when the run ran, so runs of sessions whose machine speed
    differs compare. None where a seed lacks either."""
    xs = [time_of(o) / o[4]["free_step_seconds"] if time_of(o) and o[4].get("free_step_seconds") else None
          for o in outs]
    return statistics.median(xs) if xs and None not in xs else None


def summarize(runs, group, goal):
    """One method in one cell over its seeds: the median time (projections stand in
    for capped seeds, marked), its range, and the per-step figures of the median seed."""
    outs = [outcome(runs, r, goal) for r in group]
    times = [time_of(o) for o in outs]
    if any(t is None for t in times):
        times = None
    some_projected = any(o[0] is None for o in outs)
    med = statistics.median(times) if times else None
    return {"method": group[0]["method"], "framework": framework(group[0]), "side": side(group[0]),
            "seeds": len(group), "median": med,
            "range": (min(times), max(times)) if times else None, "projected": some_projected, "outs": outs,
            "runs": group, "free_steps": in_free_steps(outs),
            "reached": all(o[0] is not None for o in outs)}


def cell_methods(runs, model, rate, goal):
    """The methods raced in one cell (the `isolated` runs measure the bound's step and race nothing)."""
    groups = {}
    for r in runs:
        if r["model"] == model and r["rate"] == rate and r["method"] != "isolated":
            groups.setdefault((r["kind"], r["method"]), []).append(r)
    return [summarize(runs, sorted(g, key=lambda r: r["seed"]), goal) for g in groups.values()]


def wire_per_step(row):
    """The bytes a worker sent on its link per step (train.py's `wire_bytes_sent`:
    the interface's count, framing and TCP/IP included); blank in records made
    before it was counted."""
    return f"{row['wire_bytes_sent'] / row['steps'] / WORKERS:,.0f}" if "wire_bytes_sent" in row else ""


def fp8(row):
    """torchft's fp8 path's payload per worker-step beside its fp32 one (train.py's
    `fp8_bytes_sent`, by formula: it needs CUDA and never ran here)."""
    return f" (fp8 by formula: {row['fp8_bytes_sent'] / row['steps'] / WORKERS:,.0f})" if "fp8_bytes_sent" in row else ""


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
          f"payload bytes per worker-step | wire bytes per worker-step | {goal.name} |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for s in sorted(methods, key=lambda s: (not s["reached"], s["median"] if s["median"] is not None else 1e18)):
        t, steps, per_step, _, row = s["outs"][len(s["outs"]) // 2]
        capped = ""
        if "capped_at_seconds" in row and t is None:
            capped = " (capped)" if pace(s["runs"][len(s["outs"]) // 2]) else " (capped; no pace over whole periods)"
        metric = row.get(goal.metric)
        print(f"| {s['framework']} | {s['method']} | {s['seeds']} | {fmt_time(s)}{capped} | {steps} | "
              f"{1e3 * per_step:,.0f} | {row['bytes_sent'] / row['steps'] / WORKERS:,.0f}{fp8(row)} | "
              f"{wire_per_step(row)} | {goal.show(metric) if metric is not None else ''} |")
    best = {}
    for s in methods:
        if s["reached"] and (s["side"] not in best or s["median"] < best[s["side"]]["median"]):
            best[s["side"]] = s
    g, t = best.get("gradcomp"), best.get("torch")
    if g and t:
        ps = pairs(g, t)
        each = ", ".join(f"seed {seed}: {r:.2f}{p}" for seed, r, p in ps)
        print(f"\ngradcomp's best, {g['method']} ({g['framework']}): {g['median']:.1f} s; PyTorch's best, "
              f"{t['method']}: {t['median']:.1f} s; PyTorch ÷ gradcomp paired per seed: {each or 'no common seed'}.")
    # Where a side reached nothing, its best projection stands in (marked in the summary).
    for name in ("gradcomp", "torch"):
        if name not in best:
            proj = [s for s in methods if s["side"] == name and s["median"] is not None]
            if proj:
                best[name] = min(proj, key=lambda s: s["median"])
    return best.get("gradcomp"), best.get("torch")


def verdict(rate, ps, g_bound, g_own):
    """Whether a cell meets issue #51's targets, on the paired median `ps`:
    at 10 (100) Mbit/s gradcomp's best ≥ 3× (1.5×) sooner than PyTorch's, within
    1.3× the lower bound (`g_bound`) and 1.10× its own steps × the
    communication-free step (`g_own`); at 1 Gbit/s and unshaped PyTorch no more
    than 1.05× sooner. No verdict on fewer than three pairs, on a projection, or on
    a pair run on a machine whose speed had moved (`pairs`' marks)."""
    if not ps:
        return ""
    marks = marks_of(ps)
    if len(ps) < 3 or marks:
        why = [w for m, w in (("*", "projected"), ("†", "machine drift")) if m in marks]
        return f"no verdict ({len(ps)} pair{'s' if len(ps) != 1 else ''}" + "".join(f", {w}" for w in why) + ")"
    ratio = statistics.median(r for _, r, _ in ps)
    if rate in ("10mbit", "100mbit"):
        need = 3.0 if rate == "10mbit" else 1.5
        ok = ratio >= need and g_bound is not None and g_bound <= 1.3 and g_own is not None and g_own <= 1.10
        return "met" if ok else "missed"
    return "met" if ratio >= 1 / 1.05 else "missed"


def svg(summary):
    """The summary as a figure: per model and link, gradcomp's best and PyTorch's
    best as bars (seconds to target, hatched where projected), the lower bound
    as a tick."""
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
           '(orange), hatched: projected; black tick: lower bound</text>']
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
            out.append(f'<line x1="{x(lim["seconds"]):.1f}" x2="{x(lim["seconds"]):.1f}" y1="{y - 2}" y2="{y + 2 * bar + 1}" '
                       'stroke="black" stroke-width="2"/>')
        y += 2 * bar + gap
    out.append(f'<line x1="{left}" x2="{left + width}" y1="{y}" y2="{y}" stroke="#444"/>')
    for k in range(6):
        v = top * k / 5
        out.append(f'<text x="{x(v):.1f}" y="{y + 14}" text-anchor="middle">{v:.0f}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def faults_section(root):
    """The column under faults (issue #51, point 5): bench/peer/faults.sh's runs under
    `root` or `root/faults` (race-51.sh's `faults` phase: directories holding driver.jsonl),
    each faulted run beside its pair without faults (NAME-faults and NAME-nofaults), read by
    faults.py's `table_run`. The target: reached, with goodput (the committed steps' share of
    those computed) ≥ 95%; beside it their share of full capacity (every worker computing the
    run's steps: issue #69)."""
    dirs = sorted(os.path.dirname(p) for sub in ("*", os.path.join("faults", "*"))
                  for p in glob.glob(os.path.join(root, sub, "driver.jsonl")))
    if not dirs:
        return
    import faults
    rows = []
    for d in dirs:
        info = next((r for r in map(json.loads, open(os.path.join(d, "driver.jsonl"))) if r.get("kind") == "run"), None)
        if info is None:
            sys.exit(f"error: {d}/driver.jsonl has no \"run\" record (not a bench/peer/faults.py run?)")
        # Runs before the config was recorded ran faults.py's default, the LSTM.
        model = os.path.basename(info.get("config", "experiments/tta-ptb-lstm-local.toml"))[4:-5]
        label = model if "config" in info else f"{model} (unrecorded: faults.py's default)"
        rows.append((label, info.get("seed", 1), faults.table_run(d, Goal(model).value)))
    print("\n**Under faults** (bench/peer/faults.sh: a worker's host lost at 25% of the run and revived at "
          "50%, another worker stopped for 60 s at 75%)\n")
    print("| run | model | framework | seed | faults | seconds to target | ÷ without faults | goodput | "
          "of capacity | target |")
    print("|---|---|---|---:|---|---:|---:|---:|---:|---|")
    # faults.sh names a pair NAME-nofaults and NAME-faults (the same seed).
    base = {os.path.basename(r["dir"]): r for *_, r in rows}
    for model, seed, r in rows:
        name = os.path.basename(r["dir"])
        b = base.get(name.replace("-faults", "-nofaults")) if r["faults"] else None
        t = r["time_to_target"]
        ratio = t / b["time_to_target"] if t and b and b["time_to_target"] else None
        good = r["goodput"]
        ok = t is not None and good is not None and good >= 0.95
        print(f"| {name} | {model} | {r['framework']} | {seed} | {'yes' if r['faults'] else 'no'} | "
              f"{f'{t:.1f}' if t else 'not reached'} | {f'{ratio:.2f}' if ratio else ''} | "
              f"{f'{good:.1%}' if good is not None else ''} | "
              f"{f'{cap:.1%}' if (cap := r.get('capacity')) is not None else ''} | "
              f"{('met' if ok else 'missed') if r['faults'] else ''} |")


def print_summary(summary):
    """The closing table: per model and link the two bests, their pairs, the lower bound and the verdict."""
    print("\n**Summary: time to target, gradcomp's best path against PyTorch's best, paired per seed, "
          "and the lower bound** (seconds, median over seeds [range]; * a capped seed's projection counted; "
          f"† a pair whose two runs' free steps differ by more than {DRIFT:.2f}× (run in different sessions); "
          "'projected': nothing reached the target)\n")
    for model in dict.fromkeys(m for m, *_ in summary):
        cells = [(rate, b) for m, rate, b, *_ in summary if m == model]
        if not any(b for _, b in cells):
            print(f"- {model}: no lower bound (no communication-free step timed, or no run reached the target)")
        for rate, b in cells:
            if b:
                print(f"- {model}, {rate}: lower bound {b['seconds']:.1f} s = {b['steps']:.1f} steps "
                      f"({b['steps_run']}) × {1e3 * b['step']:.1f} ms ({b['step_run']})")
    print("\n| model | link | gradcomp's best | s | PyTorch's best | s | PyTorch ÷ gradcomp, paired "
          "(median [range], pairs) | gradcomp ÷ bound | PyTorch ÷ bound | gradcomp ÷ own steps | targets |")
    print("|---|---|---|---:|---|---:|---:|---:|---:|---:|---|")
    for model, rate, bound, g, t in summary:
        def cell(s):
            if not s:
                return "— (nothing reached or projected) | "
            where = {"gradcomp (burn)": "burn", "DDP + gradcomp hook": "hook",
                     "gradcomp LocalUpdates": "LocalUpdates", "PyTorch": ""}[s["framework"]]
            return f"{s['method']}{f' ({where})' if where else ''} | {fmt_time(s)}"
        ps = pairs(g, t) if g and t else []
        rs = [r for _, r, _ in ps]
        marks = marks_of(ps)
        paired = (f"{statistics.median(rs):.2f} [{min(rs):.2f}–{max(rs):.2f}], {len(rs)}"
                  f"{' ' + marks if marks else ''}") if rs else ""
        lim = bound["seconds"] if bound else None
        g_lim = g["median"] / lim if g and lim and g["median"] else None
        t_lim = t["median"] / lim if t and lim and t["median"] else None
        g_own = own_steps(g, bound["step"] if bound else None) if g else None
        show = lambda v: f"{v:.2f}" if v is not None else ""  # noqa: E731
        print(f"| {model} | {rate} | {cell(g)} | {cell(t)} | {paired} | {show(g_lim)} | {show(t_lim)} | "
              f"{show(g_own)} | {verdict(rate, ps, g_lim, g_own)} |")


# The seed bench/peer/race-51.sh tunes on (its TUNE_SEED's default), raced in no cell.
TUNE_SEED = 9


def split_tuning(runs):
    """(the tuning seed's runs, the others): the first are `--pick`'s alone, and neither their
    times nor their steps enter a cell or its bound (race-51.sh's rule)."""
    return ([r for r in runs if r["seed"] == TUNE_SEED],
            [r for r in runs if r["seed"] != TUNE_SEED])

# The tuning's families (bench/peer/race-51.sh): each picks its own point from its grid.
# Each family's variable of race-51.sh's cells (`--pick-env`).
FAMILIES = (("gradcomp LocalUpdates", "gradcomp-local-", "RACE_GRADCOMP"),
            ("torchft DiLoCo", "torchft-diloco-", "RACE_TORCHFT"),
            ("torch post-local SGD", "torch-postlocal-", "RACE_POSTLOCAL"))


def pick(methods):
    """The tuning rule of bench/peer/race-51.sh over one family's summaries: the least time
    to target; where none reached it, the least projection; among those within 2% of that
    time, the fewest payload bytes per worker-step. The time is counted in each run's own
    communication-free steps (`in_free_steps`) where every point has one, so points run in
    different sessions compare; else in seconds. Returns (the pick or None, the ranking,
    the key's unit: "free steps" or "s")."""
    reached_ = [s for s in methods if s["reached"]]
    pool = reached_ or [s for s in methods if s["median"] is not None]
    unit = "free steps" if pool and all(s["free_steps"] is not None for s in pool) else "s"
    key = (lambda s: s["free_steps"]) if unit == "free steps" else (lambda s: s["median"])  # noqa: E731
    ranking = sorted(pool, key=key)
    if not ranking:
        return None, [], unit
    best = key(ranking[0])

    def per_step(s):
        row = s["outs"][len(s["outs"]) // 2][4]
        return row["bytes_sent"] / row["steps"]
    close = [s for s in ranking if key(s) <= 1.02 * best]
    return min(close, key=per_step), ranking, unit


def family_picks(runs, model, rate="100mbit"):
    """[(family, its race-51.sh variable, `pick` of its points)] for `model` at `rate`, from
    the tuning seed's runs alone: the cells' seeds, raced with the picks, must not move them."""
    tuning, _ = split_tuning(runs)
    methods = cell_methods(tuning, model, rate, Goal(model))
    return [(family, var, pick([s for s in methods if s["method"].startswith(prefix)]))
            for family, prefix, var in FAMILIES]


def print_picks(runs, rate="100mbit"):
    """Each family's pick at `rate` per model, with its ranking (`--pick`)."""
    for model in sorted({r["model"] for r in runs}):
        for family, _, (chosen, ranking, unit) in family_picks(runs, model, rate):
            if not ranking:
                continue
            order = ", ".join(f"{s['method']} {fmt_time(s)}"
                              + (f" = {s['free_steps']:.0f} free steps" if unit == "free steps" else "")
                              for s in ranking)
            how = "in each run's own free steps" if unit == "free steps" else \
                "in seconds: a point has no `free_step_seconds`, so points from other sessions may not compare"
            print(f"- {model}, {family}: pick **{chosen['method']}**"
                  f"{'' if chosen['reached'] else ' (projected: nothing reached)'} (ranked {how}); ranking: {order}")


def pick_env(runs, model, rate="100mbit"):
    """`RACE_GRADCOMP=… RACE_TORCHFT=… RACE_POSTLOCAL=…`: each family's pick for `model`,
    for bench/peer/race-51.sh's cells; exits with an error naming the families without one."""
    chosen = {var: picked[0] for _, var, picked in family_picks(runs, model, rate)}
    missing = [var for var, c in chosen.items() if c is None]
    if missing:
        sys.exit(f"error: no tuning records of {model} at {rate} for {', '.join(missing)} "
                 f"(run bench/peer/race-51.sh OUT tune-… first)")
    return " ".join(f"{var}={c['method']}" for var, c in chosen.items())


def take(args, flag):
    """The value after `flag` in `args`, both removed; None without the flag."""
    if flag not in args:
        return None
    i = args.index(flag)
    if i + 1 == len(args):
        sys.exit(f"error: {flag} needs a value (bench/peer/table.py OUT [--svg FIGURE | --pick | --pick-env MODEL])")
    value = args[i + 1]
    del args[i:i + 2]
    return value


def main():
    args = sys.argv[1:]
    model = take(args, "--pick-env")
    if model:
        print(pick_env(load(args[0] if args else "runs/peer"), model))
        return
    if "--pick" in args:
        args.remove("--pick")
        print_picks(load(args[0] if args else "runs/peer"))
        return
    figure = take(args, "--svg")
    runs = load(args[0] if args else "runs/peer")
    tuning, runs = split_tuning(runs)
    if tuning:
        print(f"({len(tuning)} runs on the tuning seed {TUNE_SEED} left out: `--pick` ranks them)\n")
    summary = []
    for model in sorted({r["model"] for r in runs}):
        goal = Goal(model)
        for rate in RATES:
            if any(r["model"] == model and r["rate"] == rate and r["method"] != "isolated" for r in runs):
                summary.append((model, rate, lower_bound(runs, model, goal, rate)) + table(runs, model, rate, goal))
    print_summary(summary)
    faults_section(args[0] if args else "runs/peer")
    if figure:
        with open(figure, "w") as f:
            f.write(svg(summary))


if __name__ == "__main__":
    main()
