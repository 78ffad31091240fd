#!/usr/bin/env bash
# session 30 call C (~9 min; carry .peer/exp/n, .peer/exp/e25, .peer/exp/e30): the two decode experiments.
#   e30 = n + 721b8ab: the combine's block merge (long tasks) issues a row's partial loads with its lse loads, one
#         round trip; 2 combine CTAs / SM (launch bound: 128 registers). Outputs meant bitwise equal to n's.
#   e25 = n + c12308b: chunks handed out on demand through a ticket counter (s27e.sh describes it).
# Tests: e30's test_gpu_decode.py + memcheck of its long-merge test; n vs e30 outputs bitwise (decode_bits.py: the
# long-merge cases + 8/1 1x128K+31x4K bf16 and 1x64K+15x4K fp8); e25's decode GPU file + test_decode.py's cuda cases.
# A/B on 8/1/128 q_len 1 (bf16: n, e30, e25 k=2, e25 k=2 self-reset; fp8: n, e30, e25 k=2).
# Predicted e30: the long-sequence rows -2..3 us (8/1 bf16 1x128K+31x4K 45.5 -> 42.5-43.5, 1x64K+15x4K and
# 2x32K+30x4K -1.5..2.5, fp8 1x128K 31.7 -> 29-30), 64x512 / 64x4K / random within +-0.5 (the warp merge, unchanged
# code, now at 2 CTAs / SM instead of 3 for rows <= 8). Refuted if no long-sequence row gains > 1 us.
# e25: s27e.sh's prediction (-2..4 us on 64x4K, 1x128K+31x4K, zipf at k=2..4; refuted if no 8/1 row gains > 1 us).
. "$(dirname "$0")/prelude.sh"
N=$PWD/.peer/exp/n
E25=$PWD/.peer/exp/e25
E30=$PWD/.peer/exp/e30
PT="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
in_background "e30 test_gpu_decode" c_a.log 300 $E30 $PT tests/test_gpu_decode.py
in_background "e30 memcheck long merge" c_mc.log 300 $E30 $CS --tool memcheck $PT tests/test_gpu_decode.py -k long_merge
in_background "e25 test_gpu_decode" c_b.log 300 $E25 $PT tests/test_gpu_decode.py
in_background "e25 test_decode cuda" c_c.log 300 $E25 $PT tests/test_decode.py -k cuda
in_background "n bits" c_bn.log 200 $N python3 $ROOT/bench/calls/decode_bits.py $R/bits_n.npz
in_background "e30 bits" c_be.log 200 $E30 python3 $ROOT/bench/calls/decode_bits.py $R/bits_e30.npz
wait; t
grep -E 'ERROR SUMMARY' $R/c_mc.log | sort | uniq -c | head -2
python3 -c "
import numpy as np
a, b = np.load('$R/bits_n.npz'), np.load('$R/bits_e30.npz')
print('bits n vs e30:', {k: bool(np.array_equal(a[k], b[k])) for k in a.files})" 2>&1 | tail -2
collect c_
AB="env AB_WIDTH=100 AB_TIMEOUT=90 OUT=/tmp/abl tools/ab_bench.sh"
$AB 1 "decode --heads 8/1/128 --q-len 1 --kv bf16" n e30 e25:HPC_BENCH_DECODE_CHUNKS=2 \
  e25:HPC_BENCH_DECODE_CHUNKS=2,HPC_XLA_DECODE_TICKET_RESET=last > $R/c_ab1.txt 2>&1; t; cp $R/c_ab1.txt $OUT/
$AB 1 "decode --heads 8/1/128 --q-len 1 --kv fp8" n e30 e25:HPC_BENCH_DECODE_CHUNKS=2 > $R/c_ab2.txt 2>&1; t
cp $R/c_ab2.txt $OUT/
[ $(( $(date +%s) - S )) -lt 450 ] && { $AB 1 "decode --heads 8/1/128 --q-len 1 --kv bf16" n e30 \
  e25:HPC_BENCH_DECODE_CHUNKS=2 > $R/c_ab3.txt 2>&1; t; cp $R/c_ab3.txt $OUT/; }
for f in $R/c_ab*.txt; do [ -f $f ] && grep -a "│\|==" $f | cut -c1-66; done
