"""The bytes API: wire bytes cross between Python and Rust in both directions.

crates/compress/tests/wire_vectors.rs pins, in tests/vectors/wire.json, the
bytes the Rust compressors make from fixed gradients (two workers, three steps)
and their combined result. Here Python makes the same bytes from the same
gradients, and combines the Rust bytes to the same values, bit for bit.
"""
from typing import Any
import json
import os

import numpy as np
import pytest

import gradcomp

VECTORS = os.path.join(os.path.dirname(__file__), "..", "..", "compress", "tests", "vectors", "wire.json")
V = json.load(open(VECTORS))
CASES = V["cases"]


def compressors(case: Any, workers: Any) -> Any:
    opts = {k: v for k, v in case["compressor"].items() if k != "name"}
    return [gradcomp.compressor(case["compressor"]["name"], tuple(V["shape"]), rank=r, seed=V["seed"], **opts)
            for r in range(workers)]


@pytest.mark.parametrize("case", CASES, ids=[c["compressor"]["name"] for c in CASES])
def test_python_makes_the_rust_bytes(case: Any) -> None:
    workers = V["workers"]
    cs = compressors(case, workers)
    for step in range(V["steps"]):
        for r, c in enumerate(cs):
            g = np.asarray(case["inputs"][step * workers + r], dtype=np.float32).reshape(V["shape"])
            assert c.compress(g, step).hex() == case["messages"][step][r], (step, r)


@pytest.mark.parametrize("case", CASES, ids=[c["compressor"]["name"] for c in CASES])
def test_python_combines_the_rust_bytes(case: Any) -> None:
    c = compressors(case, 1)[0]
    for step in range(V["steps"]):
        got = c.aggregate([bytes.fromhex(m) for m in case["messages"][step]])
        want = np.asarray(case["combined"][step], dtype=np.float32).reshape(V["shape"])
        assert np.array_equal(got, want), step


def test_state_dict_resumes_the_memory_bit_exactly() -> None:
    g = [np.random.default_rng(s).standard_normal(100).astype(np.float32) for s in range(6)]
    a = gradcomp.compressor("topk", (100,), density=0.05)
    for step in range(3):
        a.compress(g[step], step)
    b = gradcomp.compressor("topk", (100,), density=0.05)
    b.load_state_dict(a.state_dict())
    for step in range(3, 6):
        assert a.compress(g[step], step) == b.compress(g[step], step)
    assert len(a.state_dict()["memory.0"]) == 100


def test_majority_vote_and_average() -> None:
    s = gradcomp.compressor("signsgd", (4,))
    votes = [s.compress(np.array(v, dtype=np.float32), 0) for v in ([1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1])]
    assert s.aggregate(votes).tolist() == [1, -1, -1, -1]
    d = gradcomp.compressor("dense", (3,))
    msgs = [d.compress(np.array([1, 2, 3], dtype=np.float32), 0), d.compress(np.array([3, 2, 1], dtype=np.float32), 0)]
    assert d.aggregate(msgs).tolist() == [2, 2, 2]
    assert len(msgs[0]) == 12 + 12
