#!/usr/bin/env bash
# Runs tests/test_vllm_adapter.py against vLLM 0.33 on this machine's CPU. vllm pins its own torch and ~200
# packages, so it lives in a venv of its own (cached: a second run installs nothing), next to the hpc_xla binary
# that tools/install.sh built in place for the same python3. CI runs this after the README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${HPC_VLLM_VENV:-$HOME/.cache/hpc_xla_vllm_venv}"
if ! "$VENV/bin/python" -c "import vllm, pytest, hypothesis, ml_dtypes; assert vllm.__version__.startswith('0.33.')" \
    2>/dev/null; then
  python3 -m venv "$VENV"
  for attempt in 1 2; do  # ~4 GB of wheels: one retry for a dropped download
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "vllm>=0.33,<0.34" "pytest>=8" \
      "hypothesis>=6.100" "ml_dtypes>=0.5" && break
    [ "$attempt" = 2 ] && exit 1
  done
fi
SUFFIX="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
test -f "hpc_xla/_hpc_xla$SUFFIX" || {
  echo "tools/vllm_tests.sh: no hpc_xla binary for $VENV's python (run tools/install.sh with the same python3)" >&2
  exit 1
}
# VLLM_TARGET_DEVICE=cpu: vLLM's CPU platform (it cannot infer a device on a machine without a GPU)
VLLM_TARGET_DEVICE=cpu PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" \
  "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/test_vllm_adapter.py "$@"
