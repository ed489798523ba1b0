#!/usr/bin/env bash
# The peer's environment: a virtual environment with PyTorch (CPU use; the wheel
# from PyPI), numpy, torchft (PyTorch's DiLoCo, the peer's local-update baseline:
# bench/peer/torch_local.py) and gradcomp's Python package built from this checkout.
#
#   bench/peer/install.sh [VENV]      (default ~/.cache/gradcomp/py-venv, the tests' own)
#
# Then: VENV/bin/python bench/peer/train.py ..., or bench/peer/matrix.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="${1:-${GRADCOMP_VENV:-$HOME/.cache/gradcomp/py-venv}}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q torch numpy "torchft==${TORCHFT_VERSION:-0.2.0}"
CARGO_TARGET_DIR="${GRADCOMP_PY_TARGET:-$HOME/.cache/gradcomp/py-target}" "$venv/bin/pip" install -q ./crates/py
"$venv/bin/python" -c "import torch, torchft, gradcomp; from importlib.metadata import version; print('peer ready: torch', torch.__version__, '| torchft', version('torchft'), '| gradcomp', gradcomp.__version__)"
