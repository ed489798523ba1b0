"""Outer rounds whose workers change: `LocalUpdates(..., manager=...)` on torchft.

torchft keeps the membership; gradcomp has no protocol of its own. A
lighthouse forms a quorum of the replicas alive at each outer round (their
managers heartbeat every 100 ms), torchft reconfigures a gloo group of
exactly them, and a replica that joins or fell behind is healed from a live
peer's state. Each round then runs over that group (its collectives called
directly: torchft's group is not registered with torch.distributed) and is
committed only where torchft's `should_commit` says so; a round that fails
or is refused leaves nothing applied (θ_outer, the outer momentum and the
memories as they were, the model as it was), so a lost or stopped peer costs
the round it was in. docs/RELIABILITY.md says what each fault costs.

- Every replica group is one process (torchft's rank 0 of 1); a round's
  workers are the quorum's participants, its rank the participating rank.
- A healed replica takes θ_outer, the outer momentum and the inner step from
  its healer (state stable between rounds: served while the healer waits in
  its quorum), sets its model to θ_outer, and takes part in the round it
  healed in with a zero change, which the average does not count; its
  error-feedback memories start at zero; its inner optimizer's state is its
  own (from its checkpoint, else fresh).
"""
import datetime
import math
import socket
import time
import urllib.parse
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

import numpy as np
import torch
from torch._C._distributed_c10d import (AllgatherOptions, AllreduceOptions, AllToAllOptions, BroadcastOptions, ReduceOp,
                                        TCPStore)

from . import _core
from ._agreement import Diverged, digest as _digest, pieces, same
from ._comm import _DTYPES, _bytes_tensor, _split
from ._config import OUTER, number, one_of, seconds, whole, whole_positive
from ._tensors import flatten, write_back

# State keys a healer does not send: a worker's own error-feedback memories.
_OWN = "change."


