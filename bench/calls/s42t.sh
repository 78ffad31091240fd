#!/usr/bin/env bash
# session 42 call T (~8 min, any Hopper; carry .peer/exp/m6 = main staged: `tools/stage_experiments.sh m6`): main's
# GPU test files whole. Session 41 never finished the last third of test_gpu_fused_moe.py (s41a split its ids on
# spaces; s41d hit its 300 s limit), and main's checks changed after its last GPU run (workspace-size rules, the
# overlap check in rope_norm / moe_route, decode_plan's config check before the workspace size).
# Written BEFORE the run: everything passes; the fused_moe file's four parts take ~2-4 min each side by side.
. "$(dirname "$0")/prelude.sh"
M=$PWD/.peer/exp/m6
T="python3 -m pytest -q -p no:cacheprovider"
( cd $M && PYTHONPATH=$M:$M/tests $T --collect-only tests/test_gpu_fused_moe.py 2>/dev/null | grep "::" > $R/ids.txt )
split -n l/4 -d $R/ids.txt $R/ids_part_
for part in $R/ids_part_*; do
  mapfile -t ids < "$part"  # one id a line: parametrized ids hold spaces
  in_background "moe gpu part ${part##*_}" "t_moe_${part##*_}.log" 480 $M $T "${ids[@]}"
done
in_background "decode + rope + route GPU files, argument errors" t_rest.log 480 $M $T tests/test_gpu_decode.py \
  tests/test_gpu_rope_norm.py tests/test_moe_route.py tests/test_argument_errors.py tests/test_decode.py \
  tests/test_rope_norm.py tests/test_rope_norm_errors.py tests/test_fused_moe.py
wait; t
collect t_
