#!/usr/bin/env bash
# session 43 call G (~3 min, the session's last device minutes; carry .peer/pack = tools/pack_staged.sh m9 e58).
# Experiment 58 (3bb3f75): 57's dry FinishPiece moved before PdlWait (a dummy piece), so the instruction fetches that
# warm FinishPiece for a mid-CTA piece end overlap the previous kernel instead of costing every CTA ~4 us after its
# first copies (s43f: 57 lost 0.3-2.3 us on every row; its trace: mid-CTA merge 12066 -> ~3400 cycles, stores then
# the slow part).
# Written BEFORE the run: tests pass, racecheck 0 hazards; 8/1 bf16 q_len 2 skewed rows (1x128K+31x4K, zipf, 2x32K+
# 30x4K, 1x64K+15x4K, random) -1..-4 us, uniform rows within +-0.5 (64x512 +0..+0.5: the dry pass may not hide in
# the plan kernel's 2.7 us); q_len 1 -0.3..-1.5 on skewed rows. Refuted if no q_len 2 row gains > 0.5 us in both
# rounds; lands only after 64/8 and memcheck next session.
. "$(dirname "$0")/prelude.sh"
X=$ROOT/.peer/exp; mkdir -p $X
for f in $ROOT/.peer/pack/*.tar.xz; do tar xJf $f -C $X & done; wait; t
M=$X/m9; E=$X/e58
T="python3 -m pytest -q -p no:cacheprovider"
K="cuda and torch and (q_len2 or q_len4_group16 or gqa_64_8 or d64 or many_splits or one_long)"
in_background "e58 decode gpu file" g_gpu.log 200 $E $T tests/test_gpu_decode.py
in_background "e58 test_decode cuda" g_cuda.log 200 $E $T tests/test_decode.py -k cuda
in_background "e58 racecheck" g_racecheck.log 200 $E compute-sanitizer --tool racecheck --error-exitcode 99 $T tests/test_decode.py -k "$K"
wait; t
collect g_
bench() {  # bench LABEL DIR HEADS
  ( cd $2 && PYTHONPATH=$2 timeout 100 python3 -m hpc_xla.bench decode --heads $3 --out $R/$1.json \
    > $R/$1.txt 2>&1; echo "== $1 rc=$?" ); t
}
for round in 1 2; do bench d8_m$round $M 8/1/128; bench d8_e$round $E 8/1/128; done
python3 $ROOT/bench/calls/decode_tables.py ab $R d8_ m1 m2 e1 e2 | tee $OUT/ab_table.txt
