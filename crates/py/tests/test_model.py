"""The network model from Python: gradcomp-exchange's predict on a model's shapes."""
from typing import Any, Dict
import pytest
import torch

import gradcomp
import gradcomp.torch as gt

SHAPES = [[500, 800], [500], [10, 500], [10]]


def test_slow_links_favour_compression_and_fast_ones_less() -> None:
    slow = gradcomp.model(SHAPES, compute_seconds=0.01, workers=16, link_gbps=0.1)
    fast = gradcomp.model(SHAPES, compute_seconds=0.01, workers=16, link_gbps=100)
    assert slow["pays_off"]
    times = [m["step_seconds"] for m in slow["methods"]]
    assert times == sorted(times)
    dense = {m["method"]: m for m in slow["methods"]}["dense (allreduce)"]
    assert dense["speedup_over_dense"] == 1.0
    assert dense["bytes_per_worker"] == 4 * (500 * 800 + 500 + 10 * 500 + 10)
    best_slow = slow["best"]["speedup_over_dense"]
    best_fast = fast["best"]["speedup_over_dense"]
    assert best_slow > best_fast


def test_one_worker_never_pays_for_compression() -> None:
    one = gradcomp.model(SHAPES, compute_seconds=0.01, workers=1, link_gbps=1)
    dense = {m["method"]: m for m in one["methods"]}["dense (allreduce)"]
    assert dense["step_seconds"] == pytest.approx(0.01, rel=0.5)


def test_from_a_torch_module() -> None:
    net = torch.nn.Sequential(torch.nn.Linear(800, 500), torch.nn.Linear(500, 10))
    r = gradcomp.model(net, compute_seconds=0.01, workers=8, link_gbps=1)
    assert {m["compressor"] for m in r["methods"]} >= {"dense", "topk", "powersgd", "terngrad"}
    shapes = gradcomp.model([list(p.shape) for p in net.parameters()], compute_seconds=0.01, workers=8, link_gbps=1)
    def by_method(res: Any) -> Any:
        return {m["method"]: m["bytes_per_worker"] for m in res["methods"]}
    assert by_method(r) == by_method(shapes)
    assert gt.model is gradcomp.model  # one entry


@pytest.mark.parametrize("kwargs,needle", [
    ({"workers": 0}, "workers"),
    ({"link_gbps": 0}, "link"),
    ({"compute_seconds": -1}, "compute_seconds"),
    ({"density": 2}, "density"),
    ({"workers": True}, "workers"),
    ({"workers": -2}, "workers"),
    ({"link_gbps": True}, "link_gbps"),
    ({"compute_seconds": "fast"}, "compute_seconds"),
    ({"alpha": None}, "alpha"),
    ({"period": 0}, "period"),
    ({"period": 8, "fragments": 9}, "fragments"),
    ({"period": 8, "delay": 8}, "delay"),
    ({"period": 8, "fragments": 0}, "fragments"),
])
def test_bad_arguments_name_themselves(kwargs: Any, needle: Any) -> None:
    args: Any = dict(shapes=SHAPES, compute_seconds=0.01, workers=4, link_gbps=1)
    args.update(kwargs)
    with pytest.raises(ValueError, match=needle):
        gradcomp.model(**args)


def test_the_model_ranks_only_what_the_hook_runs_and_states_its_margin() -> None:
    r = gradcomp.model(SHAPES, compute_seconds=0.01, workers=16, link_gbps=0.1)
    assert not any("parameter server" in m["method"] for m in r["methods"]), [m["method"] for m in r["methods"]]
    assert r["margin"] == r["best"]["speedup_over_dense"]
    assert "accuracy" in r["does_not_know"]
    # A method a few percent faster than dense does not "pay off": the model cannot tell them apart.
    close = gradcomp.model(SHAPES, compute_seconds=100.0, workers=2, link_gbps=100)
    assert close["margin"] < 1.1 and not close["pays_off"], close["margin"]


def test_local_updates_are_priced_per_inner_step() -> None:
    """Local updates at H = 32 on a slow link: one round of the model per period,
    so dense's bytes once per 32 inner steps and a step near the compute time."""
    sync = gradcomp.model(SHAPES, compute_seconds=0.05, workers=4, link_gbps=0.1)
    local = gradcomp.model(SHAPES, compute_seconds=0.05, workers=4, link_gbps=0.1, period=32, fragments=2, delay=1)
    dense = {m["method"]: m for m in local["methods"]}["dense (allreduce)"]
    sync_dense = {m["method"]: m for m in sync["methods"]}["dense (allreduce)"]
    assert dense["local_bytes_per_period"] == dense["bytes_per_worker"]
    assert 0.05 <= dense["local_step_seconds"] < sync_dense["step_seconds"]
    assert "local_step_seconds" not in sync_dense


def test_the_plan_says_why_and_gives_local_updates_arguments() -> None:
    """`gradcomp.plan`: one line per decision, and LocalUpdates' keyword
    arguments; a slow link takes a longer period or more fragments than a
    fast one, and bad arguments are named."""
    fast = gradcomp.plan(SHAPES, step_seconds=0.05, workers=4, link_gbps=100, total_steps=800)
    slow = gradcomp.plan(SHAPES, step_seconds=0.05, workers=4, link_gbps=0.01, total_steps=800)
    assert len(fast["lines"]) == 5 and all("\n" not in line for line in fast["lines"]), fast
    kw = fast["local_updates"]
    assert {"period", "fragments", "delay", "outer", "compressor", "topology"} <= set(kw), kw
    # No synchronous phase: on the tuning seed one cost steps (ALGORITHMS.md §2.5).
    assert kw["compressor"] == "fp4" and "sync_steps" not in kw and kw["period"] >= 16, kw
    assert (kw["outer"], kw["outer_warmup_rounds"]) == ("nesterov", 8), kw
    # A run of fewer outer rounds than Nesterov needs (28) averages.
    short = gradcomp.plan(SHAPES, step_seconds=0.05, workers=4, link_gbps=100, total_steps=300)
    assert (short["local_updates"]["outer"], short["local_updates"]["outer_warmup_rounds"]) == ("sgd", 0), short
    s = slow["local_updates"]
    assert (s["period"], s["fragments"], s["delay"]) > (kw["period"], kw["fragments"], kw["delay"]), (s, kw)
    for args, needle in (({"step_seconds": 0.0}, "step_seconds"), ({"workers": 1}, "workers"),
                         ({"total_steps": 0}, "total_steps"), ({"link_gbps": -1.0}, "link_gbps")):
        call: Dict[str, Any] = {"step_seconds": 0.05, "workers": 4, "link_gbps": 1.0, "total_steps": 100, **args}
        with pytest.raises(ValueError, match=needle):
            gradcomp.plan(SHAPES, **call)
