#!/usr/bin/env bash
# session 42 call H (~3 min; carry .peer/exp/m7 = main with 51, .peer/exp/e53 = experiment 53 `e53:fdec913`):
# experiment 53 (FinishPiece's merge factors with ex2.approx and __fdividef: 71 fewer instructions of cold code).
# Written BEFORE the run: tests pass; 8/1 q_len 2 -0.2..-1 us (52 showed the time following FinishPiece's size: bf16
# +73 instructions cost +0.5..2.6 us, fp8 -96 gained 0.3..0.9); q_len 1 -0..-0.5. Refuted if no q_len 2 row gains
# > 0.3 us in both rounds; lands if no row loses > 0.3 us in both rounds.
. "$(dirname "$0")/prelude.sh"
A=$PWD/.peer/exp/m7
B=$PWD/.peer/exp/e53
T="python3 -m pytest -q -p no:cacheprovider"
in_background "e53 decode gpu file" g_gpu.log 300 $B $T tests/test_gpu_decode.py
in_background "e53 test_decode cuda cases" g_cuda.log 300 $B $T tests/test_decode.py -k cuda
wait; t
collect g_
bench() {
  ( cd $2 && PYTHONPATH=$2 timeout 150 python3 -m hpc_xla.bench decode --heads 8/1/128 --out $R/dec_$1.json \
    > $R/dec_$1.txt 2>&1; echo "== $1 rc=$?" ); t
}
for round in 1 2; do bench main_r$round $A; bench e53_r$round $B; done
python3 $ROOT/bench/calls/decode_tables.py ab $R dec_ main_r1 main_r2 e53_r1 e53_r2 | tee $OUT/ab_table.txt
