#!/usr/bin/env bash
# A/B of staged packages (tools/stage_ab_copy.sh NAME) under one benchmark command, versions alternating round by
# round, on the GPU machine (carry `.peer`). Each version runs from inside its staged folder: `python -m` puts the
# working directory first on sys.path, so running from the repo root would import the root's package (and its
# binary) for every version.
#   tools/ab_bench.sh ROUNDS "moe --shapes qwen3-30b-a3b,hy3-tp8 --tokens 1,4" base new
# Output: per round and version, the table rows of `python -m hpc_xla.bench ...`; full logs under $OUT (or /tmp).
# Set env knobs per version with NAME=ENV,ENV (e.g. "new:HPC_XLA_MOE_UP_WARPS=8") -- the staged folder is the
# part before the colon.
set -u
cd "$(dirname "$0")/.."
rounds="${1:?usage: tools/ab_bench.sh ROUNDS \"SUITE ARGS\" VERSION...}"
args="${2:?bench arguments}"
shift 2
out="${OUT:-/tmp}"
for r in $(seq 1 "$rounds"); do
  i=0
  for spec in "$@"; do
    i=$((i + 1))
    name="${spec%%:*}"
    envs=""
    [ "$spec" != "$name" ] && envs="${spec#*:}"
    dir=".peer/exp/$name"
    [ -d "$dir" ] || { echo "no $dir: stage it with tools/stage_ab_copy.sh $name" >&2; exit 1; }
    log="$out/ab_${args%% *}_r${r}_${i}_${name}.txt"
    # (the version's own settings last: they may override HPC_BENCH_PEERS)
    # shellcheck disable=SC2086
    (cd "$dir" && env PYTHONPATH="$PWD" HPC_BENCH_PEERS="${HPC_BENCH_PEERS:-0}" ${envs//,/ } \
      timeout "${AB_TIMEOUT:-150}" python3 -m hpc_xla.bench $args > "$log" 2>&1)
    echo "== $spec round $r rc=$?"
    grep "│" "$log" | cut -c1-"${AB_WIDTH:-90}"
  done
done
