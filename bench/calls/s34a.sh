#!/usr/bin/env bash
# session 34 call A (~7 min; carry .peer/exp/n, .peer/exp/e36): experiment 36 -- the down GEMM on 128x128 ping-pong
# tiles (HPC_XLA_MOE_DOWN_SCHEDULE=pingpong | pingpong_n2), e36 = main + 1917be8. Tests: its own (bitwise against the
# cooperative default on both w13 layouts, counters), the knob refusal, the grouped oracle cases with pingpong_n2
# forced, memcheck + synccheck on two cases; then the A/B, 2 rounds: n | e36 pingpong | e36 pingpong_n2.
# Predicted (vs n): Hy3-TP8 T=4096 / 16384 (K = 192: 2 k-blocks per tile, the epilogue most of a cooperative tile)
# -5..15%; Qwen3 fp8 / bf16 T=4096 / 16384 (K = 768) -2..5%; Hy3-EP8 (K = 1536) -1..3%; T=1024 Qwen3 fp8 / Hy3 (64-row
# tiles) unchanged; refuted if no Hy3-TP8 / Qwen3 row at T >= 4096 gains > 1%.
. "$(dirname "$0")/prelude.sh"
E6=$PWD/.peer/exp/e36
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
M=tests/test_gpu_fused_moe.py
in_background "e36 pingpong test + knobs" a_a.log 240 $E6 $T $M -k "down_pingpong or knobs_reject"
in_background "e36 oracle, pingpong_n2 forced" a_b.log 240 $E6 env HPC_XLA_MOE_DOWN_SCHEDULE=pingpong_n2 \
  $T $M -k "grouped_vs_oracle or grouped_deterministic"
in_background "e36 memcheck" a_mc.log 240 $E6 env HPC_XLA_MOE_DOWN_SCHEDULE=pingpong $CS --tool memcheck $T $M \
  -k "grouped_vs_oracle and (case0 or case6)"
wait; t
in_background "e36 synccheck" a_sc.log 200 $E6 env HPC_XLA_MOE_DOWN_SCHEDULE=pingpong_n2 $CS --tool synccheck $T $M \
  -k "grouped_vs_oracle and case0"
env AB_WIDTH=100 AB_TIMEOUT=200 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b,hy3-tp8,hy3-ep8 --tokens 1024,4096,16384" n e36:HPC_XLA_MOE_DOWN_SCHEDULE=pingpong \
  e36:HPC_XLA_MOE_DOWN_SCHEDULE=pingpong_n2 > $R/a_ab.txt 2>&1; t
wait; t
grep -hE 'ERROR SUMMARY' $R/a_mc.log $R/a_sc.log | sort | uniq -c | head -4
collect a_
cp $R/a_ab.txt $OUT/; grep -a "│\|==" $R/a_ab.txt | cut -c1-90
