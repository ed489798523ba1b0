"""Local updates with an outer optimizer (DiLoCo) for PyTorch: `LocalUpdates`.

Two gloo processes, each with its own replica and AdamW: the loss falls, the
replicas agree after every round, the outer Nesterov step is torch's SGD on
the averaged change, and a checkpoint resumes bit-exactly.
"""
from typing import Any, Dict, List

import pytest

import gradcomp
import gradcomp.torch as gt

SCRIPT = r'''
import sys, json, torch, torch.distributed as dist
import gradcomp.torch as gt
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=rank, world_size=2)
def data(step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(32, 8, generator=g)
    return x, x @ torch.arange(8.0).reshape(8, 1) / 8
def run(outer, compressor, steps, resume=None, save_at=None, **options):
    torch.manual_seed(rank)            # the replicas start apart: rank 0's model is broadcast
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    lu = gt.LocalUpdates(model, opt, period=4, outer=outer, compressor=compressor, **options)
    start, saved = 0, None
    if resume is not None:
        model.load_state_dict(resume["model"]); opt.load_state_dict(resume["opt"]); lu.load_state_dict(resume["lu"])
        start = resume["step"]
    losses, agree = [], []
    for step in range(start, steps):
        x, y = data(step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward(); opt.step(); opt.zero_grad(); lu.step()
        losses.append(loss.item())
        if (step + 1) %% 4 == 0 and not options.get("fragments") and not options.get("overlap"):
            w = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
            other = w.clone(); dist.broadcast(other, src=0)
            agree.append(bool(torch.equal(w, other)))
        if save_at == step + 1:
            import copy
            saved = {"model": copy.deepcopy(model.state_dict()), "opt": copy.deepcopy(opt.state_dict()),
                     "lu": copy.deepcopy(lu.state_dict()), "step": step + 1}
    w = [p.detach().reshape(-1).tolist() for p in model.parameters()]
    return losses, agree, w, saved, lu.last_round
out = {}
for label, outer, compressor, options in (
        ("nesterov-dense", "nesterov", "dense", {}), ("sgd-dense", "sgd", "dense", {}),
        ("nesterov-topk", "nesterov", "topk", {"density": 0.5}),
        # Streaming: fragment 1 (the bias) starts at 19 (τ 1) or 18 (τ 2) and
        # merges at 20, so the checkpoint at 19 is taken with its round in flight.
        ("streaming", "nesterov", "dense", {"fragments": 2, "delay": 1}),
        ("streaming-topk", "nesterov", "topk", {"density": 0.5, "fragments": 2, "delay": 2, "mix": 0.25}),
        # Eager (with averaging: with Nesterov at lr 0.7, momentum 0.9 a round's
        # staleness makes this model oscillate, ALGORITHMS.md §2.3): the round
        # started at 16 is in flight at the checkpoint at 19.
        ("eager", "sgd", "dense", {"overlap": "eager"}),
        # Eager rounds per fragment: fragment 1's round started at 19 (τ 1) is in
        # flight at the checkpoint and merges, on the fresh change, at 20.
        ("eager-streaming", "sgd", "dense", {"overlap": "eager", "fragments": 2, "delay": 1})):
    losses, agree, w, saved, last = run(outer, compressor, 40, save_at=19, **options)
    _, _, w2, _, _ = run(outer, compressor, 40, resume=saved, **options)
    out[label] = {"first": sum(losses[:4]) / 4, "last": sum(losses[-4:]) / 4,
                                     "agree": all(agree), "rounds": len(agree), "resumed_equal": w == w2,
                                     "bytes": last["bytes_sent"]}
print("RESULT", json.dumps(out))
'''


