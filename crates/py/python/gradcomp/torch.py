"""PyTorch DDP comm hooks backed by gradcomp's Rust compressors.

    import gradcomp.torch
    state, hook = gradcomp.torch.hook("topk", density=0.01)
    ddp.register_comm_hook(state, hook)

Each DDP bucket is exchanged by gradcomp-exchange's exchange: compressed in Rust with
the GIL released, its messages moved by `torch.distributed` (summable messages
by `all_reduce`, per-worker ones by `all_gather`), decoded and averaged. The
hook's result is the averaged gradient, as DDP's own allreduce hook gives it.

State follows the tensor, not the bucket: a parameter's key is its order of
first appearance (the same in every run of the same model), each tensor's
residual, momentum and PowerSGD Q is stored under its key, and its random
stream is keyed by it. When DDP rebuilds its buckets after the first step, the
state moves to the new buckets; `state_dict()` and `load_state_dict()` carry it
across a restart, and a resumed run continues bit-exactly.
"""
import concurrent.futures
import json
import math
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist

from . import _core
from ._comm import Comm, check_group, own_comm
from ._config import whole

__all__ = ["GradcompState", "hook", "exchange_hook", "model", "LocalUpdates", "manager", "round_timeout"]

_NONFINITE = ("stop", "skip")
_BUCKET_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class GradcompState:
    """The hook's state: the buckets' exchanges, the step, the statistics.

    Build it with `gradcomp.torch.hook`, which also checks the options.
    """

    def __init__(self, name: str, process_group: Optional[dist.ProcessGroup] = None, on_nonfinite: str = "stop",
                 stats_every: int = 0, lr: float = 1.0, **options: Any) -> None:
        if on_nonfinite not in _NONFINITE:
            raise ValueError(f"gradcomp: on_nonfinite: {on_nonfinite!r} is not 'stop' or 'skip'")
        stats_every = whole("stats_every", stats_every)
        if isinstance(lr, bool) or not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
            raise ValueError(f"gradcomp: lr: {lr!r} is not a positive number")
        check_group(process_group)
        self._setup(_core.hook_config(name, options), process_group, on_nonfinite, stats_every, lr)
        first = _core.first_compressed_step(self.config)
        if first >= 1000:
            warnings.warn(f"gradcomp: {self.name} sends dense bytes (a plain allreduce) for its first {first} steps, "
                          "as torch's PowerSGD hook does (start_iter); pass start_iter=2 (the earliest with "
                          "error feedback) to compress sooner", stacklevel=3)

    def _setup(self, config: str, process_group: Optional[dist.ProcessGroup], on_nonfinite: str, stats_every: int,
               lr: float) -> None:
        self.config = config
        self.name = _core.check_config(self.config)
        self.process_group = process_group
        self.on_nonfinite = on_nonfinite
        self.stats_every = stats_every
        # The learning rate the optimizer applies (lr-scaled error feedback reads it).
        self.lr = float(lr)
        # This worker's rank and the world size, once the hook has run.
        self._rank: Optional[int] = None
        self._world: Optional[int] = None
        self.iteration = 0
        self.skipped_steps = 0
        self._comm: Optional[Comm] = None
        # The communication thread the buckets' exchanges run on, in order.
        self._worker: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._keys: Dict[int, int] = {}
        # Set once a step has gone through every bucket of this state's model.
        self._model_seen = False
        self._rust: Optional[_core.Hook] = None
        self._pending: Optional[Dict[str, Dict[str, Any]]] = None
        # Whether a bucket of the step under way was skipped.
        self._skipping = False
        self._staging: Dict[int, Tuple[torch.Tensor, torch.Tensor]] = {}

    # -- the buckets' exchanges ------------------------------------------------

    def _key_of(self, params: List[torch.Tensor]) -> List[int]:
        """Each parameter's index in the model. A parameter first seen after
        a complete step belongs to another model: one state serves one DDP
        model (its memories are per tensor), so that is refused."""
        if self._model_seen and any(id(p) not in self._keys for p in params):
            raise ValueError("gradcomp: this GradcompState is registered with a second DDP model; "
                             "build one state per model with gradcomp.torch.hook")
        return [self._keys.setdefault(id(p), len(self._keys)) for p in params]

    def _hook(self, rank: int, world: int) -> _core.Hook:
        if self._rust is None:
            self._rank, self._world = rank, world
            self._rust = _core.Hook(self.config, rank, world)
            if self._pending is not None:
                self._rust.load(self._pending)
                self._pending = None
        return self._rust

    def _pinned(self, index: int, buf: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Host float32 buffers (in, out) for a device bucket or a bf16/fp16
        one, kept while the bucket keeps its size; page-locked for CUDA, where a pinned round trip of a
        25 MiB bucket took 1.0 ms against 20 ms pageable (H200,
        docs/BENCHMARKS.md): the driver stages pageable memory through a
        bounce buffer."""
        pair = self._staging.get(index)
        if pair is None or pair[0].numel() != buf.numel():
            pinned = buf.device.type == "cuda"
            pair = (torch.empty(buf.numel(), dtype=torch.float32, pin_memory=pinned),
                    torch.empty(buf.numel(), dtype=torch.float32, pin_memory=pinned))
            self._staging[index] = pair
        return pair

    # -- checkpoints -----------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """Everything a resumed run needs: the step, and every tensor's state
        (as torch tensors), with the rank and world size that made it and the
        configuration. It is this worker's own: save one file per rank (the
        memories differ between workers). Loads under `torch.load`'s default
        `weights_only=True`."""
        if self._rust is not None:
            units = {u: {k: torch.from_numpy(np.array(v)) for k, v in b.items()}
                     for u, b in self._rust.state().items()}
        else:
            units = {u: {k: torch.as_tensor(v) for k, v in b.items()} for u, b in (self._pending or {}).items()}
        rank, world = self._where()
        return {"config": self.config, "iteration": self.iteration, "skipped_steps": self.skipped_steps,
                "rank": rank, "world_size": world, "units": units}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores `state_dict()`; refuses another configuration, and the
        state of another rank or world size (naming the rank that saved it)."""
        if json.loads(state["config"]) != json.loads(self.config):
            raise ValueError("gradcomp: this state was saved with another configuration:\n"
                             f"  saved: {state['config']}\n  now:   {self.config}")
        rank, world = self._where()
        saved_rank, saved_world = state.get("rank"), state.get("world_size")
        if None not in (rank, saved_rank) and (saved_rank, saved_world) != (rank, world):
            raise ValueError(f"gradcomp: this state was saved by rank {saved_rank} of {saved_world}; rank {rank} of "
                             f"{world} must load its own (save state_dict() once per rank, e.g. "
                             f"f\"hook-rank{{dist.get_rank()}}.pt\")")
        self.iteration = int(state["iteration"])
        self.skipped_steps = int(state.get("skipped_steps", 0))
        units = {u: {k: np.asarray(v, dtype=np.float32).reshape(-1) for k, v in b.items()}
                 for u, b in state["units"].items()}
        if self._rust is not None:
            self._rust.load(units)
        else:
            self._pending = units

    def _where(self) -> Tuple[Optional[int], Optional[int]]:
        """(rank, world size) of this worker in the state's group, or (None, None) before any group."""
        if self._rank is not None:
            return self._rank, self._world
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(self.process_group), dist.get_world_size(self.process_group)
        return None, None

    # -- pickling: the configuration and the state, not the group ---------------

    def __getstate__(self) -> Dict[str, Any]:
        # As torch's PowerSGDState: the process group does not pickle; a
        # restored state uses the default group (register it again).
        return {"config": self.config, "on_nonfinite": self.on_nonfinite, "stats_every": self.stats_every,
                "lr": self.lr, "state": self.state_dict()}

    def __setstate__(self, d: Dict[str, Any]) -> None:
        self._setup(d["config"], None, d["on_nonfinite"], d["stats_every"], d["lr"])
        self.load_state_dict(d["state"])

    # -- statistics ------------------------------------------------------------

    def last_step(self) -> Optional[Dict[str, Any]]:
        """The last complete step's statistics, summed over its buckets
        (`buckets` holds each bucket's own); None before the first."""
        return self._rust.last_step() if self._rust is not None else None


