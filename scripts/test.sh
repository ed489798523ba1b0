#!/usr/bin/env bash
# The test suite: every crate, the MPI backend included (its tests start
# `mpirun -np 2` and `-np 4`) and the device kernels on wgpu, which is Mesa's
# software Vulkan (lavapipe) where there is no GPU. Installs the system
# packages if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo test --workspace --features gradcomp-cli/mpi,gradcomp-dp/learner,gradcomp-kernels/wgpu "$@"
