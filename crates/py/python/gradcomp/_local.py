"""Local updates with an outer optimizer (DiLoCo, Streaming DiLoCo) for any torch module.

    outer = gradcomp.torch.LocalUpdates(model, inner_opt, period=32, outer="nesterov",
                                        compressor="topk", density=0.01, fragments=4, delay=2)
    for batch in data:
        loss_fn(model(batch)).backward(); inner_opt.step(); inner_opt.zero_grad()
        outer.step()        # counts inner steps; runs (or starts, or finishes) outer rounds

No DDP: every rank keeps a full replica and steps on its own batches with its
own optimizer (whose state is kept across rounds, as DiLoCo does). Every
`period` inner steps the ranks average their changes (the model's
change since the last round; densely, or through a gradcomp compressor with
its error feedback) and the outer optimizer moves the shared model, which
every rank adopts. With `fragments` P the model's tensors form P groups whose
rounds are staggered across the period; with `delay` τ a round runs on a
round thread (the core's) while the next τ inner steps compute, and its result is
mixed in as α·θ + (1 − α)·θ_outer (`mix` α), or, with `overlap="eager"`, the
fragment's outer step takes this worker's fresh change. With `overlap="eager"`
(or `"delayed"`) and no delay a round runs through the whole next period
instead (ALGORITHMS.md §2.3). A synchronous phase may come first (`sync_steps`, ALGORITHMS.md §2.4):
each of its steps exchanges the gradients through `sync_compressor` (dense, as
torch's post-local SGD; or PowerSGD, fp4, Top-k with their error feedback)
before `optimizer.step()`, and the period may double at stated steps
(`period_doubles_at`). The rounds are the core's
(`gradcomp_exchange`'s local-update strategy and its outer-round machine,
thread included: the ones the burn trainer runs), over torch.distributed;
this class only reads and writes the model.
"""
import time
import json
import weakref
import datetime
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np
import torch
import torch.distributed as dist

from . import _core
from ._agreement import Diverged, digest, pieces, same
from ._comm import Comm, bounded_group, check_group, payload_device
from ._config import OUTER, OVERLAP, flag, number, one_of, seconds, whole, whole_positive
from ._liveness import Liveness
from ._membership import Membership
from ._tensors import flatten, views, write_back


def _check_under_manager(period: int, delay: int, fragments: int, overlap: str, sync_steps: int,
                         sync_compressor: str) -> None:
    """ValueError naming an argument that membership (torchft's quorum each
    round) does not run."""
    if delay * max(1, fragments) >= period:
        raise ValueError(f"gradcomp: delay: {delay} with a manager must be below period/fragments "
                         f"({period}/{fragments}): a round is committed (or discarded) at its merge, before "
                         "the next one's quorum")
    if overlap != "none":
        raise ValueError(f"gradcomp: overlap: {overlap!r} is not run under a manager yet: torchft commits a round "
                         "at its own quorum, and a round in flight through the whole period would be committed "
                         "at the next round's; use delay below period/fragments")
    if sync_steps > 0 and sync_compressor != "dense":
        raise ValueError(f"gradcomp: sync_compressor: {sync_compressor!r}: under a manager the synchronous phase is "
                         "dense (a compressed one's error feedback is not run across a changing membership yet)")


