#!/usr/bin/env bash
# session 59 call C (~2.5 min, any Hopper): s59b cut to the device budget left (~6 min) after many refused starts.
# Carry .peer/pack (m59 = main, e89 = experiment 89e at 54f0d72). Predictions and land rule: s59b.sh's header (same
# experiment); here only 8/1 (bf16, fp8) at T=16384, rounds m / e / s0 / e / m, then the stream tests (numerics vs
# the CPU reference, bitwise vs the paired kernel, the knob matrix) with memcheck on the numerics cases.
. "$(dirname "$0")/prelude.sh"
unpack_packs
M=$X/m59 E=$X/e89
for v in m e e2 m2; do
  case $v in m|m2) d=$M knob="HPC_XLA_ROPE_STREAM=1" ;; e|e2) d=$E knob="HPC_XLA_ROPE_STREAM=1" ;; s0) d=$E knob="HPC_XLA_ROPE_STREAM=0" ;; esac
  (cd $d && env PYTHONPATH=$d:$d/tests $knob timeout 30 python3 $ROOT/tools/ab_time.py \
    --heads 8/1/128 --variants bf16,fp8 > $R/ab_$v.txt 2>&1)
  echo "$v: $(tail -n1 $R/ab_$v.txt)" | tee -a $OUT/s59c_ab.txt; t
done
in_background "stream tests" rope_tests.log 90 $E python3 -m pytest -q -p no:cacheprovider -rf \
  tests/test_gpu_rope_norm.py -k "stream_kernel or every_rows"
in_background "memcheck" rope_memcheck.log 90 $E compute-sanitizer --target-processes all --error-exitcode 99 \
  --tool memcheck python3 -m pytest -q -p no:cacheprovider tests/test_gpu_rope_norm.py -k "stream_kernel_numerics"
wait; t
grep -hE "^FAILED|^E  |ERROR SUMMARY" $R/rope_*.log | sort | uniq -c | head -20
for f in $R/rope_*.log; do echo "### $f"; tail -30 "$f"; done > $OUT/s59c_tests.txt
