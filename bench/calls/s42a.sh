#!/usr/bin/env bash
# session 42 call A (~3 min, any Hopper -- an H200 preferred, the issue's machine; carry .peer/exp/e49 = experiment
# 49 staged: `tools/stage_experiments.sh e49:024a68f`): where the decode attention CTAs' cycles go, by phase
# (copy issue / ring wait / compute per tile; q load / finish / advance per piece; lead-in), for 8/1/128 bf16 at
# q_len 1, q_len 1 on the 16-row kernel (HPC_XLA_DECODE_FORCE_MT1=1) and q_len 2, then fp8 q_len 1 and 2.
# Session 41 (H100): the 16-row kernel costs +1.4..5.4 us at q_len 1 with the same bytes and pieces (most of q_len
# 2's gap to FlashInfer); moving its stalls (experiments 47, 48) did not move the time.
# Written BEFORE the run: per tile, compute ~600-900 cycles (8 rows) and +150-300 for 16 rows; wait ~4000-6000
# cycles; copy ~300-500. If the 16-row kernel's extra time is its compute, the per-tile compute grows by about the
# total's growth per tile and the wait does not shrink by as much (the ring issues its next copy only after the
# compute: the stage cycle is load latency + compute); if instead the wait grows, the extra time is in how the
# copies meet the memory system, not in the instructions.
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e49
run() {  # run LABEL ENV ARGS...
  local label=$1 env=$2; shift 2
  # shellcheck disable=SC2086
  ( cd $E && env $env PYTHONPATH=$E timeout 150 python3 $E/tools/decode_trace.py "$@" > $R/trace_$label.txt 2>&1
    echo "== $label rc=$?" ); t
  cut -c1-190 $R/trace_$label.txt | grep -v "^\s*$" | tail -16
}
run q1 "HPC_X=0" --q-len 1
run q1_mt1 "HPC_XLA_DECODE_FORCE_MT1=1" --q-len 1
run q2 "HPC_X=0" --q-len 2
run fp8_q1 "HPC_X=0" --q-len 1 --variant fp8 --workloads "64x4K,1x128K+31x4K,256 zipf"
run fp8_q2 "HPC_X=0" --q-len 2 --variant fp8 --workloads "64x4K,1x128K+31x4K,256 zipf"
tar czf $OUT/s42a_traces.tgz -C $R $(cd $R && ls trace_*)
