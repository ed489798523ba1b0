#!/usr/bin/env bash
# What building gradcomp with burn's `cuda` feature needs on Debian 12, without
# the download burn's LLVM build script would otherwise make (it fails on a
# machine with no internet beyond the package registries):
#   - Debian's LLVM 22 (llvm-22-dev, libpolly-22-dev and the libraries it links)
#   - ~/.local/share/tracel/tracel-llvm-23.1.0-4/{bin,lib,include} pointing at
#     /usr/lib/llvm-22, with the `.tracel-llvm-installed` marker the build
#     script looks for
#   - a `liblibz3.so` link to the system libz3 in a directory the build then
#     puts on LIBRARY_PATH (printed at the end: source it or export it).
# Needs root and apt. Idempotent.
set -euo pipefail
. "$(dirname "$0")/lib/apt.sh"

packages="llvm-22-dev libpolly-22-dev libzstd-dev zlib1g-dev libxml2-dev libffi-dev libz3-dev"
missing=""
for p in $packages; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
# shellcheck disable=SC2086 # a list of package names
[ -z "$missing" ] || apt_install "the cuda build needs these packages" $missing

llvm=/usr/lib/llvm-22
tracel="$HOME/.local/share/tracel/tracel-llvm-23.1.0-4"
mkdir -p "$tracel"
for d in bin lib include; do ln -sfn "$llvm/$d" "$tracel/$d"; done
touch "$tracel/.tracel-llvm-installed"

z3dir="$HOME/.local/share/tracel/z3"
mkdir -p "$z3dir"
z3=$(ls /usr/lib/x86_64-linux-gnu/libz3.so* 2>/dev/null | head -n 1)
[ -n "$z3" ] || { echo "error: no libz3.so found (package libz3-dev)" >&2; exit 1; }
ln -sf "$z3" "$z3dir/liblibz3.so"
echo "export LIBRARY_PATH=$z3dir\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
