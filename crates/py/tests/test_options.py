"""Every option reaches the core or is refused (issue #35, point 1).

For every compressor and every option it documents (its `[compressor]` table,
as Rust's defaults list it, and the `[compression]` and top-level keys a hook
or a bytes-API compressor takes), setting the option to a value other than its
default either changes what is sent or the result, or raises ValueError naming
the option. The hook's side runs through `_core.replay`, the exchange the hook
calls, on two in-process workers; the bytes API's through `compress`.
"""
import json
import os
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

import gradcomp
from gradcomp import _core

SHAPES = [[24, 16], [16]]
STEPS = 4
DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "docs", "CONFIG.md")

# A value other than the default, for each option a compressor documents.
OTHER: Dict[str, Any] = {
    "clipping": False, "c": 1.0, "share_scaler": False, "packing": "base3", "levels": 4,
    "density": 0.1, "wire": {"indices": "varint", "values": "f16"}, "sample_fraction": 0.5, "same_seed": True,
    "unbiased": True, "threshold": 0.3, "matrix_approximation_rank": 2, "start_iter": 3,
    "min_compression_rate": 100.0, "error_feedback": False, "warm_start": False, "orthogonalization_epsilon": 1e-3,
    "random_seed": 5, "momentum": 0.5, "block": 64, "beta": 0.5, "importance": "magnitude", "epsilon": 0.1,
    "granularity": "global", "residual": "lr-scaled", "dgc_momentum": 0.5, "seed": 7,
    "format": "e2m1", "rounding": "stochastic", "k": 6, "chunk": 8, "vector_chunk": 8, "values": "f32",
    "decay": 0.5, "clip": False,
}
# What the runs start from: PowerSGD compressing from step 2, DGC-k dense
# enough that its sample size depends on sample_fraction, the chunked methods
# keeping few enough per tile that the tiles' sizes matter.
BASE: Dict[str, Dict[str, Any]] = {"powersgd": {"start_iter": 2}, "dgck": {"density": 0.3},
                                   "sparseloco": {"k": 4}, "dct-topk": {"k": 4}}
# The chunked methods tile a matrix by `chunk` and a vector by `vector_chunk`:
# the bytes API runs them on both.
CHUNKED = {"sparseloco", "dct-topk"}
# Methods whose memory is none by default, and those summed in an allreduce (docs/CONFIG.md).
NO_MEMORY = {"dense", "fp16", "terngrad", "qsgd", "signsgd", "signum", "natural", "esgd"}
SUMMED = {"dense", "fp16", "terngrad", "powersgd"}
# The methods that draw random numbers (Rust's `Method::draws_random`, checked
# there against the messages): the run-wide `seed` is taken by every method and
# changes only these.
RANDOM = {"terngrad", "qsgd", "randk", "natural", "dgck"}
HOOK_KEYS = ["granularity", "memory", "residual", "dgc_momentum", "exclude", "seed", "topology"]
BYTES_KEYS = ["memory", "residual", "dgc_momentum", "seed"]


def own_options(name: str) -> List[str]:
    table = json.loads(_core.compressor_options(name))
    return ["matrix_approximation_rank" if k == "rank" else k for k in table if k != "name"]


def other(name: str, key: str) -> Any:
    if key == "memory":
        return "error-feedback" if name in NO_MEMORY else "none"
    if key == "topology":
        return "allgather" if name in SUMMED else "allreduce"
    if key == "exclude":
        return {"min_size": 1000} if name == "powersgd" else {"biases": True}
    if key == "refine":
        return name != "gaussiank-refined"
    return OTHER[key]


GRADS = [[np.random.default_rng(10 * w + s).standard_normal(24 * 16 + 16).astype(np.float32) for s in range(STEPS)]
         for w in range(2)]