def _phases(sync_steps: int, sync_compressor: str, sync_options: Optional[Dict[str, Any]],
            period_doubles_at: Sequence[int], period_qsr_alpha: Optional[float]) -> Dict[str, Any]:
    """The plan of phases' keys of `strategy` (`sync`, `period_rule`), from
    LocalUpdates' arguments; the core checks them (docs/CONFIG.md)."""
    plan: Dict[str, Any] = {}
    if whole("sync_steps", sync_steps) > 0:
        if not isinstance(sync_compressor, str):
            raise ValueError(f"gradcomp: sync_compressor: {sync_compressor!r} is not a compressor's name")
        if sync_options is not None and not isinstance(sync_options, dict):
            raise ValueError(f"gradcomp: sync_options: {sync_options!r} is not a dict of the compressor's options")
        plan["sync"] = {"steps": sync_steps, "compressor": {"name": sync_compressor, **(sync_options or {})}}
    elif sync_compressor != "dense" or sync_options:
        raise ValueError("gradcomp: sync_compressor: set sync_steps, the synchronous phase's length, too")
    if isinstance(period_doubles_at, (str, bytes)) or not isinstance(period_doubles_at, (list, tuple)):
        raise ValueError(f"gradcomp: period_doubles_at: {period_doubles_at!r} is not a list of steps")
    if period_doubles_at:
        plan["period_rule"] = {"name": "doubling",
                               "at": [whole(f"period_doubles_at[{i}]", a) for i, a in enumerate(period_doubles_at)]}
    if period_qsr_alpha is not None:
        if period_doubles_at:
            raise ValueError("gradcomp: period_qsr_alpha: one period rule at a time; leave period_doubles_at out")
        plan["period_rule"] = {"name": "qsr", "alpha": number("period_qsr_alpha", period_qsr_alpha)}
    return plan


def _learning_rates(lr_at: Optional[Callable[[int], float]], qsr: bool,
                    total_steps: Optional[int]) -> Optional[List[float]]:
    """QSR's learning rates: `lr_at(step)` at each of the run's steps (the
    core resolves the periods from them)."""
    if lr_at is None and not qsr:
        return None
    if not qsr:
        raise ValueError("gradcomp: lr_at: it sets QSR's periods; set period_qsr_alpha too")
    if lr_at is None or not callable(lr_at):
        raise ValueError(f"gradcomp: lr_at: {lr_at!r} is not a function of the step (period_qsr_alpha needs the "
                         "inner learning rate at each step, e.g. your scheduler's closed form)")
    if total_steps is None:
        raise ValueError("gradcomp: total_steps: period_qsr_alpha needs the run's inner steps")
    return [number(f"lr_at({t})", lr_at(t)) for t in range(whole_positive("total_steps", total_steps))]


def _outer(name: str, lr: Optional[float], momentum: Optional[float], warmup_rounds: int, decay_rounds: int,
           rounds: Optional[int]) -> Dict[str, Any]:
    """`strategy.outer` from LocalUpdates' `outer*` arguments (unset: the optimizer's defaults)."""
    settings: Dict[str, Any] = {"name": name, "warmup_rounds": whole("outer_warmup_rounds", warmup_rounds),
                                "decay_rounds": whole("outer_decay_rounds", decay_rounds)}
    if rounds is not None:
        settings["rounds"] = whole("outer_rounds", rounds)
    if lr is not None:
        settings["lr"] = lr
    if momentum is not None:
        settings["momentum"] = momentum
    return settings