class FtComm:
    """gradcomp's collectives on a torchft process group (its reconfigured
    gloo group of the quorum's participants), called directly. The group's
    timeout bounds every collective: a stopped peer fails the round there."""

    # The round thread's channel is this object too (`duplicate`): its
    # `rank` and `world` are set at each quorum, and the core reads them
    # there (`TorchCollective`'s `follows`).
    follows_quorum = True

    def __init__(self, pg: Any) -> None:
        self.pg = pg
        self.rank, self.world = 0, 1

    def _wait(self, work: Any) -> None:
        work.wait()
        if (err := self.pg.errored()) is not None:
            raise RuntimeError(f"torchft group: {err}")

    def all_reduce(self, view: memoryview, dtype: str, op: str) -> None:
        if len(view) == 0:
            return
        t = torch.frombuffer(view, dtype=_DTYPES[dtype])
        wide = t.to(torch.int32) if dtype == "int16" else t
        opts = AllreduceOptions()
        opts.reduceOp = ReduceOp.MAX if op == "max" else ReduceOp.SUM
        self._wait(self.pg.allreduce([wide], opts))
        if wide.data_ptr() != t.data_ptr():
            t.copy_(wide.to(t.dtype))
        del t

    def count(self, value: int, digest: int = 0, step: Optional[int] = None) -> "Count":
        """In one allreduce: the sum of every participant's `value`; of the
        participants in sync (those that pass their inner `step`: not a
        replica whose heal failed) how many there are, their step, and
        whether their `digest`s are all the same (`_agreement`)."""
        inside = int(step is not None)
        t = torch.tensor([value, inside, inside * (step or 0), *pieces(digest, step is not None)], dtype=torch.int64)
        opts = AllreduceOptions()
        opts.reduceOp = ReduceOp.SUM
        self._wait(self.pg.allreduce([t], opts))
        total, k, steps, *sums = t.tolist()
        return Count(total, k, steps // k if k else 0, same(k, sums))

    def all_gather(self, data: bytes) -> List[bytes]:
        size = torch.tensor([len(data)], dtype=torch.int64)
        world = self.pg.size()
        sizes_out = [[torch.zeros_like(size) for _ in range(world)]]
        self._wait(self.pg.allgather(sizes_out, [size], AllgatherOptions()))
        sizes = [int(s.item()) for s in sizes_out[0]]
        longest = max(sizes)
        if longest == 0:
            return [b""] * world
        buf = torch.zeros(longest, dtype=torch.uint8)
        if data:
            buf[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        parts = [[torch.empty_like(buf) for _ in range(world)]]
        self._wait(self.pg.allgather(parts, [buf], AllgatherOptions()))
        return [p[:s].numpy().tobytes() for p, s in zip(parts[0], sizes)]

    def all_to_all(self, parts: List[bytes]) -> List[bytes]:
        sent = [len(p) for p in parts]
        sizes = torch.tensor(sent, dtype=torch.int64)
        got = torch.empty_like(sizes)
        ones = [1] * len(parts)
        self._wait(self.pg.alltoall_base(got, sizes, ones, ones, AllToAllOptions()))
        received = [int(s) for s in got.tolist()]
        out = torch.empty(sum(received), dtype=torch.uint8)
        self._wait(self.pg.alltoall_base(out, _bytes_tensor(b"".join(parts)), received, sent, AllToAllOptions()))
        return _split(out.numpy().tobytes(), received)

    def broadcast(self, data: bytes, root: int) -> bytes:
        opts = BroadcastOptions()
        opts.rootRank = root
        size = torch.tensor([len(data)], dtype=torch.int64)
        self._wait(self.pg.broadcast([size], opts))
        buf = torch.zeros(int(size.item()), dtype=torch.uint8)
        if data and len(data) == buf.numel():
            buf[:] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if buf.numel():
            self._wait(self.pg.broadcast([buf], opts))
        return buf.numpy().tobytes()

    def barrier(self) -> None:
        self.count(0, step=0)

    def duplicate(self) -> "FtComm":
        """The round thread's channel: this group itself. Between a round's
        start and its merge nothing else uses it (a start never comes before
        the previous round's merge under a manager: τ < period/fragments)."""
        return self


def manager(*, lighthouse: str, replica_id: str, round_timeout: Union[float, datetime.timedelta],
            min_replicas: int = 1, host: Optional[str] = None,
            quorum_timeout: Union[float, datetime.timedelta] = 600.0,
            heartbeat: Union[float, datetime.timedelta] = 0.1, quorum_retries: int = 0) -> Any:
    """A torchft `Manager` for `LocalUpdates(..., manager=...)`: this process
    a replica group of one, a reconfigurable gloo group whose collectives
    time out after `round_timeout` (take it from `round_timeout(...)`: the
    network model's round time times a stated factor), quorums formed by the
    lighthouse at `lighthouse` (`http://host:port`) with at least
    `min_replicas` replicas, `heartbeat` seconds between heartbeats. `host`:
    the address peers reach this process at, for its store and its heals
    (default: its host name). `quorum_retries`: torchft's retries of a
    quorum's call to its lighthouse, all within `quorum_timeout`
    (`TORCHFT_QUORUM_RETRIES` overrides it); a quorum that still fails
    raises `TimeoutError` on the worker (docs/RELIABILITY.md: a lost
    lighthouse)."""
    try:
        from torchft.manager import Manager  # type: ignore[import-untyped]
        from torchft.process_group import ProcessGroupGloo  # type: ignore[import-untyped]
    except ImportError as e:
        raise ImportError("gradcomp: manager: needs torchft (pip install torchft==0.2.0)") from e
    for name, value in (("lighthouse", lighthouse), ("replica_id", replica_id)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"gradcomp: manager: {name}: {value!r} is not a non-empty string")
    if host is not None and (not isinstance(host, str) or not host):
        raise ValueError(f"gradcomp: manager: host: {host!r} is not a non-empty string (or None)")
    timeout = seconds("round_timeout", round_timeout)
    host = host or socket.gethostname()
    store = TCPStore(host, 0, is_master=True, wait_for_workers=False)
    m = Manager(pg=ProcessGroupGloo(timeout=timeout), load_state_dict=None, state_dict=None,
                min_replica_size=whole_positive("min_replicas", min_replicas), use_async_quorum=False,
                replica_id=replica_id, store_addr=host, store_port=store.port, rank=0, world_size=1,
                lighthouse_addr=lighthouse, hostname=host, timeout=timeout,
                checkpoint_transport=_heal_transport(host, timeout),
                quorum_timeout=seconds("quorum_timeout", quorum_timeout),
                heartbeat_interval=seconds("heartbeat", heartbeat), init_sync=True,
                quorum_retries=whole("quorum_retries", quorum_retries))
    m._gradcomp_store = store  # the replica group's store lives as long as its manager
    return m


def _heal_transport(host: str, timeout: datetime.timedelta) -> Any:
    """torchft's HTTP checkpoint server (it listens on every interface), for
    heals, advertised at `host`: its own address names
    `socket.gethostname()`, which a peer may not reach (or which resolves to
    127.0.0.1 there). Its timeout is `timeout` rounded up to whole seconds
    (`_transport_timeout`)."""
    from torchft.checkpointing.http_transport import HTTPTransport  # type: ignore[import-untyped]
    name = f"[{host}]" if ":" in host else host

    class Advertised(HTTPTransport):  # type: ignore[misc]
        def address(self) -> str:
            url = urllib.parse.urlsplit(str(super().address()))
            return url._replace(netloc=f"{name}:{url.port}").geturl()

    return Advertised(timeout=_transport_timeout(timeout), num_chunks=0)


def _transport_timeout(timeout: datetime.timedelta) -> datetime.timedelta:
    """`timeout` rounded up to whole seconds, for torchft's HTTP checkpoint
    server (the one a heal reads from). torchft 0.2.0's handler asserts
    `connection.gettimeout() == timeout` and answers HTTP 500 when it fails;
    a socket keeps its timeout in nanoseconds, rounded up, so about 2% of
    fractional values (8.221894 s: 8.221894001) read back different and
    every heal from that peer fails. Whole seconds read back exactly."""
    return datetime.timedelta(seconds=math.ceil(timeout.total_seconds()))


def round_timeout(model: torch.nn.Module, *, link_bps: float, workers: int, period: int, compressor: str = "dense",
                  fragments: int = 1, outer: str = "nesterov", factor: float = 4.0, floor: float = 5.0,
                  density: float = 0.001) -> float:
    """Seconds a round's collectives may take before its peers count as lost:
    `factor` × (the network model's round time for `model`'s change through
    `compressor` among `workers` on a link of `link_bps` (one fragment's
    round with `fragments`) + a heal's transfer), and at least `floor`. A
    replica that heals does so at the round's quorum, while its peers wait in
    the round's first collective: it fetches θ_outer, and with `outer =
    "nesterov"` the outer momentum, in f32 from one peer. fp4 and eightbit
    are priced on the allgather (the slower topology: it bounds a
    reduce-scatter's round); a compressor the model does not price (natural,
    sparseloco, ...) is timed as dense, whose round bounds theirs."""
    one_of("round_timeout: compressor", compressor, _core.methods())
    one_of("round_timeout: outer", outer, OUTER)
    workers = whole_positive("workers", workers)
    if not math.isfinite(number("factor", factor)) or factor <= 0:
        raise ValueError(f"gradcomp: round_timeout: factor: {factor!r} is not a finite number > 0")
    if not math.isfinite(number("floor", floor)) or floor < 0:
        raise ValueError(f"gradcomp: round_timeout: floor: {floor!r} is not a finite number ≥ 0")
    trained = [p for p in model.parameters() if p.requires_grad]
    shapes = [list(p.shape) or [1] for p in trained]
    rows = _core.predict(shapes, 0.0, workers, float(link_bps), density=density, period=period, fragments=fragments)
    row = next((r for r in rows if r["compressor"] == compressor), None) or \
        next(r for r in rows if r["compressor"] == "dense")
    round_seconds = float(row["local_step_seconds"]) * period / fragments
    values = sum(p.numel() for p in trained)
    heal_seconds = (2 if outer == "nesterov" else 1) * 4 * values * 8 / float(link_bps)
    return max(floor, factor * (round_seconds + heal_seconds))


class Membership:
    """The rounds of one `LocalUpdates` under a torchft `Manager`."""

    def __init__(self, outer: Any, manager: Any) -> None:
        if getattr(manager, "_use_async_quorum", False):
            raise ValueError("gradcomp: manager: build it with use_async_quorum=False (gradcomp.torch.manager does): "
                             "a round's quorum, and a heal, must be settled before the round's exchange")
        self.outer, self.manager = outer, manager
        self.comm = FtComm(manager._pg)
        self.healed = False
        self.heal_bytes = 0
        # Why this replica's heal at the last quorum failed (a state that did not load).
        self.heal_error: Optional[BaseException] = None
        self.pending: Optional[_Round] = None
        # What the rounds did, for the caller: committed, discarded, healed.
        self.events: List[Dict[str, Any]] = []
        manager.register_state_dict_fn("gradcomp", self._load, self._state)

    def _state(self) -> Dict[str, Any]:
        """What a healing peer takes (read on torchft's quorum thread while
        this replica waits in its own quorum: stable between rounds)."""
        o = self.outer
        state = {k: torch.from_numpy(np.array(v)) for k, v in o._rust.state().items() if not k.startswith(_OWN)}
        # θ_outer once the rounds hold one; before the first round, the model.
        anchor = state.get("outer.anchor")
        model = anchor if anchor is not None and anchor.numel() else o._flat()
        return {"outer": state, "model": model, "inner_steps": o.inner_steps, "config": o.config,
                "plan_lines": list(o.plan_lines)}

    def _load(self, state: Dict[str, Any]) -> None:
        """A healer's state into this replica (torchft calls it inside the
        quorum). A state that does not load (truncated, corrupt, another
        model's) fails the heal, as a failed transfer does: this replica
        keeps its own state, sits out the round and heals at the next."""
        o = self.outer
        plan = (o._rust, o.config, o.period, o.delay, list(o.plan_lines))
        before = (o._rust.state(), o._flat(), o.inner_steps)
        try:
            self._take(state)
        except Exception as e:  # noqa: BLE001 - any bad state is a failed heal, named in the round's event
            o._rust, o.config, o.period, o.delay, o.plan_lines = plan
            o._rust.load(before[0])
            o._write(before[1])
            o.inner_steps = before[2]
            self.heal_error = RuntimeError(f"the heal's state did not load ({type(e).__name__}: {e})")

    def _take(self, state: Dict[str, Any]) -> None:
        o = self.outer
        config = state.get("config", o.config)
        if config != o.config:
            if not o.plan_lines:  # a plan given by hand: the replicas were started differently
                raise ValueError(f"the peer runs another configuration than this replica:\n  theirs: {config}\n"
                                 f"  mine:   {o.config}")
            o._adopt(str(config), [str(line) for line in state.get("plan_lines", [])])
        mine = o._rust.state()  # this worker's own memories: zero for a newcomer
        own = {k: np.zeros_like(np.asarray(v, dtype=np.float32)) for k, v in mine.items() if k.startswith(_OWN)}
        theirs = {k: np.asarray(v, dtype=np.float32).reshape(-1) for k, v in state["outer"].items()}
        o._rust.load({**own, **theirs})
        o.inner_steps = int(state["inner_steps"])
        # The model is θ_outer's tensor once anchored: it travels once.
        moved = {t.data_ptr(): int(t.numel()) * t.element_size() for t in [*state["outer"].values(), state["model"]]}
        self.heal_bytes = sum(moved.values())
        o._write(torch.as_tensor(state["model"], dtype=torch.float32).reshape(-1))
        self.healed = True

    def round(self) -> None:
        """The round work due at this inner step: a round in flight landed
        and given torchft's verdict (merged, or discarded with nothing
        applied); a round starting here started after a quorum (healing this
        replica if it is behind), among the quorum's participants; blocking
        (no delay), both at once."""
        o = self.outer
        if self.pending is not None and o._rust.merges(o.inner_steps):
            self._commit(None)
        # (Before a synchronous phase the first round comes at its end; its steps' quorums heal.)
        if (o.inner_steps == 0 and not o._rust.warming(0)) or o._rust.starts(o.inner_steps):
            self._start()

    def _quorum(self, began: float) -> Optional["_Quorum"]:
        """This step's quorum (a round's start, or a synchronous step):
        torchft's, healing this replica where it is behind; None where the
        quorum's group did not form here (torchft's error)."""
        m = self.manager
        self.heal_error = None
        steps = m.state_dict()  # torchft's own step, which a heal moves before `_load` runs
        m.start_quorum()  # may heal: `_load` sets the step, the model and the outer state
        if getattr(m._pg, "_pg", True) is None:
            return None
        if self.heal_error is not None:
            m.load_state_dict(steps)  # still behind, so the next quorum heals this replica again
        healed, self.healed = self.healed, False
        # A heal that failed (its transfer, torchft's error; or its state, `_load`'s) leaves
        # this replica behind: it sits the step out, and the next quorum heals it again.
        failed = self.heal_error or (None if healed else m.errored())
        return _Quorum(healed, m.participating_rank(), m.num_participants(), failed, time.monotonic() - began)

    def _check(self, q: "_Quorum", step: int) -> "Count":
        """The quorum's first collective: how many contribute, and that every
        participant in sync holds one shared state (θ_outer, the outer
        momentum, the plan), else `Diverged`."""
        if q.rank is None:
            raise RuntimeError("this replica is not among the quorum's participants")
        self.comm.rank, self.comm.world = q.rank, q.world
        o = self.outer
        count = self.comm.count(0 if q.healed or q.failed else 1, _digest(o._rust.state(shared=True), o.config),
                                step=None if q.failed else step)
        if not count.same:
            raise Diverged(f"gradcomp: step {step}: the replicas' shared state (θ_outer, the outer momentum, the plan) "
                           "differs after the quorum, which heals every replica behind: their rounds cannot "
                           "go on; restart them from one replica's checkpoint")
        return count

    def sync_step(self, grad: torch.Tensor) -> bool:
        """A step of the (dense) synchronous phase, a quorum of its own as
        torchft's DDP takes: the participants' mean gradient in `grad`, in
        place, where torchft commits the step (True); else False and the
        caller skips it. A replica healed at this quorum (its gradient is
        its old model's) or whose heal failed sends zeros and is not
        counted; one whose heal failed skips the step and heals at the next."""
        m, o = self.manager, self.outer
        began = time.monotonic()
        q = self._quorum(began)
        event: Dict[str, Any] = {"step": o.inner_steps, "sync": True, "workers": 0, "healed": False,
                                 "committed": False, "error": None, "quorum_seconds": time.monotonic() - began,
                                 "heal_bytes": 0}
        self.events.append(event)
        if q is None:
            event.update(error=f"no group: the step's group did not form ({m.errored()})",
                         seconds=time.monotonic() - began)
            return False
        event.update(workers=q.world, healed=q.healed, heal_bytes=self.heal_bytes if q.healed else 0)
        error: Optional[BaseException] = None
        try:
            self._check(q, o.inner_steps)
            o._count(o._rust.average_state(grad.numpy(), self.comm, q.rank, q.world,
                                           contributes=not (q.healed or q.failed)))
            if q.failed is not None:
                error = RuntimeError(f"this replica's heal failed ({q.failed}); it skipped the step and heals at "
                                     "the next quorum")
        except (FloatingPointError, RuntimeError) as e:
            error = e
        committed, error = self._verdict(error, q.rank, "step")
        event.update(committed=committed, error=None if error is None else str(error),
                     seconds=time.monotonic() - began)
        return committed

    def _start(self) -> None:
        o = self.outer
        began = time.monotonic()
        q = self._quorum(began)
        if q is None:
            self._no_group(began)
            return
        step, healed, failed, rank, world = o.inner_steps, q.healed, q.failed, q.rank, q.world
        self.pending = _Round(step, healed, began, rank, world, o._rust.state(), q.seconds)
        flat = o._flat()
        try:
            count = self._check(q, step)
            assert rank is not None  # (`_check` refuses a replica outside the quorum)
            # The buffers' and the inner state's means among the round's in-sync
            # participants, applied at its commit (every participant takes part).
            self.pending = self.pending._replace(sides=self._sides(count, healed or failed is not None, rank, world))
            if failed is not None:
                self._sit_out(count, flat, failed)
                return
            if step > 0 and np.asarray(self.pending.snapshot.get("outer.anchor", ())).size == 0:
                # The first round, after a synchronous phase: the models may differ by a
                # replica healed in it (its optimizer's state its own), so θ_outer is
                # their mean, the same on every participant.
                o._count(o._rust.average_state(flat.numpy(), self.comm, rank, world, contributes=not healed))
            record = o._rust.average(step, flat.numpy(), self.comm, rank, world, count.total)
        except (FloatingPointError, RuntimeError) as e:
            self._commit(e)
            return
        if o.delay == 0 or step == 0:  # done in place: start and merge
            self._commit(None, record, flat)

    def _no_group(self, began: float) -> None:
        """A round whose group did not form on this replica (torchft's store
        timed out configuring it): nothing is exchanged or applied, its peers'
        collectives fail within the round timeout and they discard the round
        too, and the next round's quorum forms a new group. Before, the
        round's first collective raised an AssertionError and the worker died."""
        self.events.append({"step": self.outer.inner_steps, "sync": False, "workers": 0, "healed": False,
                            "committed": False,
                            "error": f"no group: the round's group did not form ({self.manager.errored()})",
                            "seconds": time.monotonic() - began, "quorum_seconds": time.monotonic() - began,
                            "heal_bytes": 0})

    def _sides(self, count: "Count", behind: bool, rank: int, world: int) -> List["_Side"]:
        """At a round's start, among its participants: the model's
        floating-point buffers (`average_buffers`) at every round, and the
        inner optimizer's state (`inner_state_every`) at the round that ends
        a k-th period, each averaged over the participants in sync (a replica
        healed into the round, or sitting it out, sends zeros and takes the
        others' mean). Nothing is applied here: `_commit` does, at a commit.
        A participant whose optimizer holds no state yet (or another shape
        of it) takes no part in that mean (a length agreed by a max first)."""
        o, sides = self.outer, []
        step = count.step
        merge = step + o.delay if step > 0 else 0  # the step the round ends (merges) at
        groups = []
        if o.average_buffers:
            groups.append([b for b in o.model.buffers() if b.is_floating_point()])
        if o._rust.averages_inner_state(merge):
            groups.append(o._inner_state())
        for tensors in groups:
            mine = sum(t.numel() for t in tensors)
            agreed = bytearray(np.array([mine], dtype=np.int32).tobytes())
            self.comm.all_reduce(memoryview(agreed), "int32", "max")
            length = int(np.frombuffer(agreed, dtype=np.int32)[0])
            if length == 0:
                continue
            own = flatten(tensors) if mine == length else torch.zeros(length)
            mean = own.clone()
            o._count(o._rust.average_state(mean.numpy(), self.comm, rank, world,
                                           contributes=not behind and mine == length))
            if mine == length:
                sides.append(_Side(tensors, mean, own))
        return sides

    def _sit_out(self, count: "Count", flat: torch.Tensor, failed: BaseException) -> None:
        """The round of a replica whose heal failed: it runs the round's
        collectives at its peers' step with a zero change (its model set to
        its own θ_outer, which its peers' average does not count), so they
        commit without it, and keeps nothing of it. Its step stays behind
        theirs, so the next quorum heals it again."""
        o, r = self.outer, self.pending
        assert r is not None
        anchor = np.asarray(r.snapshot.get("outer.anchor", np.zeros(0)), dtype=np.float32)
        if anchor.size == 0:  # no θ_outer yet: the first call records the model as it
            o._rust.average(0, flat.numpy(), self.comm, r.rank, r.world)
        else:
            flat = torch.from_numpy(anchor.copy())
        o._rust.average(count.step, flat.numpy(), self.comm, r.rank, r.world, count.total)
        o._rust.wait()
        self._commit(RuntimeError(f"this replica's heal failed ({failed}); it sat the round out and heals at "
                                  "the next quorum"))

    def _verdict(self, error: Optional[BaseException], rank: Optional[int],
                 what: str) -> Tuple[bool, Optional[BaseException]]:
        """torchft's verdict on this replica's `what` (a round, a synchronous
        step) that ended with `error` (None: it went through): whether to
        commit it, and why not. Raises where this replica cannot go on: the
        participants' shared state differs (every one raises), or its own
        model is not finite (its peers go on without it)."""
        m = self.manager
        if isinstance(error, Diverged):  # every participant raises it: none goes on alone
            m.report_error(error)
            raise error
        if isinstance(error, FloatingPointError) and rank in getattr(error, "ranks", ()):
            # This replica's own model is not finite; its peers discard the
            # round and go on without it.
            m.report_error(error)
            raise FloatingPointError(f"{error}; under a manager the other replicas go on: restart this one "
                                     "and it heals from a live peer") from error
        if error is not None:
            m.report_error(error)
        committed = m.should_commit()
        if not committed and error is None:
            # Refused though this replica's part went through: its group's
            # error (noted by should_commit), else a peer's or too few.
            seen = m.errored()
            error = getattr(seen, "original_exception", seen) or RuntimeError(
                f"torchft's should_commit refused the {what}: a peer's {what} failed, or fewer than min_replicas "
                "took part")
        return committed and error is None, error

    def _commit(self, error: Optional[BaseException], record: Optional[Dict[str, Any]] = None,
                flat: Optional[torch.Tensor] = None) -> None:
        o, r = self.outer, self.pending
        assert r is not None
        self.pending = None
        if error is None and record is None:  # in flight on the round thread: land it
            try:
                o._rust.wait()
            except (FloatingPointError, RuntimeError) as e:
                error = e
        committed, error = self._verdict(error, r.rank, "round")
        if committed:
            if record is None:  # the merge, due at this step
                flat = o._flat()
                record = o._rust.average(o.inner_steps, flat.numpy(), self.comm, r.rank, r.world)
            assert flat is not None
            o._write(flat)
            o._count(record)
            for side in r.sides:
                side.apply()
        else:
            o._rust.load(r.snapshot)  # θ_outer, the outer momentum and the memories as they were
        self.events.append({"step": r.step, "sync": False, "workers": r.world, "healed": r.healed,
                            "committed": committed,
                            "error": None if error is None else str(error),
                            "seconds": time.monotonic() - r.began, "quorum_seconds": r.quorum_seconds,
                            "heal_bytes": self.heal_bytes if r.healed else 0})


class Count(NamedTuple):
    """`FtComm.count`'s answer."""
    total: int
    in_sync: int
    step: int
    same: bool


class _Quorum(NamedTuple):
    """What a quorum settled for this replica: whether it healed, its rank
    among the participants (None: not one of them) and their number, why
    its heal failed (if it did), and the seconds it took."""
    healed: bool
    rank: Optional[int]
    world: int
    failed: Optional[BaseException]
    seconds: float


class _Side(NamedTuple):
    """Tensors averaged beside a round (buffers, the inner state): their
    mean at the round's start and this replica's own values then."""
    tensors: List[torch.Tensor]
    mean: torch.Tensor
    own: torch.Tensor

    def apply(self) -> None:
        """At the commit: each tensor set to the mean plus what this replica
        moved it by since the start (nothing, without a delay; its τ steps'
        updates with one, as the round's merge keeps the model's)."""
        write_back(self.tensors, self.mean + (flatten(self.tensors) - self.own))


class _Round(NamedTuple):
    """A round from its quorum to torchft's verdict."""
    step: int
    healed: bool
    began: float
    rank: Optional[int]
    world: int
    snapshot: Dict[str, Any]
    quorum_seconds: float
    sides: List[_Side] = []
