#!/usr/bin/env bash
# session 27 optional call G (~3 min; carry .peer/exp/n): is the grouped GEMM's per-expert TMA descriptor update a
# stall? (NOTES "two leads", (1).) ncu of both grouped GEMMs (GroupedGemmEntry: gate-up with the activation epilogue,
# then down) at Qwen3 fp8 T=4096, L2 flushed: warp states and the source-level stall sampling. If the fence acquire /
# the descriptor copy shows up in the producer warp's top stalls while the consumers wait on the pipeline barrier
# (long stall_barrier / stall_wait at the consumer's pipeline wait at the start of each tile), a tile order that keeps
# a CTA on one expert is worth a custom scheduler; if the consumers never wait for the producer, it is not.
. "$(dirname "$0")/prelude.sh"
N=$PWD/.peer/exp/n
SEC="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters --section LaunchStats"
f=$OUT/ncu_grouped_qwen3_fp8_4096.txt
( cd $N && PYTHONPATH=$N timeout 240 ncu --clock-control none --cache-control all $SEC -k regex:GroupedGemmEntry -s 2 -c 2 \
    python3 ../../../tools/profile_targets.py moe --shape qwen3-30b-a3b/fp8_tensor --tokens 4096 --reps 2 > $f 2>&1; echo "ncu rc=$?" )
grep -E "GroupedGemmEntry|Duration|Compute \(SM\) Throughput|DRAM Throughput|Stall|Warp Cycles Per Issued|Issued Warp" $f | head -40
