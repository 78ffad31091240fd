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
# tests: each version runs its own; README.md, pyproject.toml and tools/: files that some tests read or run
git ls-files hpc_xla tests tools README.md pyproject.toml | tar cf - -T - | tar xf - -C "$dst"
cp "$so" "$dst/hpc_xla/"
# what the copy is (bench JSONs record it: hpc_xla/bench/report.py provenance): HEAD, and the uncommitted changes
# built into it (an experiment cherry-picked by stage_experiments.sh shows up here)
{ echo "HEAD $(git rev-parse --short HEAD) $(git log -1 --format=%s | cut -c1-100)"
  echo "staged $(date -u +%Y-%m-%dT%H:%M:%SZ); uncommitted changes built in: $(git diff HEAD --stat | tail -1)"
  git diff HEAD --stat | head -n -1; } > "$dst/STAGED.txt"
echo "$dst (PYTHONPATH=\$PWD/$dst:\$PWD/tests)"
