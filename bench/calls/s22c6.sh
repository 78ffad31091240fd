#!/usr/bin/env bash
# session 22 optional call 6 (if device time is left): why the grouped path's reduce runs at ~2x its bytes' floor
# (Qwen3 fp8 T=4096 ~65 us for ~151 MB, Hy3-TP8 ~110 us for ~300 MB; experiment 9's prefetching did not close it).
# ncu on main's binary, the reduce kernel alone: with L2 flushed (isolated) and without (the down GEMM's dirty lines
# still in L2, as in the layer). If the isolated kernel runs near the floor, the loss is the interaction with the
# down GEMM (its tail / L2 write-backs), not the reduce's own access pattern.
. "$(dirname "$0")/prelude.sh"
W=$PWD/.peer/exp/m
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats"
for shape in qwen3-30b-a3b/fp8_tensor hy3-tp8/fp8_tensor; do
  for cc in all none; do
    f=$OUT/ncu_reduce_${shape%%/*}_$cc.txt
    ( cd $W && PYTHONPATH=$W timeout 140 ncu --clock-control none --cache-control $cc $SEC -k regex:MoeReduce -s 2 -c 1 \
        python3 ../../../tools/profile_targets.py moe --shape $shape --tokens 4096 --reps 3 > $f 2>&1; echo "$shape cache=$cc rc=$?" )
    grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Block Limit|L2 Hit|Eligible Warps|Issued Warp" $f | head -14
  done
done
