"""One shared state on every worker, checked in one allreduce.

The workers of outer rounds must hold the same θ_outer, outer momentum and
plan (the configuration). Each round's first collective checks it: every
worker in sync sends a 78-bit digest of that state cut in three 26-bit pieces
and their squares; the sums are equal everywhere only if the digests are
(k · Σh² = (Σh)² for k workers, Cauchy–Schwarz; exact in int64 up to 2^11
workers). A worker not in sync (a replica whose heal failed) sends zeros and
is not counted. Used under a manager (`_membership.FtComm.count`) and
without one (`_local.LocalUpdates`).
"""
import hashlib
from typing import Any, Dict, List, Sequence

import numpy as np


class Diverged(RuntimeError):
    """The workers of a round hold different shared state (θ_outer, the
    outer momentum, the plan): each round's first collective checks it."""


def digest(state: Dict[str, Any], config: str) -> int:
    """A 78-bit digest of the shared state (`LocalUpdates.state(shared=True)`,
    the core's: no unit's buffers, which each worker owns) and the
    configuration."""
    h = hashlib.blake2b(digest_size=10)
    h.update(config.encode())
    for key in sorted(state):
        h.update(key.encode())
        h.update(np.ascontiguousarray(state[key], dtype=np.float32).data)
    return int.from_bytes(h.digest(), "little") >> 2


def pieces(value: int, inside: bool) -> List[int]:
    """What a worker adds into the check: its digest's three 26-bit pieces
    and their squares (zeros for a worker not in sync)."""
    parts = [int(inside) * ((value >> (26 * i)) & ((1 << 26) - 1)) for i in range(3)]
    return [*parts, *(p * p for p in parts)]


def same(in_sync: int, sums: Sequence[int]) -> bool:
    """Whether the `in_sync` workers' digests were all one, from the sums of
    their `pieces`."""
    return all(in_sync * sums[3 + i] == sums[i] ** 2 for i in range(3))
