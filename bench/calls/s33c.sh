#!/usr/bin/env bash
# session 33 call E (~3 min; carry .peer/exp/e33): the rest of s33b's group B (the tests after cluster_pairs, which
# s33b's 235 s did not reach) with HPC_XLA_MOE_GEMM_CLUSTER=n2 in the environment.
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e33
export HPC_XLA_MOE_GEMM_CLUSTER=n2
T="python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py"
in_background "e33 n2 moe rest" h_a.log 165 $E $T -k "w2_prefetch or tiled_persistent or sparse_reduce or knob or \
device_check or negative_ids"
wait; t
collect h_
