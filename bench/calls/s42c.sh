#!/usr/bin/env bash
# session 42 call C (~7 min, any Hopper; carry .peer/exp/e46 (= main's kernels, its knob off), .peer/exp/e50
# (experiment 50, `e50:aeb1948`) and .peer/exp/e51 (experiment 51, `e51:ea2f8e5`)).
# Why (51): s42a's per-phase trace (experiment 49, H100) put the 16-row kernel's extra time at the piece end:
# FinishPiece 9091 cycles a piece at q_len 2 vs 3495 at q_len 1 (bf16 1x128K+31x4K; fp8 ~7300 vs ~3900; q_len 1 on
# the 16-row kernel 8206), while per-tile copy + wait + compute was no larger (3663 vs 3839). Its merge ran WN
# serial rounds of one warp writing all D columns into a buffer with 4-way bank conflicts. 51: all warps busy in
# every round (rotating column groups), rows padded by 8 floats.
# Written BEFORE the run: e50 and e51 pass the decode GPU file and test_decode's cuda cases. A/B, 2 rounds, layer us
# (H100 main last session: q2 64x4K ~58, 1x128K+31x4K 60.4):
#   e51: 8/1 bf16 q_len 2 -1.5..-3 us on every row with >= 1 piece per CTA (64x4K, 1x128K+31x4K, 2x32K), zipf
#   (1.7 pieces per CTA) -2..-4; q_len 1 -0.3..-1; fp8 q_len 2 -1..-2, q_len 1 -0.3..-1; 64/8 within +-1% or better.
#   Refuted if no q_len 2 row gains > 1 us in both rounds. Lands if no row loses > 0.5 us in both rounds.
#   e50: as s42b predicted (q_len 2 -1..-3 us); refuted if no q_len 2 row gains > 1 us in both rounds.
. "$(dirname "$0")/prelude.sh"
A=$PWD/.peer/exp/e46
B=$PWD/.peer/exp/e50
C=$PWD/.peer/exp/e51
T="python3 -m pytest -q -p no:cacheprovider"
in_background "e50 decode gpu file" c_e50_gpu.log 300 $B $T tests/test_gpu_decode.py
in_background "e50 test_decode cuda cases" c_e50_cuda.log 300 $B $T tests/test_decode.py -k cuda
in_background "e51 decode gpu file" c_e51_gpu.log 300 $C $T tests/test_gpu_decode.py
in_background "e51 test_decode cuda cases" c_e51_cuda.log 300 $C $T tests/test_decode.py -k cuda
wait; t
collect c_
bench() {  # bench LABEL DIR HEADS: decode from DIR into $R/dec_LABEL.json
  ( cd $2 && PYTHONPATH=$2 timeout 150 python3 -m hpc_xla.bench decode --heads $3 --out $R/dec_$1.json \
    > $R/dec_$1.txt 2>&1; echo "== $1 rc=$?" ); t
}
for round in 1 2; do
  bench main_r$round $A 8/1/128
  bench e51_r$round $C 8/1/128
  bench e50_r$round $B 8/1/128
done
bench main_64 $A 64/8/128
bench e51_64 $C 64/8/128
bench e50_64 $B 64/8/128
# the short table: layer us (decode_attention with its plan built) per version and round
python3 $ROOT/bench/calls/decode_tables.py ab $R dec_ main_r1 main_r2 e51_r1 e51_r2 e50_r1 e50_r2 main_64 e51_64 e50_64 \
  | tee $OUT/ab_table.txt
tar czf $OUT/s42c_raw.tgz -C $R $(cd $R && ls dec_* *.log)
