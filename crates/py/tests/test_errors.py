"""Bad options raise a Python exception naming the option; a NaN stops every
worker or makes every worker skip the step; nothing crashes the interpreter."""
from typing import Any
import pytest

import gradcomp
import gradcomp.torch as gt


@pytest.mark.parametrize("name,options,needle", [
    ("topk", {"densty": 0.1}, "densty"),
    ("topk", {"density": 2.0}, "density"),
    ("topk", {"density": "a lot"}, "density"),
    ("powersgd", {"rank": 2}, "matrix_approximation_rank"),
    ("powersgd", {"matrix_approximation_rank": 0}, "rank"),
    ("qsgd", {"levels": -1}, "levels"),
    ("nosuch", {}, "nosuch"),
    ("topk", {"granularity": "sideways"}, "sideways"),
    ("topk", {"topology": "parameter-server"}, "parameter server"),
    ("topk", {"topology": "allreduce"}, "topology"),
    ("fp4", {"topology": "reduce-scatter"}, "LocalUpdates"),
    ("signsgd", {"topology": "reduce-scatter"}, "topology"),
    ("esgd", {}, "esgd"),
    ("topk", {"memory": "elephant"}, "elephant"),
    ("topk", {"density": float("nan")}, "density"),
])
def test_bad_options_name_the_option(name: Any, options: Any, needle: Any) -> None:
    with pytest.raises(ValueError, match=needle):
        gt.hook(name, **options)


def test_hook_level_options_are_checked() -> None:
    with pytest.raises(ValueError, match="on_nonfinite"):
        gt.hook("topk", on_nonfinite="ignore")
    with pytest.raises(ValueError, match="stats_every"):
        gt.hook("topk", stats_every=-1)
    with pytest.raises(ValueError, match="lr"):
        gt.hook("topk", lr=0)
    with pytest.raises(TypeError, match="name"):
        gt.hook(3)  # type: ignore[arg-type]  # refused at run time: the test


def test_a_state_of_another_configuration_is_refused() -> None:
    a, _ = gt.hook("topk", density=0.1)
    b, _ = gt.hook("topk", density=0.2)
    with pytest.raises(ValueError, match="another configuration"):
        b.load_state_dict(a.state_dict())


def test_nan_stops_every_worker(ddp: Any) -> None:
    case = {"id": "nan", "name": "topk", "options": {"density": 0.1}, "steps": 6, "nan_at": 3, "nan_rank": 1}
    ranks = ddp([case], 2)
    for r in ranks:
        err = r["nan"].get("error", "")
        assert "NaN or Inf" in err and "step 3" in err and "[1]" in err, err


def test_nan_skip_skips_the_step_on_every_worker(ddp: Any) -> None:
    case = {"id": "nan", "name": "topk", "options": {"density": 0.1}, "steps": 6, "nan_at": 3, "nan_rank": 1,
            "on_nonfinite": "skip"}
    ranks = ddp([case], 2)
    for r in ranks:
        assert "error" not in r["nan"], r["nan"]["error"]
        assert r["nan"]["skipped_steps"] == 1
    assert ranks[0]["nan"]["digest"] == ranks[1]["nan"]["digest"]


def test_compressor_api_errors() -> None:
    with pytest.raises(ValueError, match="rounds"):
        gradcomp.compressor("powersgd", (8, 8))
    c = gradcomp.compressor("topk", (16,), density=0.25)
    with pytest.raises(ValueError, match="16"):
        c.compress([1.0] * 3, step=0)
    good = c.compress([1.0] * 16, step=0)
    with pytest.raises(ValueError, match=r"messages\[1\]"):
        c.aggregate([good, good[:-3]])
    with pytest.raises(ValueError, match=r"messages\[0\]"):
        c.aggregate([b"\x00" * 20])
    with pytest.raises(ValueError, match="at least one"):
        c.aggregate([])


# -- the bytes API refuses what it cannot combine (issue #35) ------------------

SINGLE_MESSAGE = ["dense", "fp16", "terngrad", "qsgd", "onebit", "topk", "gaussiank", "dgck", "trimmedk",
                  "randk", "threshold", "signsgd", "signum", "efsignsgd", "natural", "eightbit", "fp4",
                  "sparseloco", "dct-topk"]


