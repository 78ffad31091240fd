#!/usr/bin/env bash
# session 59 call B (~6 min, any Hopper; the H200 is the card of record for #2). SHORT=1 (~3 min, for a small budget):
# smoke, 8/1 only in rounds m / e / e / m, the stream tests with memcheck; no bench, racecheck or sweep. Carry
# .peer/pack (m59 = main, e89 = experiment 89e: `tools/stage_experiments.sh e89` at 54f0d72, then
# `tools/pack_staged.sh m59 e89`).
# Experiment 89: rope_norm's streaming kernel (csrc/rope_norm/rope_norm_stream.cuh) -- the paired kernel's math fed
# from shared-memory stages that a producer warp fills by cp.async.bulk, 2 persistent CTAs of 6 consumer warps per
# SM; taken for every 4-row paired launch whose rows it can copy; HPC_XLA_ROPE_STREAM=0 = the paired kernel.
# Written BEFORE the run (session 59): on the H200 the paired kernel is concurrency-bound (89% of the copy ceiling on
# the H100, 77-78% on the H200 for bf16 8/1 T=16384), the stream holds up to 3 stages x 24 KB of reads in flight per
# CTA without registers: bf16 8/1 T=16384 28.7 -> 25.5-27.5 us on the H200 (80-86% of the ceiling), fp8 8/1 similar
# (-5..-10%); on an H100 8/1 -0..-6%; 64/8 and 32/4 (2 stages of ~42 KB, 5 consumer warps) within -8..+5%; e89 with
# STREAM=0 within +-1.5% of m59 (the paired body's SASS moved by scheduling only).
# Sweep (8/1 only): TOKENS=4 / 16, STAGES=2 / 3 within +-4% of the default (8 tokens, 4 stages); no winner predicted.
# Land rule: GPU rope tests pass (incl. the new bitwise stream-vs-paired test), memcheck 0 errors and racecheck 0
# hazards on the stream tests, and bf16 8/1 T=16384 streamed <= 0.97x m59 in both rounds. The auto rule then keeps
# the stream only for the shapes where it is not slower than m59 in both rounds.
. "$(dirname "$0")/prelude.sh"
unpack_packs
M=$X/m59 E=$X/e89
# smoke first (a hang or a wrong result must not cost the A/B's minutes): the stream numerics cases, 90 s
( cd $E && PYTHONPATH=$E:$E/tests timeout 90 python3 -m pytest -q -x -p no:cacheprovider tests/test_gpu_rope_norm.py \
    -k stream_kernel_numerics > $OUT/s59b_smoke.txt 2>&1; echo "smoke rc=$?" | tee -a $OUT/s59b_smoke.txt ); t
if ! grep -q "smoke rc=0" $OUT/s59b_smoke.txt; then tail -30 $OUT/s59b_smoke.txt; exit 1; fi
# ab LABEL DIR HEADS [KNOB=VALUE...]: tools/ab_time.py (bf16 and fp8, T=16384) from the staged DIR with the knobs
# set, its line appended to s59b_ab.txt
ab() {
  local label=$1 d=$2 heads=$3
  shift 3
  (cd $d && env PYTHONPATH=$d:$d/tests "$@" timeout 100 python3 $ROOT/tools/ab_time.py --heads $heads \
    --variants bf16,fp8 > $R/ab_$label.txt 2>&1)
  echo "$label: $(tail -n1 $R/ab_$label.txt)" | tee -a $OUT/s59b_ab.txt; t
}
K="stream_kernel_numerics"
if [ "${SHORT:-0}" = 1 ]; then
  ab m $M 8/1/128; ab e $E 8/1/128; ab e2 $E 8/1/128; ab m2 $M 8/1/128
  in_background "stream tests" rope_tests.log 90 $E python3 -m pytest -q -p no:cacheprovider -rf \
    tests/test_gpu_rope_norm.py -k "stream_kernel or every_rows"
  in_background "memcheck" rope_memcheck.log 90 $E compute-sanitizer --target-processes all --error-exitcode 99 \
    --tool memcheck python3 -m pytest -q -p no:cacheprovider tests/test_gpu_rope_norm.py -k "$K"
  wait; t
  grep -hE "^FAILED|^E  |ERROR SUMMARY" $R/rope_*.log | sort | uniq -c | head -20
  for f in $R/rope_*.log; do echo "### $f"; tail -30 "$f"; done > $OUT/s59b_tests.txt
  exit 0
fi
for round in 1 2; do
  ab m_r$round $M 8/1/128,64/8/128
  ab e_r$round $E 8/1/128,64/8/128
  [ $round = 1 ] && ab s0_r1 $E 8/1/128,64/8/128 HPC_XLA_ROPE_STREAM=0  # the control once
done
( cd $E && PYTHONPATH=$E timeout 100 python3 -m hpc_xla.bench rope_norm --heads 8/1/128 \
    > $OUT/s59b_rope_e89.txt 2>&1; echo "rope bench e89 rc=$?" ); t
grep -a "│" $OUT/s59b_rope_e89.txt | cut -c1-130
in_background "rope tests" rope_tests.log 150 $E python3 -m pytest -q -p no:cacheprovider -rf tests/test_gpu_rope_norm.py
in_background "memcheck" rope_memcheck.log 150 $E compute-sanitizer --target-processes all --error-exitcode 99 \
  --tool memcheck python3 -m pytest -q -p no:cacheprovider tests/test_gpu_rope_norm.py -k "$K"
in_background "racecheck" rope_racecheck.log 150 $E compute-sanitizer --target-processes all --error-exitcode 99 \
  --tool racecheck python3 -m pytest -q -p no:cacheprovider tests/test_gpu_rope_norm.py -k "$K"
wait; t
grep -hE "^FAILED|^E  |ERROR SUMMARY|RACECHECK SUMMARY|Error|hazard" $R/rope_*.log | sort | uniq -c | head -30
for f in $R/rope_*.log; do echo "### $f"; tail -40 "$f"; done > $OUT/s59b_tests.txt
# the stream's tile and ring swept on 8/1 (HPC_XLA_ROPE_STREAM_TOKENS / _STAGES; default 8 tokens, 4 stages)
for knob in TOKENS=4 TOKENS=16 STAGES=2; do ab "e89_$knob" $E 8/1/128 HPC_XLA_ROPE_STREAM_$knob; done
cat $OUT/s59b_ab.txt
