#!/usr/bin/env bash
# session 44 call D (~4 min, any Hopper; carry .peer/pack = `tools/stage_experiments.sh m11 e61:59da36f
# t61:024a68f,59da36f && tools/pack_staged.sh m11 e61 t61`; t61 = 61b + experiment 49's per-CTA trace).
# Experiment 61b (59da36f: the aligned decode layout for 16-row pieces): its decode GPU file (device plan == host plan, now
# with aligned plans at q_len 2; numerics) and a 2-round A/B at 8/1: m11 (main with 59b) | e61 (aligned by the
# model: 64x512 Q=2, 64x4K Q=16, 1x128K+31x4K Q=16, 1x32K+63x1K Q=7) | e61 with HPC_XLA_DECODE_ALIGNED=2 (aligned
# wherever it fits: also 1x64K+15x4K Q=8, 2x32K+30x4K Q=13, 128 random Q=83) | e61 with =3 (aligned wherever it
# fits at q_len 1 too).
# Written BEFORE the run (session 44): tests pass, sanitizers clean; q_len 2 1x128K+31x4K -2..-5 us (every CTA one piece of 16 tiles:
# s43b's 1-piece CTAs ended 6-8 us before the 2-piece ones), 64x4K -1..-3 (16 tiles a CTA against 13 + 3 x 17),
# 1x32K+63x1K -0.5..-2, 64x512 -1..+1 (4 partials a unit to merge); q_len 1 and fp8 q_len 1 unchanged (no choice at 8
# rows); =2 on 2x32K+30x4K -1..-3, 128 random +5..+20 (Q=83 against ~16 now: the model's reason not to); =3 at
# q_len 1: 1x128K+31x4K and 64x4K -0.5..-2 (54c made the q_len 1 mid-CTA finish cheaper, so less than at q_len 2).
# Trace (t61, q_len 2, =0 vs =1): aligned, every CTA has 1 piece and the slowest CTA ends within ~3 us of the mean
# (s43b, cost 4: the 2-piece CTAs ended 6-8 us after it).
. "$(dirname "$0")/prelude.sh"
unpack_packs
T="python3 -m pytest -q -p no:cacheprovider"
in_background "e61 decode gpu file" d_e61_gpu.log 200 $X/e61 $T tests/test_gpu_decode.py
sanitize_decode d_e61 $X/e61  # (the plan kernel changed: memcheck + racecheck over test_decode's q_len 2 cuda cases)
wait; t
collect d_
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $R/d_e61_memcheck.log $R/d_e61_racecheck.log | sort | uniq -c
for round in 1 2; do
  bench_decode d8_m11_$round $X/m11 8/1/128
  bench_decode d8_e61_$round $X/e61 8/1/128
  HPC_XLA_DECODE_ALIGNED=2 bench_decode d8_e61f_$round $X/e61 8/1/128
  HPC_XLA_DECODE_ALIGNED=3 bench_decode d8_e61q_$round $X/e61 8/1/128
done
python3 $ROOT/bench/calls/decode_tables.py ab $R d8_ m11_1 m11_2 e61_1 e61_2 e61f_1 e61f_2 e61q_1 e61q_2 | tee $OUT/ab_table.txt
for mode in 0 1; do  # per-CTA trace of the same batches without / with the aligned layout
  ( cd $X/t61 && HPC_XLA_DECODE_ALIGNED=$mode PYTHONPATH=$X/t61 timeout 120 python3 $ROOT/bench/calls/decode_trace_ctas.py \
    --q-len 2 --workloads "1x128K+31x4K;64x4K" > $R/ctas_aligned$mode.txt 2>&1; echo "== trace aligned=$mode rc=$?" ); t
  cut -c1-160 $R/ctas_aligned$mode.txt | tee $OUT/ctas_aligned$mode.txt
done
tar czf $OUT/s44d_raw.tgz -C $R $(cd $R && ls d8_*.txt d8_*.json ctas_* *.log)
