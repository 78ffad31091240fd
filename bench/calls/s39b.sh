#!/usr/bin/env bash
# session 39 call B (~5 min, any Hopper; carry .peer/exp/m3 = main staged, its commit in STAGED.txt): what s39a could
# not run -- the JAX GPU tests (m2's API 0.4 handlers were refused by the stale FFI release table; the guard now reads
# the running jaxlib's own header) -- the decode and rope GPU files whole, fused_moe's JAX / graph / compile tests,
# and every non-GPU-file test with the GPU present (the torch Autograd-key kernels, the bridge's ValueErrors).
. "$(dirname "$0")/prelude.sh"
M=$PWD/.peer/exp/m3
T="python3 -m pytest -q -p no:cacheprovider"
in_background "decode gpu" b_dec.log 200 $M $T tests/test_gpu_decode.py
in_background "rope+multi gpu" b_rope.log 200 $M $T tests/test_gpu_rope_norm.py tests/test_gpu_multi_device.py
in_background "moe gpu jax/graph/compile" b_moe.log 200 $M env "PYTEST_ADDOPTS=-k 'jax or graph or compile'" $T \
  tests/test_gpu_fused_moe.py
in_background "rest (GPU present)" b_rest.log 300 $M $T tests --ignore=tests/test_gpu_decode.py \
  --ignore=tests/test_gpu_fused_moe.py --ignore=tests/test_gpu_rope_norm.py --ignore=tests/test_gpu_multi_device.py
wait; t
collect b_
