#!/usr/bin/env bash
# session 61 call B (~3.5 min, H200 ONLY -- exits at once on anything else; not run in session 61: five refused
# starts, two H100s). Carry .peer/pack (m59 = main, e90c = 5d05fcd: `tools/stage_experiments.sh m59 e90c:5d05fcd &&
# tools/pack_staged.sh m59 e90c`). e90c is 90b (3f95f08, which s61a measured) with the fp8 q kernels left exactly as
# main's (the same SASS, checked): only the bf16 / fp16 q 4-row kernels change.
# Why: s61a refuted experiment 90b (5 blocks a SM for the 4-row rope_norm kernel, +24% resident warps for +7.6%
# instructions) on an H100, but an H100 cannot show a concurrency gain there: main runs at 89% of its copy ceiling,
# about what a copy of the same bytes reaches, so only the re-unpack's instructions could show (+1.7..7%). #2's miss
# is the H200's (78%), where the same kernel leaves ~20% of the ceiling and s60b's reading (latency, 0.76 eligible
# warps a scheduler, 36.5% of the stalls on the row loads) would pay for more warps. The same call also takes s60b's
# ncu of main on the H200 with ncu's L2 breakdown (s61c on the H100: the L2 figure is the fabric between the two L2
# partitions, 75.5% at 33 us for us, 83.1% for a copy of the same bytes -- is it a co-limit on the H200?).
# Predicted (written before the run), H200, T=16384: e90c bf16 8/1 -2..-6% against m59 (28.7 -> 27.0-28.1 us),
# 64/8 and 32/4 -3..+2%, fp8 rows +-1% (main's kernels there; the fp8 cache + bf16 q kernels are not timed). ncu of m59 8/1: L2
# throughput 85-92%, DRAM 70-80%, eligible warps 0.6-0.8 a scheduler.
# Land rule: e90c lands for bf16 / fp16 q only if bf16 8/1 <= 0.97x m59 in both rounds and no bf16 row above 1.01x in
# both rounds (the launch would have to choose the build by card,
# since the H100 measured it slower: that choice is then written with the numbers of both cards). Landing also means:
# RowsPerGroup's two-wave rule (rope_norm.cu) takes kPairedMinBlocks<4, fp8_q> -- in 90c it reads 5 for every
# variant, so fp8 q batches of 4224-5279 tokens at 8/1 would drop to 1 row (not timed here: T is 16384).
. "$(dirname "$0")/prelude.sh"
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then echo "not an H200: nothing run"; exit 0; fi
unpack_packs
M=$X/m59 B=$X/e90c
ab() {
  local label=$1 d=$2
  (cd $d && PYTHONPATH=$d:$d/tests timeout 100 python3 $ROOT/tools/ab_time.py --heads 8/1/128,64/8/128,32/4/128 \
    --variants bf16,fp8 > $R/ab_$label.txt 2>&1)
  echo "$label: $(tail -n1 $R/ab_$label.txt)" | tee -a $OUT/s61b_ab.txt; t
}
ab m_r1 $M; ab b_r1 $B; ab b_r2 $B; ab m_r2 $M
SHORT=${SHORT:-0}  # SHORT=1 (~1.5 min, for a small budget): the A/B and main's ncu only
# ncu, kernel alone, cold caches, 8/1 bf16: main and e90c (the s60b sections, no source page; with ncu's breakdown of
# the L2 throughput figure into its units -- the partition fabric among them)
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section Occupancy"
TREES="m59 e90c"; [ $SHORT = 1 ] && TREES=m59
for tree in $TREES; do
  ( cd $X/$tree && PYTHONPATH=$X/$tree timeout 60 ncu --clock-control none --cache-control all $SEC \
      --metrics dram__bytes_read.sum,lts__t_bytes.sum,smsp__inst_executed.sum,breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed \
      -k regex:RopeNorm -s 1 -c 1 python3 $ROOT/tools/profile_targets.py rope_norm --tokens 16384 --heads 8,1,128 \
      --variant bf16 --reps 2 > $R/ncu_$tree.txt 2>&1 )
  echo "$tree: $(grep -E "^\s+(Duration|DRAM Throughput|L2 Cache Throughput|Registers Per Thread|Achieved Occupancy|Eligible Warps Per Scheduler|Active Warps Per Scheduler|Issued Warp Per Scheduler|lts__|dram__bytes|smsp__inst)" \
    $R/ncu_$tree.txt | awk '{$1=$1; print}' | tr '\n' ';')" | tee -a $OUT/s61b_ncu.txt; t
done
[ $SHORT = 1 ] && { cat $OUT/s61b_ab.txt; exit 0; }
# the rope bench of record (8/1, every T, copy ceiling, unfused peer) from the build that wins 8/1 in round 2
W=$M; [ "$(tail -n1 $R/ab_b_r2.txt | awk '{print $3}')" \< "$(tail -n1 $R/ab_m_r2.txt | awk '{print $3}')" ] && W=$B
( cd $W && PYTHONPATH=$W timeout 100 python3 -m hpc_xla.bench rope_norm --heads 8/1/128 > $OUT/s61b_rope_bench.txt 2>&1
  echo "rope bench ($(basename $W)) rc=$?" ); t
grep -a "│" $OUT/s61b_rope_bench.txt | cut -c1-140
cat $OUT/s61b_ab.txt
