#!/usr/bin/env bash
# session 44 call A (~8 min; carry .peer/pack = `tools/stage_experiments.sh mN e58:3bb3f75 e58c:be042bf &&
# tools/pack_staged.sh mN e58 e58c`, with M= below set to mN). Prepared in session 43.
# (1) main's GPU test files whole (54c, the k_cache error fix, and tests never yet GPU-run: test_out_may_be_x_or_
#     shared_output in test_gpu_fused_moe.py, test_out_may_be_q in test_gpu_decode.py); fused_moe in four processes.
# (2) experiments 58 (FinishPiece once dry before PdlWait, its fetches overlapping the plan kernel) and 58c (58 + 55b's
#     bulk copies of split pieces' rows): tests, memcheck, racecheck, A/B 2 rounds 8/1 and 64/8 against main.
# Written BEFORE the run (session 43): all tests pass. 58: 8/1 bf16 q_len 2 skewed rows (1x128K+31x4K, zipf,
# 2x32K+30x4K, 1x64K+15x4K, random) -1..-4 us, uniform rows within +-0.5, q_len 1 -0.3..-1.5 on skewed rows; 58c a
# further -0.5..-2 on the q_len 2 skewed rows (s43f: warmed, the mid-CTA finish's stores were its slow part).
# Lands if no row loses > 0.3 us (64/8: 0.3%) in both rounds and a skewed q_len 2 row gains > 1 us in both.
. "$(dirname "$0")/prelude.sh"
unpack_packs
M=$X/mN; A=$X/e58; C=$X/e58c
T="python3 -m pytest -q -p no:cacheprovider"
( cd $M && PYTHONPATH=$M:$M/tests $T --collect-only tests/test_gpu_fused_moe.py 2>/dev/null | grep "::" > $R/ids.txt )
split -n l/4 -d $R/ids.txt $R/ids_part_
for part in $R/ids_part_*; do
  mapfile -t ids < "$part"  # one id a line: parametrized ids hold spaces
  in_background "moe gpu part ${part##*_}" "a_moe_${part##*_}.log" 480 $M $T "${ids[@]}"
done
in_background "main: decode + rope + route GPU files, argument errors, CPU-facing files" a_rest.log 480 $M $T \
  tests/test_gpu_decode.py tests/test_gpu_rope_norm.py tests/test_moe_route.py tests/test_argument_errors.py \
  tests/test_decode.py tests/test_rope_norm.py tests/test_rope_norm_errors.py tests/test_fused_moe.py
wait; t
for e in e58 e58c; do
  in_background "$e decode gpu file" a_${e}_gpu.log 300 $X/$e $T tests/test_gpu_decode.py
  in_background "$e test_decode cuda" a_${e}_cuda.log 300 $X/$e $T tests/test_decode.py -k cuda
done
wait; t
sanitize_decode a_e58c $C
wait; t
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $R/a_e58c_memcheck.log $R/a_e58c_racecheck.log | sort | uniq -c
collect a_
for round in 1 2; do
  bench_decode d8_m$round $M 8/1/128; bench_decode d8_a$round $A 8/1/128; bench_decode d8_c$round $C 8/1/128
done
python3 $ROOT/bench/calls/decode_tables.py ab $R d8_ m1 m2 a1 a2 c1 c2 | tee $OUT/ab_table.txt
for round in 1 2; do
  bench_decode d64_m$round $M 64/8/128; bench_decode d64_a$round $A 64/8/128; bench_decode d64_c$round $C 64/8/128
done
python3 $ROOT/bench/calls/decode_tables.py ab $R d64_ m1 m2 a1 a2 c1 c2 | tee -a $OUT/ab_table.txt
tar czf $OUT/s44a_raw.tgz -C $R $(cd $R && ls d8_*.txt d64_*.txt d8_*.json d64_*.json *.log)
