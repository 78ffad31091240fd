#!/usr/bin/env bash
# session 29 call A (~6 min; carry .peer/exp/n, .peer/exp/e29): experiment 29 (bbf983f, reverted on main; staged as
# e29 = main + it; n = main): rope_norm's fp8-q row scale without division calls, max |x| reduced alongside the sum of
# squares. Tests: main's new ones on n (the call-free helpers against the float division on all 2^32 floats,
# fp8_scale_selfcheck; the special rows -- zero row at eps 0, overflowing sum of squares, inf, bad position -- at
# 1 / 2 / 4 rows), then the whole rope_norm GPU file and the CPU-facing rope_norm tests on e29, memcheck on e29's
# special-row and rows tests. Then n vs e29 on the rope_norm suite at T = 1024, 16384 (3 rounds): the bf16 rows are
# the control (their SASS is the same instructions, renamed registers).
# Predicted (session 29): fp8 rows at T=16384 -3..8% (8/1 32.1 -> 29.5-31 us; 64/8 182 -> 168-178; 32/4 95 -> 88-93),
# T=1024 fp8 within +-2%, bf16 within +-1%. Refuted if no fp8 T=16384 row moves > 1.5%. Outputs are meant to be bit-
# identical (the tests check the arithmetic, not old vs new outputs): if a special-row test fails, the monotone-
# rounding argument in TransformRowFolded is wrong somewhere -- go back to the per-row max after 1 / rms.
. "$(dirname "$0")/prelude.sh"
N=$PWD/.peer/exp/n
E=$PWD/.peer/exp/e29
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
in_background "main: helpers + special rows" a_n.log 200 $N $T tests/test_gpu_rope_norm.py -k "fp8_scale or special_rows"
in_background "e29 rope gpu file" a_a.log 280 $E $T tests/test_gpu_rope_norm.py
in_background "e29 rope cpu-facing" a_b.log 280 $E $T tests/test_rope_norm.py tests/test_rope_norm_errors.py
wait; t
in_background "e29 memcheck" a_mc.log 280 $E $CS --tool memcheck $T tests/test_gpu_rope_norm.py \
  -k "special_rows or every_rows_per_group"
wait; t
grep -E 'ERROR SUMMARY' $R/a_mc.log | sort | uniq -c | head -3
collect a_
S1="rope_norm --tokens 1024,16384"
env AB_WIDTH=110 AB_TIMEOUT=150 OUT=/tmp/abl tools/ab_bench.sh 3 "$S1" n e29 > $R/a_ab.txt 2>&1; t
cp $R/a_ab.txt $OUT/; grep -a "│\|==" $R/a_ab.txt | cut -c1-110
