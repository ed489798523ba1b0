"""Checks of the Python arguments that are not options (shapes, ranks, steps).

The options themselves (docs/CONFIG.md's keys) go to Rust as they are given:
`_core.hook_config` and `_core.Compressor` route them to their sections and
raise ValueError naming one that is unknown, out of range or not for this
entry point.
"""
import datetime
import math
from typing import Any, Sequence, Union

import numpy as np

from . import _core

# The outer optimizers of local updates (`strategy.outer.name`), as the core registers them.
OUTER = tuple(_core.outer_optimizers())
# How a round overlaps the next inner phase (`strategy.overlap`).
OVERLAP = ("none", "eager", "delayed")


def whole(name: str, value: Any) -> int:
    """`value` as a whole number ≥ 0, or ValueError naming the argument
    (booleans are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"gradcomp: {name}: {value!r} is not a whole number ≥ 0")
    return int(value)


def whole_positive(name: str, value: Any) -> int:
    """`value` as a whole number ≥ 1, or ValueError naming the argument."""
    if whole(name, value) == 0:
        raise ValueError(f"gradcomp: {name}: 0; at least 1")
    return int(value)


def one_of(name: str, value: Any, choices: Sequence[str]) -> str:
    """`value` if it is one of `choices`, or ValueError naming the argument
    and the choices."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"gradcomp: {name}: {value!r} is not one of {', '.join(choices)}")
    return value


def number(name: str, value: Any) -> float:
    """`value` as a float, or ValueError naming the argument (booleans are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"gradcomp: {name}: {value!r} is not a number")
    return float(value)


def flag(name: str, value: Any) -> bool:
    """`value` if it is a bool, or ValueError naming the argument."""
    if not isinstance(value, bool):
        raise ValueError(f"gradcomp: {name}: {value!r} is not True or False")
    return value


def seconds(name: str, value: Union[float, datetime.timedelta]) -> datetime.timedelta:
    """`value` (seconds, or a timedelta) as a timedelta: finite and > 0, else ValueError naming `name`."""
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ValueError(f"gradcomp: {name}: {value!r} is not a finite number of seconds > 0")
    return datetime.timedelta(seconds=float(value))
