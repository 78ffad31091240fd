#!/usr/bin/env bash
# session 46 call D (~2 min; carry .peer/pack m46 e63): why experiment 63 (the fused single-token down) lost +6.8 us on
# Qwen3 fp8 T=1 (s46b, H100: 21.7 -> 28.5). Per-kernel durations under graph replay (tools/profile_kernels.py moe)
# fused and =0, then ncu of the fused gate-up kernel alone (cold L2): duration, DRAM / L2 / L1 throughput, warp
# states. Written BEFORE: the fused gate-up kernel takes most of the loss (its w2 pieces, 32 bytes per 768-byte row,
# read at low DRAM efficiency and through the same L1 / LSU queues as the w13 copies), the sum kernel ~1-2 us.
. "$(dirname "$0")/prelude.sh"
unpack_packs
E=$X/e63
for v in 1 0; do
  ( cd $E && PYTHONPATH=$E HPC_XLA_MOE_FUSED_DOWN=$v HPC_BENCH_PEERS=0 \
      HPC_PROFILE_MOE=qwen3-30b-a3b/fp8_tensor:1,hy3-tp8/fp8_tensor:1 timeout 120 python3 $ROOT/tools/profile_kernels.py moe \
      > $OUT/prof_fused$v.txt 2>&1; echo "profile fused=$v rc=$?" ); t
  grep -v "^ *$" $OUT/prof_fused$v.txt | tail -14 | cut -c1-150
done
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats"
f=$OUT/ncu_fused.txt
( cd $E && PYTHONPATH=$E timeout 150 ncu --clock-control none --cache-control all $SEC \
    -k regex:GateUpWgmma -s 2 -c 1 python3 $ROOT/tools/profile_targets.py moe --shape qwen3-30b-a3b/fp8_tensor --tokens 1 \
    --reps 3 > $f 2>&1; echo "ncu rc=$?" ); t
grep -E "Duration|Compute \(SM\) Throughput|DRAM Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|Memory Throughput|Warp Cycles Per Issued|Issued Warp|Stall" $f | head -30
# main's new oracle check (82208a8: nearest of the oracle and its +-2e-4 inter nudges) on m46's kernels: the random
# problems test, session 46's two midpoint draws included
cp hpc_xla/*.py $X/m46/hpc_xla/ && cp tests/*.py $X/m46/tests/
( cd $X/m46 && PYTHONPATH=$X/m46:$X/m46/tests timeout 200 python3 -m pytest -q -p no:cacheprovider \
    tests/test_gpu_fused_moe.py -k "random_problems or vs_oracle" > $R/d_rand.log 2>&1; echo "random problems rc=$?: $(tail -n1 $R/d_rand.log)" )
grep -E "^E  |Falsifying|^FAILED" $R/d_rand.log | head
