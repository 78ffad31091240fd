#!/usr/bin/env bash
# session 32 call A (~10 min; carry .peer/exp/n, .peer/exp/m (a copy of n), .peer/vllm_triton_moe): the rest of
# test_gpu_fused_moe.py that s27f's first run (session 32, H100) left when its two groups hit their 290 s timeouts
# (every test that ran passed: 50 of group A, 86 of group B), then the fused_moe table of record (s22c5's bench).
. "$(dirname "$0")/prelude.sh"
N=$PWD/.peer/exp/n
T="python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py"
DESEL=""
for c in 0-128x256 1-128x128 2-64x256 3-64x128 4-128x256 5-128x128 6-64x256 7-64x128 8-128x256; do
  DESEL="$DESEL --deselect tests/test_gpu_fused_moe.py::test_grouped_act_epilogue_equals_kernel[case$c]"
done
in_background "moe A rest" g_a.log 220 $N $T -k "act_epilogue or interleaved" $DESEL
in_background "moe B rest" g_b.log 220 $N $T -k "w2_prefetch or tiled_persistent or sparse_reduce or knob or \
bad_activation_scale or negative_ids"
wait; t
collect g_
W=$PWD/.peer/exp/m
( cd $W && PYTHONPATH=$W HPC_TRITON_MOE_DIR=$PWD/../../vllm_triton_moe timeout 330 python3 -m hpc_xla.bench moe \
  --out $OUT/moe.json > $OUT/moe_table.txt 2>&1; echo "bench rc=$?" )
grep -v "^  " $OUT/moe_table.txt | tail -70 | cut -c1-190
t
