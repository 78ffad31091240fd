#!/usr/bin/env bash
# session 33 call E (~5 min; carry .peer/exp/n, .peer/exp/e34, .peer/exp/e35): the A/B of experiments 34 and 35
# (see s33d.sh), 2 rounds: n | e34 | e34 with HPC_XLA_MOE_GEMM_CLUSTER=1 (no pairs anywhere: experiment 33's gain on
# this card) | e35 | e35 with HPC_XLA_MOE_TILE_ORDER=strided (its control: must equal n). Predicted: e34 DSv3-EP8 T=4096 -1..4%, T=16384 -1..3% (refuted if both < 1%); e35 Qwen3 fp8
# T=4096 -5..20 us, T=1024 -3..10, Hy3-TP8 T=4096 -5..15 (refuted if no Qwen3 / Hy3 row gains > 1%).
. "$(dirname "$0")/prelude.sh"
env AB_WIDTH=100 AB_TIMEOUT=240 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8,dsv3-ep8 --tokens 1024,4096,16384" n e34 \
  e34:HPC_XLA_MOE_GEMM_CLUSTER=1 e35 e35:HPC_XLA_MOE_TILE_ORDER=strided > $R/d_ab.txt 2>&1; t
cp $R/d_ab.txt $OUT/; grep -a "│\|==" $R/d_ab.txt | cut -c1-90
