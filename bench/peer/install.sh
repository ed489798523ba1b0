#!/usr/bin/env bash
# The peer's environment: a virtual environment with PyTorch (CPU use; the wheel
# from PyPI), numpy and gradcomp's Python package built from this checkout.
#
#   bench/peer/install.sh [VENV]      (default ~/.cache/gradcomp/py-venv, the tests' own)
#
# Then: VENV/bin/python bench/peer/train.py ..., or bench/peer/matrix.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="${1:-${GRADCOMP_VENV:-$HOME/.cache/gradcomp/py-venv}}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q torch numpy
CARGO_TARGET_DIR="${GRADCOMP_PY_TARGET:-$HOME/.cache/gradcomp/py-target}" "$venv/bin/pip" install -q ./crates/py
"$venv/bin/python" -c "import torch, gradcomp; print('peer ready: torch', torch.__version__, '| gradcomp', gradcomp.__version__)"
