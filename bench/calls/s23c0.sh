#!/usr/bin/env bash
# session 23 call 0 (main = .peer/exp/m, staged from main after session 23's validation changes): the GPU tests of
# the host paths that changed -- rope_norm (positions/slot_mapping contiguity, written-view and alignment checks moved
# to ArgCheck) and decode (PlanMaxCtas, plan/workspace contiguity, k_cache/q/out/workspace alignment, max_ctas <=
# 2048) -- plus memcheck on the new refusal tests. No kernel changed, so no benchmark.
. "$(dirname "$0")/prelude.sh"
W=$PWD/.peer/exp/m
PT="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
( cd $W && PYTHONPATH=$W:$W/tests timeout 280 $PT tests/test_gpu_rope_norm.py tests/test_rope_norm_errors.py tests/test_rope_norm.py > $R/t_r.log 2>&1; echo "rope gpu tests rc=$?: $(tail -n1 $R/t_r.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 280 $PT tests/test_gpu_decode.py tests/test_decode.py > $R/t_d.log 2>&1; echo "decode gpu tests rc=$?: $(tail -n1 $R/t_d.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 280 $PT tests/test_gpu_fused_moe.py -k "reject or bad or error or graph or negative" tests/test_argument_errors.py tests/test_jax_sharding.py > $R/t_m.log 2>&1; echo "moe/args tests rc=$?: $(tail -n1 $R/t_m.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 280 $CS --tool memcheck $PT tests/test_gpu_decode.py tests/test_gpu_rope_norm.py -k "misaligned or refused or rejected" > $R/mc.log 2>&1; echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $R/mc.log | sort | uniq -c | head -3) $(tail -n1 $R/mc.log)" ) &
wait; t
grep -E "^FAILED|^E  " $R/t_*.log | head -20
for f in $R/*.log; do echo "### $f"; tail -60 $f; done > $OUT/tests_all.txt
