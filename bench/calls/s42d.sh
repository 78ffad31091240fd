#!/usr/bin/env bash
# session 42 call D (~5 min, any Hopper; carry .peer/exp/m7 (= main with experiment 51 landed: `tools/stage_experiments.sh
# m7`), .peer/exp/e51t (experiment 49's trace + 51: `e51t:024a68f,ea2f8e5`) and .whl (tools/fetch_peer_wheels.sh)).
# (1) main's decode against FlashInfer in one run (8/1/128 and 64/8/128, bf16 and fp8, q_len 1 and 2): is q_len 2
#     still slower than FI's FA2 prefill anywhere (issue #3: never slower)?
# (2) the per-phase trace with 51: did FinishPiece's cycles per piece fall as s42c's times say?
# Written BEFORE the run: 8/1 bf16 q_len 2 within 0.97-1.03x of FI on 1x128K+31x4K (57.2 vs 55.7 last session),
# faster elsewhere; q_len 1 faster everywhere. Trace: finish per piece 9091 -> 3000-4500 cycles at q_len 2, 3495 ->
# 2000-3000 at q_len 1; per-tile cycles unchanged.
. "$(dirname "$0")/prelude.sh"
M=$PWD/.peer/exp/m7
E=$PWD/.peer/exp/e51t
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?"
trace() {  # trace LABEL ARGS...
  local label=$1; shift
  ( cd $E && PYTHONPATH=$E timeout 150 python3 $E/tools/decode_trace.py "$@" > $R/trace_$label.txt 2>&1
    echo "== $label rc=$?" ); t
  grep -E "^==|per piece|per tile" $R/trace_$label.txt | cut -c1-150
}
W="64x4K,1x128K+31x4K,256 zipf"
trace q1 --q-len 1 --workloads "$W"
trace q2 --q-len 2 --workloads "$W"
trace fp8_q2 --q-len 2 --variant fp8 --workloads "$W"
bench() {  # bench LABEL HEADS: main's decode with FlashInfer on the path
  ( cd $M && PYTHONPATH=$M:/tmp/site timeout 240 python3 -m hpc_xla.bench decode --heads $2 --out $R/dec_$1.json \
    > $R/dec_$1.txt 2>&1; echo "== $1 rc=$?" ); t
}
bench 8 8/1/128
bench 64 64/8/128
python3 $ROOT/bench/calls/decode_tables.py fi $R/dec_*.json | tee $OUT/fi_table.txt
tar czf $OUT/s42d_raw.tgz -C $R $(cd $R && ls dec_* trace_* pip.log)
