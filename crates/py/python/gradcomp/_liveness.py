"""Which peer a failed round lost, without a manager: a heartbeat in the rendezvous store.

Every rank's daemon thread adds 1 to a counter of its own in the process
group's store (`gradcomp/alive/<global rank>`) every `BEAT` seconds: one
store operation, no clocks compared across hosts. When a round fails on the
transport (a `RuntimeError` out of a collective; a `FloatingPointError` is
already agreed by every worker and passes as it is), the rank reads every
peer's counter twice, `WINDOW` seconds apart, and raises `PeerLost` naming
the peers whose counter did not move. A peer that closed its `LocalUpdates`
after a failure of its own marks that it did (`gradcomp/closed/<rank>`), so
it is not named. Where no heartbeat stopped, the peer gloo's error names
(its address: the peer this rank waited on) is named instead, or the lost
peer is said to be unknown; a store that does not answer names its host.

Store operations block without a deadline on a store that stopped
answering (torch's `TCPStore` applies its timeout to waits, not to `add`),
so each is run on a daemon thread and abandoned after `DEADLINE` seconds.
The rank whose process serves the store (rank 0 where `init_process_group`
made it) waits, when it closes, up to `DEADLINE` seconds for its live peers
to close: they neither lose the store in the middle of naming a lost peer
nor find it gone at their next heartbeat.
"""
import datetime
import os
import re
import threading
import time
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, TypeVar

import torch.distributed as dist
from torch._C._distributed_c10d import PrefixStore, TCPStore

BEAT = 0.5       # seconds between two heartbeats
WINDOW = 1.25    # seconds between the two reads of the peers' counters (2.5 heartbeats)
DEADLINE = 2.0   # seconds a store operation may take before the store counts as lost

T = TypeVar("T")
# gloo names a peer by its address: "Read error [10.0.0.3]:41017", "Connection closed by peer [::1]:5000".
_GLOO_PEER = re.compile(r"\[((?:\d{1,3}\.){3}\d{1,3}|[0-9A-Fa-f]*:[0-9A-Fa-f:.]*)\]:(\d+)")


class PeerLost(RuntimeError):
    """An outer round failed on the transport. `step`: the inner step it
    failed at; `ranks`: the global ranks known lost (empty where none is
    known); `known_by`: `"heartbeat"` (their counters stopped), `"store"`
    (the store their process serves stopped answering), `"transport"`
    (gloo's error names the peer at `address`, the one this rank waited on)
    or `"unknown"`."""

    def __init__(self, message: str, step: int, ranks: List[int], known_by: str, address: Optional[str]) -> None:
        super().__init__(message)
        self.step, self.ranks, self.known_by, self.address = step, ranks, known_by, address


class _StoreLost(Exception):
    pass


def _within(seconds: float, op: Callable[[], T]) -> T:
    """`op()` run on a daemon thread; `_StoreLost` if it has not returned
    within `seconds` (it is abandoned) or raised."""
    box: Dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = op()
        except Exception as e:  # the store's own error (connection refused or reset)
            box["error"] = e

    t = threading.Thread(target=run, name="gradcomp-store-op", daemon=True)
    t.start()
    t.join(seconds)
    if "value" in box:
        return box["value"]  # type: ignore[no-any-return]
    if "error" in box:
        raise _StoreLost(str(box["error"]).splitlines()[0])
    raise _StoreLost(f"no answer within {seconds:g} s")


