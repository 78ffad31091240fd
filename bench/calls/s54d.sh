#!/usr/bin/env bash
# session 54 call D (~2.5-4 min, H200 ONLY -- exits at once on anything else): s47h without FlashInfer, for a budget
# that no longer holds s47h (~9 min with FlashInfer's cold JIT). Carry .peer/pack (main staged as m59, or
# TREE=name), .peer/probe. The H200 rows of #2 / #3 / #4, unmeasured since
# session 39-40: decode_ring_probe, rope_norm 8/1, MoE T=1 (ours), decode 8/1 bf16 q_len 1 and 2 (ours, no peer).
# Written BEFORE the run (session 54, from s38b-s40b and the H100 sessions since): probe skeleton 85-95% of the SM copy
# ceiling at spin 800; rope_norm bf16 8/1 T=16384 75-78% (28.5-29.5 us); MoE Qwen3 fp8 T=1 18.0-18.5 us; decode 8/1
# bf16 q_len 1 step 64x4K 40-43 us, 1x128K+31x4K 41-44 (s38b 43.1 / 44.5, H100 sessions since moved q_len 1 steps by
# -1.5..-3), q_len 2 steps 2-5 us above q_len 1.
. "$(dirname "$0")/prelude.sh"
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then echo "not an H200: nothing run"; exit 0; fi
unpack_packs
M=$X/${TREE:-m59}  # main: tools/stage_experiments.sh m59 && tools/pack_staged.sh m59
h200_rows $M
( cd $M && PYTHONPATH=$M HPC_BENCH_PEERS=0 timeout 100 python3 -m hpc_xla.bench decode --heads 8/1/128 --kv bf16 \
    --out $OUT/dec_8_bf16.json > $OUT/dec_8_bf16.txt 2>&1; echo "decode bench rc=$?" ); t
grep -a "│" $OUT/dec_8_bf16.txt | cut -c1-120