def test_local_updates_learn_agree_and_resume_bit_exactly() -> None:
    from conftest import free_port, run_ranks
    script = SCRIPT % free_port()
    import json
    for out, err, _ in run_ranks(script, 2):
        line = next((l for l in out.splitlines() if l.startswith("RESULT ")), None)
        assert line is not None, out + err
        res = json.loads(line[len("RESULT "):])
        for name, r in res.items():
            assert r["last"] < 0.5 * r["first"], (name, r)
            if not name.startswith(("streaming", "eager")):
                assert r["agree"] and r["rounds"] == 10, (name, r)
            assert r["resumed_equal"], (name, "a resumed run must end bit-exactly where the whole run did")
        # Dense: 4 bytes per parameter (9 of them) per round, and one 4-byte slot per worker
        # carrying the non-finite flags inside the allreduce; Top-k's messages (index, value,
        # header per tensor) cost more than that on so small a model, and are counted.
        assert res["nesterov-dense"]["bytes"] == 36 + 8 and res["sgd-dense"]["bytes"] == 36 + 8, res
        assert res["nesterov-topk"]["bytes"] > 0, res
        # A Streaming round carries one fragment: the weight's 8 values or the bias's 1.
        assert res["streaming"]["bytes"] in (32 + 8, 4 + 8), res


WORLD_OF_ONE = r'''
import json, torch, torch.distributed as dist
import gradcomp.torch as gt
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=0, world_size=1)
m = torch.nn.Linear(2, 1); o = torch.optim.SGD(m.parameters(), lr=0.1)
for kwargs, needle in (({"period": 0}, "period"), ({"period": True}, "period"), ({"period": 4, "outer": "adam"}, "outer"),
                       ({"period": 4, "outer_lr": -1.0}, "outer.lr"), ({"period": 4, "outer_momentum": 1.0}, "outer.momentum"),
                       ({"period": 4, "compressor": "esgd"}, "esgd"), ({"period": 4, "gamma": 0.5}, "gamma"),
                       ({"period": 4, "compressor": "topk", "dgc_momentum": 0.5}, "dgc_momentum"),
                       ({"period": 4, "bucket_mb": 1.0}, "bucket_mb"),
                       ({"period": 4, "delay": 4}, "delay"), ({"period": 4, "fragments": 3}, "fragments"),
                       ({"period": 4, "fragments": 0}, "fragments"), ({"period": 4, "mix": 1.5}, "mix"),
                       ({"period": 4, "mix": "half"}, "mix"), ({"period": 4, "delay": -1}, "delay"),
                       ({"period": 4, "compressor": "signsgd"}, "majority vote"),
                       ({"period": 4, "overlap": "sideways"}, "overlap"),
                       ({"period": 4, "overlap": "eager", "fragments": 2}, "overlap"),
                       ({"period": 4, "overlap": "delayed", "delay": 1}, "overlap"),
                       ({"period": 4, "round_timeout": 0}, "round_timeout"),
                       ({"period": 4, "round_timeout": "5"}, "round_timeout"),
                       ({"period": 4, "outer_decay_rounds": 2}, "decay_rounds"),
                       ({"period": 4, "outer_decay_rounds": 5, "outer_rounds": 3}, "decay_rounds"),
                       ({"period": 4, "warmup_steps": -1}, "warmup_steps"),
                       ({"period": 4, "average_buffers": 1}, "average_buffers"),
                       ({"period": 4, "sync_steps": 2, "sync_compressor": "nope"}, "sync_compressor"),
                       ({"period": 4, "sync_steps": 2, "sync_compressor": "topk", "sync_options": {"density": 2.0}},
                        "sync_compressor.density"),
                       ({"period": 4, "sync_compressor": "topk"}, "sync_steps"),
                       ({"period": 4, "sync_steps": 2, "warmup_steps": 2}, "warmup_steps"),
                       ({"period": 4, "period_doubles_at": [8, 4]}, "period_rule"),
                       ({"period": 4, "period_doubles_at": 8}, "period_doubles_at"),
                       ({"period": 4, "period_qsr_alpha": 0.1}, "lr_at"),
                       ({"period": 4, "period_qsr_alpha": 0.1, "lr_at": lambda t: 0.1}, "total_steps"),
                       ({"period": 4, "period_qsr_alpha": -1.0, "lr_at": lambda t: 0.1, "total_steps": 8},
                        "period_rule.alpha"),
                       ({"period": 4, "lr_at": lambda t: 0.1, "total_steps": 8}, "period_qsr_alpha"),
                       ({"period": 4, "period_qsr_alpha": 0.1, "lr_at": lambda t: float("nan"), "total_steps": 8},
                        "lr_at"),
                       ({"period": 4, "inner_state_every": -1}, "inner_state_every"),
                       ({}, "period"), ({"plan": "auto", "link_gbps": 1.0, "total_steps": 8}, "step_seconds"),
                       ({"plan": "manual", "step_seconds": 0.1, "link_gbps": 1.0, "total_steps": 8}, "plan")):
    try:
        gt.LocalUpdates(m, o, **kwargs)
        print("accepted", kwargs)
    except ValueError as e:
        print("refused", needle in str(e), needle, e)
# QSR: H = max(2, (0.2/lr)²): 4 while lr is 0.1, 16 from step 20 (lr 0.05), the last cut at the run's end.
q = gt.LocalUpdates(m, o, period=2, period_qsr_alpha=0.2, lr_at=lambda t: 0.1 if t < 20 else 0.05, total_steps=60)
print("qsr", json.dumps(json.loads(q.config)["strategy"]["period_rule"]["periods"]),
      [t for t in range(1, 60) if q._rust.merges(t)])
lu = gt.LocalUpdates(m, o, period=4)
with torch.no_grad():
    m.weight[0, 0] = float("nan")
for _ in range(3):
    lu.step()
try:
    lu.step()
    print("accepted nan")
except FloatingPointError as e:
    print("refused True nan", e)
'''


