#!/usr/bin/env bash
# session 39 call B (~3 min, any Hopper; carry .peer/exp/m2 = main 213b727 staged + the _ffi.py fix that reads the
# running jaxlib's own XLA_FFI_API_MINOR): the JAX tests that s39a could not run (m2 has API 0.4 handlers, the device
# jaxlib 0.11.2 accepts 0.4, the stale release table said 0.3).
. "$(dirname "$0")/prelude.sh"
M=$PWD/.peer/exp/m2
T="python3 -m pytest -q -p no:cacheprovider"
export PYTEST_ADDOPTS="-k jax"
in_background "decode gpu jax" b_dec.log 200 $M $T tests/test_gpu_decode.py
in_background "moe gpu jax" b_moe.log 200 $M $T tests/test_gpu_fused_moe.py
in_background "rope+multi gpu jax" b_rope.log 200 $M $T tests/test_gpu_rope_norm.py tests/test_gpu_multi_device.py
( export PYTEST_ADDOPTS=""; in_background "rest (GPU present)" b_rest.log 200 $M $T tests \
  --ignore=tests/test_gpu_decode.py --ignore=tests/test_gpu_fused_moe.py --ignore=tests/test_gpu_rope_norm.py \
  --ignore=tests/test_gpu_multi_device.py; wait )
wait; t
collect b_
