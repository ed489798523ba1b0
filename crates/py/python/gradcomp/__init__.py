"""gradcomp: gradient compression backed by gradcomp's Rust compressors.

- `gradcomp.torch.hook(name, **options)`: a PyTorch DDP comm hook and its state.
- `gradcomp.compressor(name, shape, **options)`: one tensor's compressor, to and
  from gradcomp's wire bytes, for any transport.
- `gradcomp.model(...)`: the network model: which compressor pays off, and the
  predicted step time; `gradcomp.plan(...)`: the plan of local updates it
  chooses (`plan = "auto"`).

Every algorithm runs in Rust (the crates gradcomp-compress and gradcomp-exchange);
this package is bindings.
"""
from typing import Any, Dict, Iterable, Mapping, Sequence, Tuple, Union

import numpy as np

from . import _core
from ._config import whole as _whole
from ._model import model, plan


__version__ = _core.__version__

__all__ = ["Compressor", "compressor", "model", "plan", "__version__"]


class Compressor:
    """One tensor's compressor and its memory (error feedback, DGC momentum).

    `compress(array, step)` returns this worker's message as bytes;
    `aggregate(messages)` decodes every worker's and combines them as gradcomp's
    exchange does (their average, or signSGD's majority vote). Bytes made here
    decode in Rust and the reverse.
    """

    def __init__(self, name: str, shape: Union[int, Sequence[int]], *, rank: int = 0, **options: Any) -> None:
        dims = shape if isinstance(shape, (tuple, list)) else (shape,)
        self.shape = tuple(_whole("shape", d) for d in dims)
        # The options (docs/CONFIG.md's keys, `memory`, `dgc_momentum`,
        # `residual` and `seed` among them) are routed and checked in Rust.
        self._inner = _core.Compressor(name, list(self.shape), options, rank=_whole("rank", rank))

    @property
    def name(self) -> str:
        return self._inner.name

    def compress(self, array: Any, step: int) -> bytes:
        flat = np.ascontiguousarray(np.asarray(array, dtype=np.float32).reshape(-1))
        return self._inner.compress(flat, _whole("step", step))

    def aggregate(self, messages: Iterable[bytes]) -> "np.typing.NDArray[np.float32]":
        return self._inner.aggregate([bytes(m) for m in messages]).reshape(self.shape)

    def state_dict(self) -> Dict[str, "np.typing.NDArray[np.float32]"]:
        return {k: np.array(v) for k, v in self._inner.state_dict().items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._inner.load_state_dict({k: np.asarray(v, dtype=np.float32).reshape(-1) for k, v in state.items()})


def compressor(name: str, shape: Union[int, Sequence[int]], **options: Any) -> Compressor:
    """`Compressor(name, shape, **options)`."""
    return Compressor(name, shape, **options)
