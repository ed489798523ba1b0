"""The network model from Python: which compressor pays off, and the step time.

The same model as `gradcomp model` (gradcomp-dp's `predict`): each method's
bytes are what its codec really produces for these shapes, and its compress and
decode times are measured on this CPU; the wire is priced with α–β formulas
(latency `alpha` per message, bandwidth `link_gbps`).
"""
from . import _core


def model(shapes, compute_seconds, workers, link_gbps, *, density=0.001, alpha=1e-4):
    """Predicts one training step for each method.

    - `shapes`: the parameter tensors' shapes (e.g. `[p.shape for p in m.parameters()]`).
    - `compute_seconds`: one worker's measured forward and backward pass.
    - `workers`, `link_gbps`: N and the link speed in Gbit/s.

    Returns `{"best": ..., "pays_off": bool, "methods": [...]}`, the methods
    fastest first, each with `step_seconds`, `speedup_over_dense` and
    `bytes_per_worker`; `pays_off` is whether the fastest beats dense.
    """
    shapes = [[int(d) for d in s] or [1] for s in shapes]
    rows = _core.predict(shapes, float(compute_seconds), int(workers), float(link_gbps) * 1e9,
                         density=float(density), alpha=float(alpha))
    rows.sort(key=lambda r: r["step_seconds"])
    best = rows[0]
    return {"best": best, "pays_off": best["compressor"] != "dense", "methods": rows}
