#!/usr/bin/env bash
# session 44 call C (~5 min, any Hopper; carry .peer/pack = `tools/stage_experiments.sh m11 e60:3bb3f75 &&
# tools/pack_staged.sh m11 e60` and .peer/exp/e45 = `tools/stage_experiments.sh e45:cb7b631`).
# (1) s41c's MoE T=1 timeline of experiment 45 (predictions in s41c.sh's header).
# (2) experiment 60 = experiment 58 (FinishPiece once dry before PdlWait) again, now on main with 59b, whose plan
#     kernel triggers the attention kernel right after its own PdlWait: 58's dry pass can overlap the plan kernel's
#     work only now (s44b measured 58 on main before 59b: +1 us on every q_len 1 row, +2..3 at q_len 2).
# Written BEFORE the run (session 44): e60 decode tests pass; A/B vs m11: q_len 1 within +0.5 (the dry pass now
# mostly hidden behind the plan kernel); q_len 2 skewed rows -0.5..-2 (the warm mid-CTA finish). If q_len 1 is still
# ~+1 us, the dry pass is not hidden and the warm-up idea is closed.
. "$(dirname "$0")/prelude.sh"
unpack_packs
T="python3 -m pytest -q -p no:cacheprovider"
if [ -z "${SKIP_TESTS:-}" ]; then  # SKIP_TESTS=1: the timeline and the A/B only (a last ~3 device minutes)
  in_background "e60 decode gpu file" c_e60_gpu.log 300 $X/e60 $T tests/test_gpu_decode.py
  in_background "e60 test_decode cuda" c_e60_cuda.log 300 $X/e60 $T tests/test_decode.py -k cuda
  wait; t
  collect c_
fi
E=$ROOT/.peer/exp/e45
for args in "--shape qwen3-30b-a3b/fp8_tensor" "--shape hy3-tp8/fp8_tensor" ; do
  ( cd $E && PYTHONPATH=$E timeout 120 python3 $ROOT/tools/moe_trace.py $args 2>&1 | tail -30 ); t
done > $OUT/moe_trace_e45.txt
cat $OUT/moe_trace_e45.txt
for round in 1 2; do
  for e in m11 e60; do bench_decode d8_${e}_$round $X/$e 8/1/128; done
done
python3 $ROOT/bench/calls/decode_tables.py ab $R d8_ m11_1 m11_2 e60_1 e60_2 | tee $OUT/ab_table.txt
tar czf $OUT/s44c_raw.tgz -C $R $(cd $R && ls d8_*.txt d8_*.json)
