#!/usr/bin/env bash
# session 43 call A (FIRST, ~8 min, an H200 if one comes -- the table of record -- else any Hopper; carry .peer/exp/m8
# = main staged (`tools/stage_experiments.sh m8`) and .whl (tools/fetch_peer_wheels.sh)).
# (1) decode tests on main's build (51 landed in session 42; its GPU run was on the e51 build of the same kernels);
# (2) decode vs FlashInfer in one run: 8/1/128 bf16, then 64/8/128 (bf16 + fp8, q_len 1). FlashInfer JIT-builds its
#     kernels on first use (s42d: 8/1 with both dtypes > 240 s), so each run has its own long timeout; fp8 8/1 is in
#     s43b.
# Written BEFORE the run (H100 after 51, s42e: q_len 1 0.56-0.97x of FI's time, q_len 2 slower on 1x128K+31x4K
# 1.046x / 1x64K+15x4K 1.018x / 2x32K+30x4K 1.013x): on an H200 q_len 1 0.95-1.0x on the uniform rows (session 39: 0.98-
# 0.99x before 51), q_len 2 1.0-1.1x on the three skewed rows (the H200's session-39 gap was larger: 0.85x -> FI
# faster by 15%), faster on the rest. 64/8 bf16 64x4K within +-1% of FI.
. "$(dirname "$0")/prelude.sh"
M=$PWD/.peer/exp/m8
T="python3 -m pytest -q -p no:cacheprovider"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?"
in_background "decode gpu file" a_gpu.log 300 $M $T tests/test_gpu_decode.py
in_background "test_decode cuda cases" a_cuda.log 300 $M $T tests/test_decode.py -k cuda
wait; t
collect a_
bench() {  # bench LABEL SECONDS ARGS...: main's decode with FlashInfer on the path
  local label=$1 secs=$2; shift 2
  ( cd $M && PYTHONPATH=$M:/tmp/site timeout $secs python3 -m hpc_xla.bench decode "$@" --out $OUT/dec_$label.json \
    > $R/dec_$label.txt 2>&1; echo "== $label rc=$?" ); t
}
bench 8_bf16 330 --heads 8/1/128 --kv bf16
bench 64 200 --heads 64/8/128
python3 $ROOT/bench/calls/decode_tables.py fi $OUT/dec_*.json | tee $OUT/fi_table.txt
tar czf $OUT/s43a_raw.tgz -C $R $(cd $R && ls dec_* *.log)