# DDP checks a hook's annotations: exactly dist.GradBucket and
# torch.futures.Future[torch.Tensor] (torch's stubs do not name GradBucket).
def exchange_hook(state: "GradcompState",
                  bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:  # type: ignore[name-defined]
    """The DDP comm hook: `ddp.register_comm_hook(state, exchange_hook)`.

    Returns at once with the bucket's pending future: the exchange
    (compression, the collectives, decoding, and the workers' agreement on
    a non-finite gradient, carried inside the first collective) runs on
    the state's communication thread, one bucket after another in the order
    DDP hands them over (the same on every worker), while the backward pass
    goes on. Its collectives use a gloo group of their own, made at the first
    bucket, so they never interleave with DDP's own collectives."""
    if state._comm is None:
        state._comm = own_comm(state.process_group, bucket.buffer().device)
        state._worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="gradcomp-hook")
    buf = bucket.buffer()
    if buf.dtype not in _BUCKET_DTYPES:
        raise TypeError(f"gradcomp's hooks take float32, bfloat16 or float16 gradients; this bucket holds {buf.dtype}")
    params = bucket.parameters()
    work = _BucketWork(buf, bucket.index(), bucket.is_last(), state._key_of(params),
                       [list(p.shape) or [1] for p in params])
    fut: "torch.futures.Future[torch.Tensor]" = torch.futures.Future()

    def run() -> None:
        try:
            fut.set_result(_exchange(state, work))
        except BaseException as e:  # every failure reaches DDP through the future
            fut.set_exception(e)  # type: ignore[arg-type]  # torch's stub types it as the result

    assert state._worker is not None
    state._worker.submit(run)
    return fut