def test_bad_local_updates_arguments_name_themselves() -> None:
    from conftest import free_port, run_ranks
    out = run_ranks(WORLD_OF_ONE % free_port(), 1, timeout=120)[0]
    lines: List[str] = [l for l in out.out.splitlines() if l.startswith(("refused", "accepted"))]
    assert len(lines) == 41, out.out + out.err
    for line in lines:
        assert line.startswith("refused True"), line
    qsr = next(l for l in out.out.splitlines() if l.startswith("qsr "))
    assert qsr == "qsr [[0, 4], [20, 16], [52, 9]] [4, 8, 12, 16, 20, 36, 52]", qsr


def test_local_updates_is_exported() -> None:
    assert gt.LocalUpdates.__module__ == "gradcomp._local"
    assert "LocalUpdates" in gt.__all__
    assert gradcomp.__version__


RECORD = r'''
import sys, json, torch, torch.distributed as dist
import gradcomp._local as local
import gradcomp.torch as gt
rank, out, kwargs, world = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=rank, world_size=world)
real = local._core.LocalUpdates
# Per inner step with round work: the model as the front handed it to the
# core, and as the core left it (a round in flight merged, the rounds
# starting here started on the core's round thread).
calls = {}
class Recording:
    def __init__(self, *args, **kwargs):
        self.inner = real(*args, **kwargs)
        self.due, self.wait, self.state, self.load = self.inner.due, self.inner.wait, self.inner.state, self.inner.load
        self.warming, self.sync_step, self.starts = self.inner.warming, self.inner.sync_step, self.inner.starts
        self.averages_inner_state, self.average_state = self.inner.averages_inner_state, self.inner.average_state
    def average(self, step, host, comm):
        before = host.copy()
        r = self.inner.average(step, host, comm)
        calls[step] = {"before": before.tolist(), "after": host.tolist()}
        return r
local._core.LocalUpdates = Recording
torch.manual_seed(rank)
model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
opt = torch.optim.AdamW(model.parameters(), lr=0.05)
opts = {k: v for k, v in {"compressor": "topk", "density": 0.3, **kwargs}.items() if v is not None}
lu = gt.LocalUpdates(model, opt, outer="nesterov", **opts)
for step in range(12):
    g = torch.Generator().manual_seed(100 * step + rank)
    x = torch.randn(16, 6, generator=g)
    torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)).backward()
    opt.step(); opt.zero_grad(); lu.step()
lu.close()
steps = sorted(calls)
json.dump({"config": lu.config, "shapes": [list(p.shape) for p in lu.params], "steps": steps,
           "calls": [calls[s] for s in steps]}, open(out + "/rank%%d.json" %% rank, "w"))
'''


