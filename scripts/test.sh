#!/usr/bin/env bash
# The test suite: every crate, the MPI backend included (its tests start
# `mpirun -np 2` and `-np 4`) and the device kernels on wgpu, which is Mesa's
# software Vulkan (lavapipe) where there is no GPU; then the Python package's
# tests (scripts/test-python.sh: PyTorch DDP with gradcomp's hooks). Installs
# the system packages, and the Python environment, if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# gradcomp-py is an extension module: pytest tests it, through the wheel.
cargo test --workspace --exclude gradcomp-py --features gradcomp-cli/mpi,gradcomp-dp/learner,gradcomp-kernels/wgpu "$@"
scripts/test-python.sh
