#!/usr/bin/env bash
# session 27 call F (~10 min; carry .peer/exp/n): the whole GPU test files on main's binary (n), two pytest groups
# of test_gpu_fused_moe.py at a time (side by side with more, its child-process tests hit their timeouts: session 26),
# then test_gpu_decode.py, test_gpu_rope_norm.py and the CPU-facing files with the binary. Run after s27d passed.
. "$(dirname "$0")/prelude.sh"
N=$PWD/.peer/exp/n
T="python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py"
PT="python3 -m pytest -q -p no:cacheprovider"
G1="grouped_vs_oracle or grouped_dims or v1_and_grouped or multi_cta or one_token or act_epilogue or interleaved"
( cd $N && PYTHONPATH=$N:$N/tests timeout 290 $T -k "$G1" > $R/f_a.log 2>&1; echo "moe A rc=$?: $(tail -n1 $R/f_a.log)" ) &
( cd $N && PYTHONPATH=$N:$N/tests timeout 290 $PT tests/test_gpu_decode.py tests/test_gpu_rope_norm.py tests/test_decode.py tests/test_argument_errors.py > $R/f_b.log 2>&1; echo "decode + rope rc=$?: $(tail -n1 $R/f_b.log)" ) &
wait; t
( cd $N && PYTHONPATH=$N:$N/tests timeout 280 $T -k "not ($G1)" > $R/f_c.log 2>&1; echo "moe B rc=$?: $(tail -n1 $R/f_c.log)" ) &
( cd $N && PYTHONPATH=$N:$N/tests timeout 280 $PT tests/test_fused_moe.py tests/test_moe_route.py tests/test_rope_norm.py > $R/f_d.log 2>&1; echo "cpu-facing rc=$?: $(tail -n1 $R/f_d.log)" ) &
wait; t
grep -E "^FAILED|^E  " $R/f_*.log | head -20
for f in $R/f_*.log; do echo "### $f"; tail -60 $f; done > $OUT/tests_all.txt
