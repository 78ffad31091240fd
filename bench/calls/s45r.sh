#!/usr/bin/env bash
# session 45 call R (~1.5 min; only worth it on an H200: issue #2's target is an H200 number; carry .peer/pack as s44d).
# rope_norm's suite on main (m46b = main; no rope_norm kernel change since the s38b record) twice, for #2's 8/1 row.
# Written BEFORE the run (session 45): bf16 8/1 T=16384 28.5-29.5 us = 75-78% of the copy ceiling (s38b: 77%);
# on an H100 ~89% (sessions 25-44).
. "$(dirname "$0")/prelude.sh"
unpack_packs
M=$X/${TREE:-m46b}
for round in 1 2; do
  ( cd $M && PYTHONPATH=$M timeout 150 python3 -m hpc_xla.bench rope_norm --out $OUT/rope_norm_$round.json \
      > $OUT/rope_table_$round.txt 2>&1; echo "rope bench $round rc=$?" ); t
done
grep -v "^  " $OUT/rope_table_1.txt | tail -40 | cut -c1-190
grep -E "8/1" $OUT/rope_table_2.txt | cut -c1-190
