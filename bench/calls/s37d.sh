#!/usr/bin/env bash
# session 37 call D, for the NEXT device session (~4 min, any Hopper; carry .peer/exp/e41c = 135add1 staged, or
# restage with `tools/stage_experiments.sh e41c:135add1`): experiment 41c -- 41b (16 KB chunks, division-free cursor)
# at two CTAs per SM (a 4-stage ring each, shared memory sized by the shape). Session 37 on an H100, T=1, us: main's
# two kernels 22.4-23.1 (Qwen3 fp8) / 17.1-17.5 (Hy3-TP8) / 14.4-14.7 (Hy3-EP8); 41 32.7 / 28.4 / 21.5; 41b 23.5 /
# 19.0 / 14.3 -- the per-chunk instruction chain of one warpgroup per SM bounds it (ncu of 41). Predicted (H100):
# Qwen3 fp8 T=1 23.5 -> 14-18 us, Hy3-TP8 19.0 -> 11-15, Hy3-EP8 unchanged (109 KB: still one CTA per SM); refuted
# if Qwen3 fp8 T=1 is not below main's by > 10%. A/B first (2 rounds; e41c unset = main's kernels), then the tests
# (both knob values; the oracle now reads interleaved problems in vLLM's layout) with memcheck beside them.
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e41c
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
M=tests/test_gpu_fused_moe.py
env AB_WIDTH=110 AB_TIMEOUT=120 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8,hy3-ep8 --tokens 1" e41c e41c:HPC_XLA_MOE_ONE_KERNEL=1 \
  > $R/c_ab.txt 2>&1; t
grep -a "│\|==" $R/c_ab.txt | cut -c1-110
in_background "e41c one-kernel + knob" c_a.log 200 $E $T $M -k "one_kernel or knobs_reject"
in_background "e41c memcheck" c_mc.log 200 $E $CS --tool memcheck $T $M -k "one_kernel_vs_oracle and 1"
wait; t
grep -hE 'ERROR SUMMARY' $R/c_mc.log | sort | uniq -c
collect c_
cp $R/c_ab.txt $OUT/
