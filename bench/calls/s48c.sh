#!/usr/bin/env bash
# session 48 call C (~2 min, any Hopper; carry .peer/pack with m48 = main): s48b cut to what ~290 s of device budget
# holds -- ncu of DecodePlanKernel alone (8/1 bf16 1x128K+31x4K, q_len 2 then 1): duration and per-SASS stall samples.
# Written BEFORE the run (s48a, H100: plan us 3.0-3.3 at q_len 1, 6.4-8.0 at q_len 2, 8 plans back to back in a
# graph): ncu duration at q_len 1 ~1.5-2 us (the rest is launch and the PDL flush), q_len 2 ~5 -- the choice's phases.
. "$(dirname "$0")/prelude.sh"
unpack_packs
E=$X/m48
for q in 2 1; do
  (cd $E && PYTHONPATH=$E timeout 70 ncu --clock-control none -k regex:DecodePlanKernel \
    --launch-skip 2 --launch-count 1 --set full --warp-sampling-interval 0 --import-source no -f -o $R/ncu_q$q \
    python3 $ROOT/tools/profile_targets.py decode --heads 8,1,128 --workload 1x128K+31x4K --q-len $q --reps 4 \
    > $R/ncu_q$q.log 2>&1; echo "ncu q$q rc=$?")
  ncu -i $R/ncu_q$q.ncu-rep > $OUT/ncu_q$q.txt 2>&1
  ncu -i $R/ncu_q$q.ncu-rep --page source --csv --print-source sass > $OUT/sass_q$q.csv 2>&1; t
  grep -a "Duration\|Elapsed Cycles\|Warp Cycles Per Issued" $OUT/ncu_q$q.txt | head -4
done
tail -3 $R/ncu_q2.log
