#!/usr/bin/env bash
# session 26 call F (~4.5 min, the session's last device minutes): GPU tests of main at b3051c3 (.peer/exp/m3: the
# planner's piece cost 4 by default, fp8 q -> bf16 or fp16 out) -- test_decode.py's cuda cases (the new
# fp8_q_fp16_out named case among them) and test_gpu_decode.py, in two processes -- then the piece-cost default on
# the rows session 26's sweep did not cover (32/8/128 bf16 and 8/1/128 bf16 q_len 2): m3 (4) against m3 with
# HPC_XLA_DECODE_PIECE_COST=2 (the old default), one round each, as far as the time allows.
. "$(dirname "$0")/prelude.sh"
W=$PWD/.peer/exp/m3
PT="python3 -m pytest -q -p no:cacheprovider"
( cd $W && PYTHONPATH=$W:$W/tests timeout 170 $PT tests/test_decode.py -k "cuda" > $R/f_a.log 2>&1; echo "test_decode cuda rc=$?: $(tail -n1 $R/f_a.log)" ) &
( cd $W && PYTHONPATH=$W:$W/tests timeout 170 $PT tests/test_gpu_decode.py > $R/f_b.log 2>&1; echo "test_gpu_decode rc=$?: $(tail -n1 $R/f_b.log)" ) &
wait; t
grep -E "^FAILED|^E  " $R/f_*.log | head -12
for f in $R/f_*.log; do echo "### $f"; tail -30 $f; done > $OUT/tests_all.txt
AB="env AB_WIDTH=100 AB_TIMEOUT=60 OUT=/tmp/abl tools/ab_bench.sh"
[ $(( $(date +%s) - S )) -lt 200 ] && { $AB 1 "decode --heads 32/8/128 --q-len 1 --kv bf16" m3 m3:HPC_XLA_DECODE_PIECE_COST=2 > $R/f_ab1.txt 2>&1; t; cp $R/f_ab1.txt $OUT/; }
[ $(( $(date +%s) - S )) -lt 235 ] && { $AB 1 "decode --heads 8/1/128 --q-len 2 --kv bf16" m3 m3:HPC_XLA_DECODE_PIECE_COST=2 > $R/f_ab2.txt 2>&1; t; cp $R/f_ab2.txt $OUT/; }
for f in $R/f_ab*.txt; do [ -f $f ] && grep -a "│\|==" $f | cut -c1-66; done
