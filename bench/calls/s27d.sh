#!/usr/bin/env bash
# session 27 call D (~7 min; carry .peer/exp/m and .peer/exp/n): the interleaved w13 (w13_interleaved=True) with the
# activation in the grouped gate-up GEMM's epilogue by default, and experiment 22's removal.
#   m = main at 6e71b1e (act kernel, vLLM's layout everywhere; the bench passes vLLM's layout)
#   n = this session's main: every path reads either layout; the bench prepares the interleaved layout for ours
# Tests on n: the act-epilogue cases (bitwise vs the act kernel on both layouts, launch counters), every other path on
# the interleaved layout (bitwise vs vLLM's), the knob refusals, decode's long merge tasks; memcheck on two cases.
# Then m vs n on the moe suite (1 round). Predicted (session 27's s25e on e16d): Qwen3 fp8 T=4096 -5..8%, bf16 -4..6%,
# T <= 256 unchanged (tiled / stream paths: the same kernels, rows addressed differently).
. "$(dirname "$0")/prelude.sh"
N=$PWD/.peer/exp/n
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
in_background "act 128x256" d_a.log 300 $N $T tests/test_gpu_fused_moe.py -k "act_epilogue and 128x256"
in_background "act 128x128 + knobs" d_b.log 300 $N $T tests/test_gpu_fused_moe.py -k "act_epilogue and 128x128 or knobs_reject"
in_background "paths + decode" d_c.log 300 $N $T tests/test_gpu_fused_moe.py tests/test_gpu_decode.py \
  -k "interleaved or long_merge or grouped_vs_oracle or stream_path_vs"
in_background "memcheck" d_mc.log 300 $N $CS --tool memcheck $T tests/test_gpu_fused_moe.py -k "interleaved and (env0 or env3 or env6)"
wait; t
grep -E 'ERROR SUMMARY' $R/d_mc.log | sort | uniq -c | head -3
collect d_
env AB_WIDTH=100 AB_TIMEOUT=150 OUT=/tmp/abl tools/ab_bench.sh 1 "moe --shapes qwen3-30b-a3b,hy3-tp8,mixtral-8x7b/bf16 --tokens 1,16,256,1024,4096,16384" m n > $R/d_ab.txt 2>&1; t
cp $R/d_ab.txt $OUT/; grep -a "│\|==" $R/d_ab.txt | cut -c1-70
