#!/usr/bin/env bash
# session 42 call G (~3 min; carry .peer/exp/m7 = main with 51, .peer/exp/e52 = experiment 52 `e52:2ba34a6`):
# experiment 52 (FinishPiece's merge buffer zeroed first, rounds only add: one copy of the access code).
# Written BEFORE the run: tests pass; 8/1 q_len 2 -0.2..-0.8 us (the no_inst stalls on FinishPiece's lines were 4.3%
# of q_len 2's samples; the code it runs is smaller, though the bf16 MT1 function's FinishPiece grew 714 -> 787
# instructions); q_len 1 within +-0.3. Refuted if no q_len 2 row gains > 0.3 us in both rounds.
. "$(dirname "$0")/prelude.sh"
A=$PWD/.peer/exp/m7
B=$PWD/.peer/exp/e52
T="python3 -m pytest -q -p no:cacheprovider"
in_background "e52 decode gpu file" g_gpu.log 300 $B $T tests/test_gpu_decode.py
in_background "e52 test_decode cuda cases" g_cuda.log 300 $B $T tests/test_decode.py -k cuda
wait; t
collect g_
bench() {
  ( cd $2 && PYTHONPATH=$2 timeout 150 python3 -m hpc_xla.bench decode --heads 8/1/128 --out $R/dec_$1.json \
    > $R/dec_$1.txt 2>&1; echo "== $1 rc=$?" ); t
}
for round in 1 2; do bench main_r$round $A; bench e52_r$round $B; done
python3 $ROOT/bench/calls/decode_tables.py ab $R dec_ main_r1 main_r2 e52_r1 e52_r2 | tee $OUT/ab_table.txt
