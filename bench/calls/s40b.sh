#!/usr/bin/env bash
# session 40 call B (~4 min, any Hopper; carry .peer/exp/m4 = main with the two-pass down sum (141d8b2) staged, and
# .peer/exp/m3 = the main before it): the landed sum on main's own build -- the stream-path tests, racecheck and
# synccheck of the new shared-memory pass (its __syncthreads), then a 1-round A/B at T=1 (expected as experiment 43
# measured: Qwen3 fp8 -0.3..-0.5 us, Hy3 -0.1..-0.3).
. "$(dirname "$0")/prelude.sh"
M4=$PWD/.peer/exp/m4
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
K="stream or one_token or deterministic or random_problems or graph_per_token or negative_ids or out_of_range"
in_background "m4 moe stream tests" b_t.log 240 $M4 env "PYTEST_ADDOPTS=-k '$K'" $T tests/test_gpu_fused_moe.py
in_background "m4 racecheck" b_rc.log 240 $M4 $CS --tool racecheck $T tests/test_gpu_fused_moe.py \
  -k "one_token_at_model_shapes or one_token_repeated"
in_background "m4 synccheck" b_sc.log 240 $M4 $CS --tool synccheck $T tests/test_gpu_fused_moe.py \
  -k "one_token_at_model_shapes or one_token_repeated"
wait; t
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $R/b_rc.log $R/b_sc.log | sort | uniq -c
collect b_
env AB_WIDTH=110 AB_TIMEOUT=90 OUT=/tmp/abl HPC_BENCH_PEERS=0 tools/ab_bench.sh 1 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8/fp8_tensor,hy3-ep8/fp8_tensor --tokens 1,4" m3 m4 > $R/b_ab.txt 2>&1; t
grep -a "│\|==" $R/b_ab.txt | cut -c1-110
cp $R/b_ab.txt $OUT/
