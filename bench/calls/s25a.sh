#!/usr/bin/env bash
# session 25 call A = session 22 call 3 + session 23 call 0 + session 23 call 8 in one command (each call's machine
# start costs ~1 min of a 30-min budget). Phase 1 (GPU tests, in parallel: none of them is timed): experiment 17's
# decode tests + memcheck/racecheck on .peer/exp/e17, and main's host-path tests + memcheck on .peer/exp/m.
# Phase 2: call 3's A/B (m vs e17, nothing else on the GPU). Phase 3: call 8's per-CTA decode traces (e19), only if
# time is left. Every phase writes to $OUT as it ends, so a timeout keeps what finished.
. "$(dirname "$0")/prelude.sh"
PT="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
W=$PWD/.peer/exp/e17; M=$PWD/.peer/exp/m
( cd $W && PYTHONPATH=$W:$W/tests timeout 280 $PT tests/test_gpu_decode.py > $R/t_g.log 2>&1; echo "e17 gpu decode tests rc=$?: $(tail -n1 $R/t_g.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 280 $PT tests/test_decode.py -k "cuda" > $R/t_d.log 2>&1; echo "e17 decode cuda tests rc=$?: $(tail -n1 $R/t_d.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 280 $CS --tool memcheck $PT tests/test_gpu_decode.py -k "without_plan or graph" > $R/mc.log 2>&1; echo "e17 memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $R/mc.log | sort | uniq -c | head -3) $(tail -n1 $R/mc.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 280 $CS --tool racecheck $PT tests/test_gpu_decode.py -k "without_plan_equals_with_plan_large and lens2" > $R/rc.log 2>&1; echo "e17 racecheck rc=$?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $R/rc.log | sort | uniq -c | head -3) $(tail -n1 $R/rc.log)" ) &
( cd $M && PYTHONPATH=$M:$M/tests timeout 280 $PT tests/test_gpu_rope_norm.py tests/test_rope_norm_errors.py tests/test_rope_norm.py > $R/m_r.log 2>&1; echo "main rope tests rc=$?: $(tail -n1 $R/m_r.log)" ) &
( cd $M && PYTHONPATH=$M:$M/tests timeout 280 $PT tests/test_gpu_decode.py tests/test_decode.py > $R/m_d.log 2>&1; echo "main decode tests rc=$?: $(tail -n1 $R/m_d.log)" ) &
( cd $M && PYTHONPATH=$M:$M/tests timeout 280 $PT tests/test_gpu_fused_moe.py -k "reject or bad or error or graph or negative" tests/test_argument_errors.py tests/test_jax_sharding.py > $R/m_m.log 2>&1; echo "main moe/args tests rc=$?: $(tail -n1 $R/m_m.log)" ) &
( cd $M && PYTHONPATH=$M:$M/tests timeout 280 $CS --tool memcheck $PT tests/test_gpu_decode.py tests/test_gpu_rope_norm.py -k "misaligned or refused or rejected" > $R/m_mc.log 2>&1; echo "main memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $R/m_mc.log | sort | uniq -c | head -3) $(tail -n1 $R/m_mc.log)" ) &
wait; t
grep -E "^FAILED|^E  " $R/t_*.log $R/m_*.log | head -20
for f in $R/*.log; do echo "### $f"; tail -60 $f; done > $OUT/tests_all.txt
AB="env AB_WIDTH=150 AB_TIMEOUT=120 OUT=/tmp/abl tools/ab_bench.sh"
$AB 2 "decode --heads 8/1/128 --q-len 1 --kv bf16" m e17 > $R/ab1.txt; t; cp $R/ab1.txt $OUT/
$AB 1 "decode --heads 8/1/128 --q-len 1 --kv fp8" m e17 > $R/ab3.txt; t; cp $R/ab3.txt $OUT/
if [ $(( $(date +%s) - S )) -lt 430 ]; then
  $AB 1 "decode --heads 64/8/128 --q-len 1 --kv bf16" m e17 > $R/ab2.txt; t; cp $R/ab2.txt $OUT/
fi
if [ $(( $(date +%s) - S )) -lt 470 ] && [ -d .peer/exp/e19 ]; then
  W=$PWD/.peer/exp/e19
  for args in "--workload 64x4K --graph" "--workload 1x128K+31x4K --graph" "--workload 64x512 --graph" \
              "--workload 1x128K+31x4K --kv fp8 --graph" "--heads 64,8,128 --workload 64x4K --graph"; do
    [ $(( $(date +%s) - S )) -lt 560 ] || break
    ( cd $W && PYTHONPATH=$W timeout 40 python3 tools/decode_trace.py $args 2>&1 | tail -22 ); echo
  done > $OUT/trace.txt; t
fi
cat $R/ab*.txt | cut -c1-130
