#!/usr/bin/env python3
"""Reference vectors for eager and delayed outer steps (Kale, Douillard, Donchev
2025, arXiv 2502.12996), written in plain torch from the paper's algorithm.

No library implements the paper's overlap, so this script is the reference: the
algorithm of docs/ALGORITHMS.md section 2.3, written out with torch tensors and
``torch.optim.SGD`` as the outer optimizer of each worker's own outer model, M
workers simulated in one process (their average is the sum in rank order divided
by M, as an allreduce gives it). It was written and committed before gradcomp's
implementation; ``crates/exchange/tests/eager_reference.rs`` replays its inner
steps through gradcomp's rounds and compares every model after every step.

Model (identical init on every worker)::

    "a.weight" (4x6), "a.bias" (4), "b.w" (30)
    init[name][i] = (((7*i + 3*j) % 11) - 5) / 8        j = index of the tensor

Inner step t (1-based) of worker m: the gradient depends on the model, so the
workers' phases differ with where each starts::

    grad[name][i] = 0.25 * p[i] + (((3*i + 5*t + 7*j + 11*m) % 13) - 6) / 16

stepped by ``torch.optim.SGD(lr=0.1)``. Every H inner steps (step t = k*H) each
worker takes its pseudo-gradient of the phase, starts its round (here: the
average is computed at once but handed to the worker only at the next round,
as an overlapped round would land), and steps its outer model on

    eager:   G_m = (Dbar_prev - own_prev) + own        own = Delta_m / M
    delayed: G_m = Dbar_prev

(Dbar_prev and own_prev zero at the first round), then adopts it.

The JSON holds, per worker and inner step, the model after the inner step
("before") and after the round logic ("after"), and at the end each worker's
outer model and its SGD momentum buffer. Run from the repository root with any
python that has torch (the project's py-venv does)::

    ~/.cache/gradcomp/py-venv/bin/python scripts/eager-vectors.py

It writes crates/exchange/tests/vectors/eager-<case>.json.
"""

from __future__ import annotations

import json
import os
from typing import Dict, List

import torch

SHAPES = {"a.weight": [4, 6], "a.bias": [4], "b.w": [30]}
NAMES = list(SHAPES)
WORKERS = 3
H = 4
STEPS = 12
INNER_LR = 0.1

CASES = {
    "eager-nesterov": ("eager", dict(lr=0.7, momentum=0.9, nesterov=True)),
    "delayed-nesterov": ("delayed", dict(lr=0.7, momentum=0.9, nesterov=True)),
    "eager-sgd": ("eager", dict(lr=1.0)),
}


def init() -> List[torch.Tensor]:
    out = []
    for j, n in enumerate(NAMES):
        count = 1
        for d in SHAPES[n]:
            count *= d
        v = [(((7 * i + 3 * j) % 11) - 5) / 8 for i in range(count)]
        out.append(torch.tensor(v, dtype=torch.float32).reshape(SHAPES[n]))
    return out


def inner_grad(p: torch.Tensor, j: int, t: int, m: int) -> torch.Tensor:
    idx = torch.arange(p.numel())
    fixed = (((3 * idx + 5 * t + 7 * j + 11 * m) % 13) - 6).to(torch.float32) / 16
    return (0.25 * p.detach().reshape(-1) + fixed).reshape(p.shape)


def flat(ts: List[torch.Tensor]) -> Dict[str, List[float]]:
    return {n: t.detach().reshape(-1).tolist() for n, t in zip(NAMES, ts)}


def run(form: str, outer_kw: dict) -> dict:
    local = [[torch.nn.Parameter(t.clone()) for t in init()] for _ in range(WORKERS)]
    inner = [torch.optim.SGD(ps, lr=INNER_LR) for ps in local]
    # Each worker's own outer model and outer optimizer (the eager term makes
    # the workers' outer models differ).
    outer_model = [[torch.nn.Parameter(t.clone()) for t in init()] for _ in range(WORKERS)]
    outer = [torch.optim.SGD(ps, **outer_kw) for ps in outer_model]
    zeros = [torch.zeros_like(t) for t in init()]
    pending = zeros  # Dbar of the round in flight, landed at the next round
    own_prev = [list(zeros) for _ in range(WORKERS)]
    steps: Dict[str, list] = {str(m): [] for m in range(WORKERS)}
    for t in range(1, STEPS + 1):
        for m in range(WORKERS):
            for j, p in enumerate(local[m]):
                p.grad = inner_grad(p, j, t, m)
            inner[m].step()
        before = [flat(local[m]) for m in range(WORKERS)]
        if t % H == 0:
            with torch.no_grad():
                deltas = [[o.detach() - p.detach() for o, p in zip(outer_model[m], local[m])]
                          for m in range(WORKERS)]
                # The round started here: the sum in rank order over M.
                dbar = []
                for j in range(len(NAMES)):
                    s = deltas[0][j].clone()
                    for m in range(1, WORKERS):
                        s += deltas[m][j]
                    dbar.append(s / WORKERS)
                for m in range(WORKERS):
                    own = [d / WORKERS for d in deltas[m]]
                    for j, o in enumerate(outer_model[m]):
                        if form == "eager":
                            o.grad = (pending[j] - own_prev[m][j]) + own[j]
                        else:
                            o.grad = pending[j].clone()
                    outer[m].step()
                    own_prev[m] = own
                    for p, o in zip(local[m], outer_model[m]):
                        p.copy_(o)
                pending = dbar  # lands at the next round
        for m in range(WORKERS):
            steps[str(m)].append({"before": before[m], "after": flat(local[m])})
    momentum = {}
    for m in range(WORKERS):
        bufs = [outer[m].state[o].get("momentum_buffer") for o in outer_model[m]]
        momentum[str(m)] = None if bufs[0] is None else flat(bufs)
    return {
        "reference": {"torch": torch.__version__, "script": "scripts/eager-vectors.py"},
        "config": {"form": form, "H": H, "inner_steps": STEPS, "workers": WORKERS,
                   "outer_lr": outer_kw["lr"], "outer_momentum": outer_kw.get("momentum", 0.0),
                   "outer_nesterov": outer_kw.get("nesterov", False)},
        "param_names": NAMES,
        "shapes": SHAPES,
        "init": flat(init()),
        "steps": steps,
        "outer_models": {str(m): flat(outer_model[m]) for m in range(WORKERS)},
        "momentum": momentum,
    }


def main() -> None:
    torch.set_num_threads(1)
    out = os.path.join("crates", "exchange", "tests", "vectors")
    for case, (form, kw) in CASES.items():
        path = os.path.join(out, f"eager-{case}.json")
        with open(path, "w") as f:
            json.dump(run(form, kw), f)
        print(path)


if __name__ == "__main__":
    main()
