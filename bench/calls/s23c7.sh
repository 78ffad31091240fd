#!/usr/bin/env bash
# session 23 optional call 7: why the tiled path's GEMMs stream weights at 3.3-3.65 TB/s at T=16 (session 19's
# profile: Qwen3 fp8 T=16 gate-up 252 MB in 69 us, down 126 MB in 38 us; DSv3-EP8 T=16 is 0.97x Triton) when a
# one-wave copy of the same bytes reaches ~4.1. ncu on main's binary, each GEMM kernel alone with L2 flushed:
# DRAM throughput, achieved occupancy, bytes in flight (L1/L2 sectors, long-scoreboard stalls), the tail (SM active
# cycles vs elapsed). If DRAM sits near 4 TB/s inside the kernel, the loss is ramp / tail / the handover between
# kernels (a scheduling question); if not, it is the per-CTA pipeline (stages, K split) -- a kernel question.
. "$(dirname "$0")/prelude.sh"
W=$PWD/.peer/exp/m
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats --section SchedulerStats"
for shape in qwen3-30b-a3b/fp8_tensor dsv3-ep8/fp8_block128 mixtral-8x7b/bf16; do
  f=$OUT/ncu_gemm_${shape%%/*}.txt
  ( cd $W && PYTHONPATH=$W timeout 170 ncu --clock-control none --cache-control all $SEC -k regex:MoeGemmKernel -s 2 -c 2 \
      python3 ../../../tools/profile_targets.py moe --shape $shape --tokens 16 --reps 3 > $f 2>&1; echo "$shape rc=$?" )
  grep -E "MoeGemmKernel|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Grid Size|Waves Per SM|Eligible Warps|No Eligible" $f | head -24
done
