#!/usr/bin/env python3
"""The table and figure of a local-updates sweep (scripts/local-updates-sweep.sh).

    scripts/local-updates-table.py RUNS OUT_PREFIX [TITLE]

For every run directory under RUNS: the final test perplexity (the last
epoch's), the bytes every worker sent in all (the epochs' cumulative
`bytes_sent`, all workers) and per worker, and the training wall-clock; a
markdown table to OUT_PREFIX.md and a scatter of perplexity against bytes
per worker (log scale) to OUT_PREFIX.svg, one point per setting.
"""
import json
import math
import os
import sys


def last_epoch(run):
    path = os.path.join(run, "epochs.jsonl")
    if not os.path.exists(path):
        return None
    lines = [json.loads(line) for line in open(path) if line.strip()]
    return lines[-1] if lines else None


def workers(run):
    for line in open(os.path.join(run, "config.toml")):
        if line.startswith("workers"):
            return int(line.split("=")[1])
    return 1


def rows(runs):
    out = []
    for name in sorted(os.listdir(runs)):
        run = os.path.join(runs, name)
        if not os.path.isdir(run):
            continue
        e = last_epoch(run)
        if e is None or "test_perplexity" not in e:
            continue
        n = workers(run)
        out.append({"name": name, "perplexity": e["test_perplexity"], "bytes": e["bytes_sent"],
                    "per_worker": e["bytes_sent"] / n, "steps": e["steps"], "wall": e["wall_seconds"]})
    return out


def table(rs):
    dense = next((r for r in rs if r["name"] == "sync-dense"), None)
    lines = ["| setting | test perplexity | bytes per worker | × fewer than sync dense | steps | wall (s) |",
             "|---|---|---|---|---|---|"]
    for r in sorted(rs, key=lambda r: -r["per_worker"]):
        fewer = f"{dense['per_worker'] / r['per_worker']:.0f}" if dense and r["per_worker"] else "–"
        lines.append(f"| {r['name']} | {r['perplexity']:.1f} | {r['per_worker'] / 1e6:,.1f} MB | {fewer} | "
                     f"{r['steps']} | {r['wall']:.0f} |")
    return "\n".join(lines) + "\n"


def svg(rs, title):
    w, h, m = 760, 460, 70
    xs = [math.log10(max(r["per_worker"], 1.0)) for r in rs]
    ys = [r["perplexity"] for r in rs]
    x0, x1 = math.floor(min(xs)), math.ceil(max(xs))
    y0, y1 = min(ys) * 0.97, max(ys) * 1.03
    x1 = x1 if x1 > x0 else x0 + 1
    px = lambda x: m + (x - x0) / (x1 - x0) * (w - 2 * m)
    py = lambda y: h - m - (y - y0) / (y1 - y0 if y1 > y0 else 1) * (h - 2 * m)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
             f'<line x1="{m}" y1="{h - m}" x2="{w - m}" y2="{h - m}" stroke="black"/>',
             f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h - m}" stroke="black"/>',
             f'<text x="{w / 2}" y="{h - 20}" text-anchor="middle">bytes sent per worker (log scale)</text>',
             f'<text x="18" y="{h / 2}" text-anchor="middle" transform="rotate(-90 18 {h / 2})">final test perplexity</text>']
    for d in range(x0, x1 + 1):
        parts.append(f'<line x1="{px(d)}" y1="{h - m}" x2="{px(d)}" y2="{h - m + 5}" stroke="black"/>')
        parts.append(f'<text x="{px(d)}" y="{h - m + 18}" text-anchor="middle">1e{d}</text>')
    for k in range(5):
        y = y0 + (y1 - y0) * k / 4
        parts.append(f'<text x="{m - 6}" y="{py(y) + 4}" text-anchor="end">{y:.0f}</text>')
    for r, x, y in zip(rs, xs, ys):
        colour = "#1f77b4" if r["name"].startswith("local") else "#d62728" if r["name"].startswith("sync") else "#2ca02c"
        parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{colour}"/>')
        parts.append(f'<text x="{px(x) + 6:.1f}" y="{py(y) - 5:.1f}">{r["name"]}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    runs, prefix = sys.argv[1], sys.argv[2]
    title = sys.argv[3] if len(sys.argv) > 3 else "final perplexity against bytes sent"
    rs = rows(runs)
    if not rs:
        sys.exit(f"error: no finished runs under {runs}")
    open(prefix + ".md", "w").write(table(rs))
    open(prefix + ".svg", "w").write(svg(rs, title))
    print(table(rs))


if __name__ == "__main__":
    main()
