# Shared start of the session's device-call scripts (sourced): repository root (from .peer/ or bench/calls/), quiet
# Python, the GPU's clocks, a scratch folder $R and a stopwatch t.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[1]}")/.." && pwd); [ -d "$ROOT/tools" ] || ROOT=$(cd "$ROOT/.." && pwd); cd "$ROOT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
R=/tmp/r; mkdir -p $R /tmp/abl; S=$(date +%s); t() { echo "t=$(( $(date +%s) - S ))"; }
# in_background LABEL LOG SECONDS DIR CMD...: CMD in the staged folder DIR (its Python first on the path) under a
# timeout, in the background, output to $R/LOG; prints "LABEL rc=N: <its last line>" when it ends. `wait` collects.
in_background() {
  local label=$1 log=$R/$2 secs=$3 dir=$4
  shift 4
  ( cd "$dir" && PYTHONPATH="$dir:$dir/tests" timeout "$secs" "$@" > "$log" 2>&1; echo "$label rc=$?: $(tail -n1 "$log")" ) &
}
# collect PREFIX: the failures of $R/PREFIX*.log on stdout, their tails to $OUT/tests_all.txt
collect() {
  grep -E "^FAILED|^E  " "$R"/"$1"*.log | head -20
  for f in "$R"/"$1"*.log; do echo "### $f"; tail -60 "$f"; done > "$OUT/tests_all.txt"
}
