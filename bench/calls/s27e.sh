#!/usr/bin/env bash
# session 27 call E (~8 min; carry .peer/exp/n and .peer/exp/e25): experiment 25d, decode chunks handed out on
# demand (c12308b = 25c 78b8629 + session 28's review fixes: tickets at the workspace's start, self-reset only for
# torch plans, poisoned-partials tests; reverted on main; e25 = main + c12308b, restaged in session 28).
# HPC_XLA_DECODE_TICKET_RESET=last: the tickets reset by the kernel's last CTA instead of a memset before it (keeps
# the PDL overlap; torch plans only, decode_plan zeroes a new plan's tickets). Tests on e25: test_chunks_on_demand(_self_reset) (fp64 reference, run-to-run
# bitwise) + test_gpu_decode.py and test_decode.py's cuda cases (the default path: one chunk per CTA, kernels
# recompiled with the ticket walk). Then n / e25 / e25 with 2 and 4 chunks per CTA (HPC_BENCH_DECODE_CHUNKS) / 2
# self-reset on 8/1/128 bf16 (2 rounds) and fp8, 64/8 bf16 (1 round).
# Predicted: k = 2..4 -2..4 us on 64x4K, 1x128K+31x4K and zipf (8/1), +0..1 on 64x512; e25 at k = 1 equal to n within
# noise; self-reset 0.5-1.5 us ahead of the memset form (the PDL overlap). Refuted if no 8/1 row gains > 1 us at any
# k, either form. If it wins: land with the device default max_ctas = k x resident for head_dim <= 128.
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e25
PT="python3 -m pytest -q -p no:cacheprovider"
in_background "e25 test_gpu_decode" e_a.log 240 $E $PT tests/test_gpu_decode.py
in_background "e25 test_decode cuda" e_b.log 240 $E $PT tests/test_decode.py -k cuda
wait; t
collect e_
AB="env AB_WIDTH=100 AB_TIMEOUT=60 OUT=/tmp/abl tools/ab_bench.sh"
V="n e25 e25:HPC_BENCH_DECODE_CHUNKS=2 e25:HPC_BENCH_DECODE_CHUNKS=4 e25:HPC_BENCH_DECODE_CHUNKS=2,HPC_XLA_DECODE_TICKET_RESET=last"
$AB 2 "decode --heads 8/1/128 --q-len 1 --kv bf16" $V > $R/e_ab1.txt 2>&1; t; cp $R/e_ab1.txt $OUT/
$AB 1 "decode --heads 8/1/128 --q-len 1 --kv fp8" $V > $R/e_ab2.txt 2>&1; t; cp $R/e_ab2.txt $OUT/
[ $(( $(date +%s) - S )) -lt 420 ] && { $AB 1 "decode --heads 64/8/128 --q-len 1 --kv bf16" n e25:HPC_BENCH_DECODE_CHUNKS=2 > $R/e_ab3.txt 2>&1; t; cp $R/e_ab3.txt $OUT/; }
for f in $R/e_ab*.txt; do [ -f $f ] && grep -a "│\|==" $f | cut -c1-66; done
