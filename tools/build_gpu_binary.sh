#!/usr/bin/env bash
# Builds the cp312 binary the H200 test machine runs (Python 3.12, jaxlib 0.11.2 there) on this machine, so
# nvcc time costs no GPU time: hpc_xla/_hpc_xla.cpython-312-x86_64-linux-gnu.so (git-ignored; pass it to the
# device tool in `carry`). Build headers must be no newer than the runtime's: jaxlib is pinned to the H200's.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${HPC_GPU_VENV:-$HOME/.cache/hpc_xla_venv312}"
PY312="${PY312:-$HOME/.pyenv/versions/3.12.1/bin/python}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY312" -m venv "$VENV"
  "$VENV/bin/pip" install -q "nanobind==3.1.0" "jaxlib==0.11.2" numpy
  "$VENV/bin/pip" install -q --no-deps nvidia-cutlass
fi
HPC_PYTHON="$VENV/bin/python" tools/build.sh
