#!/usr/bin/env bash
# session 43 call E (~3 min; carry .peer/pack = tools/pack_staged.sh m9 t56: main 4738e0c (54c landed, the k_cache
# error fix and its GPU-side test anchor) and experiment 56t (c05b877: the trace with FinishPiece's sub-phases and
# HPC_XLA_DECODE_TRACE_NO_STORES)).
# (1) main's tests: decode GPU file, test_decode cuda cases, test_argument_errors + test_rope_norm_errors (their
#     jax cases failed on s43d's GPU only for the message anchor, fixed in 1739b12).
# (2) Where a mid-CTA FinishPiece's ~19000 cycles go (s43d: bulk stores left them as they were).
# Written BEFORE the run: if the stores were it, 55b would have moved it; so "store" (global writes + barrier) is
# small and the time is in prep (first barrier) or merge (rounds' barriers): the warps reach FinishPiece at
# different times (their copy issue stalls differ) or its code is fetched cold from a loaded L2 (no_inst, s42f).
# With HPC_XLA_DECODE_TRACE_NO_STORES=1 the finish stays within 10% of the stored run's.
. "$(dirname "$0")/prelude.sh"
X=$ROOT/.peer/exp; mkdir -p $X
for f in $ROOT/.peer/pack/*.tar.xz; do tar xJf $f -C $X & done; wait; t
M=$X/m9; TR=$X/t56
T="python3 -m pytest -q -p no:cacheprovider"
in_background "main decode gpu file" e_gpu.log 300 $M $T tests/test_gpu_decode.py
in_background "main test_decode cuda" e_cuda.log 300 $M $T tests/test_decode.py -k cuda
in_background "main argument errors" e_args.log 300 $M $T tests/test_argument_errors.py tests/test_rope_norm_errors.py
wait; t
collect e_
trace() {  # trace LABEL Q_LEN [ENV...]
  local label=$1 q=$2; shift 2
  ( cd $TR && env "$@" PYTHONPATH=$TR timeout 120 python3 $ROOT/bench/calls/decode_trace_ctas.py --q-len $q \
    --workloads "1x128K+31x4K;256 zipf" > $R/ctas_$label.txt 2>&1; echo "== trace $label rc=$?" ); t
  cut -c1-150 $R/ctas_$label.txt | grep -v "^   [0-9]"
}
trace q2 2 HPC_XLA_DECODE_TRACE_NO_STORES=0
trace q2_nostores 2 HPC_XLA_DECODE_TRACE_NO_STORES=1
trace q1 1 HPC_XLA_DECODE_TRACE_NO_STORES=0
cat $R/ctas_*.txt > $OUT/trace_ctas.txt
