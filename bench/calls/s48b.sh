#!/usr/bin/env bash
# session 48 call B (~5 min, any Hopper; carry .peer/pack with m48 = main since experiment 65 landed
# (tools/stage_experiments.sh m48 && tools/pack_staged.sh m48): where the q_len 2 plan's time goes after experiment 65.
# (1) the 8/1 bf16 suite (q_len 1 and 2), one round each: default | ALIGNED=0 (no aligned candidate) |
#     PIECE_COST=4 (no choice: session 43's plain planner) -- s47p's decomposition again, on the new kernel.
# (2) ncu of DecodePlanKernel alone (1x128K+31x4K, q_len 1 and 2): duration, and per-SASS stall samples.
# Written BEFORE the run (s48a, H100: plan us 3.0-3.3 at q_len 1, 6.4-8.0 at q_len 2): PIECE_COST=4 plan ~3.0 at
# q_len 2; ALIGNED=0 ~4.5-5 (the two-layout search ~1.5-2 us, the aligned candidate + its scan ~2-3 us). ncu duration
# at q_len 1 ~1.5-2 us (the rest of the 3 us is launch and PDL flush), q_len 2 ~5.
. "$(dirname "$0")/prelude.sh"
unpack_packs
E=$X/m48
env AB_WIDTH=150 AB_TIMEOUT=120 OUT=/tmp/abl tools/ab_bench.sh 1 "decode --heads 8/1/128 --kv bf16" \
  m48 m48:HPC_XLA_DECODE_ALIGNED=0 \
  m48:HPC_XLA_DECODE_PIECE_COST=4 > $R/b_ab.txt 2>&1; t
cp $R/b_ab.txt $OUT/
for q in 1 2; do
  (cd $E && PYTHONPATH=$E timeout 150 ncu --clock-control none -k regex:DecodePlanKernel \
    --launch-skip 2 --launch-count 1 --set full --warp-sampling-interval 0 --import-source no -f -o $R/ncu_q$q \
    python3 $ROOT/tools/profile_targets.py decode --heads 8,1,128 --workload 1x128K+31x4K --q-len $q --reps 4 \
    > $R/ncu_q$q.log 2>&1; echo "ncu q$q rc=$?")
  ncu -i $R/ncu_q$q.ncu-rep > $OUT/ncu_q$q.txt 2>&1
  ncu -i $R/ncu_q$q.ncu-rep --page source --csv --print-source sass > $OUT/sass_q$q.csv 2>&1; t
  grep -a "Duration\|Elapsed Cycles\|Registers Per\|Warp Cycles Per Issued" $OUT/ncu_q$q.txt | head -6
done
tail -3 $R/ncu_q1.log
grep -a "│\|==" $R/b_ab.txt | cut -c1-110
