"""gradcomp: gradient compression backed by gradcomp's Rust compressors.

- `gradcomp.torch.hook(name, **options)`: a PyTorch DDP comm hook and its state.
- `gradcomp.compressor(name, shape, **options)`: one tensor's compressor, to and
  from gradcomp's wire bytes, for any transport.
- `gradcomp.model(...)`: the network model: which compressor pays off, and the
  predicted step time.

Every algorithm runs in Rust (the crates gradcomp-compress and gradcomp-dp);
this package is bindings.
"""
import json
from typing import Any, Dict, Iterable, Mapping, Sequence, Tuple, Union

import numpy as np

from . import _core
from ._config import config_json, whole as _whole
from ._model import model


__version__ = _core.__version__

__all__ = ["Compressor", "compressor", "model", "__version__"]


class Compressor:
    """One tensor's compressor and its memory (error feedback, DGC momentum).

    `compress(array, step)` returns this worker's message as bytes;
    `aggregate(messages)` decodes every worker's and combines them as gradcomp's
    exchange does (their average, or signSGD's majority vote). Bytes made here
    decode in Rust and the reverse.
    """

    def __init__(self, name: str, shape: Union[int, Sequence[int]], *, rank: int = 0, seed: int = 1,
                 memory: str = "auto", dgc_momentum: float = 0.9, residual: str = "raw", **options: Any) -> None:
        dims = shape if isinstance(shape, (tuple, list)) else (shape,)
        self.shape = tuple(_whole("shape", d) for d in dims)
        for key in options:
            if key in _NOT_FOR_ONE_TENSOR:
                raise ValueError(f"gradcomp: {key}: {_NOT_FOR_ONE_TENSOR[key]}")
        if residual != "raw":
            raise ValueError(f"gradcomp: residual: {residual!r}: the bytes API has no learning rate, so its "
                             "error feedback keeps raw gradients ('raw', the default)")
        if isinstance(dgc_momentum, bool) or not isinstance(dgc_momentum, (int, float)):
            raise ValueError(f"gradcomp: dgc_momentum: {dgc_momentum!r} is not a number in [0, 1)")
        table = json.loads(config_json(name, options))["compressor"]
        self._inner = _core.Compressor(json.dumps(table), list(self.shape), rank=_whole("rank", rank),
                                       seed=_whole("seed", seed), memory=memory, dgc_momentum=float(dgc_momentum))

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


# The configuration keys that say how a model is cut or stepped: a single
# tensor's compressor has none of them.
_NOT_FOR_ONE_TENSOR = {
    "granularity": "one compressor is one tensor; granularity is how gradcomp's hook and trainer cut a model",
    "exclude": "one compressor is one tensor; exclusion is how gradcomp's hook and trainer cut a model",
    "warmup": "the density warm-up is per epoch, which the bytes API does not see; set density",
    "local_clip": "DGC's local clipping needs the whole model's gradient norm; clip before compress",
    "topology": "the bytes API moves no bytes; your transport is the topology",
}


def compressor(name: str, shape: Union[int, Sequence[int]], **options: Any) -> Compressor:
    """`Compressor(name, shape, **options)`."""
    return Compressor(name, shape, **options)
