#!/usr/bin/env bash
# In-place build of hpc_xla/_hpc_xla<EXT_SUFFIX> for the Python given by $HPC_PYTHON (default: python3).
# Bazel when available (the build of record), else nvcc + g++ (tools/nvcc_build.py). A shared disk cache makes
# fresh clones (CI) reuse nvcc objects.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${HPC_PYTHON:-$(command -v python3)}"
SUFFIX=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
if command -v bazel >/dev/null 2>&1 && [ "${HPC_XLA_BUILD:-bazel}" != "nvcc" ]; then
  HPC_PYTHON="$PY" bazel build --disk_cache="$HOME/.cache/hpc_xla_bazel_disk" //:hpc_xla
  install -m 0755 "bazel-bin/hpc_xla/_hpc_xla$SUFFIX" "hpc_xla/_hpc_xla$SUFFIX"
else
  "$PY" tools/nvcc_build.py --out "hpc_xla/_hpc_xla$SUFFIX"
fi
echo "hpc_xla/_hpc_xla$SUFFIX"
