#!/usr/bin/env bash
# session 32 call B (~5 min; carry .peer/exp/n): what s32a's groups left of test_gpu_fused_moe.py when they hit their
# 220 s timeouts (all that ran passed): act_epilogue case24-27, interleaved, the last two knob cases, the activation
# scale check and negative ids.
. "$(dirname "$0")/prelude.sh"
N=$PWD/.peer/exp/n
T="python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py"
in_background "moe A tail" h_a.log 280 $N $T -k "(act_epilogue and (case24 or case25 or case26 or case27)) or interleaved"
in_background "moe B tail" h_b.log 280 $N $T -k "(moe_knobs and (W2_PREFETCH or GATHER)) or bad_activation_scale or \
negative_ids"
wait; t
collect h_
