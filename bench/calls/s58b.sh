#!/usr/bin/env bash
# session 58 call B (~4-6 min on an H200, ~3.5 min elsewhere). Carry .peer/pack holding e87 only (main after session
# 58: its route.cu SASS equals the staged e87 binary's; `tools/stage_experiments.sh e87:7478f8a && tools/pack_staged.sh
# e87`) and .peer/probe.
# 1. On an H200 only: s54d.sh's rows on e87 (decode_ring_probe, rope_norm 8/1, MoE T=1, decode 8/1 bf16 q_len 1 / 2;
#    predictions in s54d.sh's header, written in session 54) -- the H200 tables unmeasured since session 39.
# 2. Any card: main's whole MoE GPU test files (test_gpu_fused_moe.py, test_moe_route.py) and the rope_norm GPU file
#    on e87 -- s58a ran a selection of 44 of them for 87's landing. Expected: every test passes.
. "$(dirname "$0")/prelude.sh"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  TREE=e87 bash "$(dirname "$0")/s54d.sh"
  S=$(date +%s)  # (s54d.sh ran in its own shell: this stopwatch restarts here)
else
  unpack_packs
fi
X=$ROOT/.peer/exp
in_background "moe tests" moe_tests.log 260 $X/e87 python3 -m pytest -q -p no:cacheprovider -x \
  tests/test_gpu_fused_moe.py tests/test_moe_route.py
in_background "rope tests" rope_tests.log 260 $X/e87 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_rope_norm.py
wait; t
grep -E "^FAILED|^E  " $R/*_tests.log | head -20
for f in $R/*_tests.log; do echo "### $f"; tail -25 "$f"; done > $OUT/s58b_tests.txt
