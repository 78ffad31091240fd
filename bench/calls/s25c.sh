#!/usr/bin/env bash
# session 25 call C: GPU tests of what landed this session (.peer/exp/m2 = main with experiment 14d, the tiled-path
# 32-row tile from avg 8, the plan-size check and the two GPU-only test fixes), then the A/B m (before) vs m2 on the
# rows the changes move. Tests first, in parallel (none timed); the A/B alone on the GPU.
. "$(dirname "$0")/prelude.sh"
W=$PWD/.peer/exp/m2
T="python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py"
PT="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
( cd $W && PYTHONPATH=$W:$W/tests timeout 200 $T -k "grouped_vs_oracle or grouped_dims" > $R/c_a.log 2>&1; echo "A rc=$?: $(tail -n1 $R/c_a.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 200 $T -k "v1_and_grouped or multi_cta or one_token" > $R/c_b.log 2>&1; echo "B rc=$?: $(tail -n1 $R/c_b.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 200 $T -k "grouped_other_tiles or grouped_deterministic or random_problems or graph" > $R/c_c.log 2>&1; echo "C rc=$?: $(tail -n1 $R/c_c.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 200 $T -k "not (device_checks_are_skipped or grouped_vs_oracle or grouped_dims or v1_and_grouped or multi_cta or one_token or grouped_other_tiles or grouped_deterministic or random_problems or graph)" > $R/c_d.log 2>&1; echo "D rc=$?: $(tail -n1 $R/c_d.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 280 $PT tests/test_argument_errors.py tests/test_decode.py tests/test_decode_plan.py tests/test_fused_moe.py tests/test_gpu_fused_moe.py::test_device_checks_are_skipped_inside_a_graph_capture tests/test_gpu_decode.py tests/test_gpu_rope_norm.py > $R/c_e.log 2>&1; echo "E rc=$?: $(tail -n1 $R/c_e.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 200 $CS --tool memcheck $T -k "sparse or grouped_vs_oracle and case3" > $R/c_mc.log 2>&1; echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $R/c_mc.log | sort | uniq -c | head -3) $(tail -n1 $R/c_mc.log)" ) &
wait; t
grep -E "^FAILED|^E  " $R/c_*.log | head -20
for f in $R/c_*.log; do echo "### $f"; tail -50 $f; done > $OUT/tests_all.txt
AB="env AB_WIDTH=100 AB_TIMEOUT=100 OUT=/tmp/abl tools/ab_bench.sh"
[ $(( $(date +%s) - S )) -lt 190 ] && $AB 1 "moe --shapes mixtral-8x7b/bf16,qwen3-30b-a3b/bf16,hy3-ep8,dsv3-ep8 --tokens 32,64,128,256,4096" m m2 > $R/c_ab.txt 2>&1; t
cp $R/c_ab.txt $OUT/; cut -c1-90 $R/c_ab.txt
# the planner's piece cost (b055b99), if time is left: 8/1 bf16, default 2 against 0 / 1 / 4
if [ $(( $(date +%s) - S )) -lt 300 ]; then
  env AB_WIDTH=100 AB_TIMEOUT=100 OUT=/tmp/abl tools/ab_bench.sh 1 "decode --heads 8/1/128 --q-len 1 --kv bf16" m2 \
    m2:HPC_XLA_DECODE_PIECE_COST=1 m2:HPC_XLA_DECODE_PIECE_COST=0 m2:HPC_XLA_DECODE_PIECE_COST=4 > $R/c_pc.txt 2>&1; t
  cp $R/c_pc.txt $OUT/; cut -c1-90 $R/c_pc.txt
fi
