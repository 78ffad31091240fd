#!/usr/bin/env bash
# session 45 call B (~4.5 min, any Hopper; carry .peer/pack = `tools/stage_experiments.sh m11 e61c:3601483 &&
# tools/pack_staged.sh m11 e61c` and .whl = tools/fetch_peer_wheels.sh).
# Experiment 61c (3601483 = 61b with the choice rule refit to s44d / s45a: aligned when Q tiles alone model below the
# cost layouts and Q >= 6.2 tiles): its decode GPU file + memcheck / racecheck, a 2-round A/B at 8/1 of m11 / e61c,
# then #3's q_len 2 rows (bf16) against FlashInfer on e61c in one run.
# Written BEFORE the run (session 45, H100 figures): vs m11, q_len 2 bf16 1x128K+31x4K -1.5..-2.5 (as e61),
# 1x64K+15x4K -0.8..-1.5 (as e61 =2), 1x32K+63x1K -0.2..-0.6, 64x4K -0.2..-0.5, 64x512 / random / zipf within 0.3
# (unaligned as on main), 2x32K+30x4K -0.5..+0.3 (Q=13: e61 =2 measured -0.1); fp8 q_len 2 likewise; q_len 1 rows
# within 0.3 (no layout change below 16 rows). Against FlashInfer (s45a ran FI 55.7 / 33.8 / 44.1 on those three):
# every bf16 q_len 2 row below 1.0x.
. "$(dirname "$0")/prelude.sh"
unpack_packs
T="python3 -m pytest -q -p no:cacheprovider"
in_background "e61c decode gpu file" b_e61c_gpu.log 200 $X/e61c $T tests/test_gpu_decode.py
sanitize_decode b_e61c $X/e61c
wait; t
collect b_
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $R/b_e61c_memcheck.log $R/b_e61c_racecheck.log | sort | uniq -c
for round in 1 2; do
  for e in m11 e61c; do bench_decode d8_${e}_$round $X/$e 8/1/128; done
done
python3 $ROOT/bench/calls/decode_tables.py ab $R d8_ m11_1 m11_2 e61c_1 e61c_2 | tee $OUT/ab_table.txt
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?"
M=$X/e61c
( cd $M && PYTHONPATH=$M:/tmp/site timeout 200 python3 -m hpc_xla.bench decode --heads 8/1/128 --kv bf16 --q-len 2 \
    --out $OUT/dec_8_bf16_q2.json > $R/dec_8_bf16_q2.txt 2>&1; echo "== fi bf16 q2 rc=$?" ); t
python3 $ROOT/bench/calls/decode_tables.py fi $OUT/dec_*.json | tee $OUT/fi_table.txt
tar czf $OUT/s45b_raw.tgz -C $R $(cd $R && ls d8_*.txt d8_*.json dec_* *.log)
