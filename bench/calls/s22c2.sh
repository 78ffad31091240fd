#!/usr/bin/env bash
# session 22 call 2 (staged in session 22 from main + 6429757 + cbf43dd = experiments 15c and 16b in one binary, both
# behind knobs): correctness first -- the fused-gather tests (15c), the act-epilogue tests (16) and both knobs together,
# memcheck / racecheck / synccheck -- then the A/B of the four combinations and per-kernel profiles.
. "$(dirname "$0")/prelude.sh"
W=$PWD/.peer/exp/e16
T="python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
( cd $W && PYTHONPATH=$W:$W/tests timeout 300 $T -k "(fused_gather_equals or knobs_reject or other_tiles)" > $R/t_g.log 2>&1; echo "gather tests rc=$?: $(tail -n1 $R/t_g.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 300 $T -k "act_epilogue and not 128x128" > $R/t_a.log 2>&1; echo "act tests (128x256) rc=$?: $(tail -n1 $R/t_a.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 300 $T -k "act_epilogue and 128x128" > $R/t_b.log 2>&1; echo "act tests (128x128) rc=$?: $(tail -n1 $R/t_b.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 300 $CS --tool memcheck $T -k "fused_gather_equals and case1 and 128x256 or act_epilogue_equals and 128x256 and (case0 or case5) or with_fused_gather and case0 and 128x256" > $R/mc.log 2>&1; echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $R/mc.log | sort | uniq -c | head -3) $(tail -n1 $R/mc.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 300 $CS --tool racecheck $T -k "fused_gather_equals and case1 and 128x256" > $R/rc.log 2>&1; echo "racecheck rc=$?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $R/rc.log | sort | uniq -c | head -3) $(tail -n1 $R/rc.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 300 $CS --tool synccheck $T -k "fused_gather_equals and case1 and 128x256" > $R/sc.log 2>&1; echo "synccheck rc=$?: $(grep -E 'ERROR SUMMARY' $R/sc.log | sort | uniq -c | head -3) $(tail -n1 $R/sc.log)" ) &
wait; t
grep -E "^FAILED|^E  " $R/t_*.log | head -12
AB="env AB_WIDTH=100 AB_TIMEOUT=120 OUT=/tmp/abl tools/ab_bench.sh"
$AB 2 "moe --shapes hy3-tp8,qwen3-30b-a3b --tokens 4096" e16 e16:HPC_XLA_MOE_GATHER=fused e16:HPC_XLA_MOE_ACT=epilogue e16:HPC_XLA_MOE_GATHER=fused,HPC_XLA_MOE_ACT=epilogue > $R/ab1.txt; t
for v in "" "HPC_XLA_MOE_GATHER=fused" "HPC_XLA_MOE_ACT=epilogue"; do
 ( cd $W && env $v PYTHONPATH=$W HPC_PROFILE_MOE="hy3-tp8/fp8_tensor:4096,qwen3-30b-a3b/fp8_tensor:4096" timeout 100 python3 ../../../tools/profile_kernels.py moe > "$R/prof_${v:-base}.txt" 2>&1; echo "prof '$v' rc=$?" )
done; t
cat $R/ab*.txt > $OUT/ab_all.txt; for f in $R/prof_*.txt; do echo "### $f"; cat "$f"; done > $OUT/prof_all.txt
for f in $R/*.log; do echo "### $f"; tail -40 $f; done > $OUT/tests_all.txt
cat $R/ab1.txt | cut -c1-84
for f in $R/prof_*.txt; do echo "== $f"; grep -E "==|after" "$f" | cut -c1-40,60-150; done
