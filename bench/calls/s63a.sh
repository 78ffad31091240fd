#!/usr/bin/env bash
# session 63 call A (~7 min on an H100, ~9.5 on an H200; any Hopper). Carry .peer/pack: m62 = main after session
# 62, e93 = 4f7a56c, e94 = 8291bcb (e93 + k/v token pairs, 94b); m59 / e90c (main before 91, and 90c) for an H200 from a
# worktree at 5062a1b:
#   git worktree add /tmp/w59 5062a1b && (cd /tmp/w59 && tools/stage_experiments.sh m59 e90c:5d05fcd) &&
#   mkdir -p .peer/exp && mv /tmp/w59/.peer/exp/m59 /tmp/w59/.peer/exp/e90c .peer/exp/ &&
#   tools/stage_experiments.sh m62 e93:4f7a56c e94:8291bcb && tools/pack_staged.sh m62 e93 e94 m59 e90c
# Why (#2): s62b (SHORT, H100) timed experiment 93 (= 92's early row loads + the late coefficients) at fp8 rows
# -1.6..-3.2%, bf16 8/1 -1.3%, no row slower, against main with 91; its numerics (4 / 2 / 1 rows) passed and memcheck
# was clean, but the rope GPU file did not finish inside the call's limit. Experiment 94 (on top of 93, CPU only so
# far): with one kv head at 4 rows a k/v lane group holds two tokens' k and v rows -- at 8/1 the merged k/v groups
# filled 2 of their 4 rows yet were a third of the warps, each paying a whole group's fixed costs; now 40960 groups
# instead of 49152 at T=16384. This call runs both GPU files first, times m62 / e93 / e94, and on an H200 measures
# what #2 needs: the 8/1 bench of record (% of the copy ceiling) from the fastest build, e90c against m59 (s61b's
# question), and s60b's ncu.
# Predicted (written before the run), T=16384: e93 against m62 as in s62b on an H100 (bf16 8/1 -1..-2%, fp8 rows
# -2..-3%); e94 against e93: 8/1 bf16 -1..-4% on an H100 (near its bytes' pace there), fp8 8/1 -4..-9%, 64/8 and
# 32/4 +-1% (no pairs: Hkv > 1), T=1024 8/1 +-3%. H200: e93 bf16 8/1 -2..-5% against m62, e94 a further -4..-10%
# (m62 ~28 us, 80% of a ~4.16 TB/s ceiling is 27.8).
# Land rules (written before this run): e93 lands if its rope GPU file passes and no row is above 1.01x m62 in both
# rounds (bench/NOTES.md session 62). e94 lands on top of it if its rope GPU file passes (test_kv_token_pairs
# included), memcheck finds 0 errors, no row is above 1.01x e93 in both rounds and an 8/1 row is <= 0.98x e93 in both
# rounds. e90c: s61b's rule, on an H200 only.
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
# the GPU files first, both builds side by side (~100 s), then e94's memcheck of the pair cases with the others
in_background "e93 rope GPU file" rope_tests_e93.log 250 $X/e93 python3 -m pytest -q -p no:cacheprovider -rf \
  tests/test_gpu_rope_norm.py
in_background "e94 rope GPU file" rope_tests_e94.log 250 $X/e94 python3 -m pytest -q -p no:cacheprovider -rf \
  tests/test_gpu_rope_norm.py
in_background "e94 rope numerics rows=4" rope_numerics_e94.log 200 $X/e94 env HPC_XLA_ROPE_ROWS=4 python3 -m pytest \
  -q -p no:cacheprovider -rf tests/test_rope_norm.py -k cuda
in_background "e94 memcheck" rope_memcheck_e94.log 250 $X/e94 compute-sanitizer --target-processes all \
  --error-exitcode 99 --tool memcheck python3 -m pytest -q -p no:cacheprovider tests/test_gpu_rope_norm.py \
  -k "kv_token_pairs or every_rows or bad_indices"
wait; t
grep -hE "^FAILED|^E  |ERROR SUMMARY" $R/rope_*.log | sort | uniq -c | head -20 | tee $OUT/s63a_tests.txt
for f in $R/rope_*.log; do echo "### $f"; tail -25 "$f"; done >> $OUT/s63a_tests.txt
ab m62_r1 m62; ab e93_r1 e93; ab e94_r1 e94
[ $H200 = 1 ] && { ab m59_r1 m59; ab c_r1 e90c; ab c_r2 e90c; ab m59_r2 m59; }
ab e94_r2 e94; ab e93_r2 e93; ab m62_r2 m62
if [ $H200 = 1 ]; then
  for tree in m62 e94; do  # the 8/1 bench of record (copy ceiling, same-bytes copy, unfused peer)
    ( cd $X/$tree && PYTHONPATH=$X/$tree timeout 100 python3 -m hpc_xla.bench rope_norm --heads 8/1/128 \
        --out $OUT/rope_norm_$tree.json > $R/rope_bench_$tree.txt 2>&1; echo "rope bench $tree rc=$?" ); t
    grep -a "│" $R/rope_bench_$tree.txt | grep 16384 | sed "s/^/$tree /" | tee -a $OUT/s63a_rope.txt
  done
  SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section Occupancy"
  for tree in m62 e94; do
    ( cd $X/$tree && PYTHONPATH=$X/$tree timeout 60 ncu --clock-control none --cache-control all $SEC \
        --metrics dram__bytes_read.sum,lts__t_bytes.sum,smsp__inst_executed.sum,breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed \
        -k regex:RopeNorm -s 1 -c 1 python3 $ROOT/tools/profile_targets.py rope_norm --tokens 16384 --heads 8,1,128 \
        --variant bf16 --reps 2 > $R/ncu_$tree.txt 2>&1 )
    echo "$tree: $(grep -E "^\s+(Duration|DRAM Throughput|L2 Cache Throughput|Registers Per Thread|Achieved Occupancy|Eligible Warps Per Scheduler|Active Warps Per Scheduler|Issued Warp Per Scheduler|lts__|dram__bytes|smsp__inst)" \
      $R/ncu_$tree.txt | awk '{$1=$1; print}' | tr '\n' ';')" | tee -a $OUT/s63a_ncu.txt; t
  done
fi
head -12 $OUT/s63a_tests.txt; cat $OUT/s63a_ab.txt
