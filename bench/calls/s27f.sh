#!/usr/bin/env bash
# session 27 call F (~9 min; carry .peer/exp/n): the whole GPU test files on main's binary (n), two pytest groups
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
# the rest in two groups side by side (session 34: one group of it ran ~107 of ~124 tests in 280 s, since bd37859's
# many-expert cases), then the CPU-facing files (~95 s)
G2="cuda_vs_oracle or random_problems or i_multiple or stream_path or cuda_deterministic or out_of_range \
or bad_id or skipped_inside or cuda_errors or cuda_graph or jax_jit or fused_routing"
in_background "moe B1" f_c.log 280 $N $T -k "not ($G1) and ($G2)"
in_background "moe B2" f_e.log 280 $N $T -k "not ($G1) and not ($G2)"
wait; t
in_background "cpu-facing" f_d.log 200 $N $PT tests/test_fused_moe.py tests/test_moe_route.py tests/test_rope_norm.py
wait; t
collect f_
