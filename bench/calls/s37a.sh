#!/usr/bin/env bash
# session 37 call A (~6 min, any Hopper; carry .peer/exp/e41 only, = ece8e74 staged: the knob is off by default, so
# e41 unset IS the baseline -- main plus the bitwise-neutral LaunchWith / PackE4M3x4 refactors): experiment 41, the
# single-token fp8_tensor layer as ONE cooperative kernel (HPC_XLA_MOE_ONE_KERNEL=1 | nopdl;
# csrc/moe/stream_one_kernel.cu).
# Tests: its own (10 problems x 2 runs bitwise, launch counters, oracle + CPU, a CUDA graph replayed with new routing
# == eager) under both knob values, the knob refusal, the stream-path tests (PackE4M3x4 moved); memcheck, racecheck
# and synccheck on the knob-1 test (a hang is a timeout: the grid barriers).
# Then the A/B at T=1, 3 rounds: e41 | e41 ONE_KERNEL=1 | e41 ONE_KERNEL=nopdl (does PDL + cooperative launch at all,
# and does the PDL overlap matter).
# Predicted (H100; main's T=1: Qwen3 fp8 ~23 us, Hy3-TP8 ~17, Hy3-EP8 ~13): Qwen3 fp8 -25..40% (37.7 MB streamed
# through one ring per SM: ~11 us of DRAM at 3.35 TB/s + ~3-4 us of start and barriers), Hy3-TP8 -25..40%, Hy3-EP8
# -10..30% (few local pairs: mostly fixed cost). Refuted if Qwen3 fp8 T=1 gains < 10%. If "1" fails to launch
# (cooperative + PDL refused) and "nopdl" wins, the default would launch without PDL.
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e41
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
M=tests/test_gpu_fused_moe.py
in_background "e41 one-kernel + knobs" a_a.log 300 $E $T $M -k "one_kernel or knobs_reject"
in_background "e41 stream path (PackE4M3x4 moved)" a_b.log 300 $E $T $M -k "stream_path or one_token"
wait; t
for tool in memcheck racecheck synccheck; do
  in_background "e41 $tool" a_$tool.log 240 $E $CS --tool $tool $T $M -k "one_kernel_vs_oracle and 1"
done
wait; t
env AB_WIDTH=110 AB_TIMEOUT=150 OUT=/tmp/abl tools/ab_bench.sh 3 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8,hy3-ep8 --tokens 1" e41 e41:HPC_XLA_MOE_ONE_KERNEL=1 \
  e41:HPC_XLA_MOE_ONE_KERNEL=nopdl > $R/a_ab.txt 2>&1; t
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $R/a_memcheck.log $R/a_racecheck.log $R/a_synccheck.log | sort | uniq -c
collect a_
cp $R/a_ab.txt $OUT/; grep -a "│\|==" $R/a_ab.txt | cut -c1-110
