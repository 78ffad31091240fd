#!/usr/bin/env bash
# session 33 call C (~5 min; carry .peer/exp/n, .peer/exp/e33): experiment 33's second look -- call A saw
# n2 take Mixtral bf16 T=4096 5005 -> 4584 us (one round) and Hy3-TP8 T=16384 -3%, Qwen3 fp8 T=4096 unchanged.
# Mixtral bf16/fp8 and the T=16384 rows, n vs n2 vs m2, 2 rounds.
. "$(dirname "$0")/prelude.sh"
env AB_WIDTH=100 AB_TIMEOUT=140 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes mixtral-8x7b --tokens 1024,4096,16384" n e33:HPC_XLA_MOE_GEMM_CLUSTER=n2 \
  e33:HPC_XLA_MOE_GEMM_CLUSTER=m2 > $R/c_ab.txt 2>&1; t
cp $R/c_ab.txt $OUT/; grep -a "│\|==" $R/c_ab.txt | cut -c1-90
