#!/usr/bin/env bash
# session 43 call F (~5 min; carry .peer/pack = tools/pack_staged.sh m9 e57 t57: main 4738e0c, experiment 57
# (bff9a53: FinishPiece runs once dry before the first tile) and its trace build (365590d: 56t's sub-phases on 57)).
# s43e (t56, q_len 2, 1x128K+31x4K): a FinishPiece that ends mid-CTA ~19 us (prep 3412 / merge 12066 / store 6378
# cycles a piece averaged over 2-piece CTAs, against 944 / 1551 / 3653 in 1-piece CTAs, whose finish ends the CTA);
# the stores are not it (55b's bulk stores and HPC_XLA_DECODE_TRACE_NO_STORES left it). Reading: its code is fetched
# cold from L2 behind the SM's queue of K/V requests (s42f's ncu: no_instruction stalls in FinishPiece).
# Written BEFORE the run:
# - e57 tests pass, memcheck 0 errors, racecheck 0 hazards (the dry pass writes ml / obuf / the free stage).
# - t57 trace, q_len 2: mid-CTA finish < 6 us (prep + merge + store of 2-piece CTAs < 6000 cycles a piece); the
#   2-piece CTAs' max within 2 us of the 1-piece CTAs'. If the finish stays ~19 us: refuted (then the smem ops
#   themselves wait, e.g. behind queued cp.async in the MIO path), and the trace says which sub-phase.
# - A/B 2 rounds, layer us, 8/1 bf16 q_len 2: 1x128K+31x4K / zipf -3..-6, 128 random -2..-5, 2x32K+30x4K -2..-4,
#   1x64K+15x4K -1..-3, 64x4K within +-1, 64x512 +0..+1 (the dry pass and a second q load on short CTAs); q_len 1
#   -1..-3 on the skewed rows; 64/8 -0.5..-2%. Lands if no row loses > 0.3 us (64/8 0.3%) in both rounds and the
#   skewed q_len 2 rows gain > 1 us in both.
. "$(dirname "$0")/prelude.sh"
X=$ROOT/.peer/exp; mkdir -p $X
for f in $ROOT/.peer/pack/*.tar.xz; do tar xJf $f -C $X & done; wait; t
M=$X/m9; E=$X/e57; TR=$X/t57
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
K="cuda and torch and (q_len2 or q_len4_group16 or gqa_64_8 or d64 or many_splits or one_long)"
in_background "e57 decode gpu file" f_gpu.log 300 $E $T tests/test_gpu_decode.py
in_background "e57 test_decode cuda" f_cuda.log 300 $E $T tests/test_decode.py -k cuda
for tool in memcheck racecheck; do
  in_background "e57 $tool" f_$tool.log 280 $E $CS --tool $tool $T tests/test_decode.py -k "$K"
done
wait; t
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $R/f_memcheck.log $R/f_racecheck.log | sort | uniq -c
collect f_
trace() {  # trace LABEL Q_LEN
  ( cd $TR && PYTHONPATH=$TR timeout 120 python3 $ROOT/bench/calls/decode_trace_ctas.py --q-len $2 \
    --workloads "1x128K+31x4K;256 zipf;64x4K" > $R/ctas_$1.txt 2>&1; echo "== trace $1 rc=$?" ); t
  cut -c1-150 $R/ctas_$1.txt | grep -v "^   [0-9]"
}
trace q2 2
bench() {  # bench LABEL DIR HEADS
  ( cd $2 && PYTHONPATH=$2 timeout 150 python3 -m hpc_xla.bench decode --heads $3 --out $R/$1.json \
    > $R/$1.txt 2>&1; echo "== $1 rc=$?" ); t
}
for round in 1 2; do bench d8_m$round $M 8/1/128; bench d8_e$round $E 8/1/128; done
python3 $ROOT/bench/calls/decode_tables.py ab $R d8_ m1 m2 e1 e2 | tee $OUT/ab_table.txt
for round in 1 2; do bench d64_m$round $M 64/8/128; bench d64_e$round $E 64/8/128; done
python3 $ROOT/bench/calls/decode_tables.py ab $R d64_ m1 m2 e1 e2 | tee -a $OUT/ab_table.txt
trace q1 1
cat $R/ctas_*.txt > $OUT/trace_ctas.txt
tar czf $OUT/s43f_raw.tgz -C $R $(cd $R && ls d8_*.txt d64_*.txt d8_*.json d64_*.json *.log)
