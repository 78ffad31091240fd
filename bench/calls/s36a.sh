#!/usr/bin/env bash
# session 36 call A (~7 min; carry .peer/exp/m = main, .peer/exp/e39 = main + experiment 39 (e1863fd), .peer/exp/e40 =
# main + experiment 40 (cacb30a, which holds 39 too): ~58 MB): rope_norm's paired kernel with a shorter critical
# path per row (csrc/rope_norm/rope_norm_paired.cuh, csrc/common/fp8_scale.cuh). Experiment 39:
#   (1) full-warp shuffles -- a partial mask made ptxas check convergence (S2R, MATCH.ANY, REDUX.OR) before every
#       row's reduction; safe because a warp's live lanes now always run the same rows (tiles of a warp of tokens
#       where heads do not divide by the groups: rope_norm.cu, uneven_rows);
#   (2) fp8 q: max |y| as a tree (depth 5, not a chain of 16 dependent FMNMX);
#   (3) fp8 q: the row's scale and multiplier in single precision (FMUL + 2 FFMA; MUFU.RCP + 2 FFMA, nvcc's own
#       fast path of 1.0f / s) instead of the double chain (~13 dependent FP64 / conversion ops), the double helpers
#       only for amax < 2^-116 or inf. Bit-exact: the CPU check runs every float through the quotient, the GPU
#       self-check (test_fp8_scale_helpers_match_ieee_division_on_every_float) both numbers.
#   Predicted (H100, session 31's e29 A/B as the base: fp8 8/1 34.0, 64/8 192, 32/4 101.8 us at T=16384): fp8 rows
#   -5..15% (they take as long as the bf16 rows for 25% fewer bytes: latency-bound, and (2)+(3) take ~150 of ~450
#   cycles off a q row's dependent chain); bf16 rows 0..-4% ((1) only; 8/1 is at 88-90% of the H100's ceiling);
#   T=1024 within +-3%. Refuted if no fp8 T=16384 row gains > 2%; if a bf16 row loses > 2% in both rounds, (1) goes
#   back to the group masks.
# Experiment 40 = 39 + a full group's rows in phases (every row's sums / max, ONE shuffle block for all rows, the
# scales behind one range test, then the outputs: the rows' chains overlap where 39 still runs them one after the
# other between branches) with the 4-row kernels at 4 blocks/SM (128 registers: no spills; at 5 they spilled 140-480
# B). Predicted vs m: fp8 T=16384 -8..20%, bf16 -3..+3%, T=1024 +-3%; refuted if not > 2% faster than e39 on fp8.
# Tests: e39's and e40's rope GPU files (the self-check now has 3 counters; test_every_rows_per_group_setting has a
# 10/3 case whose q and kv groups are uneven at 2 and 4 rows, and e40's an 8/4 gptj fp8 case on the phased path),
# e40's CPU-facing rope files; memcheck and synccheck (the shuffles' masks) on e40's special-rows and rows-per-group
# tests (e40 holds 39's masks and tiles). Then the A/B, 2 rounds, m | e39 | e40, rope_norm T=1024 / 16384, all
# heads, bf16 and fp8. Landing: e40 if it wins, else e39 if it does (then its own sanitizer run first).
. "$(dirname "$0")/prelude.sh"
E39=$PWD/.peer/exp/e39
E40=$PWD/.peer/exp/e40
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
in_background "e39 rope gpu file" a_g39.log 420 $E39 $T tests/test_gpu_rope_norm.py
in_background "e40 rope gpu file" a_g40.log 420 $E40 $T tests/test_gpu_rope_norm.py
in_background "e40 rope cpu-facing" a_h.log 300 $E40 $T tests/test_rope_norm.py tests/test_rope_norm_errors.py
in_background "e40 memcheck" a_mc.log 420 $E40 $CS --tool memcheck $T tests/test_gpu_rope_norm.py \
  -k "special_rows or every_rows_per_group"
in_background "e40 synccheck" a_sc.log 420 $E40 $CS --tool synccheck $T tests/test_gpu_rope_norm.py \
  -k "special_rows or every_rows_per_group or large_batch"
wait; t
for f in $R/a_mc*.log $R/a_sc*.log; do
  echo "$(basename $f): $(grep -E 'ERROR SUMMARY' $f | sort | uniq -c | head -2 | tr '\n' ' ')"
done
collect a_
env AB_WIDTH=110 AB_TIMEOUT=150 OUT=/tmp/abl tools/ab_bench.sh 2 "rope_norm --tokens 1024,16384" m e39 e40 \
  > $R/a_ab.txt 2>&1; t
cp $R/a_ab.txt $OUT/; grep -a "│\|==" $R/a_ab.txt | cut -c1-110