def test_messages_of_another_compressor_are_refused() -> None:
    import numpy as np
    x = np.linspace(-1, 1, 48, dtype=np.float32)
    made = {n: gradcomp.compressor(n, (6, 8)).compress(x, 0) for n in SINGLE_MESSAGE}
    for mine in SINGLE_MESSAGE:
        c = gradcomp.compressor(mine, (6, 8))
        for theirs, msg in made.items():
            if theirs == mine:
                c.aggregate([msg, msg])
            else:
                with pytest.raises(ValueError, match=r"messages\[1\] was made by another compressor"):
                    c.aggregate([made[mine], msg])


def test_messages_of_another_configuration_or_shape_are_refused() -> None:
    import numpy as np
    x = np.linspace(-1, 1, 48, dtype=np.float32)
    mine = gradcomp.compressor("topk", (6, 8), density=0.1)
    other_density = gradcomp.compressor("topk", (6, 8), density=0.2).compress(x, 0)
    other_shape = gradcomp.compressor("topk", (8, 6), density=0.1).compress(x, 0)
    for msg in (other_density, other_shape):
        with pytest.raises(ValueError, match=r"messages\[0\]"):
            mine.aggregate([msg])


@pytest.mark.parametrize("name", SINGLE_MESSAGE)
def test_a_non_finite_input_is_refused_naming_the_element(name: Any) -> None:
    import numpy as np
    x = np.ones(12, dtype=np.float32)
    x[5] = np.nan
    with pytest.raises(ValueError, match="array: element 5 is NaN"):
        gradcomp.compressor(name, 12).compress(x, 0)


@pytest.mark.parametrize("arg,kwargs", [
    ("shape", {"shape": (-3, 4)}),
    ("shape", {"shape": (True, 4)}),
    ("rank", {"rank": -1}),
    ("rank", {"rank": True}),
    ("seed", {"seed": -5}),
])
def test_argument_errors_name_the_argument(arg: Any, kwargs: Any) -> None:
    kwargs = {"shape": 12, **kwargs}
    with pytest.raises(ValueError, match=f"{arg}: "):
        gradcomp.compressor("topk", **kwargs)


def test_a_negative_or_boolean_step_is_refused() -> None:
    import numpy as np
    c = gradcomp.compressor("topk", 12)
    for step in (-1, True):
        with pytest.raises(ValueError, match="step: "):
            c.compress(np.ones(12, dtype=np.float32), step)


def test_hook_options_are_not_booleans_and_the_group_is_a_group() -> None:
    with pytest.raises(ValueError, match="lr"):
        gt.hook("topk", lr=True)
    with pytest.raises(ValueError, match="stats_every"):
        gt.hook("topk", stats_every=True)
    with pytest.raises(TypeError, match="process_group"):
        gt.hook("topk", process_group="gloo")  # type: ignore[arg-type]  # refused at run time: the test


TWO_MODELS = r'''
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import gradcomp.torch as gt
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=0, world_size=1)
state, hook = gt.hook("topk", density=0.5)
a, b = DDP(torch.nn.Linear(4, 2)), DDP(torch.nn.Linear(4, 2))
a.register_comm_hook(state, hook)
b.register_comm_hook(state, hook)
a(torch.ones(3, 4)).sum().backward()
try:
    b(torch.ones(3, 4)).sum().backward()
    print("accepted")
except Exception as e:
    print("refused:", e)
'''


def test_a_state_registered_with_two_models_is_refused() -> None:
    from conftest import free_port, run_ranks
    out = run_ranks(TWO_MODELS % free_port(), 1, timeout=120)[0]
    assert "refused:" in out.out and "second DDP model" in out.out, out.out + out.err


# -- every option reaches the core or is refused (issue #35) -------------------

@pytest.mark.parametrize("key,value", [("warmup", {"densities": [0.5]}), ("local_clip", 1.0)])
def test_the_hook_refuses_options_of_gradcomps_own_step(key: Any, value: Any) -> None:
    with pytest.raises(ValueError, match=f"{key}: "):
        gt.hook("topk", density=0.1, **{key: value})


@pytest.mark.parametrize("key,value", [("granularity", "global"), ("exclude", {"biases": True}),
                                       ("warmup", {"densities": [0.5]}), ("local_clip", 1.0),
                                       ("topology", "allgather"), ("residual", "lr-scaled")])
def test_the_bytes_api_refuses_what_one_tensor_has_not(key: Any, value: Any) -> None:
    with pytest.raises(ValueError, match=f"{key}: "):
        gradcomp.compressor("topk", 12, density=0.25, **{key: value})


