#!/usr/bin/env bash
# session 49, the shortest form (~3 device minutes; carry .peer/pack as s49a): no tests, signal only -- the MoE T=1
# A/B of experiment 67 by its knob, then the decode 8/1 bf16 A/B m48 | e66c | e67 while the call's time lasts
# (tables to $OUT as they run). A version that shows a gain still needs s49a's tests before it lands.
. "$(dirname "$0")/prelude.sh"
X=$ROOT/.peer/exp; mkdir -p $X
for v in m48 e66c e67; do tar xJf .peer/pack/$v.tar.xz -C $X & done; wait; t
env AB_WIDTH=150 AB_TIMEOUT=60 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8/fp8_tensor --tokens 1" e67:HPC_XLA_CARVEOUT=0 e67 > $OUT/n_moe.txt 2>&1; t
grep -a "│\|==" $OUT/n_moe.txt | cut -c1-130
env AB_WIDTH=150 AB_TIMEOUT=90 OUT=/tmp/abl tools/ab_bench.sh 2 "decode --heads 8/1/128 --kv bf16" \
  m48 e66c e67 > $OUT/n_ab.txt 2>&1; t
grep -a "│\|==" $OUT/n_ab.txt | cut -c1-110
