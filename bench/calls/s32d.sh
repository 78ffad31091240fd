#!/usr/bin/env bash
# session 32 call D (~9-10 min; carry .peer/exp/n, .peer/exp/e33): experiment 33 -- the 128x256 grouped GEMMs in clusters
# of 2 CTAs along N, A by TMA multicast (HPC_XLA_MOE_GEMM_CLUSTER=n2), beside pairs along M sharing B (=m2, experiment
# 18's form on today's kernels; e33 = main 2e4415e + 9eaae37).
# Tests on e33: the cluster test (6 cases, both w13 layouts, bitwise vs one-CTA clusters), the knob refusals, the act
# epilogue's 128x256 cases; memcheck + synccheck (cluster barriers) on the cluster test's children.
# Then n vs e33 with n2 and with m2 (e33 without the knob is n's kernels), 2 rounds.
# Predicted: Qwen3 fp8 T=4096 -10..30 us, T=16384 -30..100; Hy3-TP8 T=4096 -5..20; Mixtral bf16 T=4096 -2..5%;
# T <= 1024 unchanged (64-row tiles). Refuted if Qwen3 fp8 T=4096 gains < 5 us.
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e33
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
M=tests/test_gpu_fused_moe.py
in_background "e33 cluster + knobs + act 128x256" d_a.log 240 $E $T $M -k "cluster_pairs or knobs_reject or \
(act_epilogue and 128x256)"
in_background "e33 memcheck cluster" d_mc.log 240 $E $CS --tool memcheck $T $M -k "cluster_pairs and (case0 or case2)"
in_background "e33 synccheck cluster" d_sc.log 240 $E $CS --tool synccheck $T $M -k "cluster_pairs and case3"
wait; t
grep -hE 'ERROR SUMMARY' $R/d_mc.log $R/d_sc.log | sort | uniq -c | head -4
collect d_
env AB_WIDTH=100 AB_TIMEOUT=200 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b,hy3-tp8,hy3-ep8 --tokens 1024,4096,16384" n e33:HPC_XLA_MOE_GEMM_CLUSTER=n2 \
  e33:HPC_XLA_MOE_GEMM_CLUSTER=m2 \
  > $R/d_ab.txt 2>&1; t
env AB_WIDTH=100 AB_TIMEOUT=150 OUT=/tmp/abl tools/ab_bench.sh 1 "moe --shapes mixtral-8x7b/bf16 --tokens 4096" \
  n e33:HPC_XLA_MOE_GEMM_CLUSTER=n2 e33:HPC_XLA_MOE_GEMM_CLUSTER=m2 > $R/d_ab2.txt 2>&1; t
cp $R/d_ab*.txt $OUT/; grep -a "│\|==" $R/d_ab.txt $R/d_ab2.txt | cut -c1-90
# If time is left: the L2 reading of the clustered GEMMs against one-CTA ones (Qwen3 fp8 T=4096, L2 flushed).
for v in "1" "n2" "m2"; do
  ( cd $E && PYTHONPATH=$E HPC_XLA_MOE_GEMM_CLUSTER=$v timeout 150 ncu --clock-control none --cache-control all \
      --section SpeedOfLight --section MemoryWorkloadAnalysis -k regex:GroupedGemmEntry -s 2 -c 2 \
      python3 ../../../tools/profile_targets.py moe --shape qwen3-30b-a3b/fp8_tensor --tokens 4096 --reps 2 \
      > $OUT/ncu_cluster_$v.txt 2>&1; echo "ncu cluster=$v rc=$?" )
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Max Bandwidth|Compute \(SM\)" $OUT/ncu_cluster_$v.txt | head -12
done; t
