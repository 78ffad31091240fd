#!/usr/bin/env bash
# session 30 call D (~8 min; carry .peer/exp/n, .peer/exp/e31): experiment 31 -- fp8_tensor's 64-row ping-pong
# grouped tiles compute the activation in the gate-up epilogue too (555e487; e31 = main f8f0e54 + it).
# Tests on e31: the act-epilogue test on all four tiles (bitwise vs the act kernel on both layouts, launch counters),
# the interleaved-path test (the 64-row act kernel forced), the knob refusals; memcheck on the 64-row act cases.
# Then n vs e31 on the fp8 shapes whose groups are <= 64 rows (Qwen3 T = 256, 1024; Hy3-TP8 / EP8 T = 256, 1024)
# with T = 4096 as the control (128-row tiles: the same kernels), 2 rounds.
# Predicted: Qwen3 fp8 T=1024 -5..10 us (the act kernel and the gate_up round trip go), T=256 -2..4, Hy3-TP8 / EP8
# T=1024 -4..10; T=4096 within noise. Refuted if no T <= 1024 row gains > 1%. If the ping-pong epilogue is slower
# than the act kernel somewhere (its stores now sit between the two warpgroups' MMA turns), say where.
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e31
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
M=tests/test_gpu_fused_moe.py
in_background "e31 act 64-row tiles" d_a.log 400 $E $T $M -k "act_epilogue and 64x"
in_background "e31 act 128-row tiles" d_b.log 400 $E $T $M -k "act_epilogue and 128x"
in_background "e31 interleaved paths + knobs" d_c.log 400 $E $T $M -k "interleaved_w13_equals or knobs_reject"
in_background "e31 memcheck 64-row act" d_mc.log 400 $E env HPC_XLA_MOE_GEMM_TILE=64x256 $CS --tool memcheck $T $M \
  -k "act_epilogue and 64x256 and ((case2 and not case26) or case18)"
wait; t
grep -E 'ERROR SUMMARY' $R/d_mc.log | sort | uniq -c | head -3
collect d_
env AB_WIDTH=100 AB_TIMEOUT=200 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8,hy3-ep8 --tokens 256,1024,4096" n e31 > $R/d_ab.txt 2>&1; t
cp $R/d_ab.txt $OUT/; grep -a "│\|==" $R/d_ab.txt | cut -c1-70
