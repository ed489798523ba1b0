#!/usr/bin/env bash
# The Python package's tests: installs gradcomp (crates/py, built by maturin)
# into a virtual environment, with PyTorch, numpy and pytest from PyPI on first
# use, and runs pytest on crates/py/tests (DDP over gloo with 2 and 4
# processes on 127.0.0.1; LocalUpdates under torchft's membership with 3), and the peer benchmark's bookkeeping
# (bench/peer/test_peer.py). Arguments go to pytest.
#
# The environment lives outside the repository ($GRADCOMP_VENV, default
# ~/.cache/gradcomp/py-venv), so it is reused and never committed; so does
# the wheel's build ($GRADCOMP_PY_TARGET, default ~/.cache/gradcomp/py-target).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${GRADCOMP_VENV:-$HOME/.cache/gradcomp/py-venv}"
# The wheel is a release build: its own target directory keeps it apart from
# the debug test build's (and warm between runs).
export CARGO_TARGET_DIR="${GRADCOMP_PY_TARGET:-$HOME/.cache/gradcomp/py-target}"
if [ ! -x "$venv/bin/python" ]; then
    echo "== creating $venv"
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import torch, numpy, pytest, mypy, torchft" 2>/dev/null; then
    echo "== installing torch, numpy, pytest, mypy and torchft into $venv (about 2 minutes)"
    # torchft: the membership engine of LocalUpdates(manager=...), run by
    # its fault tests (crates/py/tests/test_local_membership.py).
    "$venv/bin/pip" install -q torch numpy pytest mypy "torchft==${TORCHFT_VERSION:-0.2.0}"
fi
echo "== pip install ./crates/py"
"$venv/bin/pip" install -q ./crates/py
# The package (with its extension's stubs, _core.pyi), its example and its
# tests are typed.
echo "== mypy --strict crates/py/python/gradcomp crates/py/examples crates/py/tests"
"$venv/bin/mypy" --strict --no-incremental crates/py/python/gradcomp crates/py/examples crates/py/tests
echo "== pytest crates/py/tests bench/peer/test_peer.py"
"$venv/bin/python" -m pytest -q -p no:cacheprovider crates/py/tests bench/peer/test_peer.py scripts/test_check_shape.py "$@"
