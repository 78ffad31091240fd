#!/usr/bin/env bash
# session 45 call A (~6 min: FlashInfer JIT-builds its kernels first; after s44d on the same packs, carry .peer/pack and
# .whl = tools/fetch_peer_wheels.sh). TREE=e61 (default: experiment 61b, if s44d lands it) or TREE=m11 (main).
# Issue #3's three q_len 2 rows against FlashInfer in ONE run: 8/1/128 bf16 q_len 2 (ours with the plan kernel
# counted vs FlashInfer's FA2 paged prefill), then fp8 q_len 2 if time is left.
# Written BEFORE the run (session 44), with 61b: 1x128K+31x4K 0.92-0.98x of FlashInfer's time (s44b: ~1.02x before),
# 1x64K+15x4K ~1.0-1.02x (61b keeps cost 4 there; =2 would align it), 2x32K+30x4K 0.98-1.0x; the other rows as in
# s43a (0.58-0.995x).
. "$(dirname "$0")/prelude.sh"
unpack_packs
M=$X/${TREE:-e61}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?"
bench() {  # bench LABEL SECONDS ARGS...: the staged tree's decode with FlashInfer on the path
  local label=$1 secs=$2; shift 2
  ( cd $M && PYTHONPATH=$M:/tmp/site timeout $secs python3 -m hpc_xla.bench decode "$@" --out $OUT/dec_$label.json \
    > $R/dec_$label.txt 2>&1; echo "== $label rc=$?" ); t
}
bench 8_bf16_q2 330 --heads 8/1/128 --kv bf16 --q-len 2
bench 8_fp8_q2 200 --heads 8/1/128 --kv fp8 --q-len 2
python3 $ROOT/bench/calls/decode_tables.py fi $OUT/dec_*.json | tee $OUT/fi_table.txt
tar czf $OUT/s45a_raw.tgz -C $R $(cd $R && ls dec_* *.log)