@pytest.mark.parametrize("kwargs,rounds,world", [
    ({"period": 3}, 5, 2), ({"period": 4, "fragments": 2, "delay": 1}, 13, 2),
    ({"period": 4, "fragments": 4, "delay": 2, "mix": 0.3}, 13, 2),
    # The change in fp4 through the reduce-scatter: shards over 4 gloo ranks.
    ({"period": 3, "compressor": "fp4", "density": None, "topology": "reduce-scatter"}, 5, 4),
    # Eager outer steps: each round in flight through the whole next period,
    # or (with a delay) each fragment's through τ steps, on the round thread.
    ({"period": 3, "overlap": "eager"}, 5, 2), ({"period": 4, "fragments": 2, "delay": 1, "overlap": "eager"}, 13, 2),
    # Two synchronous steps first: the rounds at 2, 5, 8, 11.
    ({"period": 3, "warmup_steps": 2, "outer_warmup_rounds": 2}, 4, 2),
    # A phase through top-k with its memory, then H = 2 doubling at the first
    # boundary at or after step 5: the rounds at 2 (θ_outer recorded), 4, 6, 10.
    ({"period": 2, "sync_steps": 2, "sync_compressor": "topk", "sync_options": {"density": 0.5},
      "period_doubles_at": [5]}, 4, 2)])
def test_the_fronts_rounds_are_the_cores(tmp_path: Any, kwargs: Dict[str, Any], rounds: int, world: int) -> None:
    """`LocalUpdates`' rounds (blocking, and Streaming with its rounds on the
    core's round thread over a gloo group of their own), recorded on gloo
    ranks, replayed through the core's strategy as the burn front's handle
    calls it (`ModelAveraging::average`, its round thread over the in-process
    collective's second channel): the same models, bit for bit (the
    reduce-scatter's alltoallv over gloo included)."""
    import json
    import numpy as np
    from gradcomp import _core
    from conftest import free_port, run_ranks
    script = RECORD % free_port()
    outs = run_ranks(script, world, str(tmp_path), json.dumps(kwargs), str(world))
    recs = []
    for r in range(world):
        path = tmp_path / f"rank{r}.json"
        assert path.exists(), outs
        recs.append(json.loads(path.read_text()))
    calls = [rec["calls"] for rec in recs]
    assert all(rec["steps"] == recs[0]["steps"] for rec in recs) and len(calls[0]) == rounds, recs[0]["steps"]
    replayed = _core.replay_local(recs[0]["config"], recs[0]["shapes"], recs[0]["steps"],
                                  [[np.asarray(c["before"], dtype=np.float32) for c in w] for w in calls])
    for rank in range(world):
        for i, c in enumerate(calls[rank]):
            assert np.array_equal(np.asarray(c["after"], dtype=np.float32), replayed[rank][i]), (rank, i)
    if "fragments" not in kwargs and "overlap" not in kwargs:
        assert all(c[-1]["after"] == calls[0][-1]["after"] for c in calls), "every rank adopts the same model"
    if "overlap" in kwargs:
        assert calls[0][-1]["after"] != calls[1][-1]["after"], "eager: each rank's own change stands in for its part"


WARMUP = r'''
import sys, json, torch, torch.distributed as dist
import gradcomp.torch as gt
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=rank, world_size=2)
def gathered(t):
    ts = [torch.empty_like(t) for _ in range(2)]
    dist.all_gather(ts, t.contiguous())
    return ts
out = {}
for label, phase in (("True", {"warmup_steps": 3, "average_buffers": True}), ("False", {"warmup_steps": 3}),
                     ("topk", {"sync_steps": 3, "sync_compressor": "topk", "sync_options": {"density": 0.5}}),
                     ("inner", {"warmup_steps": 3, "inner_state_every": 1})):
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    lu = gt.LocalUpdates(model, opt, period=4, **phase)
    seen = []
    for step in range(7):
        g = torch.Generator().manual_seed(10 * step + rank)
        x = torch.randn(8, 4, generator=g)
        torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)).backward()
        opt.step(); opt.zero_grad(); lu.step()
        w = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        bn = torch.cat([model[1].running_mean, model[1].running_var])
        a, b = gathered(w)
        c, d = gathered(bn)
        e, f = gathered(torch.cat([opt.state[p]["momentum_buffer"].reshape(-1) for p in model.parameters()]))
        seen.append({"params": bool(torch.equal(a, b)), "buffers": bool(torch.equal(c, d)),
                     "moments": bool(torch.equal(e, f)), "bytes": [lu.bytes_sent, lu.bytes_received]})
    out[label] = seen
print("RESULT", json.dumps(out))
'''


