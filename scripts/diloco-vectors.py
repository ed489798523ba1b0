#!/usr/bin/env python3
"""Reference vectors for DiLoCo / Streaming DiLoCo, produced by torchft itself.

This script RUNS torchft's own ``torchft.local_sgd.DiLoCo`` class (nothing of
torchft is copied here) with the real ``torchft.manager.Manager``, the real
``torchft.process_group.ProcessGroupGloo`` and the real lighthouse
(``torchft._torchft.LighthouseServer``), on CPU, float32, with two replica
groups of one process each.  It writes one JSON file per case to
``crates/exchange/tests/vectors/diloco-<case>.json``; the Rust tests compare
gradcomp's implementation against them.

Model (identical, deterministic init on both replicas)::

    a = nn.Linear(6, 4)            -> "a.weight" (4x6, row-major), "a.bias" (4)
    b = module with Parameter(30)  -> "b.w" (30: gradcomp splits the model by size,
                                               so {a.weight, a.bias} (28) and {b.w} are
                                               its two fragments too)

    init[name][i] = (((7*i + 3*j) % 11) - 5) / 8        j = index of the param
                                                         in the order above
Each inner step t (0-based), on replica r, the gradient is SET (no data, no
loss)::

    grad[r][t][name][i] = (((3*i + 5*t + 7*j + 11*r) % 13) - 6) / 16

Inner optimizer: ``torch.optim.SGD(lr=0.1)`` (no momentum).  Outer optimizer:
``torch.optim.SGD(lr=0.7, momentum=0.9, nesterov=True)`` (one per fragment,
as in torchft's own tests), or ``SGD(lr=1.0)`` for the model-averaging case.

For every inner step the JSON holds, per replica, the parameters right after
the inner ``optimizer.step()`` update and before torchft's step post-hook runs
("before": captured by a step post-hook registered before DiLoCo's), the
parameters after ``optimizer.step()`` returned, i.e. after torchft's hook
("after"), torchft's saved global parameters (``original_parameters`` of each
fragment, "global") and ``manager.current_step()``.  At the end it records the
outer optimizers' momentum buffers.

Install (once; do not touch the project's py-venv, make a separate venv that
reuses its torch)::

    python3 -m venv ~/.cache/gradcomp/ref-venv
    SP=$(~/.cache/gradcomp/py-venv/bin/python -c 'import site;print(site.getsitepackages()[0])')
    RSP=$(~/.cache/gradcomp/ref-venv/bin/python -c 'import site;print(site.getsitepackages()[0])')
    echo "$SP" > "$RSP/zz-py-venv.pth"          # reuse py-venv's torch
    ~/.cache/gradcomp/ref-venv/bin/pip install --no-deps torchft-nightly==2026.10.26
    ~/.cache/gradcomp/ref-venv/bin/pip install 'opentelemetry-exporter-otlp-proto-http>=1.39.0' \
        'opentelemetry-sdk>=1.39.0' 'opentelemetry-api>=1.39.0'

(or ``pip install torch torchft-nightly`` into any venv).  Run from the
repository root::

    ~/.cache/gradcomp/ref-venv/bin/python scripts/diloco-vectors.py [CASE ...]

It starts the lighthouse in this process and spawns two worker processes per
case (localhost only, fetches nothing).  About 10-20 s per case.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "crates" / "exchange" / "tests" / "vectors"

PARAM_NAMES = ["a.weight", "a.bias", "b.w"]
INNER_LR = 0.1

# name -> (n_fragments, sync_every H, fragment_sync_delay, fragment_update_alpha,
#          outer optimizer kwargs, number of inner steps)
NESTEROV = {"lr": 0.7, "momentum": 0.9, "nesterov": True}
PLAIN = {"lr": 1.0, "momentum": 0.0, "nesterov": False}
CASES = {
    # 1. DiLoCo, whole model one fragment, H=4, 3 rounds.
    "h4-nesterov": dict(fragments=1, H=4, delay=0, alpha=0.0, outer=NESTEROV, steps=12),
    # 2. Same, outer SGD lr 1 no momentum (= model averaging).
    "h4-avg": dict(fragments=1, H=4, delay=0, alpha=0.0, outer=PLAIN, steps=12),
    # 3. Streaming, fragments A and B, H=4, delay 0, alpha 0.
    "stream-h4-d0-a0": dict(fragments=2, H=4, delay=0, alpha=0.0, outer=NESTEROV, steps=12),
    # 4. Streaming, H=4, delay 1, alpha 0.5.
    "stream-h4-d1-a05": dict(fragments=2, H=4, delay=1, alpha=0.5, outer=NESTEROV, steps=12),
    # 5. Streaming, delay 2, alpha 0.  torchft rejects delay 2 with H=4 and 2
    #    fragments (it needs delay < H / fragments = 2), so H=6 (3 steps per
    #    fragment slot), 3 rounds.
    "stream-h6-d2-a0": dict(fragments=2, H=6, delay=2, alpha=0.0, outer=NESTEROV, steps=18),
    # 6. (extra) one fragment with delay 1 and alpha 0.5.
    "h4-d1-a05": dict(fragments=1, H=4, delay=1, alpha=0.5, outer=NESTEROV, steps=12),
}


def init_value(j: int, i: int) -> float:
    return (((7 * i + 3 * j) % 11) - 5) / 8


def grad_value(r: int, t: int, j: int, i: int) -> float:
    return (((3 * i + 5 * t + 7 * j + 11 * r) % 13) - 6) / 16


# --------------------------------------------------------------------------
# worker
# --------------------------------------------------------------------------


def worker(rank: int, case_name: str, lighthouse: str, out_path: str) -> None:
    import torch
    from torch import nn
    from torchft.local_sgd import DiLoCo
    from torchft.manager import Manager
    from torchft.process_group import ProcessGroupGloo

    torch.set_num_threads(1)
    case = CASES[case_name]

    class FragB(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(30))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(6, 4)
            self.b = FragB()

    model = Model()
    params = dict(model.named_parameters())
    assert list(params) == PARAM_NAMES
    with torch.no_grad():
        for j, name in enumerate(PARAM_NAMES):
            p = params[name]
            vals = [init_value(j, i) for i in range(p.numel())]
            p.copy_(torch.tensor(vals, dtype=torch.float32).view_as(p))

    def flat(t: "torch.Tensor") -> list:
        return [float(x) for x in t.detach().reshape(-1).to(torch.float32).tolist()]

    def snapshot() -> dict:
        return {n: flat(p) for n, p in model.named_parameters()}

    if case["fragments"] == 1:
        fragments = [model]
        frag_names = [list(PARAM_NAMES)]
    else:
        fragments = [model.a, model.b]
        frag_names = [["a.weight", "a.bias"], ["b.w"]]

    inner = torch.optim.SGD(model.parameters(), lr=INNER_LR)
    outers = [torch.optim.SGD(f.parameters(), **case["outer"]) for f in fragments]

    store = torch.distributed.TCPStore(
        host_name="localhost", port=0, is_master=True, wait_for_workers=False
    )
    pg = ProcessGroupGloo(timeout=timedelta(seconds=30))
    manager = Manager(
        pg=pg,
        min_replica_size=2,
        load_state_dict=lambda sd: model.load_state_dict(sd["model"]),
        state_dict=lambda: {"model": model.state_dict()},
        use_async_quorum=False,  # DiLoCo requires it
        init_sync=False,  # both replicas start from the same deterministic init
        replica_id=str(rank),
        store_addr="localhost",
        store_port=store.port,
        rank=0,
        world_size=1,
        lighthouse_addr=lighthouse,
        hostname="localhost",
        timeout=timedelta(seconds=30),
        quorum_timeout=timedelta(seconds=30),
        connect_timeout=timedelta(seconds=30),
    )

    record: dict = {"grads": [], "steps": []}
    before: dict = {}

    def capture_before(_opt, _args, _kwargs) -> None:
        before.clear()
        before.update(snapshot())

    # Registered BEFORE DiLoCo's own step post-hook, so it runs first.
    hook = inner.register_step_post_hook(capture_before)

    diloco = DiLoCo(
        manager,
        fragments,
        inner,
        outers if len(outers) > 1 else outers[0],
        sync_every=case["H"],
        fragment_sync_delay=case["delay"],
        fragment_update_alpha=case["alpha"],
    )
    # Observe (not alter) when torchft prepares / performs each fragment's sync.
    events: list = []
    current = {"step": 0}

    def observe(frag_id: int, kind: str, fn):
        def wrapped(*a, **k):
            events.append({"inner_step": current["step"], "event": kind, "fragment": frag_id})
            return fn(*a, **k)

        return wrapped

    for frag_id, frag in enumerate(diloco._fragments):
        frag.prepare_sync = observe(frag_id, "prepare", frag.prepare_sync)
        frag.perform_sync = observe(frag_id, "perform", frag.perform_sync)

    with diloco:
        for t in range(case["steps"]):
            current["step"] = t + 1
            grads = {}
            for j, name in enumerate(PARAM_NAMES):
                p = params[name]
                g = torch.tensor(
                    [grad_value(rank, t, j, i) for i in range(p.numel())],
                    dtype=torch.float32,
                ).view_as(p)
                p.grad = g
                grads[name] = flat(g)
            record["grads"].append(grads)
            inner.step()
            glob = {}
            for frag, names in zip(diloco._fragments, frag_names):
                fparams = dict(frag._model_fragment.named_parameters())
                for fname, saved in frag.original_parameters.items():
                    full = names[list(fparams).index(fname)]
                    glob[full] = flat(saved)
            record["steps"].append(
                {
                    "before": dict(before),
                    "after": snapshot(),
                    "global": glob,
                    "manager_step": manager.current_step(),
                }
            )
    hook.remove()

    momentum = {}
    for opt, f, names in zip(outers, fragments, frag_names):
        for name, p in zip(names, f.parameters()):
            buf = opt.state.get(p, {}).get("momentum_buffer")
            if buf is not None:
                momentum[name] = flat(buf)
    record["outer_momentum_buffers"] = momentum
    record["manager_step_end"] = manager.current_step()
    record["sync_events"] = events

    manager.shutdown(wait=False)
    with open(out_path, "w") as fh:
        json.dump(record, fh)


# --------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------


def run_case(case_name: str, python: str) -> dict:
    import torch
    import torchft  # noqa: F401
    from importlib.metadata import version
    from torchft._torchft import LighthouseServer

    case = CASES[case_name]
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=2)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            procs = []
            outs = []
            for rank in range(2):
                out = os.path.join(tmp, f"rank{rank}.json")
                outs.append(out)
                log = open(os.path.join(tmp, f"rank{rank}.log"), "w")
                procs.append(
                    subprocess.Popen(
                        [python, __file__, "--worker", str(rank), "--case", case_name,
                         "--lighthouse", lighthouse.address(), "--out", out],
                        env={**os.environ, "OMP_NUM_THREADS": "1"},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
            deadline = time.time() + 300
            for p in procs:
                p.wait(timeout=max(1, deadline - time.time()))
            for rank, p in enumerate(procs):
                if p.returncode != 0:
                    sys.stderr.write(open(os.path.join(tmp, f"rank{rank}.log")).read()[-20000:])
                    raise RuntimeError(f"worker {rank} failed with {p.returncode} in {case_name}")
            ranks = [json.load(open(o)) for o in outs]
    finally:
        lighthouse.shutdown()

    n_frag = case["fragments"]
    fragments = [list(PARAM_NAMES)] if n_frag == 1 else [["a.weight", "a.bias"], ["b.w"]]
    shapes = {"a.weight": [4, 6], "a.bias": [4], "b.w": [30]}
    init = {
        name: [float(init_value(j, i)) for i in range(int(torch.tensor(shapes[name]).prod()))]
        for j, name in enumerate(PARAM_NAMES)
    }
    outer = case["outer"]
    return {
        "reference": {
            "implementation": "torchft.local_sgd.DiLoCo (run, not reimplemented)",
            "torchft": f"torchft-nightly {version('torchft-nightly')}",
            "torch": torch.__version__,
            "manager": "real torchft.manager.Manager + torchft._torchft.LighthouseServer"
                       " (min_replicas=2), ProcessGroupGloo, CPU, 2 replica groups x 1 process",
            "manager_args": {"use_async_quorum": False, "init_sync": False,
                             "min_replica_size": 2},
            "diloco_args": {
                "model_fragments": ["model"] if n_frag == 1 else ["model.a", "model.b"],
                "inner_optimizer": f"torch.optim.SGD(lr={INNER_LR})",
                "outer_optimizer": (
                    f"torch.optim.SGD(fragment.parameters(), lr={outer['lr']}, "
                    f"momentum={outer['momentum']}, nesterov={outer['nesterov']})"
                    + (" (one per fragment, passed as a list)" if n_frag > 1 else "")
                ),
                "sync_every": case["H"],
                "fragment_sync_delay": case["delay"],
                "fragment_update_alpha": case["alpha"],
                "should_quantize": False,
                "use_bucketization": False,
            },
            "script": "scripts/diloco-vectors.py",
        },
        "config": {
            "H": case["H"],
            "fragments": fragments,
            "fragment_sync_delay": case["delay"],
            "fragment_update_alpha": case["alpha"],
            "outer_lr": outer["lr"],
            "outer_momentum": outer["momentum"],
            "outer_nesterov": outer["nesterov"],
            "inner_lr": INNER_LR,
            "inner_steps": case["steps"],
            "replicas": 2,
            "dtype": "float32",
        },
        "param_names": list(PARAM_NAMES),
        "shapes": shapes,
        "formulas": {
            "init": "init[name][i] = (((7*i + 3*j) % 11) - 5) / 8, j = index of name in param_names",
            "grad": "grad[r][t][name][i] = (((3*i + 5*t + 7*j + 11*r) % 13) - 6) / 16",
        },
        "init": init,
        "grads": {str(r): ranks[r]["grads"] for r in range(2)},
        "steps": {str(r): ranks[r]["steps"] for r in range(2)},
        "outer_momentum_buffers": {str(r): ranks[r]["outer_momentum_buffers"] for r in range(2)},
        "manager_step_end": {str(r): ranks[r]["manager_step_end"] for r in range(2)},
        "sync_events": {str(r): ranks[r]["sync_events"] for r in range(2)},
        "notes": {
            "before": "params right after the inner SGD update of step t, before torchft's "
                      "DiLoCo step post-hook (a post-hook registered before DiLoCo's)",
            "after": "params after optimizer.step() returned (after DiLoCo's post-hook)",
            "global": "each fragment's torchft original_parameters (saved global params) "
                      "after step t",
            "manager_step": "manager.current_step() after step t (counts committed syncs)",
            "sync_events": "calls of torchft's _StreamingDiLoCoFragment.prepare_sync / perform_sync, "
                           "observed by wrapping them; inner_step is 1-based (the hook after the "
                           "inner_step-th optimizer.step())",
        },
    }


def dumps_compact(data: dict) -> str:
    """Indented JSON, but each list of numbers on one line."""
    import re

    text = json.dumps(data, indent=1)
    number_list = re.compile(r"\[\s*(-?[0-9][0-9eE.+-]*(?:,\s*-?[0-9][0-9eE.+-]*)*)\s*\]")
    return number_list.sub(lambda m: "[" + ", ".join(re.split(r",\s*", m.group(1))) + "]", text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="*", help=f"cases to run (default all): {list(CASES)}")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--lighthouse", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--out-dir", default=str(OUT_DIR))
    args = ap.parse_args()

    if args.worker is not None:
        worker(args.worker, args.case, args.lighthouse, args.out)
        return

    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in args.cases or list(CASES):
        t0 = time.time()
        data = run_case(name, sys.executable)
        path = out_dir / f"diloco-{name}.json"
        with open(path, "w") as fh:
            fh.write(dumps_compact(data) + "\n")
        print(f"{name}: wrote {path} in {time.time() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()
