#!/usr/bin/env bash
# session 37 call B (~2 min; carry .peer/exp/e41): why experiment 41 ran 1.5x SLOWER than the two stream kernels
# (s37a, H100: Qwen3 fp8 T=1 22.4 -> 32.7 us, ~1.15 TB/s). ncu of the one kernel at Qwen3 fp8 T=1, cold L2: duration,
# DRAM / L2 throughput, warp states, then the SASS lines with the most stall samples. Expected readings: a CTA
# waiting on its ring (stall_long_scoreboard / barrier at the wait) with DRAM well below peak says the copies are
# not in flight (issue or ring depth); long grid-barrier waits (the ATOM / spin loop) say stage imbalance; time in
# the per-chunk index math or the wgmma wait says the iteration itself is the bound.
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e41
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy"
f=$OUT/ncu_one.txt
( cd $E && PYTHONPATH=$E HPC_XLA_MOE_ONE_KERNEL=1 timeout 150 ncu --clock-control none --cache-control all $SEC \
    -k regex:OneKernel -s 2 -c 1 python3 $ROOT/tools/profile_targets.py moe --shape qwen3-30b-a3b/fp8_tensor --tokens 1 \
    --reps 3 > $f 2>&1; echo "ncu rc=$?" )
grep -E "Duration|Compute \(SM\) Throughput|DRAM Throughput|L2 Cache Throughput|Memory Throughput|Stall|Warp Cycles Per Issued|Issued Warp|Registers|Grid Size|Block Limit|Achieved" $f | head -40
f=$OUT/ncu_one_src.csv
( cd $E && PYTHONPATH=$E HPC_XLA_MOE_ONE_KERNEL=1 timeout 150 ncu --clock-control none --cache-control all \
    --section SourceCounters --section WarpStateStats --page source --print-source sass --csv -k regex:OneKernel -s 2 \
    -c 1 python3 $ROOT/tools/profile_targets.py moe --shape qwen3-30b-a3b/fp8_tensor --tokens 1 --reps 3 > $f 2>&1
  echo "ncu source rc=$?" )
python3 "$ROOT/tools/ncu_stalls.py" "$f" 25
