"""The collectives gradcomp's Rust exchange calls, on a torch.distributed group.

Buffers arrive as memoryviews of Rust memory, valid only during the call: each
is wrapped by `torch.frombuffer` (no copy) and the wrapper dropped before the
call returns.
"""
from typing import List, Optional

import torch
import torch.distributed as dist

_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
}
_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}


class Comm:
    """gradcomp's collectives on `group` (None: the default group)."""

    def __init__(self, group: Optional[dist.ProcessGroup] = None) -> None:
        self.group = group
        self.world = dist.get_world_size(group)

    def all_reduce(self, view: memoryview, dtype: str, op: str) -> None:
        if len(view) == 0:
            return
        t = torch.frombuffer(view, dtype=_DTYPES[dtype])
        if dtype == "int16":
            # gloo sums no 16-bit integers: sum in 32 bits and wrap back, as
            # the other backends' wrapping 16-bit sum does.
            wide = t.to(torch.int32)
            dist.all_reduce(wide, op=_OPS[op], group=self.group)
            t.copy_(wide.to(torch.int16))
        else:
            dist.all_reduce(t, op=_OPS[op], group=self.group)
        del t

    def all_gather(self, data: bytes) -> List[bytes]:
        """Every worker's `data` (bytes), in rank order; padded to the longest on the wire."""
        size = torch.tensor([len(data)], dtype=torch.int64)
        gathered = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world)]
        dist.all_gather(gathered, size, group=self.group)
        sizes = [int(s) for s in gathered]
        longest = max(sizes)
        if longest == 0:
            return [b""] * self.world
        buf = torch.zeros(longest, dtype=torch.uint8)
        if data:
            buf[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        parts = [torch.empty(longest, dtype=torch.uint8) for _ in range(self.world)]
        dist.all_gather(parts, buf, group=self.group)
        return [p[:s].numpy().tobytes() for p, s in zip(parts, sizes)]

    def broadcast(self, data: bytes, root: int) -> bytes:
        size = torch.tensor([len(data)], dtype=torch.int64)
        dist.broadcast(size, src=root, group=self.group)
        n = int(size)
        buf = torch.zeros(n, dtype=torch.uint8)
        if dist.get_rank(self.group) == root and data:
            buf[:] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if n:
            dist.broadcast(buf, src=root, group=self.group)
        return buf.numpy().tobytes()

    def barrier(self) -> None:
        dist.barrier(group=self.group)
