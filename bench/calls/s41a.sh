#!/usr/bin/env bash
# session 41 call A (~6 min, any Hopper; carry .peer/exp/m5 = main staged: `tools/stage_experiments.sh m5` AFTER
# a317d01, the bad-input fixes): the decode GPU file, the fused_moe GPU file WHOLE for main with the two-pass
# stream down sum (141d8b2; whole it runs past one 440 s process, so its test ids in three parallel processes),
# then where decode q_len 2's extra time goes.
# Written BEFORE the run: tests all pass (the sum ran 39 stream tests + racecheck clean in s40b). Decode, H200,
# 8/1/128 bf16 1x128K+31x4K: q_len 1 44.5 us, q_len 2 51.4 (FlashInfer's FA2 prefill 43.8): the attention kernel
# carries most of the +7 us (twice the live softmax rows: MT = 1 instead of the half-tile MT = 0), the merge
# (partials of 16 rows instead of 8) +1..2 us.
. "$(dirname "$0")/prelude.sh"
M=$PWD/.peer/exp/m5
T="python3 -m pytest -q -p no:cacheprovider"
( cd $M && PYTHONPATH=$M:$M/tests $T --collect-only tests/test_gpu_fused_moe.py 2>/dev/null | grep "::" > $R/ids.txt )
split -n l/3 -d $R/ids.txt $R/ids_part_
for part in $R/ids_part_*; do
  mapfile -t ids < "$part"  # one id a line: parametrized ids hold spaces
  in_background "moe gpu part ${part##*_}" "a_moe_${part##*_}.log" 420 $M $T "${ids[@]}"
done
# session 40's bad-input fixes on the GPU (HPC_XLA_CHECK's stale-plan and q_scale checks, a new GPU test) and the
# argument-error tests with the GPU present
in_background "decode gpu + argument errors" a_dec.log 300 $M $T tests/test_gpu_decode.py tests/test_argument_errors.py
wait; t
collect a_
( cd $M && PYTHONPATH=$M HPC_PROFILE_QLEN=1,2 timeout 150 python3 $ROOT/tools/profile_kernels.py decode \
  > $OUT/decode_profile.txt 2>&1; echo "decode profile rc=$?" ); t
grep -av "^ *$" $OUT/decode_profile.txt | tail -40 | cut -c1-160
# rope_norm's new "sep us" column (separated timing of our calls, next to the chained us), first GPU run: expected
# bf16 8/1 T=1024 ~3.8 chained / ~4.7 separated (s39d's A/B), T=16384 within 2% of each other.
( cd $M && PYTHONPATH=$M timeout 120 python3 -m hpc_xla.bench rope_norm --tokens 1,1024,16384 --heads 8/1/128 \
  --out $OUT/rope_sep.json > $OUT/rope_sep.txt 2>&1; echo "rope bench rc=$?" ); t
grep -a "│" $OUT/rope_sep.txt | cut -c1-150
