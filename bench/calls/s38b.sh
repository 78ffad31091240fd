#!/usr/bin/env bash
# session 38 call B (H200 only, ~6-9 min; carry .peer/exp/m = main staged, .whl from tools/fetch_peer_wheels.sh): the
# rope_norm and decode tables of record on the H200 -- rope_norm with experiment 40 (H100 session 37: fp8 8/1 T=16384
# 33.7 -> 31.0 us; the H200 record, sessions 25-27, had bf16 8/1 at 76% of the copy ceiling and fp8 8/1 at 53%);
# decode with FlashInfer 0.5.3 (both decode configs; q_len 2 against its causal paged prefill) in the same run.
# Predicted: rope bf16 8/1 T=16384 76-80%, fp8 8/1 60-70% (E40's -8% on the H100); decode rows unchanged from the
# session-27 record (no decode kernel change since).
. "$(dirname "$0")/prelude.sh"
W=$PWD/.peer/exp/m
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?"; t
( cd $W && PYTHONPATH=$W timeout 150 python3 -m hpc_xla.bench rope_norm --out $OUT/rope_norm.json > $OUT/rope_table.txt 2>&1; echo "rope bench rc=$?" ); t
grep -v "^  " $OUT/rope_table.txt | tail -40 | cut -c1-190
# The issue's target rows first (q_len 1, the two head shapes of its table, both KV dtypes), then q_len 2 on 8/1 bf16:
# FlashInfer's causal paged prefill there has not run yet (a failing config prints one line and is left out).
( cd $W && PYTHONPATH=$W:/tmp/site timeout 300 python3 -m hpc_xla.bench decode --heads 8/1/128,64/8/128 --q-len 1 \
    --out $OUT/decode.json > $OUT/decode_table.txt 2>&1; echo "decode bench rc=$?" ); t
grep -v "^  " $OUT/decode_table.txt | tail -50 | cut -c1-200
( cd $W && PYTHONPATH=$W:/tmp/site timeout 120 python3 -m hpc_xla.bench decode --heads 8/1/128 --kv bf16 --q-len 2 \
    --out $OUT/decode_q2.json > $OUT/decode_q2_table.txt 2>&1; echo "decode q_len 2 bench rc=$?" ); t
grep -v "^  " $OUT/decode_q2_table.txt | tail -20 | cut -c1-200
