"""Bad options raise a Python exception naming the option; a NaN stops every
worker or makes every worker skip the step; nothing crashes the interpreter."""
import pytest

import gradcomp
import gradcomp.torch as gt


@pytest.mark.parametrize("name,options,needle", [
    ("topk", {"densty": 0.1}, "densty"),
    ("topk", {"density": 2.0}, "density"),
    ("topk", {"density": "a lot"}, "density"),
    ("powersgd", {"rank": 0}, "rank"),
    ("qsgd", {"levels": -1}, "levels"),
    ("nosuch", {}, "nosuch"),
    ("topk", {"granularity": "sideways"}, "sideways"),
    ("topk", {"topology": "parameter-server"}, "parameter server"),
    ("topk", {"topology": "allreduce"}, "topology"),
    ("esgd", {}, "esgd"),
    ("topk", {"memory": "elephant"}, "elephant"),
    ("topk", {"density": float("nan")}, "density"),
])
def test_bad_options_name_the_option(name, options, needle):
    with pytest.raises(ValueError, match=needle):
        gt.hook(name, **options)


def test_hook_level_options_are_checked():
    with pytest.raises(ValueError, match="on_nonfinite"):
        gt.hook("topk", on_nonfinite="ignore")
    with pytest.raises(ValueError, match="stats_every"):
        gt.hook("topk", stats_every=-1)
    with pytest.raises(ValueError, match="lr"):
        gt.hook("topk", lr=0)
    with pytest.raises(TypeError, match="name"):
        gt.hook(3)


def test_a_state_of_another_configuration_is_refused():
    a, _ = gt.hook("topk", density=0.1)
    b, _ = gt.hook("topk", density=0.2)
    with pytest.raises(ValueError, match="another configuration"):
        b.load_state_dict(a.state_dict())


def test_nan_stops_every_worker(ddp):
    case = {"id": "nan", "name": "topk", "options": {"density": 0.1}, "steps": 6, "nan_at": 3, "nan_rank": 1}
    ranks = ddp([case], 2)
    for r in ranks:
        err = r["nan"].get("error", "")
        assert "FloatingPointError" in err and "step 3" in err and "[1]" in err, err


def test_nan_skip_skips_the_step_on_every_worker(ddp):
    case = {"id": "nan", "name": "topk", "options": {"density": 0.1}, "steps": 6, "nan_at": 3, "nan_rank": 1,
            "on_nonfinite": "skip"}
    ranks = ddp([case], 2)
    for r in ranks:
        assert "error" not in r["nan"], r["nan"]["error"]
        assert r["nan"]["skipped_steps"] == 1
    assert ranks[0]["nan"]["digest"] == ranks[1]["nan"]["digest"]


def test_compressor_api_errors():
    with pytest.raises(ValueError, match="rounds"):
        gradcomp.compressor("powersgd", (8, 8))
    c = gradcomp.compressor("topk", (16,), density=0.25)
    with pytest.raises(ValueError, match="16"):
        c.compress([1.0] * 3, step=0)
    good = c.compress([1.0] * 16, step=0)
    with pytest.raises(ValueError, match="message 1"):
        c.aggregate([good, good[:-3]])
    with pytest.raises(ValueError, match="message 0"):
        c.aggregate([b"\x00" * 20])
    with pytest.raises(ValueError, match="at least one"):
        c.aggregate([])
