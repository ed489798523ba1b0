"""Failures of `LocalUpdates` without a manager: prompt and clear on every rank.

- A non-finite parameter on one rank is agreed inside the round's first
  collective: every rank raises `FloatingPointError` naming the worker and the
  round's step (blocking rounds at once; an overlapped round where it lands).
- A peer that stops answering (SIGSTOP) while a round is on the core's round
  thread fails the others within the user's `init_process_group` timeout: the
  thread's group takes it, not torch's default for a new group (30 minutes).
- A peer that dies or stops before a round is named on every surviving rank
  (`PeerLost`, a `RuntimeError`): its heartbeat in the store stopped
  (`gradcomp/_liveness.py`); within the process group's timeout, or within
  `LocalUpdates(round_timeout=)` whatever the group's.
"""
import json
from typing import Any, List

import pytest

NAN = r'''
import sys, json, time, torch, torch.distributed as dist
import gradcomp.torch as gt
rank, world, delay = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=rank, world_size=world)
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
lu = gt.LocalUpdates(model, opt, period=4, fragments=2 if delay else 1, delay=delay)
out = {"raised": None}
for step in range(1, 13):
    if step == 5 and rank == 1:
        with torch.no_grad():
            model.weight[0, 0] = float("nan")
    try:
        lu.step()
    except FloatingPointError as e:
        out = {"raised": "FloatingPointError", "message": str(e), "at": step}
        break
    except Exception as e:
        out = {"raised": type(e).__name__, "message": str(e), "at": step}
        break
print("RESULT", json.dumps(out), flush=True)
'''


@pytest.mark.parametrize("delay", [0, 1])
def test_a_nan_on_one_rank_is_floating_point_error_on_every_rank(delay: int) -> None:
    from conftest import free_port, run_ranks
    world = 3
    ran = run_ranks(NAN % free_port(), world, str(world), str(delay), timeout=120)
    results: List[Any] = []
    for r in ran:
        line = next((l for l in r.out.splitlines() if l.startswith("RESULT ")), None)
        assert line is not None, r.out + r.err
        results.append(json.loads(line[len("RESULT "):]))
    for rank, res in enumerate(results):
        assert res["raised"] == "FloatingPointError", (rank, res)
        assert "worker(s) [1]" in res["message"] and "non-finite" in res["message"], (rank, res)
    # Every rank stops at the same step: the round's (blocking), or its merge.
    assert len({res["at"] for res in results}) == 1, results


STOP = r'''
import sys, os, json, signal, time, datetime, torch, torch.distributed as dist
import gradcomp.torch as gt
rank, pids = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=rank, world_size=2,
                        timeout=datetime.timedelta(seconds=5))
open(os.path.join(pids, str(rank)), "w").write(str(os.getpid()))
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
# H 4, P 2, τ 1: fragment 0 starts at 1, 5, ... on the round thread and merges a step later.
lu = gt.LocalUpdates(model, opt, period=4, fragments=2, delay=1)
for step in range(1, 20):
    if rank == 1 and step == 5:
        os.kill(os.getpid(), signal.SIGSTOP)   # a frozen VM: never answers again
    t = time.monotonic()
    try:
        lu.step()
    except Exception as e:
        print("RESULT", json.dumps({"raised": type(e).__name__, "message": str(e), "at": step,
                                    "waited": time.monotonic() - t}), flush=True)
        os.kill(int(open(os.path.join(pids, "1")).read()), signal.SIGKILL)
        sys.exit(0)
print("RESULT", json.dumps({"raised": None}), flush=True)
'''


def test_a_stopped_peer_fails_the_round_within_the_users_timeout(tmp_path: Any) -> None:
    from conftest import free_port, run_ranks
    ran = run_ranks(STOP % free_port(), 2, str(tmp_path), timeout=120)
    line = next((l for l in ran[0].out.splitlines() if l.startswith("RESULT ")), None)
    assert line is not None, ran[0].out + ran[0].err
    res = json.loads(line[len("RESULT "):])
    assert res["raised"] == "PeerLost", res   # a RuntimeError naming the stopped rank (_liveness)
    assert "rank 1 stopped answering" in res["message"], res
    # The round thread's collective waited at most the 5 s timeout (20 s of
    # slack), where torch's default for a new group is 30 minutes.
    assert res["waited"] < 25.0, res
    assert res["at"] in (5, 6), res


