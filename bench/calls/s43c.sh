#!/usr/bin/env bash
# session 43 call C (~6 min, same machine as s43a/b if possible; carry .peer/exp/m8 (main) and .peer/exp/e54
# (`tools/stage_experiments.sh e54:4e95db4`)).
# Experiment 54b (4e95db4 = 9db5db0's 54 with the 4-warp merges only and a conflict-free fp8 swizzle): FinishPiece
# merges through the ring stage the piece's last tile just left (each warp its own slice at once, one barrier, one
# summing pass) instead of WN rounds through obuf: 3 barriers a piece instead of 6,
# FinishPiece bf16 MT1 714 -> 616 instructions. After 51 (s42d trace, H100) FinishPiece still took 7315 cycles a
# piece at q_len 2, 2389 at q_len 1; 52 / 53 tied its time to its code and barriers.
# Written BEFORE the run: tests pass, memcheck and racecheck clean (the stage is shared with the cp.async ring: a
# wrong "free stage" shows as wrong numbers or a race). A/B, 2 rounds, layer us: 8/1 bf16 q_len 2 -0.8..-2 us,
# q_len 1 -0.2..-0.6; fp8 q_len 1 (MT 0, in-stage) -0.2..-0.5, fp8 q_len 2 (keeps the rounds) within +-0.3; 64/8
# within +-0.5%. Refuted if no 8/1 bf16 q_len 2 row gains > 0.5 us in both rounds; lands if no row loses > 0.3 us
# (64/8: 0.3%) in both rounds.
. "$(dirname "$0")/prelude.sh"
A=$PWD/.peer/exp/m8
B=$PWD/.peer/exp/e54
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
K="cuda and torch and (q_len2 or q_len4_group16 or gqa_64_8 or d64 or many_splits or one_long)"
in_background "e54 decode gpu file" c_gpu.log 300 $B $T tests/test_gpu_decode.py
in_background "e54 test_decode cuda cases" c_cuda.log 300 $B $T tests/test_decode.py -k cuda
wait; t
for tool in memcheck racecheck; do
  in_background "e54 $tool" c_$tool.log 280 $B $CS --tool $tool $T tests/test_decode.py -k "$K"
done
wait; t
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $R/c_memcheck.log $R/c_racecheck.log | sort | uniq -c
collect c_
bench() {  # bench LABEL DIR HEADS
  ( cd $2 && PYTHONPATH=$2 timeout 150 python3 -m hpc_xla.bench decode --heads $3 --out $R/dec_$1.json \
    > $R/dec_$1.txt 2>&1; echo "== $1 rc=$?" ); t
}
for round in 1 2; do bench main_r$round $A 8/1/128; bench e54_r$round $B 8/1/128; done
for round in 1 2; do bench main_64_r$round $A 64/8/128; bench e54_64_r$round $B 64/8/128; done
python3 $ROOT/bench/calls/decode_tables.py ab $R dec_ main_r1 main_r2 e54_r1 e54_r2 main_64_r1 main_64_r2 e54_64_r1 \
  e54_64_r2 | tee $OUT/ab_table.txt
tar czf $OUT/s43c_raw.tgz -C $R $(cd $R && ls dec_* *.log)
