#!/usr/bin/env bash
# session 29 call C (~3 min; carry .peer/exp/n): is decode's fp8 KV path conversion-bound? (#3 wants fp8 >= 1.7x our
# bf16 on the large mixes and 1x128K+31x4K <= 20 us; measured 1.2-1.4x and ~32 us. Session 25's timeline put the fp8
# CTAs' stream phase at ~3.4-4 TB/s against bf16's ~4.5.) ncu of the attention kernel alone, 8/1/128 q_len 1, bf16 vs
# fp8 KV, 64x4K and 1x128K+31x4K: DRAM throughput, issue slots busy, pipe utilization (ALU / FMA / the conversion
# and tensor pipes), instructions executed, stall reasons. Reading it: fp8 with issue slots or a conversion pipe near
# its peak while DRAM idles = conversion-bound -> a wgmma form reading e4m3 from shared memory (needs fp8 q and a V
# transpose in shared memory) is the lever; fp8 with DRAM ~ bf16's % and idle pipes = the fixed costs (start, tail,
# combine) are all that is left, as for bf16.
. "$(dirname "$0")/prelude.sh"
N=$PWD/.peer/exp/n
SEC="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats"
MET="--metrics smsp__inst_executed.sum,dram__bytes_read.sum"  # the pipes: ComputeWorkloadAnalysis's body (--print-details all)
for workload in 64x4K 1x128K+31x4K; do
  for variant in bf16 fp8; do
    f=$OUT/ncu_decode_${variant}_${workload//+/_}.txt
    ( cd $N && PYTHONPATH=$N timeout 100 ncu --clock-control none --cache-control all --print-details all $SEC $MET \
        -k regex:DecodeAttentionKernel -s 2 -c 1 python3 ../../../tools/profile_targets.py decode --heads 8,1,128 \
        --variant $variant --workload $workload --reps 3 > $f 2>&1; echo "$workload $variant ncu rc=$?" )
    grep -iE "^\s+(Duration|DRAM Throughput|Issue Slots Busy|Issued Warp Per Scheduler|No Eligible|Eligible Warps Per Scheduler|smsp__inst_executed.sum|dram__bytes_read.sum|(ALU|FMA|FP16|Tensor|XU|Uniform).*%)" $f | \
      awk '{$1=$1; print}' | tr '\n' ';' | cut -c1-500; echo
  done
done
t