LOST = r'''
import sys, os, json, signal, time, datetime, torch, torch.distributed as dist
import gradcomp.torch as gt
rank, fault, delay, pids, bound = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
# bound "group": the user's 5 s process-group timeout; "round": torch's default (30 minutes)
# for the group, and LocalUpdates' own round_timeout of 5 s.
timeout = {"timeout": datetime.timedelta(seconds=5)} if bound == "group" else {}
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=rank, world_size=3, **timeout)
open(os.path.join(pids, str(rank)), "w").write(str(os.getpid()))
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
# H 4; blocking: a round at 4, 8; overlapped (P 2, τ 1): fragment 0 starts at 5 and merges at 6;
# delay -1: a synchronous phase of 6 steps first, whose exchange (the optimizer's pre-hook) loses it at 3.
phase = delay < 0
lu = gt.LocalUpdates(model, opt, period=4, fragments=2 if delay > 0 else 1, delay=max(delay, 0),
                     sync_steps=6 if phase else 0, round_timeout=5.0 if bound == "round" else None)
for step in range(1, 13):
    if rank == 2 and step == {0: 4, 1: 5, -1: 3}[delay]:
        if fault == "exit":
            os._exit(3)                           # a dead process: its sockets close
        os.kill(os.getpid(), signal.SIGSTOP)      # a frozen VM: never answers again
    t = time.monotonic()
    try:
        if phase:
            model(torch.ones(1, 4)).sum().backward(); opt.step(); opt.zero_grad()
        lu.step()
    except Exception as e:
        print("RESULT", json.dumps({"raised": type(e).__name__, "runtime": isinstance(e, RuntimeError),
                                    "message": str(e), "at": step, "waited": time.monotonic() - t,
                                    "ranks": getattr(e, "ranks", None), "known_by": getattr(e, "known_by", None),
                                    "cause": repr(e.__cause__)}), flush=True)
        if fault == "stop":
            os.kill(int(open(os.path.join(pids, "2")).read()), signal.SIGKILL)
        sys.exit(0)                               # exits as a user's script does: LocalUpdates closes at exit
print("RESULT", json.dumps({"raised": None}), flush=True)
'''


@pytest.mark.parametrize("delay,fault,bound", [
    (delay, fault, "group") for delay in (0, 1, -1) for fault in ("exit", "stop")] + [
    # A frozen peer under torch's 30-minute default: LocalUpdates' round_timeout bounds the
    # blocking round, the round thread's (its group made from the bounded one) and the phase's.
    (delay, "stop", "round") for delay in (0, 1, -1)])
def test_a_lost_peer_is_named_on_every_surviving_rank(fault: str, delay: int, bound: str, tmp_path: Any) -> None:
    """Rank 2 dies (`os._exit`) or stops (SIGSTOP) before a round (delay -1:
    inside the synchronous phase, before its step's exchange): ranks 0 and 1
    raise a `RuntimeError` naming rank 2 and how it was known (its heartbeat
    in the store stopped), from the transport's error, within the 5 s timeout
    (the user's process group's, or LocalUpdates' `round_timeout`) + 5 s for
    the heartbeat check and a loaded machine."""
    from conftest import free_port, run_ranks
    ran = run_ranks(LOST % free_port(), 3, fault, str(delay), str(tmp_path), bound, timeout=120)
    for rank in (0, 1):
        line = next((l for l in ran[rank].out.splitlines() if l.startswith("RESULT ")), None)
        assert line is not None, (rank, ran[rank].out + ran[rank].err)
        res = json.loads(line[len("RESULT "):])
        assert res["raised"] == "PeerLost" and res["runtime"], (rank, res)
        assert res["ranks"] == [2] and res["known_by"] == "heartbeat", (rank, res)
        what = "the synchronous phase's exchange" if delay < 0 else "the outer round"
        assert res["message"].startswith(f"gradcomp: {what} at inner step "), (rank, res)
        assert "rank 2 stopped answering: its heartbeat stopped" in res["message"], (rank, res)
        assert "torch.distributed" in res["cause"], (rank, res)   # raised from the transport's error
        assert res["waited"] < 5.0 + 5.0, (rank, res)
        assert res["at"] in {0: (4,), 1: (5, 6), -1: (3,)}[delay], (rank, res)
        assert ran[rank].code == 0, (rank, ran[rank].err)


