#!/usr/bin/env bash
# session 25 call B = session 22 calls 2 and 4 in one command (one machine start). Phase 1 (GPU tests in parallel,
# none timed): experiments 15c + 16 (.peer/exp/e16: fused gather, act epilogue) and 18 (.peer/exp/e18: 2-CTA clusters),
# each with its sanitizers. Phase 2: the A/Bs, alone on the GPU, e16's 4-way first; e18's after it while time is
# left; profiles last. Every phase writes to $OUT as it ends, so a timeout keeps what finished.
. "$(dirname "$0")/prelude.sh"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
T="python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py"
W=$PWD/.peer/exp/e16
( cd $W && PYTHONPATH=$W:$W/tests timeout 240 $T -k "(fused_gather_equals or knobs_reject or other_tiles)" > $R/t_g.log 2>&1; echo "e16 gather tests rc=$?: $(tail -n1 $R/t_g.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 240 $T -k "act_epilogue" > $R/t_a.log 2>&1; echo "e16 act tests rc=$?: $(tail -n1 $R/t_a.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 240 $CS --tool memcheck $T -k "fused_gather_equals and case1 and 128x256 or act_epilogue_equals and 128x256 and (case0 or case5) or with_fused_gather and case0 and 128x256" > $R/mc16.log 2>&1; echo "e16 memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $R/mc16.log | sort | uniq -c | head -3) $(tail -n1 $R/mc16.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 240 $CS --tool racecheck $T -k "fused_gather_equals and case1 and 128x256" > $R/rc16.log 2>&1; echo "e16 racecheck rc=$?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $R/rc16.log | sort | uniq -c | head -3) $(tail -n1 $R/rc16.log)" ) &
W=$PWD/.peer/exp/e18
( cd $W && PYTHONPATH=$W:$W/tests timeout 240 $T -k "cluster or knobs_reject" > $R/t_c.log 2>&1; echo "e18 cluster tests rc=$?: $(tail -n1 $R/t_c.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 240 $CS --tool memcheck $T -k "cluster2 and (case0 or case3 or case4)" > $R/mc18.log 2>&1; echo "e18 memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $R/mc18.log | sort | uniq -c | head -3) $(tail -n1 $R/mc18.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 240 $CS --tool synccheck $T -k "cluster2 and case1" > $R/sc18.log 2>&1; echo "e18 synccheck rc=$?: $(grep -E 'ERROR SUMMARY' $R/sc18.log | sort | uniq -c | head -3) $(tail -n1 $R/sc18.log)" ) &
wait; t
grep -E "^FAILED|^E  " $R/t_*.log | head -12
for f in $R/*.log; do echo "### $f"; tail -40 $f; done > $OUT/tests_all.txt
AB="env AB_WIDTH=100 AB_TIMEOUT=120 OUT=/tmp/abl tools/ab_bench.sh"
$AB 2 "moe --shapes hy3-tp8,qwen3-30b-a3b --tokens 4096" e16 e16:HPC_XLA_MOE_GATHER=fused e16:HPC_XLA_MOE_ACT=epilogue e16:HPC_XLA_MOE_GATHER=fused,HPC_XLA_MOE_ACT=epilogue > $R/ab16.txt; t; cp $R/ab16.txt $OUT/
if [ $(( $(date +%s) - S )) -lt 420 ]; then
  $AB 1 "moe --shapes qwen3-30b-a3b,hy3-tp8,mixtral-8x7b --tokens 1024,4096,16384" e18 e18:HPC_XLA_MOE_GEMM_CLUSTER=2 > $R/ab18.txt 2>&1; t; cp $R/ab18.txt $OUT/
fi
if [ $(( $(date +%s) - S )) -lt 520 ]; then
  for v in "" "HPC_XLA_MOE_GATHER=fused" "HPC_XLA_MOE_ACT=epilogue"; do
   ( cd .peer/exp/e16 && env $v PYTHONPATH=$PWD HPC_PROFILE_MOE="hy3-tp8/fp8_tensor:4096,qwen3-30b-a3b/fp8_tensor:4096" timeout 25 python3 ../../../tools/profile_kernels.py moe > "$R/prof_${v:-base}.txt" 2>&1; echo "prof '$v' rc=$?" )
  done; t
  for f in $R/prof_*.txt; do echo "### $f"; cat "$f"; done > $OUT/prof_all.txt
fi
cat $R/ab16.txt | cut -c1-84; cat $R/ab18.txt 2>/dev/null | cut -c1-84
