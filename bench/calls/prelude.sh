# Shared start of the session's device-call scripts (sourced): repository root (from .peer/ or bench/calls/), quiet
# Python, the GPU's clocks, a scratch folder $R and a stopwatch t.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[1]}")/.." && pwd); [ -d "$ROOT/tools" ] || ROOT=$(cd "$ROOT/.." && pwd); cd "$ROOT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
R=/tmp/r; mkdir -p $R /tmp/abl; S=$(date +%s); t() { echo "t=$(( $(date +%s) - S ))"; }