UNKNOWN = r'''
import sys, json, torch, torch.distributed as dist
from gradcomp._liveness import Liveness
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=0, world_size=1)
class Owner: pass
owner = Owner()
live = Liveness(owner, None)
out = {}
gloo = ("gradcomp: torch.distributed: RuntimeError: [/__w/pytorch/third_party/gloo/gloo/transport/"
        "tcp/pair.cc:545] Read error [10.0.0.3]:41017: Connection reset by peer")
for name, text in (("address", gloo), ("none", "gradcomp: torch.distributed: Timed out waiting 5000ms for recv")):
    e = live.diagnose(7, RuntimeError(text))
    out[name] = {"message": str(e), "known_by": e.known_by, "address": e.address, "ranks": e.ranks}
try:
    with live.watch(7):
        raise RuntimeError("gradcomp: a previous round panicked")   # the core's own: not the transport's
except RuntimeError as e:
    out["core"] = type(e).__name__
live.close()
print("RESULT", json.dumps(out), flush=True)
'''


def test_a_transport_error_with_every_heartbeat_moving_names_gloos_peer_or_none() -> None:
    from conftest import free_port, run_ranks
    ran = run_ranks(UNKNOWN % free_port(), 1, timeout=120)
    line = next((l for l in ran[0].out.splitlines() if l.startswith("RESULT ")), None)
    assert line is not None, ran[0].out + ran[0].err
    res = json.loads(line[len("RESULT "):])
    assert res["address"]["known_by"] == "transport" and res["address"]["address"] == "10.0.0.3:41017", res
    assert "the peer at 10.0.0.3:41017, named by gloo's error: the one this rank waited on" in res["address"]["message"]
    assert res["none"]["known_by"] == "unknown" and "the lost peer is unknown" in res["none"]["message"], res
    assert res["address"]["ranks"] == res["none"]["ranks"] == [], res
    assert res["core"] == "RuntimeError", res


DIVERGE = r'''
import sys, json, torch, torch.distributed as dist
import gradcomp.torch as gt
rank, case = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=rank, world_size=3)
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
out = {"raised": None}
try:
    # "config": rank 1 started with another outer learning rate (its own configuration file, say).
    lu = gt.LocalUpdates(model, opt, period=4, outer="nesterov", compressor="fp4",
                         outer_lr=0.5 if case == "config" and rank == 1 else None)
    for step in range(1, 13):
        if case == "state" and rank == 1 and step == 6:
            state = lu._rust.state()   # a shared value changed here only, as a bug would
            state["outer.anchor"][0] += 1.0
            lu._rust.load(state)
        model(torch.ones(1, 4)).sum().backward(); opt.step(); opt.zero_grad()
        lu.step()
except Exception as e:
    out = {"raised": type(e).__name__, "runtime": isinstance(e, RuntimeError), "message": str(e)}
print("RESULT", json.dumps(out), flush=True)
'''


@pytest.mark.parametrize("case", ["state", "config"])
def test_ranks_whose_shared_state_or_plan_differs_stop_at_the_round_saying_so(case: str) -> None:
    """Without a manager each round's first collective checks the ranks'
    shared state (θ_outer, the outer momentum, the plan: `_agreement`): a
    rank whose θ_outer was changed stops every rank at the next round, one
    started with another configuration at the first, each with `Diverged`
    (a RuntimeError) naming the step; none goes on alone."""
    from conftest import free_port, run_ranks
    ran = run_ranks(DIVERGE % free_port(), 3, case, timeout=120)
    for r in ran:
        line = next((l for l in r.out.splitlines() if l.startswith("RESULT ")), None)
        assert line is not None, r.out + r.err
        res = json.loads(line[len("RESULT "):])
        assert res["raised"] == "Diverged" and res["runtime"], res
        step = "step 8" if case == "state" else "step 0"
        assert step in res["message"] and "differs" in res["message"], res
