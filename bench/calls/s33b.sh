#!/usr/bin/env bash
# session 33 call D (~4.5 min; carry .peer/exp/e33): test_gpu_fused_moe.py on e33 with HPC_XLA_MOE_GEMM_CLUSTER=n2
# in the environment (children inherit it), i.e. every grouped 128x256 case in 2-CTA clusters -- the evidence for
# making n2 the default.
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e33
export HPC_XLA_MOE_GEMM_CLUSTER=n2
T="python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py"
G1="grouped_vs_oracle or grouped_dims or v1_and_grouped or multi_cta or one_token or act_epilogue or interleaved"
in_background "e33 n2 moe A" g_a.log 235 $E $T -k "$G1"
in_background "e33 n2 moe B" g_b.log 235 $E $T -k "not ($G1)"
wait; t
collect g_