def _auto(plan: str, model: torch.nn.Module, group: Optional[dist.ProcessGroup], manager: Any, max_workers: int,
          step_seconds: Optional[float], link_gbps: Optional[float], total_steps: Optional[int]) -> Dict[str, Any]:
    """`plan="auto"`: rank 0 asks the core's rule (`gradcomp.plan`; its codec
    timings are this machine's) and hands its choice to every rank, so that
    all run one plan; rank 0 prints each decision. Under a manager there is
    no group before the first quorum: each replica chooses for `max_workers`
    workers on the link it is given and prints its decisions, and the first
    quorum's heal hands every replica one plan (`_membership`: a healed
    replica adopts its healer's); it is not decided again."""
    from ._model import plan as choose
    if plan != "auto":
        raise ValueError(f"gradcomp: plan: {plan!r} is not \"auto\" (leave it out to give the keys yourself)")
    for name, value in (("step_seconds", step_seconds), ("total_steps", total_steps)):
        if value is None:
            raise ValueError(f"gradcomp: {name}: plan=\"auto\" needs it (step_seconds: your measured step "
                             "without exchange; total_steps: the run's inner steps)")
    if manager is not None:
        if link_gbps is None:
            raise ValueError("gradcomp: link_gbps: plan=\"auto\" under a manager needs the link (no group to probe "
                             "before the first quorum)")
        shapes = [list(p.shape) or [1] for p in model.parameters() if p.requires_grad]
        mine = choose(shapes, float(step_seconds), whole_positive("max_workers", max_workers),  # type: ignore[arg-type]
                      float(link_gbps), whole("total_steps", total_steps))
        for line in mine["lines"]:
            print(f"gradcomp: plan: {line}", flush=True)
        return {**mine, "inputs": None}
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    alpha, probed = 1e-4, None
    if link_gbps is None:
        # A probe round over the group (the core's: allreduces fitted by the α–β model).
        on = next((p.device for p in model.parameters()), torch.device("cpu"))
        bps, alpha = _core.probe_link(Comm(group, device=payload_device(group, on)), rank, world)
        link_gbps, probed = bps / 1e9, (bps, alpha)
    box: List[Any] = [None]
    if rank == 0:
        shapes = [list(p.shape) or [1] for p in model.parameters() if p.requires_grad]
        box[0] = choose(shapes, float(step_seconds), world, float(link_gbps),  # type: ignore[arg-type]
                        whole("total_steps", total_steps), alpha=alpha)
        if probed is not None:
            box[0]["lines"].insert(0, f"link: probed by allreduces of 4 KiB to 4 MiB over the group: "
                                      f"{probed[0] / 1e9:.3g} Gbit/s, α {probed[1] * 1e3:.3g} ms")
        for line in box[0]["lines"]:
            print(f"gradcomp: plan: {line}", flush=True)
        box[0]["inputs"] = {"step_seconds": float(step_seconds), "link_bps": float(link_gbps) * 1e9,  # type: ignore[arg-type]
                            "alpha": alpha, "total_steps": whole("total_steps", total_steps)}
    src = dist.get_global_rank(group, 0) if group is not None else 0
    dist.broadcast_object_list(box, src=src, group=group)
    return dict(box[0])


def _group(group: Optional[dist.ProcessGroup], manager: Any,
           round_timeout: Optional[Union[float, datetime.timedelta]]) -> Optional[dist.ProcessGroup]:
    """The group the object's collectives run on: `group`, or (`round_timeout`)
    a group of its ranks whose every collective (the constructor's broadcast,
    the rounds, the synchronous phase's exchange) is bounded by it."""
    check_group(group)
    if manager is not None and group is not None:
        raise ValueError("gradcomp: process_group: a manager's rounds run over torchft's group; leave it out")
    if round_timeout is None:
        return group
    if manager is not None:
        raise ValueError("gradcomp: round_timeout: under a manager the rounds' timeout is the manager's "
                         "(gt.manager(round_timeout=...)); leave it out here")
    return bounded_group(group, seconds("round_timeout", round_timeout))


def _period(period: Optional[int]) -> int:
    """`period`, checked: the inner steps per round, at least 1."""
    if period is None:
        raise ValueError("gradcomp: period: the inner steps per round, or plan=\"auto\" to choose it")
    if whole("period", period) == 0:
        raise ValueError("gradcomp: period: 0 inner steps per round; at least 1")
    return int(period)


