#!/usr/bin/env bash
# session 25 call E (~5 min): experiment 16d (3ffe2c0, .peer/exp/e16d = main at 2850e52 + 16d): the activation in the
# grouped gate-up GEMM's epilogue without experiment 15. Correctness first (the act-epilogue tests: bitwise against
# the act kernel, run twice, launch counters; the knob's rejections; memcheck + racecheck on two cases), then the A/B
# against the same binary without the knob at T = 1024, 4096, 16384.
. "$(dirname "$0")/prelude.sh"
W=$PWD/.peer/exp/e16d
T="python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
( cd $W && PYTHONPATH=$W:$W/tests timeout 240 $T -k "act_epilogue and 128x256" > $R/e_a.log 2>&1; echo "act tests 128x256 rc=$?: $(tail -n1 $R/e_a.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 240 $T -k "act_epilogue and 128x128 or knobs_reject or rejects_other" > $R/e_b.log 2>&1; echo "act tests 128x128 + rejects rc=$?: $(tail -n1 $R/e_b.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 240 $CS --tool memcheck $T -k "act_epilogue_equals and 128x256 and (case0 or case5)" > $R/e_mc.log 2>&1; echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $R/e_mc.log | sort | uniq -c | head -3) $(tail -n1 $R/e_mc.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 240 $CS --tool racecheck $T -k "act_epilogue_equals and 128x256 and case1" > $R/e_rc.log 2>&1; echo "racecheck rc=$?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $R/e_rc.log | sort | uniq -c | head -3) $(tail -n1 $R/e_rc.log)" ) &
wait; t
grep -E "^FAILED|^E  " $R/e_*.log | head -12
for f in $R/e_*.log; do echo "### $f"; tail -40 $f; done > $OUT/tests_all.txt
env AB_WIDTH=100 AB_TIMEOUT=150 OUT=/tmp/abl tools/ab_bench.sh 2 "moe --shapes qwen3-30b-a3b,hy3-tp8,mixtral-8x7b/bf16 --tokens 1024,4096,16384" e16d e16d:HPC_XLA_MOE_ACT=epilogue > $R/e_ab.txt 2>&1; t
cp $R/e_ab.txt $OUT/; cut -c1-90 $R/e_ab.txt
