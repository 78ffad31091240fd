#!/usr/bin/env bash
# session 23 call 8 (experiment 19, measurement only: e19 = main + 5c2ece2, per-CTA timestamps in the decode
# kernels): where the ~9 us of fixed cost inside the 8/1 attention kernel goes (bench/research/
# decode_8_1_bandwidth.md). Eager and graph replay, bf16 and fp8, the rows whose targets are missed.
. "$(dirname "$0")/prelude.sh"
W=$PWD/.peer/exp/e19
for args in "--workload 64x4K" "--workload 64x4K --graph" "--workload 64x512 --graph" "--workload 1x128K+31x4K --graph" \
            "--workload 64x4K --kv fp8 --graph" "--workload 1x128K+31x4K --kv fp8 --graph" "--heads 64,8,128 --workload 64x4K --graph"; do
  ( cd $W && PYTHONPATH=$W timeout 60 python3 tools/decode_trace.py $args 2>&1 | tail -22 ); echo
done | tee $OUT/trace.txt
