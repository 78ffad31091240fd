#!/usr/bin/env bash
# session 42 call F (~3 min; carry .peer/exp/m7 = main with experiment 51): ncu source pages (SASS lines with
# stall samples) of the 8/1/128 bf16 decode kernel at q_len 1 and 2 (1x128K+31x4K), brought back whole to read
# here: the trace with 51 (s42d) still shows FinishPiece at 7315 cycles a piece at q_len 2 vs 2389 at q_len 1.
# Written BEFORE the run: the extra sits in FinishPiece's lines as barrier + no_instruction (cold code) stalls.
. "$(dirname "$0")/prelude.sh"
M=$PWD/.peer/exp/m7
for q in 1 2; do
  ( cd $M && PYTHONPATH=$M timeout 150 ncu --clock-control none --cache-control all --section SourceCounters \
      --section WarpStateStats --page source --print-source sass --csv -k regex:DecodeAttentionKernel -s 2 -c 1 \
      python3 $ROOT/tools/profile_targets.py decode --heads 8,1,128 --workload 1x128K+31x4K --q-len $q --reps 3 \
      > $R/ncu_q$q.csv 2>&1; echo "ncu q$q rc=$?" ); t
  python3 "$ROOT/tools/ncu_stalls.py" $R/ncu_q$q.csv 8 | cut -c1-120
done
tar czf $OUT/s42f_ncu.tgz -C $R ncu_q1.csv ncu_q2.csv
