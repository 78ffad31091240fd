#!/usr/bin/env bash
# Installs what hpc_xla needs into the current python3 and builds the binary in place (hpc_xla/_hpc_xla*.so),
# so `python3 -m hpc_xla.demo` and `python3 -m pytest tests` run from the repository root. Idempotent: a second
# run installs nothing and rebuilds nothing. (`pip install .` is the packaged alternative; see README.)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${HPC_PYTHON:-python3}"
pip_install() { "$PY" -m pip install -q --disable-pip-version-check "$@"; }

missing=()
for mod in numpy jax jaxlib nanobind hypothesis pytest ml_dtypes; do
  "$PY" -c "import $mod" 2>/dev/null || missing+=("$mod")
done
# A distribution's own Python (Debian 12's /usr/bin/python3) refuses pip installs (PEP 668): say what to do instead
# of failing in the middle of pip's output.
has_torch=1 has_cutlass=1
"$PY" -c "import torch" 2>/dev/null || has_torch=0
"$PY" -c "import importlib.util as u; assert u.find_spec('cutlass_library')" 2>/dev/null || has_cutlass=0
needs=("${missing[@]}")
[ $has_torch = 1 ] || needs+=(torch)
[ $has_cutlass = 1 ] || needs+=(nvidia-cutlass)
if [ ${#needs[@]} -gt 0 ] && "$PY" -c "import os, sys, sysconfig
sys.exit(0 if sys.prefix == sys.base_prefix and os.path.exists(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')) else 1)"; then
  echo "tools/install.sh: $(command -v "$PY") is managed by the system (PEP 668) and lacks: ${needs[*]}." >&2
  echo "  Use a virtual environment:  python3 -m venv .venv && . .venv/bin/activate && tools/install.sh" >&2
  echo "  (or point HPC_PYTHON at another interpreter)." >&2
  exit 1
fi
if [ ${#missing[@]} -gt 0 ]; then
  pip_install "numpy>=1.26" "jax>=0.6,<0.14" "jaxlib>=0.6,<0.14" "nanobind>=2.4,<4" "hypothesis>=6.100" "pytest>=8" \
    "ml_dtypes>=0.5"
fi
# torch: the CPU build where one is offered as a local file (this project's dev/CI image), else any >= 2.11.
[ $has_torch = 1 ] || pip_install "torch==2.13.0" 2>/dev/null || pip_install "torch>=2.11"
# CUTLASS/CuTe headers only: the wheel's Python dependencies are not needed to build.
[ $has_cutlass = 1 ] || pip_install --no-deps "nvidia-cutlass>=3.9"
# cuobjdump for the build test that checks the binary's SASS
command -v cuobjdump >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/cuobjdump ] || \
  "$PY" -c "import glob, nvidia, os; assert any(glob.glob(os.path.join(p, '*', 'bin', 'cuobjdump')) for p in nvidia.__path__)" 2>/dev/null || \
  pip_install nvidia-cuda-cuobjdump
HPC_PYTHON="$(command -v "$PY")" tools/build.sh
