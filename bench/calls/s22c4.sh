#!/usr/bin/env bash
# session 22 call 4 (staged in session 22: e18 = main + 15d0b89): the grouped path's 128x256 GEMMs in 2-CTA clusters
# with B multicast (HPC_XLA_MOE_GEMM_CLUSTER=2). Correctness first (bitwise vs unclustered, launch counter, the
# knob's message), then the A/B where groups have >= 2 M tiles (T >= 4096) and one T with single-M-tile groups.
. "$(dirname "$0")/prelude.sh"
W=$PWD/.peer/exp/e18
T="python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
( cd $W && PYTHONPATH=$W:$W/tests timeout 240 $T -k "cluster or knobs_reject" > $R/t_c.log 2>&1; echo "cluster tests rc=$?: $(tail -n1 $R/t_c.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 240 $CS --tool memcheck $T -k "cluster2 and (case0 or case3 or case4)" > $R/mc.log 2>&1; echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $R/mc.log | sort | uniq -c | head -3) $(tail -n1 $R/mc.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 240 $CS --tool synccheck $T -k "cluster2 and case1" > $R/sc.log 2>&1; echo "synccheck rc=$?: $(grep -E 'ERROR SUMMARY' $R/sc.log | sort | uniq -c | head -3) $(tail -n1 $R/sc.log)" ) &
wait; t
grep -E "^FAILED|^E  " $R/t_*.log | head -12
AB="env AB_WIDTH=100 AB_TIMEOUT=150 OUT=/tmp/abl tools/ab_bench.sh"
$AB 2 "moe --shapes qwen3-30b-a3b,hy3-tp8,mixtral-8x7b --tokens 1024,4096,16384" e18 e18:HPC_XLA_MOE_GEMM_CLUSTER=2 > $R/ab1.txt; t
( cd $W && PYTHONPATH=$W HPC_XLA_MOE_GEMM_CLUSTER=2 HPC_PROFILE_MOE="hy3-tp8/fp8_tensor:4096,qwen3-30b-a3b/fp8_tensor:4096" timeout 100 python3 ../../../tools/profile_kernels.py moe > $R/prof_c2.txt 2>&1; echo "prof c2 rc=$?" ); t
cat $R/ab*.txt > $OUT/ab_all.txt; cat $R/prof_*.txt > $OUT/prof_all.txt
for f in $R/*.log; do echo "### $f"; tail -40 $f; done > $OUT/tests_all.txt
cat $R/ab1.txt | cut -c1-84
grep -E "==|after" $R/prof_c2.txt | cut -c1-40,60-150
