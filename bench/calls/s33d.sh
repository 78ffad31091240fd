#!/usr/bin/env bash
# session 33 call D (~6 min; carry .peer/exp/n, .peer/exp/e34): experiment 34 -- fp8_block128's 128x128 grouped GEMMs
# in 2-CTA clusters along N (A by TMA multicast), the form experiment 33 landed for the 128x256 tiles (e34 = main
# + 5cb7ec1; n = main, both staged after 2d7a247).
# Tests on e34: the block128 cluster test (4 cases, bitwise vs one-CTA clusters), memcheck + synccheck on two cases.
# Then, 2 rounds: n | e34 (block128 pairs) | e34 with HPC_XLA_MOE_GEMM_CLUSTER=1 (no pairs anywhere: experiment 33's
# gain against n, on this card).
# Predicted e34: DSv3-EP8 T=4096 -1..4% (-8..30 us), T=16384 -1..3%; T <= 1024 unchanged (64-row tiles); the other
# shapes unchanged (same kernels as n). Refuted if DSv3-EP8 T=4096 and T=16384 both gain < 1%.
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e34
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
M=tests/test_gpu_fused_moe.py
in_background "e34 block128 cluster + knobs" d_a.log 240 $E $T $M -k "block128_cluster or knobs_reject"
in_background "e34 memcheck" d_mc.log 240 $E $CS --tool memcheck $T $M -k "block128_cluster and (case0 or case1)"
in_background "e34 synccheck" d_sc.log 240 $E $CS --tool synccheck $T $M -k "block128_cluster and case2"
wait; t
grep -hE 'ERROR SUMMARY' $R/d_mc.log $R/d_sc.log | sort | uniq -c | head -4
collect d_
env AB_WIDTH=100 AB_TIMEOUT=200 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes dsv3-ep8,qwen3-30b-a3b/fp8_tensor,mixtral-8x7b/bf16 --tokens 1024,4096,16384" n e34 \
  e34:HPC_XLA_MOE_GEMM_CLUSTER=1 > $R/d_ab.txt 2>&1; t
cp $R/d_ab.txt $OUT/; grep -a "│\|==" $R/d_ab.txt | cut -c1-90
