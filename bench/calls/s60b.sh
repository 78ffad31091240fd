#!/usr/bin/env bash
# session 60 call B (~3 min; the H200 is the card that matters -- #2's gap is an H200 gap; on an H100 it still gives
# the comparison). Carry .peer/pack (m59 = main). What bounds rope_norm's paired kernel at bf16 8/1 T=16384 now
# (78% of the copy ceiling on the H200, 89% on the H100; experiment 40's phased groups at 16 warps a SM since session
# 37, so session 9's ncu -- 74% L2 throughput, 0.97 eligible warps a scheduler, 5 blocks a SM -- predates it).
# Every 8/1 lever in bench/NOTES.md has been measured (experiment 89 last, session 60); this call measures before
# anything else is built. ncu of the kernel alone (cold caches), 8/1 and 64/8 bf16: speed of light, memory
# workload (L1 / L2 hit rates, L2 throughput against its peak), scheduler / warp state, occupancy, instructions;
# then the source page of 8/1 for the top stall lines.
# Reading it (written before the run): L2 throughput >= ~85% of peak on 8/1 with DRAM < 80% = the L2 is the co-limit
# (cos/sin and weight re-reads: cut the L2 requests per token); issue slots >= ~70% busy = instruction-bound (cut
# instructions per element); neither, with long_scoreboard on the row / position loads on top = latency with too
# few eligible warps (more warps at the same registers). 64/8 (95% of the ceiling) is the control.
. "$(dirname "$0")/prelude.sh"
unpack_packs
M=$X/${TREE:-m59}
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats"
SEC="$SEC --section Occupancy --section LaunchStats --section InstructionStats"
MET="--metrics smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,lts__t_sectors_srcunit_tex.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
for heads in 8,1,128 64,8,128; do
  f=$OUT/s60b_ncu_${heads//,/_}.txt
  ( cd $M && PYTHONPATH=$M timeout 100 ncu --clock-control none --cache-control all $SEC $MET \
      -k regex:RopeNorm -s 1 -c 1 python3 $ROOT/tools/profile_targets.py rope_norm --tokens 16384 \
      --heads $heads --variant bf16 --reps 2 > $f 2>&1; echo "$heads ncu rc=$?" ); t
  grep -E "^\s+(Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Hit Rate|L2 Hit Rate|Memory Throughput|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Active Warps Per Scheduler|Eligible Warps Per Scheduler|Achieved Occupancy|Registers Per Thread|Executed Instructions |smsp__inst_executed.sum|dram__bytes_read.sum|dram__bytes_write.sum|lts__t_bytes.sum|lts__t_sectors_srcunit_tex.sum|l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum)" $f | \
    awk '{$1=$1; print}' | tr '\n' ';' | cut -c1-900; echo
done
# 8/1's stall lines (source page, SASS): which instruction each stall sits behind
( cd $M && PYTHONPATH=$M timeout 120 ncu --clock-control none --section SourceCounters --section WarpStateStats \
    --page source --print-source sass --csv -k regex:RopeNorm -s 1 -c 1 python3 $ROOT/tools/profile_targets.py \
    rope_norm --tokens 16384 --heads 8,1,128 --variant bf16 --reps 2 > $R/src_8_1.csv 2>&1; echo "source ncu rc=$?" ); t
python3 $ROOT/tools/ncu_stalls.py $R/src_8_1.csv 25 | tee $OUT/s60b_stalls_8_1.txt
