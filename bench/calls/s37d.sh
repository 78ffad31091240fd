#!/usr/bin/env bash
# session 37 call D, for the NEXT device session (~5 min, any Hopper; carry .peer/exp/e41d = 8b81059 (41e: 41d + review nits) staged, or
# restage with `tools/stage_experiments.sh e41d:8b81059`): experiments 41c and 41d, the single-token fp8_tensor layer
# in one cooperative kernel. 41c (HPC_XLA_MOE_ONE_KERNEL=1): 41b (16 KB chunks, division-free cursor) at two CTAs
# per SM (a 4-stage ring each, shared memory sized by the shape). 41d (=ws): warp-specialized -- a producer
# warpgroup copies and publishes through mbarriers, a consumer warpgroup multiplies. Session 37 on an H100, T=1, us:
# main's two kernels 22.4-23.1 (Qwen3 fp8) / 17.1-17.5 (Hy3-TP8) / 14.4-14.7 (Hy3-EP8); 41 32.7 / 28.4 / 21.5; 41b
# 23.5 / 19.0 / 14.3 -- the per-chunk instruction chain of one warpgroup per SM bounds it (ncu of 41).
# Predicted (H100): 41c Qwen3 fp8 T=1 14-18 us, Hy3-TP8 11-15, Hy3-EP8 unchanged (one CTA per SM there); 41d
# Qwen3 11-15, Hy3-TP8 8-12, Hy3-EP8 10-13. Each refuted if its Qwen3 fp8 T=1 is not below main's by > 10%.
# A/B first (2 rounds; e41d unset = main's kernels), then the tests (knob 1, nopdl, ws: the oracle reads interleaved
# problems in vLLM's layout) with memcheck and racecheck (ws: the mbarrier ring) beside them. A hang is a deadlock in
# the ws protocol: the tests' children time out after 900 s, so the call's 600 s limit cuts them first.
# TEST_S: the test children's limit in seconds (280; s38a runs this with 200).
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e41d
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
M=tests/test_gpu_fused_moe.py
env AB_WIDTH=110 AB_TIMEOUT=90 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8,hy3-ep8 --tokens 1" e41d e41d:HPC_XLA_MOE_ONE_KERNEL=1 \
  e41d:HPC_XLA_MOE_ONE_KERNEL=ws > $R/c_ab.txt 2>&1; t
grep -a "│\|==" $R/c_ab.txt | cut -c1-110
in_background "e41d one-kernel + knob" c_a.log "${TEST_S:-280}" $E $T $M -k "one_kernel or knobs_reject"
in_background "e41d memcheck ws" c_mc.log "${TEST_S:-280}" $E $CS --tool memcheck $T $M -k "one_kernel_vs_oracle and ws"
in_background "e41d racecheck ws" c_rc.log "${TEST_S:-280}" $E $CS --tool racecheck $T $M -k "one_kernel_vs_oracle and ws"
wait; t
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $R/c_mc.log $R/c_rc.log | sort | uniq -c
collect c_
cp $R/c_ab.txt $OUT/
