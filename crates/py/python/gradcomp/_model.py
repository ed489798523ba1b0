"""The network model from Python: which compressor pays off, and the step time.

The same model as `gradcomp model` (gradcomp-exchange's `predict`): each method's
bytes are what its codec really produces for these shapes, and its compress and
decode times are measured on this CPU; the wire is priced with α–β formulas
(latency `alpha` per message, bandwidth `link_gbps`).
"""
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Union

from . import _core
from ._config import number, whole

if TYPE_CHECKING:  # torch is optional: the bytes API and the model need only numpy
    import torch

# Below a 10% predicted gain the model's own error (latency, contention,
# the host's other work) is as large as the gain: the core's rule
# (`predict::PAYS_OFF`), which `gradcomp model --dry-run` applies too.
PAYS_OFF_MARGIN: float = _core.PAYS_OFF_MARGIN
DOES_NOT_KNOW = ("accuracy: a compressed step may learn less, so a faster step pays off only if the run "
                 "does not need correspondingly more steps (measure time to accuracy)")


def model(shapes: Union["torch.nn.Module", Sequence[Sequence[int]]], compute_seconds: float, workers: int,
          link_gbps: float, *, density: float = 0.001, alpha: float = 1e-4, period: Optional[int] = None,
          fragments: int = 1, delay: int = 0) -> Dict[str, Any]:
    """Predicts one training step for each method.

    - `shapes`: the parameter tensors' shapes (e.g. `[p.shape for p in m.parameters()]`),
      or a torch module (its trainable parameters' shapes).
    - `compute_seconds`: one worker's measured forward and backward pass.
    - `workers`, `link_gbps`: N and the link speed in Gbit/s.

    Returns `{"best", "margin", "pays_off", "does_not_know", "methods"}`: the
    methods the DDP hook can run (no parameter server), fastest first, each with
    `step_seconds`, `speedup_over_dense` and `bytes_per_worker`; `margin` is the
    fastest's speedup over dense; `pays_off` is whether it beats dense by at
    least PAYS_OFF_MARGIN (closer than that, the α–β model cannot tell them
    apart); `does_not_know` says what the model leaves out.

    With `period` (and `fragments`, `delay`: `LocalUpdates`' arguments), each
    method also prices local updates whose rounds carry the change through it:
    `local_step_seconds` per inner step (the round overlapped with `delay`
    inner steps, as `LocalUpdates` runs it) and `local_bytes_per_period`.
    """
    dims = _shapes_of(shapes)
    # The ranges are Rust's to check; here only that each is a number at all.
    rows = _core.predict(dims, number("compute_seconds", compute_seconds), whole("workers", workers),
                         number("link_gbps", link_gbps) * 1e9, density=number("density", density),
                         alpha=number("alpha", alpha),
                         period=None if period is None else whole("period", period),
                         fragments=whole("fragments", fragments), delay=whole("delay", delay))
    rows.sort(key=lambda r: r["step_seconds"])
    best = rows[0]
    margin = best["speedup_over_dense"]
    return {"best": best, "margin": margin, "pays_off": best["compressor"] != "dense" and margin >= PAYS_OFF_MARGIN,
            "does_not_know": DOES_NOT_KNOW, "methods": rows}


def _shapes_of(shapes: Any) -> List[List[int]]:
    """A module's trainable parameters' shapes, or the shapes given; a scalar is [1]."""
    parameters = getattr(shapes, "parameters", None)
    if parameters is not None:
        shapes = [p.shape for p in parameters() if p.requires_grad]
    return [[int(d) for d in s] or [1] for s in shapes]


def plan(shapes: Union["torch.nn.Module", Sequence[Sequence[int]]], step_seconds: float, workers: int,
         link_gbps: float, total_steps: int, *, alpha: float = 1e-4) -> Dict[str, Any]:
    """`plan = "auto"` (ALGORITHMS.md §2.5): the plan of local updates the
    core's rule chooses for a model of `shapes` (or a torch module) whose
    communication-free step, measured, takes `step_seconds`, among `workers`
    on a link of `link_gbps` Gbit/s, over `total_steps` inner steps.

    Returns `{"lines", "local_updates", "local_step_seconds"}`: each decision
    with its reason (one line each), `LocalUpdates`' keyword arguments that
    run the plan (`LocalUpdates(model, opt, **p["local_updates"])`), and the
    predicted inner step. `LocalUpdates(..., plan="auto")` calls this on rank
    0 and hands its choice to every rank.
    """
    dims = _shapes_of(shapes)
    return _core.plan(dims, number("step_seconds", step_seconds), whole("workers", workers),
                      number("link_gbps", link_gbps) * 1e9, whole("total_steps", total_steps),
                      alpha=number("alpha", alpha))
