#!/usr/bin/env bash
# session 54 call B. On an H200: s47h (TREE=m54), the tables of record (~9 min). On an H100 (~7-8 min with a cold
# FlashInfer JIT): the decode suite whole (8/1, 64/8, 32/8; bf16 and fp8; q_len 1 and 2 where the suite has them) on
# main (m54 = 5516932) with FlashInfer 0.5.3 in the same run -- the per-step and per-layer ratios last taken in
# session 48 (s48's dec_all / fi_all), before experiments 66p, 68d/68p, 69, 71 and 72 moved the plan
# (q_len 1 3.0-3.3 -> 2.0-2.3 us, q_len 2 6.4-8.0 -> 4.4-5.6).
# Carry .peer/pack (`tools/stage_experiments.sh m54 && tools/pack_staged.sh m54`), .peer/probe (H200 branch), .whl
# (tools/fetch_peer_wheels.sh).
# Written BEFORE the run (session 54): step/FI at 8/1 bf16 q_len 1 0.85-1.0 on every row (s48: 0.89-1.025, slower
# on 4 of 8 by 0.2-2.5%; the plan is ~1 us cheaper now), q_len 2 step/FI 0.9-1.1 (s48 0.65-1.21: slower on 7 of 8;
# the plan is 2-3 us cheaper now, so slower on ~3-5 of 8); layer/FI unchanged from s48 (within +-0.02: the
# attention and combine kernels did not change since).
. "$(dirname "$0")/prelude.sh"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then TREE=${TREE:-m54} bash bench/calls/s47h.sh; exit; fi
unpack_packs
M=$X/${TREE:-m54}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > $R/pip.log 2>&1; t
( cd $M && PYTHONPATH=$M:/tmp/site timeout 540 python3 -m hpc_xla.bench decode --out $OUT/dec_all.json \
    > $OUT/dec_all.txt 2>&1; echo "decode+FI bench rc=$?" ); t
python3 $ROOT/bench/calls/decode_tables.py fi $OUT/dec_all.json > $OUT/fi_all.txt 2>&1
cut -c1-90 $OUT/fi_all.txt
