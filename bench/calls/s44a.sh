#!/usr/bin/env bash
# session 44 call A (~7 min; carry .peer/pack = `tools/stage_experiments.sh mN e58:3bb3f75 e58c:be042bf
# e59:7b7bc85 && tools/pack_staged.sh mN e58 e58c e59`, with M= below set to mN; s44b uses the same packs).
# Prepared in session 43.
# (1) main's GPU test files whole (54c, the k_cache error fix, and tests never yet GPU-run: test_out_may_be_x_or_
#     shared_output in test_gpu_fused_moe.py, test_out_may_be_q in test_gpu_decode.py); fused_moe in four processes.
# (2) (moved to s44b in session 44, which runs first: the experiments' tests and sanitizers beside their A/B)
# Written BEFORE the run (session 43): all tests pass, sanitizers clean.
. "$(dirname "$0")/prelude.sh"
unpack_packs
M=$X/m10
T="python3 -m pytest -q -p no:cacheprovider"
( cd $M && PYTHONPATH=$M:$M/tests $T --collect-only tests/test_gpu_fused_moe.py 2>/dev/null | grep "::" > $R/ids.txt )
split -n l/4 -d $R/ids.txt $R/ids_part_
for part in $R/ids_part_*; do
  mapfile -t ids < "$part"  # one id a line: parametrized ids hold spaces
  in_background "moe gpu part ${part##*_}" "a_moe_${part##*_}.log" 480 $M $T "${ids[@]}"
done
in_background "main: decode + rope + route GPU files, argument errors, CPU-facing files" a_rest.log 480 $M $T \
  tests/test_gpu_decode.py tests/test_gpu_rope_norm.py tests/test_moe_route.py tests/test_argument_errors.py \
  tests/test_decode.py tests/test_rope_norm.py tests/test_rope_norm_errors.py tests/test_fused_moe.py
wait; t
collect a_
tar czf $OUT/s44a_raw.tgz -C $R $(cd $R && ls *.log)