def test_warm_up_steps_keep_replicas_equal_and_rounds_average_the_buffers() -> None:
    """Three synchronous steps (the gradients exchanged by the pre-hook
    through the core: averaged, or top-k at half density with its memory):
    the replicas stay equal through them, then step apart; the round at step
    7 makes them equal again, and with `average_buffers` the rounds (at 3
    and 7) make BatchNorm's running statistics equal too (each rank
    normalises its own batches, so they differ otherwise)."""
    import json
    from conftest import free_port, run_ranks
    for out, err, _ in run_ranks(WARMUP % free_port(), 2):
        line = next((l for l in out.splitlines() if l.startswith("RESULT ")), None)
        assert line is not None, out + err
        res = json.loads(line[len("RESULT "):])
        # The bytes count each warm-up step's gradient allreduce (25 parameters: 100
        # bytes, sent and received) and, with average_buffers, the buffers' allreduce
        # at each of the two rounds (6 running statistics: 24 bytes).
        assert [s["bytes"] for s in res["False"][:2]] == [[100, 100], [200, 200]], res
        assert [t - f for t, f in zip(res["True"][-1]["bytes"], res["False"][-1]["bytes"])] == [48, 48], res
        # `inner_state_every=1`: SGD's momentum (25 values, 100 bytes) averaged at the
        # end of the first period (step 7), not at the round that records θ_outer (3);
        # the synchronous phase's averaged gradients keep it equal before.
        assert [s["moments"] for s in res["inner"]] == [True, True, True, False, False, False, True], res
        assert [s["moments"] for s in res["False"]] == [True, True, True, False, False, False, False], res
        assert [t - f for t, f in zip(res["inner"][-1]["bytes"], res["False"][-1]["bytes"])] == [100, 100], res
        for avg, seen in res.items():
            assert [s["params"] for s in seen] == [True, True, True, False, False, False, True], (avg, seen)
        # Each rank's BatchNorm statistics are its own batches'; averaged at
        # the rounds (the first records θ_outer after the warm-up, at step 3).
        assert [s["buffers"] for s in res["True"]] == [False, False, True, False, False, False, True], res
        assert not any(s["buffers"] for s in res["False"]), res
        # Top-k's messages (half the values with their indices and a header per
        # tensor: more than the dense 100 bytes on this 25-value model), the same
        # on every step of the phase; the local steps after it send nothing but, at
        # the first round (step 3, recording θ_outer), its agreement check (48 bytes).
        topk = [s["bytes"][0] for s in res["topk"]]
        assert topk[0] not in (0, 100) and topk[:3] == [topk[0], 2 * topk[0], 3 * topk[0] + 48], res["topk"]
        assert topk[3:6] == [topk[2]] * 3, res["topk"]


def test_what_a_manager_does_not_run_is_refused_naming_it() -> None:
    """Under a manager (torchft's quorum each round) the overlap of a whole
    period, a delay past the next round's start and a compressed
    synchronous phase are refused, each naming its argument; what it runs
    passes (a dense phase, the buffers' and the inner state's averaging:
    test_local_membership)."""
    from gradcomp._local import _check_under_manager
    _check_under_manager(8, 1, 2, "none", 0, "dense")
    _check_under_manager(8, 0, 1, "none", 3, "dense")
    for args, needle in (((8, 4, 2, "none", 0, "dense"), "delay"), ((8, 0, 1, "eager", 0, "dense"), "overlap"),
                         ((8, 0, 1, "delayed", 0, "dense"), "overlap"),
                         ((8, 0, 1, "none", 3, "powersgd"), "sync_compressor")):
        with pytest.raises(ValueError, match=needle):
            _check_under_manager(*args)
    # plan="auto" under a manager needs the link: there is no group to probe before the first quorum.
    import torch
    from gradcomp._local import _auto
    with pytest.raises(ValueError, match="link_gbps"):
        _auto("auto", torch.nn.Linear(2, 2), None, object(), 4, 0.1, None, 100)


