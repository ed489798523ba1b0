#!/usr/bin/env bash
# Installs the system packages gradcomp's MPI backend builds against (Open MPI
# and libclang for bindgen), the font its figures use, and Mesa's software
# Vulkan driver (lavapipe) on which the device-kernel tests run without a GPU,
# when missing. Needs root and apt; on other
# systems it says what to install and exits 1.
set -euo pipefail
. "$(dirname "$0")/lib/apt.sh"

have_mpi() { command -v mpicc >/dev/null && command -v mpirun >/dev/null; }
have_libclang() { ls /usr/lib/llvm-*/lib/libclang*.so* /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1; }
have_font() { [ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]; }
have_vulkan() { ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1; }

if have_mpi && have_libclang && have_font && have_vulkan; then
    exit 0
fi
# The font is for `gradcomp report`'s figures.
apt_install "gradcomp's MPI backend needs Open MPI and libclang, its kernel tests a Vulkan driver" \
    libopenmpi-dev openmpi-bin libclang-dev make fonts-dejavu-core mesa-vulkan-drivers
