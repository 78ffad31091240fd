#!/usr/bin/env bash
# session 37 call C (~3 min, any Hopper; carry .peer/exp/e41b): experiment 41b -- experiment 41 with 16 KB chunks
# (two K atoms, 8 wgmmas per chunk) and a division-free copy cursor. s37b's ncu of 41: 34.9 us, DRAM 34%, one warp
# per scheduler issuing every 4.8 cycles, ~400 instructions per 8 KB chunk: the per-chunk instruction chain, not DRAM,
# bounded it. 41b's stage-1 iteration is ~190 instructions per 16 KB (SASS), so predicted (H100) Qwen3 fp8 T=1
# 32.7 -> 13-17 us (main's two kernels: 22.4), Hy3-TP8 28.4 -> 10-14 (17.1); refuted (as a T=1 path) if Qwen3
# fp8 T=1 is not below main's 22.4. A/B first (2 rounds, e41b unset = main's kernels), then the tests (both knob
# values) with memcheck beside them.
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e41b
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
M=tests/test_gpu_fused_moe.py
env AB_WIDTH=110 AB_TIMEOUT=120 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8,hy3-ep8 --tokens 1" e41b e41b:HPC_XLA_MOE_ONE_KERNEL=1 \
  > $R/c_ab.txt 2>&1; t
grep -a "│\|==" $R/c_ab.txt | cut -c1-110
in_background "e41b one-kernel + knob" c_a.log 200 $E $T $M -k "one_kernel or knobs_reject"
in_background "e41b memcheck" c_mc.log 200 $E $CS --tool memcheck $T $M -k "one_kernel_vs_oracle and 1"
wait; t
grep -hE 'ERROR SUMMARY' $R/c_mc.log | sort | uniq -c
collect c_
cp $R/c_ab.txt $OUT/