AUTO = r'''
import sys, json, torch, torch.distributed as dist
import gradcomp.torch as gt
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=rank, world_size=2)
torch.manual_seed(rank)
model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
opt = torch.optim.AdamW(model.parameters(), lr=0.05)
lu = gt.LocalUpdates(model, opt, plan="auto", step_seconds=0.01, link_gbps=0.1, total_steps=40)
losses = []
for step in range(40):
    g = torch.Generator().manual_seed(100 * step + rank)
    x = torch.randn(16, 6, generator=g)
    loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
    loss.backward(); opt.step(); opt.zero_grad(); lu.step(); losses.append(loss.item())
lu.close()
# No link given: a probe round over the group measures it, the same on every rank.
probed = gt.LocalUpdates(model, opt, plan="auto", step_seconds=0.01, total_steps=40)
# A plan chosen for a step of 1 s on a link of 10 Mbit/s (a round of this
# 1M-value model's fp4 change takes most of a second there), whose steps take
# milliseconds: decided again at the end of the second period, on every rank.
big = torch.nn.Linear(1024, 1024)
big_opt = torch.optim.SGD(big.parameters(), lr=0.01)
drift = gt.LocalUpdates(big, big_opt, plan="auto", step_seconds=1.0, link_gbps=0.01, total_steps=640)
first, xb = drift.period, torch.randn(8, 1024)
for step in range(2 * first + 1):
    big(xb).square().mean().backward(); big_opt.step(); big_opt.zero_grad(); drift.step()
drift.close()
print("RESULT", json.dumps({"config": lu.config, "lines": lu.plan_lines, "losses": losses,
                            "probed": [probed.config, probed.plan_lines],
                            "drift": [first, drift.period, drift.plan_lines[5:],
                                      [t for t in range(1, 34 + drift.period) if drift._rust.merges(t)]]}))
'''


def test_plan_auto_is_chosen_once_for_every_rank_and_trains() -> None:
    """`LocalUpdates(plan="auto")`: rank 0 chooses (printing each decision),
    every rank runs its choice (the same configuration), and the loss falls."""
    import json
    from conftest import free_port, run_ranks
    outs = run_ranks(AUTO % free_port(), 2)
    res = []
    for out, err, code in outs:
        line = next((l for l in out.splitlines() if l.startswith("RESULT ")), None)
        assert code == 0 and line is not None, out + err
        res.append(json.loads(line[len("RESULT "):]))
    # The decisions are every rank's; rank 0 also logs each time it decides again
    # (here the measured step, a fraction of the 10 ms given, is a drift).
    assert res[0]["config"] == res[1]["config"] and res[0]["lines"][:5] == res[1]["lines"], res
    assert len(res[1]["lines"]) == 5 and "gradcomp: plan:" in outs[0].out, outs[0].out
    config = json.loads(res[0]["config"])
    assert config["strategy"]["kind"] == "local" and config["strategy"]["period"] >= 16, config
    assert config["compressor"]["name"] == "fp4" and config["strategy"]["compress_change"], config
    # The plan's outer optimizer whole: the run's 2 rounds are too few for Nesterov
    # (NESTEROV_MIN_ROUNDS): plain averaging, no warm-up (test_model: a long run's Nesterov).
    assert (config["strategy"]["outer"]["name"], config["strategy"]["outer"]["warmup_rounds"]) == ("sgd", 0), config
    losses = res[0]["losses"]
    assert sum(losses[-5:]) < 0.5 * sum(losses[:5]), losses
    assert res[0]["probed"][0] == res[1]["probed"][0] and res[0]["probed"][1][:6] == res[1]["probed"][1], res
    first, period, lines, merges = res[0]["drift"]
    assert first == 16 and period > first and res[1]["drift"][1] == period, res[0]["drift"]
    assert len(lines) == 1 and lines[0].startswith("at inner step 32 the step measured"), lines
    assert merges == res[1]["drift"][3] and merges[:3] == [16, 32, 32 + period], merges
    assert res[0]["probed"][1][0].startswith("link: probed by allreduces"), res[0]["probed"]
