#!/usr/bin/env bash
# session 34 call B (~6 min; carry .peer/exp/n, .peer/exp/e37): experiment 37 -- the 64-row ping-pong grouped tiles in
# 2-CTA clusters along N (HPC_XLA_MOE_NARROW_CLUSTER=n2, A by TMA multicast), e37 = main + d1cfeb5. Tests: its own
# (8 cases over every 64-row kernel, bitwise vs one-CTA, counts, oracle), knob refusals, the grouped oracle and
# other-tile cases with n2 forced; memcheck + synccheck; then the A/B, 2 rounds: n | e37 n2.
# Predicted: DSv3-EP8 T=1024 / 2048 -4..10%, Hy3-EP8 T=1024 -2..6%, Qwen3 fp8 T=1024 -1..4%; T=2048 Qwen3 / Hy3
# (128-row tiles) unchanged. Refuted if no row gains > 1%.
. "$(dirname "$0")/prelude.sh"
E7=$PWD/.peer/exp/e37
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
M=tests/test_gpu_fused_moe.py
in_background "e37 narrow pairs + knobs" b_a.log 240 $E7 $T $M -k "narrow_cluster or knobs_reject"
in_background "e37 oracle / other tiles, n2 forced" b_b.log 240 $E7 env HPC_XLA_MOE_NARROW_CLUSTER=n2 \
  $T $M -k "grouped_vs_oracle or other_tiles or grouped_deterministic"
in_background "e37 memcheck" b_mc.log 240 $E7 env HPC_XLA_MOE_NARROW_CLUSTER=n2 HPC_XLA_MOE_GEMM_TILE=64x256 \
  $CS --tool memcheck $T $M -k "grouped_vs_oracle and (case0 or case6)"
wait; t
in_background "e37 synccheck" b_sc.log 200 $E7 env HPC_XLA_MOE_NARROW_CLUSTER=n2 HPC_XLA_MOE_GEMM_TILE=64x128 \
  $CS --tool synccheck $T $M -k "grouped_vs_oracle and case0"
env AB_WIDTH=100 AB_TIMEOUT=200 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8,hy3-ep8,dsv3-ep8 --tokens 512,1024,2048" n \
  e37:HPC_XLA_MOE_NARROW_CLUSTER=n2 > $R/b_ab.txt 2>&1; t
wait; t
grep -hE 'ERROR SUMMARY' $R/b_mc.log $R/b_sc.log | sort | uniq -c | head -4
collect b_
cp $R/b_ab.txt $OUT/; grep -a "│\|==" $R/b_ab.txt | cut -c1-90
