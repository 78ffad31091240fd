#!/usr/bin/env bash
# session 22 call 1 (staged in session 21 from HEAD 9e8bdb4-era main; re-stage with
# `tools/stage_experiments.sh m e14:166fa33` if main moved): experiment 14b (sparse EP reduce) vs main; the tiled
# M-tile knob; stream vs tiled at Qwen3 fp8 T=2/4; Hy3-TP8 T=1; profiles; whole fused_moe GPU file on e14 + memcheck.
. "$(dirname "$0")/prelude.sh"
AB="env AB_WIDTH=100 AB_TIMEOUT=150 OUT=/tmp/abl tools/ab_bench.sh"
$AB 2 "moe --shapes hy3-ep8,dsv3-ep8,hy3-tp8 --tokens 1,16,256,1024,4096" m e14 > $R/ab1.txt; t
$AB 2 "moe --shapes mixtral-8x7b,qwen3-30b-a3b --tokens 16,32,64,128,256" m m:HPC_XLA_MOE_TILED_M=32 > $R/ab2.txt; t
# LITE=1 (a short device budget) skips the two lower-value knob A/Bs and their profiles.
if [ "${LITE:-0}" != 1 ]; then
$AB 2 "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8 --tokens 2,4" m m:HPC_XLA_MOE_PATH=v1 > $R/ab3.txt; t
$AB 2 "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8 --tokens 1024,4096" m m:HPC_XLA_MOE_GEMM_TILE=128x128 > $R/ab4.txt; t
( cd .peer/exp/m && PYTHONPATH=$PWD HPC_XLA_MOE_GEMM_TILE=128x128 HPC_PROFILE_MOE="hy3-tp8/fp8_tensor:4096,qwen3-30b-a3b/fp8_tensor:4096" timeout 100 python3 ../../../tools/profile_kernels.py moe > $R/prof_m128.txt 2>&1; echo "prof m128 rc=$?" )
( cd .peer/exp/m && PYTHONPATH=$PWD HPC_PROFILE_MOE="hy3-tp8/fp8_tensor:4096,qwen3-30b-a3b/fp8_tensor:4096" timeout 100 python3 ../../../tools/profile_kernels.py moe > $R/prof_m4096.txt 2>&1; echo "prof m4096 rc=$?" )
fi
for v in m e14; do
 ( cd .peer/exp/$v && PYTHONPATH=$PWD HPC_PROFILE_MOE="dsv3-ep8/fp8_block128:4096,hy3-ep8/fp8_tensor:4096,dsv3-ep8/fp8_block128:1024" timeout 100 python3 ../../../tools/profile_kernels.py moe > $R/prof_$v.txt 2>&1; echo "prof $v rc=$?" )
done; t
T="python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py"
W=$PWD/.peer/exp/e14
( cd $W && PYTHONPATH=$W:$W/tests timeout 280 $T -k "grouped_vs_oracle or grouped_dims" > $R/t_a.log 2>&1; echo "A rc=$?: $(tail -n1 $R/t_a.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 280 $T -k "v1_and_grouped or multi_cta or one_token" > $R/t_b.log 2>&1; echo "B rc=$?: $(tail -n1 $R/t_b.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 280 $T -k "grouped_other_tiles or grouped_deterministic or random_problems or graph" > $R/t_c.log 2>&1; echo "C rc=$?: $(tail -n1 $R/t_c.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 280 $T -k "not (grouped_vs_oracle or grouped_dims or v1_and_grouped or multi_cta or one_token or grouped_other_tiles or grouped_deterministic or random_problems or graph)" > $R/t_d.log 2>&1; echo "D rc=$?: $(tail -n1 $R/t_d.log)" ) &
CS="compute-sanitizer --target-processes all --error-exitcode 99"
( cd $W && PYTHONPATH=$W:$W/tests timeout 280 $CS --tool memcheck $T -k "grouped_vs_oracle and (case0 or case3) or cuda_vs_oracle and (case0 or case6)" > $R/mc.log 2>&1; echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $R/mc.log | sort | uniq -c) $(tail -n1 $R/mc.log)" ) &
wait; t
grep -E "^FAILED|^E  " $R/t_*.log | head -20
cat $R/ab*.txt > $OUT/ab_all.txt; for f in $R/prof_*.txt; do echo "### $f"; cat $f; done > $OUT/prof_all.txt
for f in $R/*.log; do echo "### $f"; tail -40 $f; done > $OUT/tests_all.txt
for v in m e14; do echo "== prof $v"; grep -E "==|after" $R/prof_$v.txt | grep -E "==|Reduce" | cut -c1-40,60-150; done
