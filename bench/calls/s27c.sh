#!/usr/bin/env bash
# session 27 call C (~6 min; carry .peer/exp/m and .peer/exp/e24): experiment 24 (9fc244c, reverted; e24 = m + it):
# the grouped path's top-k reduce on bf16 rows with k <= 8 and no expert parallelism keeps the next token's rows in
# flight while one is summed (MoeReducePipelinedKernel, 128 registers, 4 CTAs/SM: 1.6x the bytes in flight per SM).
# Tests first: the new bitwise test against the dense form (its selection asserted through ext().fused_moe_reduce_form),
# the sparse-vs-dense one, the grouped oracle and determinism tests, memcheck on two cases; then the A/B, 2 rounds.
# Prediction: the reduce kernel (Qwen3 fp8 T=4096 65 us for ~150 MB, session 21) -25..35%: Qwen3 fp8 / bf16 T=4096
# -15..20 us, T=16384 -50..80, Hy3-TP8 T=4096 -15..30; T <= 256 +-1 (stream / tiled paths, or few tokens per CTA);
# refuted if Qwen3 fp8 T=4096 moves less than 5 us. EP rows (sparse form) are the control: unchanged.
. "$(dirname "$0")/prelude.sh"
W=$PWD/.peer/exp/e24
T="python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
( cd $W && PYTHONPATH=$W:$W/tests timeout 300 $T -k "pipelined_reduce or sparse_reduce or grouped_deterministic" > $R/c24_a.log 2>&1; echo "e24 reduce tests rc=$?: $(tail -n1 $R/c24_a.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 300 $T -k "grouped_vs_oracle" > $R/c24_b.log 2>&1; echo "e24 grouped oracle rc=$?: $(tail -n1 $R/c24_b.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 300 $CS --tool memcheck $T -k "grouped_vs_oracle and (case0 or case3)" > $R/c24_mc.log 2>&1; echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $R/c24_mc.log | sort | uniq -c | head -3) $(tail -n1 $R/c24_mc.log)" ) &
wait; t
grep -E "^FAILED|^E  " $R/c24_*.log | head -12
for f in $R/c24_*.log; do echo "### $f"; tail -30 $f; done > $OUT/tests_e24.txt
env AB_WIDTH=100 AB_TIMEOUT=200 OUT=/tmp/abl tools/ab_bench.sh 2 "moe --shapes qwen3-30b-a3b,hy3-tp8,hy3-ep8 --tokens 256,1024,4096,16384" m e24 > $R/c24_ab.txt 2>&1; t
cp $R/c24_ab.txt $OUT/; cut -c1-100 $R/c24_ab.txt