def through_the_hook(name: str, options: Dict[str, Any]) -> Tuple[Any, Any]:
    """Both workers' outputs for every step, and what each sent (per operation: calls and bytes)."""
    config = _core.hook_config(name, options)
    outs, sent = _core.replay(config, [[0, 1]] * STEPS, [SHAPES] * STEPS, list(range(STEPS)), GRADS, lr=0.1)
    return np.concatenate([o for w in outs for o in w]), sent


def through_the_bytes_api(name: str, options: Dict[str, Any]) -> Tuple[Any, Any]:
    """One tensor's messages over the steps, and the aggregate of the last two
    (as two workers' would be); the chunked methods' on a matrix and a vector."""
    shapes: List[Any] = [(24, 16), 16] if name in CHUNKED else [24 * 16]
    results, msgs = [], []
    for shape in shapes:
        n = int(np.prod(shape))
        c = gradcomp.compressor(name, shape, **options)
        mine = [c.compress(GRADS[0][s][:n], s) for s in range(STEPS)]
        results.append(c.aggregate(mine[-2:]))
        msgs += mine
    return np.concatenate([np.ravel(r) for r in results]), msgs


def changes_or_is_refused(run: Any, name: str, key: str) -> str:
    base = dict(BASE.get(name, {}))
    result, sent = run(name, base)
    try:
        result2, sent2 = run(name, {**base, key: other(name, key)})
    except ValueError as e:
        assert f"{key}" in str(e), f"{name}: {key} refused without naming it: {e}"
        return "refused"
    assert not (np.array_equal(result, result2) and sent == sent2), \
        f"{name}: {key}={other(name, key)!r} changes neither what is sent nor the result"
    return "changes"


def keys(name: str, common: List[str]) -> List[str]:
    return own_options(name) + [k for k in common if k != "seed" or name in RANDOM]


HOOK_CASES = [(n, k) for n in _core.methods() if n != "esgd" for k in keys(n, HOOK_KEYS)]
BYTES_CASES = [(n, k) for n in _core.methods() if n not in ("esgd", "powersgd") for k in keys(n, BYTES_KEYS)]


@pytest.mark.parametrize("name,key", HOOK_CASES, ids=[f"{n}-{k}" for n, k in HOOK_CASES])
def test_every_hook_option_changes_what_is_sent_or_is_refused(name: str, key: str) -> None:
    changes_or_is_refused(through_the_hook, name, key)


@pytest.mark.parametrize("name,key", BYTES_CASES, ids=[f"{n}-{k}" for n, k in BYTES_CASES])
def test_every_bytes_api_option_changes_what_is_sent_or_is_refused(name: str, key: str) -> None:
    changes_or_is_refused(through_the_bytes_api, name, key)


def test_the_methods_the_hook_cannot_run_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="loss"):
        _core.hook_config("esgd", {})
    with pytest.raises(ValueError, match="allreduce rounds"):
        gradcomp.compressor("powersgd", (8, 8))


@pytest.mark.parametrize("key,value", [("bucket_mb", 1.0), ("pipeline", False), ("on_device", False),
                                       ("checksum_every", 5), ("base_lr", 0.1), ("server", "dedicated")])
def test_what_the_hook_sets_itself_is_refused(key: str, value: Any) -> None:
    with pytest.raises(ValueError, match=f"{key}: "):
        _core.hook_config("topk", {"density": 0.1, key: value})


def test_every_option_is_documented() -> None:
    """Each compressor's options appear in its row of docs/CONFIG.md; each method has a row."""
    docs = open(DOCS).read()
    for name in _core.methods():
        row = next((line for line in docs.splitlines() if line.startswith(f"| `{name}` |")), None)
        assert row is not None, f"docs/CONFIG.md has no row for {name}"
        for key in json.loads(_core.compressor_options(name)):
            if key != "name":
                assert f"`{key}`" in row, f"docs/CONFIG.md's row for {name} does not name {key}"
    for key in HOOK_KEYS:
        assert f"`compression.{key}" in docs or f"`{key}`" in docs, key
