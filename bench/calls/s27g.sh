#!/usr/bin/env bash
# session 27 optional call G (~5 min; carry .peer/exp/n): is the grouped GEMM's per-expert TMA descriptor update a
# stall? (NOTES "two leads", (1).) ncu of both grouped GEMMs (GroupedGemmEntry: gate-up with the activation epilogue,
# then down) at Qwen3 fp8 T=4096, L2 flushed: warp states and the source-level stall sampling. If the fence acquire /
# the descriptor copy shows up in the producer warp's top stalls while the consumers wait on the pipeline barrier
# (long stall_barrier / stall_wait at the consumer's pipeline wait at the start of each tile), a tile order that keeps
# a CTA on one expert is worth a custom scheduler; if the consumers never wait for the producer, it is not.
. "$(dirname "$0")/prelude.sh"
N=$PWD/.peer/exp/n
# Session 33: first the per-kernel times under graph replay at Qwen3 fp8 T=256 / 1024 / 4096 -- at T <= 1024 every
# expert holds one 64-row M tile, so a CTA changes expert (and TMA descriptors) on every tile of both GEMMs; if the
# down GEMM there sits well above its w2 bytes' time (201 MB), that is the second place a per-expert tile order
# would pay.
( cd $N && PYTHONPATH=$N HPC_BENCH_PEERS=0 HPC_PROFILE_MOE=qwen3-30b-a3b/fp8_tensor:256,qwen3-30b-a3b/fp8_tensor:1024,\
qwen3-30b-a3b/fp8_tensor:4096 timeout 150 python3 ../../../tools/profile_kernels.py moe > $OUT/profile_qwen3_fp8.txt 2>&1
  echo "profile rc=$?"; grep -E "==|after predecessor" $OUT/profile_qwen3_fp8.txt | cut -c1-150 | head -40 )
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section SourceCounters --section LaunchStats"
f=$OUT/ncu_grouped_qwen3_fp8_4096.txt
( cd $N && PYTHONPATH=$N timeout 240 ncu --clock-control none --cache-control all $SEC -k regex:GroupedGemmEntry -s 2 -c 2 \
    python3 ../../../tools/profile_targets.py moe --shape qwen3-30b-a3b/fp8_tensor --tokens 4096 --reps 2 > $f 2>&1; echo "ncu rc=$?" )
# L2 Cache / L1 throughput and Max Bandwidth: session 32's reading has both GEMMs pulling ~4.9 TB/s from L2 into the
# SMs (37 GB/s per SM on either GEMM) -- L2-bound if "L2 Cache Throughput" / "Max Bandwidth" sit near 90-100%.
grep -E "GroupedGemmEntry|Duration|Compute \(SM\) Throughput|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Memory Throughput|Max Bandwidth|L2 Hit Rate|Stall|Warp Cycles Per Issued|Issued Warp" $f | head -50
# Session 31 ran the lines above (section summaries only). The per-instruction stall table: the source page as CSV
# (SASS), one kernel at a time (-c 1: gate-up with -s 2, down with -s 3), then its 15 SASS lines with the most
# stall samples -- the descriptor fence / acquire (`FENCE.VIEW.ASYNC.T`, `UTMACCTL`, ...) or the consumers'
# pipeline waits (`SYNCS.PHASECHK`) near the top says where the time goes.
for k in "2 gateup" "3 down"; do
  set -- $k
  f=$OUT/ncu_src_$2.csv
  ( cd $N && PYTHONPATH=$N timeout 200 ncu --clock-control none --cache-control all --section SourceCounters \
      --section WarpStateStats --page source --print-source sass --csv -k regex:GroupedGemmEntry -s $1 -c 1 \
      python3 ../../../tools/profile_targets.py moe --shape qwen3-30b-a3b/fp8_tensor --tokens 4096 --reps 2 > $f 2>&1
    echo "ncu source $2 rc=$?" )
  python3 "$ROOT/tools/ncu_stalls.py" "$f" 15
done
