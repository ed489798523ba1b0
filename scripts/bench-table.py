#!/usr/bin/env python3
"""Renders `gradcomp bench comm --json` lines as Markdown tables.

usage: scripts/bench-table.py FILE.jsonl...   (one table per file)
"""
import json
import sys


def main() -> None:
    for path in sys.argv[1:]:
        rows = [json.loads(line) for line in open(path) if line.strip()]
        if not rows:
            print(f"\n`{path}`: no rows (the run failed)\n")
            continue
        print(f"\n`{path}`\n")
        print("| op | workers | bytes | measured s | GB/s | predicted s | prediction error |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            p = r.get("predicted_seconds")
            if p is None or p != p:  # NaN: no prediction (raw MPI baseline)
                ps, err = "-", "-"
            else:
                ps, err = f"{p:.6f}", f"{(p / r['seconds'] - 1) * 100:+.0f}%"
            print(f"| {r['op']} | {r['workers']} | {r['bytes']} | {r['seconds']:.6f} | "
                  f"{r['gbytes_per_s']:.3f} | {ps} | {err} |")


if __name__ == "__main__":
    main()
