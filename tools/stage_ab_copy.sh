#!/usr/bin/env bash
# Freezes the current package (git-tracked hpc_xla/ files + the built cp312 binary) as .peer/exp/NAME, so that one
# device call can time several kernel versions side by side: build version A, stage it, change the code, build B,
# then carry `.peer` and point PYTHONPATH at .peer/exp/NAME (A) or the repo root (B). .peer/ is git-ignored.
#   tools/stage_ab_copy.sh NAME
set -euo pipefail
cd "$(dirname "$0")/.."
name="${1:?usage: tools/stage_ab_copy.sh NAME}"
so=hpc_xla/_hpc_xla.cpython-312-x86_64-linux-gnu.so
[ -f "$so" ] || { echo "no $so: run tools/build_gpu_binary.sh first" >&2; exit 1; }
dst=".peer/exp/$name"
rm -rf "$dst" && mkdir -p "$dst"
git ls-files hpc_xla tests | tar cf - -T - | tar xf - -C "$dst"  # tests: each version runs its own
cp "$so" "$dst/hpc_xla/"
echo "$dst (PYTHONPATH=\$PWD/$dst:\$PWD/tests)"
