#!/usr/bin/env bash
# session 25 call D (optional, ~3 min): experiment 21 (f86d5e7, .peer/exp/e21 = main at bb5b7cb + 21): rope_norm's
# 4-row fp8-q kernels at 4 blocks/SM without spills, against main's binary (.peer/exp/m, restaged in session 26: its rope_norm kernels are the same). The GPU rope_norm
# tests on e21 first, then T=16384 both variants (bf16 is the control: its kernels did not change), 2 rounds.
. "$(dirname "$0")/prelude.sh"
W=$PWD/.peer/exp/e21
( cd $W && PYTHONPATH=$W:$W/tests timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_rope_norm.py tests/test_rope_norm.py > $R/d_t.log 2>&1; echo "e21 rope tests rc=$?: $(tail -n1 $R/d_t.log)" )
grep -E "^FAILED|^E  " $R/d_t.log | head -10; t
env AB_WIDTH=120 AB_TIMEOUT=120 OUT=/tmp/abl tools/ab_bench.sh 2 "rope_norm --tokens 16384" m e21 > $R/d_ab.txt 2>&1; t
cp $R/d_ab.txt $R/d_t.log $OUT/; cut -c1-120 $R/d_ab.txt
