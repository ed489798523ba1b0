#!/usr/bin/env bash
# The core knows no framework: `cargo tree` of gradcomp-exchange (every
# feature, the device kernels included) and of the Python package lists no
# burn crate. A front may depend on the core; the core never on a front.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for args in "-p gradcomp-exchange --all-features" "-p gradcomp-py"; do
    # shellcheck disable=SC2086
    crates=$(cargo tree $args -e normal,build --prefix none --format '{p}' | awk '{print $1, $2}' | sort -u)
    found=$(echo "$crates" | awk '{print $1}' | grep -E '^burn' | sort -u || true)
    if [ -n "$found" ]; then
        echo "cargo tree $args depends on burn: $(echo "$found" | tr '\n' ' ')" >&2
        status=1
    else
        echo "cargo tree $args: no burn crate ($(echo "$crates" | wc -l) crates)"
    fi
done
exit $status
