#!/usr/bin/env bash
# session 47 call H (~9 min, H200 ONLY -- exits at once on anything else; no H200 has come since session 39, and
# #2 / #3 / #4's targets are H200 numbers). Carry .peer/pack (m55 = main since session 54, TREE=name for another), .peer/probe, .whl
# (tools/fetch_peer_wheels.sh). The tables of record in ONE call (the session's device budget holds one start and
# one full call): decode_ring_probe (is the H200's 69-73% of the copy ceiling the kernel or the pattern?), rope_norm
# once (#2's 8/1 row), decode 8/1 bf16 q_len 1 with FlashInfer 0.5.3 in the same run (#3's target rows), MoE T=1
# ours (#4; no peer: vLLM's Triton needs its own call, s41b).
# Written BEFORE the run (session 47, from s38b-s40b and the H100 sessions since): probe skeleton at spin 800 85-95%
# of the SM copy ceiling; rope_norm bf16 8/1 T=16384 75-78%; decode 8/1 bf16 q_len 1 with the plan kernel 64x4K
# 41-44 us, 1x128K+31x4K 42-45 us (s38b 43.1 / 44.5; H100 sessions 42-45 moved q_len 1 by -0.5..-1.5), ours/FI
# 0.93-1.0 on those two, q_len 1 faster than FI on every row; MoE Qwen3 fp8 T=1 18.0-18.5 (s40b 18.3).
. "$(dirname "$0")/prelude.sh"
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then echo "not an H200: nothing run"; exit 0; fi
unpack_packs
M=$X/${TREE:-m55}  # m55 = main (session 54, with 73): tools/stage_experiments.sh m55 && tools/pack_staged.sh m55
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > $R/pip.log 2>&1 &
h200_rows $M
wait; echo "pip: $(tail -n1 $R/pip.log)"
# last, as it is the longest (FlashInfer JIT-builds first): what the call's limit leaves of it still comes back
( cd $M && PYTHONPATH=$M:/tmp/site timeout 330 python3 -m hpc_xla.bench decode --heads 8/1/128 --kv bf16 --q-len 1 \
    --out $OUT/dec_8_bf16_q1.json > $OUT/dec_8_bf16_q1.txt 2>&1; echo "decode+FI bench rc=$?" ); t
python3 $ROOT/bench/calls/decode_tables.py fi $OUT/dec_8_bf16_q1.json | tee $OUT/fi_table.txt
