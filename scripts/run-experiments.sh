#!/usr/bin/env bash
# Runs experiment configurations one after another (release build), each
# into runs/<name>/, with its console output in runs/<name>.log.
#
#   scripts/run-experiments.sh experiments/esgd-*.toml
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: scripts/run-experiments.sh CONFIG.toml..." >&2; exit 2; }
cargo build --release -p gradcomp-cli --features mpi >&2
mkdir -p runs
for cfg in "$@"; do
    name=$(basename "$cfg" .toml)
    echo "== $name" >&2
    if ! target/release/gradcomp train --config "$cfg" > "runs/$name.log" 2>&1; then
        echo "   FAILED (see runs/$name.log)" >&2
        continue
    fi
    grep -E "test (accuracy|perplexity)|bytes sent" "runs/$name.log" | sed 's/^/   /' >&2
done
