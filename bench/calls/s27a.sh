#!/usr/bin/env bash
# session 27 call A (~5 min; carry .peer/exp/m and .peer/exp/e23): the decode experiments of session 26.
#   m   = main at 6e71b1e (piece cost 4, fp8 q -> bf16/fp16 out, experiment 22 behind HPC_XLA_DECODE_GROUP_MERGE=1,
#         NaN rows for NaN q / K: test_decode.py's new nan test)
#   e23 = m + b2234ba (the next piece's q loads issued before the current piece's epilogue)
# Tests first (two processes): test_gpu_decode.py + the nan test on m (its new test_group_merge_of_long_tasks runs the
# knob in a child), test_decode.py's cuda cases + test_gpu_decode.py on e23. Then the A/B, one GPU process at a time:
# m / m with the group merge / e23 on 8/1/128 bf16 (2 rounds), fp8 and bf16 q_len 2 (1 round); then the piece cost's
# second round on 32/8/128 (m against m with HPC_XLA_DECODE_PIECE_COST=2).
# Predictions (bench/NOTES.md, session 26): group merge -1.5..2.5 us on the rows with a long sequence (1x128K+31x4K,
# 1x64K+15x4K, 2x32K+30x4K, 1x32K+63x1K), none on 64x512 / 64x4K; e23 -0.3..1 us where CTAs run many pieces
# (64x512, zipf, random), -0.2..0.5 elsewhere.
. "$(dirname "$0")/prelude.sh"
PT="python3 -m pytest -q -p no:cacheprovider"
M=$PWD/.peer/exp/m; E=$PWD/.peer/exp/e23
( cd $M && PYTHONPATH=$M:$M/tests timeout 200 $PT tests/test_gpu_decode.py tests/test_decode.py -k "group_merge or nan_in_q or device_plan or graph or command or checks or misaligned" > $R/a_m.log 2>&1; echo "m test_gpu_decode rc=$?: $(tail -n1 $R/a_m.log)" ) &
( cd $E && PYTHONPATH=$E:$E/tests timeout 200 $PT tests/test_decode.py -k cuda tests/test_gpu_decode.py > $R/a_e.log 2>&1; echo "e23 decode tests rc=$?: $(tail -n1 $R/a_e.log)" ) &
wait; t
grep -E "^FAILED|^E  " $R/a_*.log | head -12
for f in $R/a_*.log; do echo "### $f"; tail -30 $f; done > $OUT/tests_all.txt
AB="env AB_WIDTH=100 AB_TIMEOUT=60 OUT=/tmp/abl tools/ab_bench.sh"
V="m m:HPC_XLA_DECODE_GROUP_MERGE=1 e23"
$AB 2 "decode --heads 8/1/128 --q-len 1 --kv bf16" $V > $R/a_ab1.txt 2>&1; t; cp $R/a_ab1.txt $OUT/
$AB 1 "decode --heads 8/1/128 --q-len 1 --kv fp8" $V > $R/a_ab2.txt 2>&1; t; cp $R/a_ab2.txt $OUT/
$AB 1 "decode --heads 8/1/128 --q-len 2 --kv bf16" $V > $R/a_ab3.txt 2>&1; t; cp $R/a_ab3.txt $OUT/
[ $(( $(date +%s) - S )) -lt 420 ] && { $AB 1 "decode --heads 32/8/128 --q-len 1 --kv bf16" m m:HPC_XLA_DECODE_PIECE_COST=2 > $R/a_ab4.txt 2>&1; t; cp $R/a_ab4.txt $OUT/; }
for f in $R/a_ab*.txt; do [ -f $f ] && grep -a "│\|==" $f | cut -c1-66; done
