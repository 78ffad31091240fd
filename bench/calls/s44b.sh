#!/usr/bin/env bash
# session 44 call B (~7 min, right after s44a on the same packs: mN, e58, e58c, e59).
# A/B, 2 rounds, layer us (the plan kernel counted), 8/1/128 and 64/8/128: main, experiment 58 (FinishPiece warmed
# before PdlWait), 58c (58 + bulk stores of split pieces' rows), 59 (the planner chooses piece cost 4 or 6 per batch
# from 16 rows a piece by the modeled makespan). Plus 59's planner tests on the GPU (device plan == host plan at q_len 2).
# Written BEFORE the run (session 43):
# - 58: 8/1 bf16 q_len 2 skewed rows (1x128K+31x4K, zipf, 2x32K+30x4K, 1x64K+15x4K, random) -1..-4 us, uniform
#   rows within +-0.5, q_len 1 -0.3..-1.5 on skewed rows; 58c a further -0.5..-2 on the q_len 2 skewed rows.
# - 59 (59b, 7b7bc85): q_len 2 rows where it picks 6 (1x128K+31x4K, 2x32K+30x4K, 1x32K+63x1K, random, zipf) -1..-2.5 us as s43b's
#   cost 6 minus the plan kernel's extra (~+0.3..0.6 us: one more search per CTA start); 64x512 / 64x4K / q_len 1
#   +0..+1 (the plan kernel only; q_len 1 does no choice: +0).
# Each lands if no row loses > 0.3 us (64/8: 0.3%) in both rounds and a skewed q_len 2 row gains > 1 us in both
# (58 and 58c: the better of the two).
. "$(dirname "$0")/prelude.sh"
unpack_packs
M=$X/m10
T="python3 -m pytest -q -p no:cacheprovider"
in_background "e59 planner tests + GPU decode file" b_e59.log 300 $X/e59 $T tests/test_decode_plan.py \
  tests/test_gpu_decode.py
# (session 44: s44a's experiment half moved here, so one call decides 58 / 58c / 59 if only one call comes)
for e in e58 e58c; do
  in_background "$e decode gpu file" b_${e}_gpu.log 300 $X/$e $T tests/test_gpu_decode.py
done
for e in e58 e58c e59; do
  in_background "$e test_decode cuda" b_${e}_cuda.log 300 $X/$e $T tests/test_decode.py -k cuda
done
sanitize_decode b_e58c $X/e58c
wait; t  # (before the timings: a test process beside them would skew them)
collect b_
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $R/b_e58c_memcheck.log $R/b_e58c_racecheck.log | sort | uniq -c
for round in 1 2; do
  for e in m10 e58 e58c e59; do bench_decode d8_${e}_$round $X/$e 8/1/128; done
done
python3 $ROOT/bench/calls/decode_tables.py ab $R d8_ m10_1 m10_2 e58_1 e58_2 e58c_1 e58c_2 e59_1 e59_2 | tee $OUT/ab_table.txt
for round in 1 2; do
  for e in m10 e58 e58c e59; do bench_decode d64_${e}_$round $X/$e 64/8/128; done
done
python3 $ROOT/bench/calls/decode_tables.py ab $R d64_ m10_1 m10_2 e58_1 e58_2 e58c_1 e58c_2 e59_1 e59_2 | tee -a $OUT/ab_table.txt
tar czf $OUT/s44b_raw.tgz -C $R $(cd $R && ls d8_*.txt d64_*.txt d8_*.json d64_*.json *.log)
