"""The collectives gradcomp's Rust exchange calls, on a torch.distributed group.

Buffers arrive as memoryviews of Rust memory, valid only during the call: each
is wrapped by `torch.frombuffer` (no copy) and the wrapper dropped before the
call returns. On a group whose collectives move device tensors (NCCL), each
payload is copied to `device` for the collective and its result back: the
compression stays on the host, only the payload crosses.
"""
import datetime
from typing import Any, List, Optional

import torch
import torch.distributed as dist

_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
}
_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}


def check_group(group: Any) -> None:
    """TypeError naming `process_group` unless it is a group (or None: the default group)."""
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"gradcomp: process_group: {group!r} is not a torch.distributed process group "
                        "(dist.new_group(...), or None for the default group)")


def payload_device(group: Optional[dist.ProcessGroup], tensors_on: torch.device) -> Optional[torch.device]:
    """Where `group`'s collectives take their payloads: the tensors' CUDA
    device on an NCCL group, the host (None) otherwise; ValueError naming
    `process_group` for an NCCL group and tensors on the CPU."""
    if dist.get_backend(group) != "nccl":
        return None
    if tensors_on.type != "cuda":
        raise ValueError("gradcomp: process_group: an NCCL group moves CUDA tensors, and these are on the CPU; "
                         "pass process_group=dist.new_group(backend='gloo')")
    return tensors_on


def own_comm(group: Optional[dist.ProcessGroup], tensors_on: torch.device) -> "Comm":
    """A group of its own, of the same ranks as `group` (made collectively:
    every rank of `group` calls this), so that collectives run from a
    communication thread never interleave with the caller's own (DDP's, or
    the user's): gloo, or NCCL where `group` is NCCL (the payloads then
    cross as CUDA tensors on `tensors_on`; compression stays on the host)."""
    ranks = None if group is None else dist.get_process_group_ranks(group)
    device = payload_device(group, tensors_on)
    # The user's timeout (init_process_group's, or the group's own), never
    # torch's default for a new group: a peer that stops answering fails the
    # thread's collectives as soon as it fails the caller's.
    own = dist.new_group(ranks=ranks, backend="gloo" if device is None else "nccl", timeout=group_timeout(group))
    assert isinstance(own, dist.ProcessGroup), "this worker is in the group"
    return Comm(own, device=device)


def bounded_group(group: Optional[dist.ProcessGroup], timeout: datetime.timedelta) -> dist.ProcessGroup:
    """A group of `group`'s ranks and backend whose every collective fails
    after `timeout`, whatever `group`'s own (made collectively: every rank of
    the default group calls this, as `dist.new_group` asks). The groups made
    from it for a communication thread (`own_comm`) take its timeout too."""
    ranks = None if group is None else dist.get_process_group_ranks(group)
    own = dist.new_group(ranks=ranks, backend=dist.get_backend(group), timeout=timeout)
    assert isinstance(own, dist.ProcessGroup), "this worker is in the group"
    return own


def group_timeout(group: Optional[dist.ProcessGroup]) -> Optional[datetime.timedelta]:
    """The timeout `group`'s collectives run under (None: the default
    group): the one given to `init_process_group` or `new_group`. None where
    this torch does not say (the new group then takes torch's default)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    for device in ("cpu", "cuda"):
        try:
            timeout = pg._get_backend(torch.device(device)).options._timeout
        except Exception:  # no backend for that device, or another torch's API
            continue
        if isinstance(timeout, datetime.timedelta):
            return timeout
    return None


class Comm:
    """gradcomp's collectives on `group` (None: the default group); with
    `device`, every payload crosses as a tensor on that device (NCCL)."""

    def __init__(self, group: Optional[dist.ProcessGroup] = None, device: Optional[torch.device] = None) -> None:
        self.group = group
        self.world = dist.get_world_size(group)
        self.device = device

    def _out(self, t: torch.Tensor) -> torch.Tensor:
        """`t` where the group's collectives take it."""
        return t if self.device is None else t.to(self.device)

    def _set_device(self) -> None:
        # The communication thread's current CUDA device is the group's.
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.set_device(self.device)

    def all_reduce(self, view: memoryview, dtype: str, op: str) -> None:
        if len(view) == 0:
            return
        self._set_device()
        t = torch.frombuffer(view, dtype=_DTYPES[dtype])
        # gloo and NCCL sum no 16-bit integers: sum in 32 bits and wrap back,
        # as the other backends' wrapping 16-bit sum does.
        wide = self._out(t.to(torch.int32) if dtype == "int16" else t)
        dist.all_reduce(wide, op=_OPS[op], group=self.group)
        if wide.data_ptr() != t.data_ptr():
            t.copy_(wide.to(t.dtype).cpu())
        del t

    def all_gather(self, data: bytes) -> List[bytes]:
        """Every worker's `data` (bytes), in rank order; padded to the longest on the wire."""
        self._set_device()
        size = self._out(torch.tensor([len(data)], dtype=torch.int64))
        gathered = [torch.zeros_like(size) for _ in range(self.world)]
        dist.all_gather(gathered, size, group=self.group)
        sizes = [int(s.item()) for s in gathered]
        longest = max(sizes)
        if longest == 0:
            return [b""] * self.world
        buf = torch.zeros(longest, dtype=torch.uint8)
        if data:
            buf[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        sent = self._out(buf)
        parts = [torch.empty_like(sent) for _ in range(self.world)]
        dist.all_gather(parts, sent, group=self.group)
        return [p[:s].cpu().numpy().tobytes() for p, s in zip(parts, sizes)]

    def all_to_all(self, parts: List[bytes]) -> List[bytes]:
        """`parts[j]` to worker j; the message every worker sent this one, in
        rank order. The sizes go first (8 bytes to each worker), then the
        messages unpadded."""
        self._set_device()
        sent = [len(p) for p in parts]
        sizes = self._out(torch.tensor(sent, dtype=torch.int64))
        got = torch.empty_like(sizes)
        dist.all_to_all_single(got, sizes, group=self.group)
        received = [int(s) for s in got.tolist()]
        out = self._out(torch.empty(sum(received), dtype=torch.uint8))
        dist.all_to_all_single(out, self._out(_bytes_tensor(b"".join(parts))), output_split_sizes=received,
                               input_split_sizes=sent, group=self.group)
        return _split(out.cpu().numpy().tobytes(), received)

    def broadcast(self, data: bytes, root: int) -> bytes:
        self._set_device()
        size = self._out(torch.tensor([len(data)], dtype=torch.int64))
        dist.broadcast(size, src=root, group=self.group)
        n = int(size.item())
        buf = torch.zeros(n, dtype=torch.uint8)
        if dist.get_rank(self.group) == root and data:
            buf[:] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if n:
            moved = self._out(buf)
            dist.broadcast(moved, src=root, group=self.group)
            buf = moved.cpu()
        return buf.numpy().tobytes()

    def barrier(self) -> None:
        dist.barrier(group=self.group)

    def duplicate(self) -> "Comm":
        """A group of its own, of this group's ranks and backend (made
        collectively: every rank calls it at the same point), for the
        collectives of a communication thread (the outer rounds' thread)."""
        return own_comm(self.group, self.device if self.device is not None else torch.device("cpu"))


def _bytes_tensor(data: bytes) -> torch.Tensor:
    """`data` as a uint8 tensor (a copy: torch needs a writable buffer)."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)


def _split(data: bytes, sizes: List[int]) -> List[bytes]:
    """`data` cut into consecutive parts of `sizes` bytes."""
    parts, at = [], 0
    for s in sizes:
        parts.append(data[at:at + s])
        at += s
    return parts