class _BucketWork:
    """What a bucket's exchange needs, taken from DDP's bucket before the hook returns."""

    def __init__(self, buf: torch.Tensor, index: int, is_last: bool, keys: List[int], shapes: List[List[int]]) -> None:
        self.buf, self.index, self.is_last, self.keys, self.shapes = buf, index, is_last, keys, shapes


def _exchange(state: GradcompState, work: _BucketWork) -> torch.Tensor:
    """One bucket's exchange, on the communication thread; returns the averaged bucket."""
    assert state._comm is not None
    group = state._comm.group
    world, rank = state._comm.world, dist.get_rank(group)
    buf = work.buf
    # The compressors run on the host in float32: a device bucket, or a
    # bf16/fp16 one (converted exactly to float32, and the result rounded
    # back to the bucket's precision), crosses into a float32 host buffer.
    on_device = buf.device.type != "cpu" or buf.dtype != torch.float32
    copy_seconds = 0.0
    if on_device:
        # The result comes back into the bucket itself; the time both copies
        # take is reported as device_copy_seconds. The wait for the backward
        # pass's kernels in flight comes first, so it is not counted.
        if buf.device.type == "cuda":
            torch.cuda.synchronize(buf.device)
        t0 = time.perf_counter()
        host, out = state._pinned(work.index, buf)
        host.copy_(buf.detach().reshape(-1))
        copy_seconds += time.perf_counter() - t0
    else:
        host, out = buf, torch.empty_like(buf)
    measure = state.stats_every > 0 and state.iteration % state.stats_every == 0
    # A NaN or Inf on any worker raises FloatingPointError on every worker,
    # or (skip) leaves `out` zero and the memories as they were.
    rust = state._hook(rank, world)
    stats = rust.exchange(work.index, work.keys, work.shapes, host.detach().numpy(), out.numpy(), state._comm,
                          state.iteration, state.lr, measure, state.on_nonfinite == "skip")
    if on_device:
        # From pinned memory a blocking copy waits for its own transfer only,
        # so `out` is free for the next step when it returns.
        t0 = time.perf_counter()
        buf.copy_(out.reshape(buf.shape))
        out = buf
        copy_seconds += time.perf_counter() - t0
    rust.end_bucket(copy_seconds, work.is_last)
    state._skipping |= bool(stats["skipped"])
    if work.is_last:
        state._model_seen = True
        state.skipped_steps += state._skipping
        state._skipping = False
        state.iteration += 1
    return out


def hook(name: str, *, process_group: Optional[dist.ProcessGroup] = None, on_nonfinite: str = "stop",
         stats_every: int = 0, lr: float = 1.0,
         **options: Any) -> Tuple[GradcompState, Callable[[GradcompState, Any], "torch.futures.Future[torch.Tensor]"]]:
    """`(state, hook)` for `ddp.register_comm_hook(state, hook)`: compressor
    `name` with gradcomp's options (docs/CONFIG.md), e.g.
    `hook("topk", density=0.01)` or `hook("powersgd", matrix_approximation_rank=2, start_iter=10)`.

    - `process_group`: a gloo or NCCL group (None: the default group). The
      hook's collectives run on a group of their own over the same ranks;
      over NCCL the compressed payloads cross as CUDA tensors.
    - `on_nonfinite`: a NaN or Inf on any worker stops every worker with an
      error ('stop') or makes every worker skip the step ('skip': a zero update,
      the compressors' state untouched).
    - `stats_every`: measure the contraction and TernGrad's bound ratios every
      this many steps (0: never).
    - `lr`: the learning rate, for lr-scaled error feedback (`residual="lr-scaled"`).
    """
    state = GradcompState(name, process_group=process_group, on_nonfinite=on_nonfinite,
                          stats_every=stats_every, lr=lr, **options)
    return state, exchange_hook


# One network-model entry: `gradcomp.model` takes a module or shapes.
from ._model import model  # noqa: E402
# Local updates with an outer optimizer (DiLoCo), no DDP.
from ._local import LocalUpdates  # noqa: E402
from ._membership import manager, round_timeout  # noqa: E402
