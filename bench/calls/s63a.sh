#!/usr/bin/env bash
# session 63 call A (~4 min on an H100, ~6.5 on an H200; any Hopper). Carry .peer/pack: m62 = main after session 62,
# e93 = 4f7a56c; m59 / e90c (main before 91, and 90c) from a worktree at 5062a1b:
#   git worktree add /tmp/w59 5062a1b && (cd /tmp/w59 && tools/stage_experiments.sh m59 e90c:5d05fcd) &&
#   mkdir -p .peer/exp && mv /tmp/w59/.peer/exp/m59 /tmp/w59/.peer/exp/e90c .peer/exp/ &&
#   tools/stage_experiments.sh m62 e93:4f7a56c && tools/pack_staged.sh m62 e93 m59 e90c
# Why (#2): s62b (SHORT, H100) timed experiment 93 (= 92's early row loads + the late coefficients) at fp8 rows
# -1.6..-3.2%, bf16 8/1 -1.3%, no row slower, against main with 91; its numerics (4 / 2 / 1 rows) passed and memcheck
# was clean, but the rope GPU file did not finish inside the call's limit. This call runs that file first, times
# e93 against main again, and on an H200 measures what #2 needs: the 8/1 bench of record (% of the copy ceiling) from
# main and from e93, e90c against m59 (s61b's question), and s60b's ncu.
# Predicted (written before the run): e93 against m62 on an H100 as in s62b (bf16 8/1 -1..-2%, fp8 rows -2..-3%);
# on an H200 bf16 8/1 -2..-5% (main 91 included: 28.7 -> 26.8-28.0 us, 80-83% of the ceiling if the ceiling reads
# ~4.16 TB/s as in s59a).
# Land rule (bench/NOTES.md session 62, written before this run): e93 lands if the rope GPU file passes on it and no
# row is above 1.01x main in both rounds. e90c: s61b's rule, on an H200 only.
. "$(dirname "$0")/prelude.sh"
unpack_packs
H200=0; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && H200=1
ab() {
  local label=$1 d=$X/$2
  (cd $d && PYTHONPATH=$d:$d/tests timeout 100 python3 $ROOT/tools/ab_time.py --heads 8/1/128,64/8/128,32/4/128 \
    --variants bf16,fp8 > $R/ab_$label.txt 2>&1
   PYTHONPATH=$d:$d/tests timeout 60 python3 $ROOT/tools/ab_time.py --heads 8/1/128 --tokens 1024 \
    --variants bf16,fp8 > $R/ab1k_$label.txt 2>&1)
  echo "$label: $(tail -n1 $R/ab_$label.txt) || T=1024: $(tail -n1 $R/ab1k_$label.txt)" | tee -a $OUT/s63a_ab.txt; t
}
E=$X/e93
# the file s62b could not finish, alone on the GPU first (~90 s)
( cd $E && PYTHONPATH=$E:$E/tests timeout 200 python3 -m pytest -q -p no:cacheprovider -rf tests/test_gpu_rope_norm.py \
    > $R/rope_tests.log 2>&1; echo "e93 rope GPU file rc=$?: $(tail -n1 $R/rope_tests.log)" | tee $OUT/s63a_tests.txt ); t
grep -hE "^FAILED|^E  " $R/rope_tests.log | head -10 | tee -a $OUT/s63a_tests.txt
ab m62_r1 m62; ab e93_r1 e93
[ $H200 = 1 ] && { ab m59_r1 m59; ab c_r1 e90c; ab c_r2 e90c; ab m59_r2 m59; }
ab e93_r2 e93; ab m62_r2 m62
if [ $H200 = 1 ]; then
  for tree in m62 e93; do  # the 8/1 bench of record (copy ceiling, same-bytes copy, unfused peer), both builds
    ( cd $X/$tree && PYTHONPATH=$X/$tree timeout 100 python3 -m hpc_xla.bench rope_norm --heads 8/1/128 \
        --out $OUT/rope_norm_$tree.json > $R/rope_bench_$tree.txt 2>&1; echo "rope bench $tree rc=$?" ); t
    grep -a "│" $R/rope_bench_$tree.txt | grep 16384 | sed "s/^/$tree /" | tee -a $OUT/s63a_rope.txt
  done
  SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section Occupancy"
  for tree in m62 e93; do
    ( cd $X/$tree && PYTHONPATH=$X/$tree timeout 60 ncu --clock-control none --cache-control all $SEC \
        --metrics dram__bytes_read.sum,lts__t_bytes.sum,smsp__inst_executed.sum,breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed \
        -k regex:RopeNorm -s 1 -c 1 python3 $ROOT/tools/profile_targets.py rope_norm --tokens 16384 --heads 8,1,128 \
        --variant bf16 --reps 2 > $R/ncu_$tree.txt 2>&1 )
    echo "$tree: $(grep -E "^\s+(Duration|DRAM Throughput|L2 Cache Throughput|Registers Per Thread|Achieved Occupancy|Eligible Warps Per Scheduler|Active Warps Per Scheduler|Issued Warp Per Scheduler|lts__|dram__bytes|smsp__inst)" \
      $R/ncu_$tree.txt | awk '{$1=$1; print}' | tr '\n' ';')" | tee -a $OUT/s63a_ncu.txt; t
  done
fi
cat $OUT/s63a_tests.txt $OUT/s63a_ab.txt
