#!/usr/bin/env bash
# session 27 call F (~10 min; carry .peer/exp/n): the whole GPU test files on main's binary (n), two pytest groups
# of test_gpu_fused_moe.py at a time (side by side with more, its child-process tests hit their timeouts: session 26),
# then test_gpu_decode.py, test_gpu_rope_norm.py and the CPU-facing files with the binary. Run after s27d passed.
. "$(dirname "$0")/prelude.sh"
N=$PWD/.peer/exp/${TREE:-n}  # TREE=f: another staged tree
T="python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py"
PT="python3 -m pytest -q -p no:cacheprovider"
G1="grouped_vs_oracle or grouped_dims or v1_and_grouped or multi_cta or one_token or act_epilogue or interleaved"
in_background "moe A" f_a.log 290 $N $T -k "$G1"
in_background "decode + rope" f_b.log 290 $N $PT tests/test_gpu_decode.py tests/test_gpu_rope_norm.py tests/test_decode.py \
  tests/test_argument_errors.py
wait; t
in_background "moe B" f_c.log 280 $N $T -k "not ($G1)"
in_background "cpu-facing" f_d.log 280 $N $PT tests/test_fused_moe.py tests/test_moe_route.py tests/test_rope_norm.py
wait; t
collect f_
