#!/usr/bin/env bash
# session 29 call B (~2 min; carry .peer/exp/n; e29 landed in session 31, so only n): what bounds rope_norm's 8/1 rows at T=16384 on the H200
# (bf16 76% of the copy ceiling, 80% needed; fp8 53%, slower than bf16 for fewer bytes, while the H100 gave 88-89% /
# 66-68%). ncu of the rope kernel, 8/1/128 and 64/8/128, bf16 and fp8, on n (main) and e29 (experiment 29): DRAM throughput,
# issue slots busy, warps per scheduler and eligible, stall reasons, instructions executed, achieved occupancy.
# Reading it: DRAM < ~80% with issue slots > ~70% busy = instruction-bound (cut instructions per row); issue slots
# low with long_scoreboard / lg_throttle stalls on top = too few bytes in flight (more rows per thread or bulk copies);
# the fp8 rows' instructions (e29 vs n) say what experiment 29 removed.
. "$(dirname "$0")/prelude.sh"
SEC="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats"
MET="--metrics smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_write.sum"
for v in n; do
  for heads in 8,1,128 64,8,128; do
    for variant in bf16 fp8; do
      f=$OUT/ncu_rope_${v}_${heads//,/_}_${variant}.txt
      ( cd $PWD/.peer/exp/$v && PYTHONPATH=$PWD timeout 100 ncu --clock-control none --cache-control all $SEC $MET \
          -k regex:RopeNorm -s 1 -c 1 python3 ../../../tools/profile_targets.py rope_norm --tokens 16384 \
          --heads $heads --variant $variant --reps 2 > $f 2>&1; echo "$v $heads $variant ncu rc=$?" )
      grep -E "^\s+(Duration|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Issued Warp Per Scheduler|No Eligible|Active Warps Per Scheduler|Eligible Warps Per Scheduler|Achieved Occupancy|Registers Per Thread|smsp__inst_executed.sum|dram__bytes_read.sum|dram__bytes_write.sum)" $f | \
        awk '{$1=$1; print}' | tr '\n' ';' | cut -c1-400; echo
    done
  done
done
t