class LocalUpdates:
    """Outer rounds every `period` inner steps of `optimizer` on `model`.

    - `outer`: `"nesterov"` (DiLoCo's: lr 0.7, momentum 0.9) or `"sgd"` (lr 1,
      no momentum: plain model averaging, torch's post-local SGD);
      `outer_lr`, `outer_momentum` override the defaults.
    - `compressor` and `**options`: how the change travels
      (gradcomp's names, docs/CONFIG.md); `"dense"` averages it as it is.
    - `fragments` P: Streaming DiLoCo's fragments, contiguous runs of whole
      tensors of about equal size; fragment p's rounds end at the inner steps
      (p+1)·period/P + k·period (torchft's schedule).
    - `delay` τ (< period): a round starts τ steps before it ends, and its
      exchange runs on the core's round thread (a gloo or NCCL group of its
      own) while those τ inner steps compute. 0: blocking.
    - `mix` α: the merge is α·θ_local + (1 − α)·θ_outer; default 0.5 with a
      delay (Streaming DiLoCo's), 0 without (adopt θ_outer) and for eager
      rounds per fragment.
    - `overlap`: `"eager"` or `"delayed"` (arXiv 2502.12996): each round's
      exchange runs through the whole next period on the round thread, and
      the outer step applies the last round's average (eager: with this
      worker's fresh change standing in for its own part). One fragment, no
      `delay`, no manager. `"eager"` with a `delay` τ ≥ 1: eager rounds per
      fragment (any `fragments`): a round runs through τ steps and its
      fragment's outer step takes this worker's fresh change in place of
      the one it sent (ALGORITHMS.md §2.3).
    - `sync_steps` S: the first S inner steps are synchronous data parallel
      (post-local SGD's warm-up): a pre-hook on `optimizer` exchanges the
      gradients through `sync_compressor` with `sync_options` (default
      dense: averaged) and its memory, in the core; the rounds count from
      step S, and the phase's memory is dropped there (the optimizer's state
      carries on). `warmup_steps` is the older name of a dense phase. Under
      a manager the phase is dense and each step a quorum of its own
      (`_membership`: a step torchft does not commit is skipped).
    - `period_doubles_at`: steps after which the period doubles (the first
      period that begins at or after each is twice the one before).
    - `period_qsr_alpha` α with `lr_at` and `total_steps`: QSR's rule, the
      period beginning at step b is max(period, ⌈(α/lr_at(b))²⌉), so it grows
      as your learning rate decays (`lr_at`: the inner learning rate at a
      step, e.g. your scheduler's closed form; the periods are worked out
      once, for `total_steps` steps, and land in `config`).
    - `outer_warmup_rounds`, `outer_decay_rounds`, `outer_rounds`: the outer
      step warms up from plain averaging to `outer` over its first rounds and
      decays back over the last `outer_decay_rounds` of `outer_rounds`.
    - `average_buffers`: also average the model's floating-point buffers
      (BatchNorm's running statistics) at every round; off, each rank keeps
      its own (torchft's DiLoCo does; torch's post-local SGD under DDP
      broadcasts rank 0's at every forward).
    - `inner_state_every` k: also average `optimizer`'s per-parameter state
      (Adam's moments, SGD's momentum) at the end of every k-th period
      (DES-LOC, arXiv 2505.22549); its bytes are counted. 0: each rank keeps
      its own. Under a manager both are averaged at a round's start among
      its participants in sync and applied at its commit (`_membership`).
    - `plan="auto"` with `step_seconds` (your measured step without
      exchange), `link_gbps` (left out: measured by a probe round of
      allreduces over the group) and `total_steps`: the period, fragments,
      delay, outer optimizer, the change's compressor and route and the
      synchronous phase chosen by the core's rule (`gradcomp.plan`,
      ALGORITHMS.md §2.5) on rank 0 for every rank, its decisions printed
      and kept in `plan_lines`; those arguments are then the plan's. At
      each period's end from the second, where the inner step measured
      since the last decision moved from the plan's by more than the core's
      margin (a quarter), rank 0 decides the period again (route, fragments
      and τ kept) and every rank takes it from that boundary; rank 0 prints
      the decision and adds it to its `plan_lines`. Under a manager (with
      `link_gbps`; no probe) each replica chooses for `max_workers` workers
      and a healed replica adopts its healer's plan, so the first quorum
      leaves one plan everywhere; it is not decided again there.
    - `process_group`: a gloo or NCCL group (None: the default group); over
      NCCL the payloads cross as CUDA tensors, the arithmetic stays on the host.
    - `manager`: a torchft `Manager` (`gradcomp.torch.manager(...)`): the
      workers change from round to round (torchft's quorum; a lost or stopped
      peer costs the round it was in, a returning one is healed from a live
      peer), at most `max_workers` of them. No `process_group` then, and
      `delay` below period/fragments. See `_membership` and docs/PYTHON.md.

    - `round_timeout` (seconds, or a timedelta; no manager): every collective
      of this object (the constructor's broadcast, the rounds, on the round
      thread too, the synchronous phase's exchange, the buffers' average)
      runs on a group of `process_group`'s ranks made with this timeout, so a
      peer that died or froze is named (`PeerLost`) within it plus the
      heartbeat check (≤ 5 s), whatever the process group's own timeout
      (torch's default: 30 minutes). Made collectively: every rank of the
      default group constructs it. Under a manager: `gt.manager(round_timeout=)`.

    Call `close()` (or use it as a context manager) to wait for a round in
    flight before tearing down the process group.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, period: Optional[int] = None,
                 outer: str = "nesterov", outer_lr: Optional[float] = None, outer_momentum: Optional[float] = None,
                 compressor: str = "dense", fragments: int = 1, delay: int = 0, mix: Optional[float] = None,
                 overlap: str = "none", warmup_steps: int = 0, sync_steps: int = 0, sync_compressor: str = "dense",
                 sync_options: Optional[Dict[str, Any]] = None, period_doubles_at: Sequence[int] = (),
                 period_qsr_alpha: Optional[float] = None, lr_at: Optional[Callable[[int], float]] = None,
                 outer_warmup_rounds: int = 0, outer_decay_rounds: int = 0, outer_rounds: Optional[int] = None,
                 average_buffers: bool = False, inner_state_every: int = 0,
                 process_group: Optional[dist.ProcessGroup] = None, manager: Any = None, max_workers: int = 64,
                 round_timeout: Optional[Union[float, datetime.timedelta]] = None,
                 plan: Optional[str] = None, step_seconds: Optional[float] = None, link_gbps: Optional[float] = None,
                 total_steps: Optional[int] = None, **options: Any) -> None:
        self.plan_lines: List[str] = []
        # plan="auto": the inputs the plan was chosen for, to decide its period again on drift.
        self._replan: Optional[Dict[str, Any]] = None
        if plan is not None:
            chosen = _auto(plan, model, process_group, manager, max_workers, step_seconds, link_gbps, total_steps)
            self.plan_lines, kw, self._replan = chosen["lines"], chosen["local_updates"], chosen["inputs"]
            period, outer, compressor, fragments, delay, sync_steps, sync_compressor, sync_options = (
                kw["period"], kw["outer"], kw["compressor"], kw["fragments"], kw["delay"], kw.get("sync_steps", 0),
                kw.get("sync_compressor", "dense"), kw.get("sync_options"))
            outer_warmup_rounds = kw["outer_warmup_rounds"]
            options = {**options, "topology": kw["topology"]}
        period = _period(period)
        one_of("outer", outer, OUTER)
        process_group = _group(process_group, manager, round_timeout)
        one_of("overlap", overlap, OVERLAP)
        if manager is not None:
            _check_under_manager(period, whole("delay", delay), whole("fragments", fragments), overlap,
                                 whole("warmup_steps", warmup_steps) + whole("sync_steps", sync_steps),
                                 sync_compressor)
        settings = _outer(outer, outer_lr, outer_momentum, outer_warmup_rounds, outer_decay_rounds, outer_rounds)
        strategy: Dict[str, Any] = {"period": period, "outer": settings, "fragments": whole("fragments", fragments),
                                    "delay": whole("delay", delay), "overlap": overlap,
                                    "warmup_steps": whole("warmup_steps", warmup_steps),
                                    "average_buffers": flag("average_buffers", average_buffers),
                                    "inner_state_every": whole("inner_state_every", inner_state_every)}
        if mix is not None:
            strategy["mix"] = number("mix", mix)
        strategy.update(_phases(sync_steps, sync_compressor, sync_options, period_doubles_at, period_qsr_alpha))
        lrs = _learning_rates(lr_at, period_qsr_alpha is not None, total_steps)
        self.config = _core.local_config(compressor, strategy, options, lrs)
        self.model, self.optimizer, self.period, self.delay = model, optimizer, period, strategy["delay"]
        self.params: List[torch.nn.Parameter] = [p for p in model.parameters() if p.requires_grad]
        self.process_group = process_group
        if manager is None:
            self.rank, self.world = dist.get_rank(process_group), dist.get_world_size(process_group)
        else:  # a replica group of one; the rounds' ranks are the quorum's
            self.rank, self.world = 0, whole_positive("max_workers", max_workers)
        self._shapes = [list(p.shape) or [1] for p in self.params]  # as the core takes them (a scalar: one value)
        self._rust = _core.LocalUpdates(self.config, self._shapes, self.rank, self.world,
                                         membership=manager is not None)
        # Over NCCL the payloads cross as CUDA tensors on the model's device
        # (the round's arithmetic stays on the host, in Rust). Delayed rounds
        # run on the core's round thread, over a group of their own that the
        # core asks `Comm.duplicate` for at the first round.
        on = self.params[0].device if self.params else torch.device("cpu")
        self._membership = None if manager is None else Membership(self, manager)
        self._comm = None if manager is not None else Comm(process_group, device=payload_device(process_group, on))
        # Without a manager a lost peer is named by a heartbeat in the store (_liveness;
        # created first, so that at exit it stops after the wait below).
        self._liveness = Liveness(self, process_group, on=manager is None)
        # A round in flight is waited for when this object goes, or at exit
        # at the latest (before the interpreter stops running the round
        # thread's collectives).
        weakref.finalize(self, self._rust.wait)
        self.inner_steps = 0
        self._step_end: Optional[float] = None
        self._step_times: List[float] = []
        self.average_buffers = average_buffers
        # Rounds check the ranks hold one shared state (not under eager steps: each θ_outer its own).
        self._agrees = manager is None and overlap != "eager"
        # The synchronous phase: the gradients exchanged before the inner step.
        self._warmup = optimizer.register_step_pre_hook(self._warm_up) if self._rust.warming(0) else None
        self.last_round: Optional[Dict[str, Any]] = None
        # This worker's bytes: the rounds finished so far, and the warm-up's and
        # the buffers' allreduces.
        self.bytes_sent = 0
        self.bytes_received = 0
        self._start()

    def _start(self) -> None:
        """Every replica starts from one model: a live peer's under a
        manager, else rank 0's; the first round records it as θ_outer."""
        if self._membership is not None:
            # Every replica starts from a live peer's model (torchft heals
            # it at its first quorum); a replica that joins mid-run takes
            # part in the round its peers are at.
            self._membership.round()
            return
        # Every replica starts from rank 0's model (as DDP's constructor
        # does); the first round records it as the shared model.
        group = self.process_group
        src = dist.get_global_rank(group, 0) if group is not None else 0
        with torch.no_grad():
            for p in self.params:
                dist.broadcast(p.data, src=src, group=group)
        if self._rust.due(0):  # after a warm-up, the first round comes at its end
            self._round()

    def step(self) -> None:
        """Counts one inner step (call it after `optimizer.step()`); runs,
        starts or finishes the outer rounds due at it."""
        now = time.perf_counter()
        if self._replan is not None and self._step_end is not None:
            self._step_times.append(now - self._step_end)
        self.inner_steps += 1
        if self._rust.due(self.inner_steps):
            self._round()
        self._step_end = time.perf_counter()

    def _adopt(self, config: str, lines: List[str]) -> None:
        """Under a manager with `plan="auto"`: the plan of the replica this
        one heals from (its configuration and decisions) in place of its own
        choice, so that every replica runs one plan. A plan with another
        synchronous phase is refused (the phase's hook is set up already)."""
        rust = _core.LocalUpdates(config, self._shapes, self.rank, self.world, membership=True)
        if rust.warming(0) != self._rust.warming(0):
            raise ValueError("the peer's plan has another synchronous phase than this replica's")
        strategy = json.loads(config)["strategy"]
        self._rust, self.config = rust, config
        self.period, self.delay = int(strategy["period"]), int(strategy["delay"])
        self.plan_lines = [*lines, "adopted from the replica this one healed from (one plan for every replica)"]
        print(f"gradcomp: plan: {self.plan_lines[-1]}", flush=True)
        weakref.finalize(self, rust.wait)

    def _decide_again(self) -> None:
        """`plan="auto"` at a period's end: where the inner step measured
        over the periods since the last decision (their median, the rounds'
        own waits left out) moved from the plan's by more than the core's
        margin, rank 0 asks the rule for the period again (its route,
        fragments and τ kept) and every rank takes it from this boundary."""
        assert self._replan is not None
        times, self._step_times = self._step_times, []
        inputs = self._replan
        assert self._comm is not None, "plan=\"auto\" runs without a manager"
        period, line, inputs["step_seconds"] = self._rust.decide_again(
            self._comm, self.inner_steps, times, inputs["step_seconds"], inputs["link_bps"], inputs["alpha"],
            inputs["total_steps"])
        if line is not None:
            print(f"gradcomp: plan: {line}", flush=True)
            self.plan_lines.append(line)
        if period > 0:
            self.period = period

    def _warm_up(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """Before a step of the synchronous phase: the ranks' gradients
        through the phase's compressor in the core (a parameter without a
        gradient counts as zeros), written back as each one's gradient."""
        if not self._rust.warming(self.inner_steps):
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        flat = flatten(grads)
        if self._membership is not None:
            if not self._membership.sync_step(flat):
                for p in self.params:  # discarded: the optimizer skips every parameter
                    p.grad = None
                return
        else:
            lr = float(optimizer.param_groups[0].get("lr", 1.0))
            with self._liveness.watch(self.inner_steps, "the synchronous phase's exchange"):
                record = self._rust.sync_step(self.inner_steps, flat.numpy(), self._comm, lr=lr)
            self._count(record)
        for p, g, v in zip(self.params, grads, views(flat, grads)):
            p.grad = v.to(g.device, g.dtype)

    def _average_tensors(self, tensors: List[torch.Tensor]) -> None:
        """The ranks' mean of `tensors`, in place, through the core (one
        allreduce, its bytes counted there): the model's floating-point
        buffers (BatchNorm's running statistics) at a round, or the inner
        optimizer's state (`inner_state_every`)."""
        if not tensors:
            return
        flat = flatten(tensors)
        self._count(self._rust.average_state(flat.numpy(), self._comm))
        write_back(tensors, flat)

    def _inner_state(self) -> List[torch.Tensor]:
        """The inner optimizer's per-parameter state tensors (Adam's moments,
        SGD's momentum buffer: those shaped as their parameter), in the
        parameters' order and by key, the same on every rank."""
        state = self.optimizer.state
        return [v for p in self.params for _, v in sorted(state.get(p, {}).items())
                if isinstance(v, torch.Tensor) and v.is_floating_point() and v.shape == p.shape]

    def _flat(self) -> torch.Tensor:
        return flatten(self.params)

    def _write(self, flat: torch.Tensor) -> None:
        write_back(self.params, flat)

    def _round(self) -> None:
        """The core's round work at this inner step on the model: a round
        in flight merged, the rounds starting here started."""
        if self._membership is not None:
            self._membership.round()
            return
        flat = self._flat()
        with self._liveness.watch(self.inner_steps):
            if self._agrees and self._rust.starts(self.inner_steps):
                self._agree()
            record = self._rust.average(self.inner_steps, flat.numpy(), self._comm)
            if self.average_buffers:
                self._average_tensors([b for b in self.model.buffers() if b.is_floating_point()])
            if self._rust.averages_inner_state(self.inner_steps):
                self._average_tensors(self._inner_state())
            if self._replan is not None and self._rust.period_ended(self.inner_steps) not in (None, 1):
                self._decide_again()
        self._write(flat)
        self._count(record)

    def _agree(self) -> None:
        """Before a round starts: every rank holds one θ_outer, outer
        momentum and plan (`_agreement`: one allreduce of 48 bytes, counted),
        else every rank raises `Diverged` naming the step."""
        assert self._comm is not None
        t = bytearray(np.array(pieces(digest(self._rust.state(shared=True), self.config), True), dtype=np.int64).tobytes())
        try:
            self._comm.all_reduce(memoryview(t), "int64", "sum")
        except RuntimeError as e:  # the transport's, named as the core's collectives name it (`_liveness`)
            raise RuntimeError(f"torch.distributed: {e}") from e
        self.bytes_sent += len(t)
        self.bytes_received += len(t)
        if not same(self.world, np.frombuffer(t, dtype=np.int64).tolist()):
            raise Diverged(f"gradcomp: step {self.inner_steps}: the ranks' shared state (θ_outer, the outer "
                           "momentum, the plan) differs before the round: a rank loaded another checkpoint or "
                           "configuration, or its state was changed; restart every rank from one rank's "
                           "checkpoint (each its own file) and one configuration")

    def _count(self, record: Dict[str, Any]) -> None:
        """Counts a core call's bytes (its record); a round that finished
        in it is kept as `last_round`."""
        self.bytes_sent += int(record["bytes_sent"])
        self.bytes_received += int(record["bytes_received"])
        if record.get("finished"):
            self.last_round = record

    @property
    def events(self) -> List[Dict[str, Any]]:
        """Under a manager, each outer round so far: its inner `step`, its
        `workers`, whether this replica `healed` into it, whether it was
        `committed` (else discarded, nothing applied), its `error`, and the
        `seconds` it took (quorum included). Empty without a manager."""
        return [] if self._membership is None else self._membership.events

    def close(self) -> None:
        """Waits for a round in flight (its merge stays due); raises its failure."""
        with self._liveness.closing(self.inner_steps):
            self._rust.wait()

    def __enter__(self) -> "LocalUpdates":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- checkpoints -----------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """The outer state (θ_outer, the outer momentum, the compressor's
        memories) as torch tensors, the inner step count, and the rank and
        world size that made it: save one file per rank (the memories differ
        between workers). A round in flight is waited for first; its merge
        is due by the schedule, so a resume at any step continues exactly."""
        self._rust.wait()
        return {"config": self.config, "inner_steps": self.inner_steps, "rank": self.rank,
                "world_size": self.world,
                "state": {k: torch.from_numpy(np.array(v)) for k, v in self._rust.state().items()}}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores `state_dict()`; refuses another configuration, rank or
        world size, and any state under a manager: there a replica's outer
        state and step are its peers' (torchft heals it to the current round
        when `LocalUpdates` is made), and rolling them back behind torchft's
        back would make the replicas diverge at the next round. Load your
        model's and optimizer's own checkpoint before making `LocalUpdates`
        instead: the heal then sets the model to θ_outer, and the optimizer
        state is yours."""
        if self._membership is not None:
            raise ValueError("gradcomp: load_state_dict: under a manager a replica's outer state comes from its "
                             "peers (torchft healed this one when LocalUpdates was made); restore the model and "
                             "optimizer before making LocalUpdates and leave this state out (docs/PYTHON.md)")
        if state["config"] != self.config:
            raise ValueError("gradcomp: this state was saved with another configuration:\n"
                             f"  saved: {state['config']}\n  now:   {self.config}")
        if (state["rank"], state["world_size"]) != (self.rank, self.world):
            raise ValueError(f"gradcomp: this state was saved by rank {state['rank']} of {state['world_size']}; "
                             f"rank {self.rank} of {self.world} must load its own")
        self._rust.load({k: np.asarray(v, dtype=np.float32).reshape(-1) for k, v in state["state"].items()})
        self.inner_steps = int(state["inner_steps"])
