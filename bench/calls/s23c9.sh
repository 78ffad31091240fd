#!/usr/bin/env bash
# session 23 call 9 (main's binary, no kernel change): how much of the T >= 4096 GEMM time is partly filled tiles?
# The same binary with the bench's routing random (default) vs balanced (HPC_BENCH_MOE_ROUTING=balanced: every
# expert T*k/E pairs). bench/research/moe_grouped_gemm_1000tf.md estimates 80% useful MMA work for Qwen3 T=4096 and
# 50% for Hy3-TP8 (T=3072 balanced = exactly one 128-row tile per expert); the difference bounds what skipping
# all-padding half tiles or a better tile shape can win before anyone writes that kernel.
. "$(dirname "$0")/prelude.sh"
AB="env AB_WIDTH=110 AB_TIMEOUT=200 OUT=/tmp/abl tools/ab_bench.sh"
$AB 2 "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8,mixtral-8x7b/fp8_tensor --tokens 3072,4096,16384" m m:HPC_BENCH_MOE_ROUTING=balanced > $R/ab.txt; t
cp $R/ab.txt $OUT/ab_routing.txt; cat $R/ab.txt | cut -c1-110
