#!/usr/bin/env bash
# session 60 call A (~5-7 min, any Hopper card). Carry .peer/pack (main staged: `tools/stage_experiments.sh m59 &&
# tools/pack_staged.sh m59`; main's kernels have not changed since m59). The 68 ids of test_gpu_fused_moe.py that
# s58b / s58c did not reach and of which s59a ran only 28 (its -q output does not say which) before its 200 s limit:
# all 68 again, in three processes side by side (their time is mostly the CPU oracle), verbose so that every id's
# outcome comes back. Expected: all pass (experiment 87 touched only routing; these cases take ids given).
. "$(dirname "$0")/prelude.sh"
unpack_packs
M=$X/${TREE:-m59}
F=tests/test_gpu_fused_moe.py
A="cluster_pairs_equal_one_cta or bad_activation_scale or gemm_tile_knob"
B="interleaved_w13 or tiled_persistent_grid or sparse_reduce or moe_knobs_reject"
C="negative_ids or out_may_be_x"
for g in A B C; do
  in_background "moe $g" moe_$g.log 330 $M python3 -m pytest -v -p no:cacheprovider -rf --durations=5 $F -k "${!g}"
done
wait; t
grep -hE "^FAILED|^E  " $R/moe_*.log | head -20
grep -hcE " PASSED" $R/moe_*.log
cat $R/moe_*.log > $OUT/s60a_moe_tests.txt
grep -hE "passed|failed|skipped|error" $R/moe_*.log | grep -E "^=+" 
