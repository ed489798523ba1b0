"""The hook's aggregate equals the Rust library's on the same gradients.

A two-worker DDP run records every bucket's input and output (small buckets,
so the MLP is cut in several, and DDP rebuilds them after the first step);
`gradcomp._core.replay` runs the same calls through gradcomp-exchange's exchange on
its in-process collective, and every output must match bit for bit. With two
workers every sum has one order, so gloo's and the threads' agree exactly.
"""
from typing import Any
import numpy as np
import pytest

from gradcomp import _core

CASES = [
    ("topk", {"density": 0.05}),
    ("terngrad", {}),
    ("powersgd", {"matrix_approximation_rank": 2, "start_iter": 2}),
    ("dgck", {"density": 0.05}),
    ("qsgd", {}),
    ("signsgd", {}),
    ("fp16", {}),
    ("randk", {"density": 0.05}),
]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: Any) -> Any:
    from conftest import run_ddp
    cases = [{"id": n, "name": n, "options": o, "steps": 6, "record": True, "bucket_cap_mb": 0.01}
             for n, o in CASES]
    return run_ddp(cases, 2, tmp_path_factory.mktemp("replay"))


@pytest.mark.parametrize("name,options", CASES, ids=[c[0] for c in CASES])
def test_hook_equals_the_rust_library(recorded: Any, name: Any, options: Any) -> None:
    ranks = [r[name] for r in recorded]
    for r in ranks:
        assert "error" not in r, r.get("error")
    calls = ranks[0]["calls"]
    layouts = {tuple(c["keys"]) for c in calls}
    assert len(layouts) > 2, "the run should cut the model in several buckets, and rebuild them"
    outs, _ = _core.replay(
        _core.hook_config(name, options),
        [c["keys"] for c in calls],
        [c["shapes"] for c in calls],
        [c["step"] for c in calls],
        [[np.asarray(c["grad"], dtype=np.float32) for c in r["calls"]] for r in ranks],
    )
    for rank, r in enumerate(ranks):
        for i, c in enumerate(r["calls"]):
            hook = np.asarray(c["out"], dtype=np.float32)
            assert np.array_equal(hook, outs[rank][i]), f"{name}: rank {rank}, call {i} (step {c['step']})"
