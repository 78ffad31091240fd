#!/usr/bin/env bash
# session 31 call A (~5 min; carry .peer/exp/n, .peer/exp/e32): experiment 32 -- the token gather (main's default
# since session 31) skips a token with no local slot before loading its row (b38eb8e; e32 = main 872458a + it).
# Tests on e32: the gather test (bitwise vs the row form, EP cases with remote slots and tokens with none), the grouped
# oracle cases, memcheck on the EP gather cases. Then n vs e32, 2 rounds, on the EP shapes with the non-EP ones as
# controls. Predicted: Hy3-EP8 T=4096 -2..4 us (session 31: tokens +3.6 over rows there), DSv3-EP8 alike; Qwen3 /
# Hy3-TP8 within noise (every token has a local slot: one ballot per unit). Refuted if no EP row gains > 1 us.
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e32
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
M=tests/test_gpu_fused_moe.py
in_background "e32 gather + grouped oracle" a_a.log 300 $E $T $M -k "gather_by_tokens or grouped_vs_oracle"
in_background "e32 memcheck gather" a_mc.log 300 $E env HPC_XLA_MOE_PATH=grouped $CS --tool memcheck $T $M \
  -k "gather_by_tokens and (case4 or case5 or case6 or case8)"
wait; t
grep -E 'ERROR SUMMARY' $R/a_mc.log | sort | uniq -c | head -2
collect a_
env AB_WIDTH=100 AB_TIMEOUT=200 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes hy3-ep8,dsv3-ep8,qwen3-30b-a3b/fp8_tensor,hy3-tp8 --tokens 1024,4096" n e32 > $R/a_ab.txt 2>&1; t
cp $R/a_ab.txt $OUT/; grep -a "│\|==" $R/a_ab.txt | cut -c1-70
