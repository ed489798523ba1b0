"""A compressor name and keyword options, as the JSON of a gradcomp configuration.

The keys are gradcomp's TOML keys (docs/CONFIG.md): the compressor's own options
go to `[compressor]`; `memory`, `residual`, `granularity`, `exclude`, `warmup`,
`dgc_momentum` and `local_clip` to `[compression]`; `topology` and `seed` stay
at the top. The Rust side checks every key and raises ValueError naming one it
does not know or whose value is out of range.
"""
import json
import math
from typing import Any, Dict

import numpy as np

COMPRESSION_KEYS = {"granularity", "memory", "residual", "dgc_momentum", "warmup", "exclude", "local_clip"}
TOP_KEYS = {"topology", "seed"}


def config_json(name: str, options: Dict[str, Any]) -> str:
    """The configuration of compressor `name` with `options`, as JSON."""
    if not isinstance(name, str):
        raise TypeError(f"gradcomp: the compressor name must be a string, got {type(name).__name__}")
    for key, value in options.items():
        if not _finite(value):
            raise ValueError(f"gradcomp: {key}: {value!r} is not a finite number")
    compressor = {"name": name}
    compression = {}
    top = {}
    for key, value in options.items():
        if key in COMPRESSION_KEYS:
            compression[key] = value
        elif key in TOP_KEYS:
            top[key] = value
        else:
            compressor[key] = value
    # No parameter checksums: DDP keeps the replicas, and gradcomp never sees them.
    cfg = {"compressor": compressor, "compression": compression, "checksum_every": 0, **top}
    try:
        return json.dumps(cfg, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"gradcomp: options of {name}: {e}") from None


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    return True


def whole(name: str, value: Any) -> int:
    """`value` as a whole number ≥ 0, or ValueError naming the argument
    (booleans are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"gradcomp: {name}: {value!r} is not a whole number ≥ 0")
    return int(value)
