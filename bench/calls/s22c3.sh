#!/usr/bin/env bash
# session 22 call 3 (staged in session 22: e17 = main + 1850bf0): decode_attention without a plan (its kernels
# derive the schedule from seq_lens). Correctness first (the GPU decode tests incl. the plan-less ones, memcheck +
# racecheck on them), then the A/B against main (plan path must not move; 'no-plan us' is the new column).
. "$(dirname "$0")/prelude.sh"
W=$PWD/.peer/exp/e17
CS="compute-sanitizer --target-processes all --error-exitcode 99"
( cd $W && PYTHONPATH=$W:$W/tests timeout 280 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_decode.py > $R/t_g.log 2>&1; echo "gpu decode tests rc=$?: $(tail -n1 $R/t_g.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 280 python3 -m pytest -q -p no:cacheprovider tests/test_decode.py -k "cuda" > $R/t_d.log 2>&1; echo "decode cuda tests rc=$?: $(tail -n1 $R/t_d.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 280 $CS --tool memcheck python3 -m pytest -q -p no:cacheprovider tests/test_gpu_decode.py -k "without_plan or graph" > $R/mc.log 2>&1; echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $R/mc.log | sort | uniq -c | head -3) $(tail -n1 $R/mc.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 280 $CS --tool racecheck python3 -m pytest -q -p no:cacheprovider tests/test_gpu_decode.py -k "without_plan_equals_with_plan_large and lens2" > $R/rc.log 2>&1; echo "racecheck rc=$?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $R/rc.log | sort | uniq -c | head -3) $(tail -n1 $R/rc.log)" ) &
wait; t
grep -E "^FAILED|^E  " $R/t_*.log | head -12
AB="env AB_WIDTH=150 AB_TIMEOUT=200 OUT=/tmp/abl tools/ab_bench.sh"
$AB 2 "decode --heads 8/1/128 --q-len 1 --kv bf16" m e17 > $R/ab1.txt; t
$AB 1 "decode --heads 64/8/128 --q-len 1 --kv bf16" m e17 > $R/ab2.txt; t
$AB 1 "decode --heads 8/1/128 --q-len 1 --kv fp8" m e17 > $R/ab3.txt; t
cat $R/ab*.txt > $OUT/ab_all.txt
for f in $R/*.log; do echo "### $f"; tail -40 $f; done > $OUT/tests_all.txt
cat $R/ab*.txt | cut -c1-130