def test_dgc_momentum_reaches_the_bytes_api() -> None:
    import numpy as np
    sent = {}
    for m in (0.0, 0.9):
        c = gradcomp.compressor("dgck", 64, density=0.25, dgc_momentum=m)
        msgs = [c.compress(np.sin(np.arange(64, dtype=np.float32) * (s + 1)), s) for s in range(3)]
        sent[m] = msgs[-1]
    assert sent[0.0] != sent[0.9]
    with pytest.raises(ValueError, match="dgc_momentum"):
        gradcomp.compressor("dgck", 64, dgc_momentum=1.5)


def test_a_powersgd_hook_that_stays_dense_for_1000_steps_warns() -> None:
    import warnings
    with pytest.warns(UserWarning, match="first 1000 steps"):
        gt.hook("powersgd", matrix_approximation_rank=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gt.hook("powersgd", matrix_approximation_rank=2, start_iter=10)
        gt.hook("topk", density=0.1)


LOW_PRECISION = r'''
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import gradcomp.torch as gt
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=0, world_size=1)
for dtype in (torch.bfloat16, torch.float16):
    torch.manual_seed(0)
    plain = torch.nn.Linear(16, 4).to(dtype)
    x = torch.randn(8, 16).to(dtype)
    plain(x).pow(2).sum().backward()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 4).to(dtype))
    state, hook = gt.hook("dense")
    model.register_comm_hook(state, hook)
    model(x).pow(2).sum().backward()
    for a, b in zip(plain.parameters(), model.parameters()):
        assert b.grad.dtype == dtype and torch.equal(a.grad, b.grad), (dtype, a.grad, b.grad)
    assert state.last_step()["bytes_sent"] > 0
print("ok")
'''


def test_bf16_and_fp16_buckets_are_taken() -> None:
    from conftest import free_port, run_ranks
    out = run_ranks(LOW_PRECISION % free_port(), 1, timeout=120)[0]
    assert out.out.strip().endswith("ok"), out.out + out.err


def test_the_hook_has_the_annotations_ddp_accepts() -> None:
    import inspect
    import torch
    import torch.distributed as dist
    sig = inspect.signature(gt.exchange_hook)
    assert sig.parameters["bucket"].annotation is dist.GradBucket  # type: ignore[attr-defined]
    assert sig.return_annotation == torch.futures.Future[torch.Tensor]


FLAG_INSIDE = r'''
import sys, threading, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import gradcomp.torch as gt
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=rank, world_size=2)
calls = {"all_reduce": 0, "all_gather": 0, "broadcast": 0}
def counting(name, f):
    def wrapped(*a, **k):
        if threading.current_thread().name.startswith("gradcomp-hook"):
            calls[name] += 1
        return f(*a, **k)
    return wrapped
for name in calls:
    setattr(dist, name, counting(name, getattr(dist, name)))
for method, options in (("topk", {"density": 0.1}), ("dense", {}), ("terngrad", {}), ("qsgd", {}),
                        ("powersgd", {"matrix_approximation_rank": 1, "start_iter": 2}), ("fp16", {})):
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(64, 64))
    state, hook = gt.hook(method, on_nonfinite="skip", **options)
    model.register_comm_hook(state, hook)
    for step in range(4):
        for k in calls:
            calls[k] = 0
        x = torch.randn(4, 64)
        if step == 3 and rank == 1:
            x[0, 0] = float("nan")
        model(x).pow(2).sum().backward()
        last = state.last_step()
        print(method, step, calls["all_reduce"], calls["all_gather"], calls["broadcast"],
              last["nonfinite_check_bytes"], last["skipped"], last["nonfinite_workers"], len(last["buckets"]))
    print("skipped", method, state.skipped_steps)
'''


def test_the_nonfinite_flag_travels_inside_the_first_collective() -> None:
    """No round of its own: Top-k's bucket is its two all_gathers (sizes,
    then messages: one flag byte more), dense's one all_reduce (a float32
    slot per worker more); a NaN on rank 1 is seen by both, whatever the
    method's first collective."""
    from conftest import free_port, run_ranks
    script = FLAG_INSIDE % free_port()
    for out, err, _ in run_ranks(script, 2, timeout=180):
        lines = out.splitlines()
        assert "topk 0 0 2 0 1 False [] 1" in lines, out + err
        assert "topk 3 0 2 0 1 True [1] 1" in lines, out + err
        assert "dense 0 1 0 0 8 False [] 1" in lines, out + err
        assert "dense 3 1 0 0 8 True [1] 1" in lines, out + err
        for method in ("topk", "dense", "terngrad", "qsgd", "powersgd", "fp16"):
            assert f"skipped {method} 1" in lines, out + err
            assert any(l.startswith(f"{method} 3 ") and l.endswith(" True [1] 1") for l in lines), out + err
