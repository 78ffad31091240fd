#!/usr/bin/env bash
# session 59 call A (~1.5 min on any Hopper card; on an H200 s54d.sh's rows first, ~3-4 min more). Carry .peer/pack
# (main staged: `tools/stage_experiments.sh m59 && tools/pack_staged.sh m59`; TREE=m59, the default here) and
# .peer/probe holding decode_ring_probe (H200 rows) and route_phase_probe / route_phase_probe0 -- build both here:
#   for v in "" 0; do nvcc -std=c++17 -I. -gencode arch=compute_90a,code=sm_90a -O3 ${v:+-DROUTE_PROBE_NO_STAMPS} \
#     -o .peer/probe/route_phase_probe$v tools/route_phase_probe.cu csrc/moe/route_validate.cc csrc/common/arch.cc \
#     csrc/common/check.cc csrc/common/tensor_view.cc; done
# 1. On an H200 only: s54d.sh's rows on main (predictions in its header, session 54).
# 2. tools/route_phase_probe.cu: a routing call's cycles phase by phase (token 0's warp), T = 1 f32, with and
#    without the hooks. Written BEFORE the run (session 58): with the hooks each graph call within +0.3 us of the
#    plain build; ungrouped E = 128 k = 8: logits ~600-900 cycles (one HBM/L2 round trip), score ~200-400, select
#    ~300-500, topk ~2000-3000 (8 rounds of ~300); the grouped DeepSeek-V3 case spends its extra ~6000 cycles (3.3
#    us at 1.98 GHz over ungrouped E = 256) in select (8 rolled bias loads, each an L2 round trip: 2000-4000) and
#    groups (1000-2000); if instead it sits in topk or score, the reading of session 57/58 (rolled loads) is wrong.
# 3. The MoE GPU test ids that s58b / s58c did not reach (collection order 181-254 of test_gpu_fused_moe.py +
#    test_moe_route.py, by name below). Expected: all pass.
. "$(dirname "$0")/prelude.sh"
unpack_packs
M=$X/${TREE:-m59}
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  TREE=${TREE:-m59} bash "$(dirname "$0")/s54d.sh"
  S=$(date +%s)  # (s54d.sh ran in its own shell: this stopwatch restarts here)
fi
SEL="bad_activation_scale or gemm_tile_knob or cluster_pairs_equal_one_cta or interleaved_w13 or moe_knobs_reject"
SEL="$SEL or negative_ids or out_may_be_x or sparse_reduce or tiled_persistent_grid"
in_background "moe tests" moe_tests.log 200 $M python3 -m pytest -q -p no:cacheprovider -rf tests/test_gpu_fused_moe.py -k "$SEL"
in_background "route tests" route_tests.log 200 $M python3 -m pytest -q -p no:cacheprovider -rf tests/test_moe_route.py
{ timeout 60 ./.peer/probe/route_phase_probe; echo "== no hooks"; timeout 60 ./.peer/probe/route_phase_probe0; } \
  > $OUT/s59a_route_phases.txt 2>&1; echo "route probe rc=$?"; t
cat $OUT/s59a_route_phases.txt
wait; t
grep -hE "^FAILED|^E  " $R/*_tests.log | head -20
for f in $R/*_tests.log; do echo "### $f"; tail -25 "$f"; done > $OUT/s59a_tests.txt
