#!/usr/bin/env bash
# session 29 call A (~5 min; carry .peer/exp/m, .peer/exp/n): rope_norm's fp8-q row scale without division calls and
# with max |x| reduced alongside the sum of squares (794c679; n = main at that commit, m = main before it, 6e71b1e).
# Tests on n: the helpers against the float division on all 2^32 floats (fp8_scale_selfcheck), the special rows
# (zero row at eps 0, overflowing sum of squares, inf, bad position) at 1 / 2 / 4 rows, the whole rope_norm GPU file
# and the CPU-facing rope_norm tests with the binary; memcheck on the special-row and rows tests.
# Then m vs n on the rope_norm suite at T = 1024, 16384 (3 rounds): the bf16 rows are the control (their SASS is the
# same instructions, renamed registers).
# Predicted (session 29): fp8 rows at T=16384 -3..8% (8/1 32.1 -> 29.5-31 us; 64/8 182 -> 168-178; 32/4 95 -> 88-93),
# T=1024 fp8 within +-2%, bf16 within +-1%. Refuted if no fp8 T=16384 row moves > 1.5%. Outputs are meant to be bit-
# identical (the tests check the arithmetic, not old vs new outputs): if a special-row test fails, the monotone-
# rounding argument in TransformRowFolded is wrong somewhere -- go back to the per-row max after 1 / rms.
. "$(dirname "$0")/prelude.sh"
N=$PWD/.peer/exp/n
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
in_background "rope gpu file" a_a.log 280 $N $T tests/test_gpu_rope_norm.py
in_background "rope cpu-facing" a_b.log 280 $N $T tests/test_rope_norm.py tests/test_rope_norm_errors.py
in_background "memcheck" a_mc.log 280 $N $CS --tool memcheck $T tests/test_gpu_rope_norm.py \
  -k "special_rows or every_rows_per_group"
wait; t
grep -E 'ERROR SUMMARY' $R/a_mc.log | sort | uniq -c | head -3
collect a_
S1="rope_norm --tokens 1024,16384"
env AB_WIDTH=110 AB_TIMEOUT=150 OUT=/tmp/abl tools/ab_bench.sh 3 "$S1" m n > $R/a_ab.txt 2>&1; t
cp $R/a_ab.txt $OUT/; grep -a "│\|==" $R/a_ab.txt | cut -c1-110