def _names(ranks: List[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


class Liveness:
    """This rank's heartbeat and the diagnosis of a failed round, for the
    ranks of `group` (None: the default group). Off (no thread; failures
    pass through) with `on=False`, or where the default group's store is
    not a `TCPStore` (MPI, a `FileStore`). The heartbeat stops on `close`,
    when `owner` is garbage-collected, and at exit; its thread never keeps
    the process alive."""

    def __init__(self, owner: object, group: Optional[dist.ProcessGroup], on: bool = True) -> None:
        self.me = 0
        self.peers: List[int] = []
        self.group_rank: Dict[int, int] = {}
        self.store: Optional[TCPStore] = None
        self.where = "?"
        if on:  # (off, torch.distributed need not be initialized: a manager's rounds)
            self.me = dist.get_rank()
            self.peers = [r for r in (dist.get_process_group_ranks(group) if group is not None
                                      else range(dist.get_world_size())) if r != self.me]
            if group is not None:
                self.group_rank = {r: dist.get_group_rank(group, r) for r in self.peers}
            store = dist.distributed_c10d._get_default_store()
            while isinstance(store, PrefixStore):
                store = store.underlying_store
            if isinstance(store, TCPStore):
                # A client of its own: the heartbeat never waits behind the
                # user's store operations, nor they behind it.
                self.store = TCPStore(store.host, store.port, is_master=False, wait_for_workers=False,
                                      timeout=datetime.timedelta(seconds=DEADLINE))
                self.where = f"{store.host}:{store.port}"
        # Under torchrun the store is its agent's; otherwise rank 0's process serves it.
        self.serves_store = self.me == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
        self.lost: List[int] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._start()
        weakref.finalize(owner, self.close)

    def _key(self, what: str, rank: int) -> str:
        return f"gradcomp/{what}/{rank}"

    def _start(self) -> None:
        if self.store is None or (self._thread is not None and self._thread.is_alive()):
            return
        self._stop = threading.Event()
        self._thread = threading.Thread(target=_beat, args=(self.store, self._key("alive", self.me),
                                                            self._key("closed", self.me), self._stop),
                                        name="gradcomp-heartbeat", daemon=True)
        self._thread.start()

    @contextmanager
    def watch(self, step: int, what: str = "the outer round") -> Iterator[None]:
        """Runs the block (a round's call into the core, or `what` else: a
        synchronous step's exchange); a transport failure in it becomes
        `PeerLost`, raised from it."""
        self._start()
        try:
            yield
        except RuntimeError as e:
            if "torch.distributed" not in str(e):  # not the transport's (the core's own errors)
                raise
            raise self.diagnose(step, e, what) from e

    @contextmanager
    def closing(self, step: int) -> Iterator[None]:
        """`watch`, then the heartbeat stopped (`close`)."""
        try:
            with self.watch(step):
                yield
        finally:
            self.close()

    def diagnose(self, step: int, error: BaseException, what: str = "the outer round") -> PeerLost:
        """Why `what` (the round) at inner step `step` failed with the transport's `error`."""
        found = _GLOO_PEER.search(str(error))
        address = f"{found.group(1)}:{found.group(2)}" if found else None
        head = f"gradcomp: {what} at inner step {step} lost a peer: "
        gloo = (f"gloo's error names the peer at {address}, the one this rank waited on" if address
                else "gloo's error names no peer")
        if self.store is None:
            return PeerLost(head + f"{gloo} (no liveness signal: the process group's store is not a TCPStore)",
                            step, [], "transport" if address else "unknown", address)
        store, keys = self.store, [self._key("alive", r) for r in self.peers]
        try:
            first = _within(DEADLINE, lambda: [store.add(k, 0) for k in keys])
            time.sleep(WINDOW)
            second = _within(DEADLINE, lambda: [store.add(k, 0) for k in keys])
            stopped = [r for r, a, b in zip(self.peers, first, second) if a == b]
            closed = _within(DEADLINE, lambda: [store.add(self._key("closed", r), 0) for r in stopped])
        except _StoreLost as e:
            if self.serves_store:  # this process serves it: not a lost peer's doing
                return PeerLost(head + f"this rank's own store at {self.where} failed ({e}); {gloo}", step, [],
                                "transport" if address else "unknown", address)
            if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
                return PeerLost(head + f"the rendezvous store at {self.where} (torchrun's agent on the master host) "
                                f"stopped answering ({e}): that host is lost or cut off; {gloo}", step, [], "store",
                                address)
            self.lost = [0]
            return PeerLost(head + f"rank 0 stopped answering: the rendezvous store its process serves at "
                            f"{self.where} did not answer ({e}); {gloo}", step, [0], "store", address)
        self.lost = [r for r, c in zip(stopped, closed) if c == 0]
        moving = ("every peer's heartbeat still moves" if len(stopped) == 0 else
                  "every peer's heartbeat still moves, but for those that closed after a failure of their own")
        if self.lost:
            verb = "stopped answering: its heartbeat" if len(self.lost) == 1 else "stopped answering: their heartbeats"
            return PeerLost(head + f"{self._named(self.lost)} {verb} stopped (gradcomp's liveness signal: a counter "
                            f"in the store at {self.where} that did not move in {WINDOW:g} s); dead, stopped or "
                            f"cut off ({gloo})", step, list(self.lost), "heartbeat", address)
        if address:
            return PeerLost(head + f"the peer at {address}, named by gloo's error: the one this rank waited on "
                            f"({moving}: a cut link, or a peer alive but stuck outside the round)", step, [],
                            "transport", address)
        return PeerLost(head + f"the lost peer is unknown: {moving}, and gloo's error names no peer (a cut link, "
                        "or a peer alive but stuck outside the round)", step, [], "unknown", None)

    def _named(self, ranks: List[int]) -> str:
        if not self.group_rank or all(self.group_rank[r] == r for r in ranks):
            return _names(ranks)
        return _names(ranks) + " (worker(s) " + ", ".join(str(self.group_rank[r]) for r in ranks) + " of the group)"

    def close(self) -> None:
        """Stops the heartbeat (a later round starts it again) and marks
        this rank closed; the rank serving the store waits up to `DEADLINE`
        seconds for its peers not known lost to close too."""
        thread, store = self._thread, self.store
        if thread is None or store is None:
            return
        self._thread = None
        self._stop.set()
        thread.join(DEADLINE)
        try:
            _within(DEADLINE, lambda: store.add(self._key("closed", self.me), 1))
            if not self.serves_store:
                return
            waiting = [self._key("closed", r) for r in self.peers if r not in self.lost]
            until = time.monotonic() + DEADLINE
            while waiting and time.monotonic() < until:
                marks = _within(DEADLINE, lambda: [store.add(k, 0) for k in waiting])
                waiting = [k for k, m in zip(waiting, marks) if m == 0]
                if waiting:
                    time.sleep(0.05)
        except _StoreLost:
            pass  # the store is gone: nobody is left to wait for


def _beat(store: TCPStore, alive: str, closed: str, stop: threading.Event) -> None:
    """The heartbeat thread: `alive` + 1 every `BEAT` seconds until `stop`
    (`closed` cleared first: this rank runs rounds again). It ends quietly
    at the store's first failure: the store is gone, and its host with it."""
    try:
        store.delete_key(closed)
        while not stop.is_set():
            store.add(alive, 1)
            stop.wait(BEAT)
    except Exception:
        return
