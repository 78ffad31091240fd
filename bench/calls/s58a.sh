#!/usr/bin/env bash
# session 58 call A (~2 min, any Hopper card; on an H200 it goes on with s54d.sh's rows, ~3 min more). Carry
# .peer/pack (m57 e87: `tools/stage_experiments.sh m57 e87:7478f8a && tools/pack_staged.sh m57 e87`), .peer/probe
# (H200 rows only; build: see bench/NOTES.md's procedures or `nvcc -std=c++17 -I. -gencode
# arch=compute_90a,code=sm_90a -O3 -o .peer/probe/decode_ring_probe tools/decode_ring_probe.cu`).
#   m57 = main after session 57 (moe_route's routine with its loads in flight together, experiment 86).
#   87 = grouped routing by warp reductions: group ranks in registers, the kept groups by redux max / min rounds (were
#   warp arg-max rounds of ten dependent shuffles, ranks through shared memory), dropped groups' experts marked taken
#   in the lane masks (each rescan divided e / group_size and loaded a kept flag per expert), a group's top-two loop
#   with its loads in flight together.
# 1. Tests: e87's GPU tests (moe_route's GPU file: random grouped cases, DeepSeek-V3 and ties; fused routing on every
#    path incl. the grouped cases; the stream path); memcheck and racecheck over its routing cases.
# 2. route_chain.py on m57 and e87 (PDL on): the new grouped row (DeepSeek-V3: E = 256, 8 groups, 4 kept, sigmoid,
#    bias) and the ungrouped rows as a control.
# 3. On an H200 only: bench/calls/s54d.sh on m57.
# Written BEFORE the run (session 57, no grouped row measured yet): m57's grouped row 5-6 us a call (s57c's
# ungrouped E = 256 k = 8: 4.2), e87 -1.5..-3 us on it (f32 and bf16, T = 1 and 16); every ungrouped row within
# +-0.15 of m57 (its code is the same but for the scratch offsets).
# Land rule: 87 lands if its tests pass, the sanitizers are clean, its grouped rows are >= 0.5 us below m57's at T = 1
# (f32 and bf16), and no ungrouped row is slower than m57's by > 0.2.
. "$(dirname "$0")/prelude.sh"
unpack_packs
if [ -z "${NO_TESTS:-}" ]; then  # NO_TESTS=1: the timing only
  SEL="fused_routing or stream_path or one_token or jax_jit_on_gpu or route"
  in_background "87 tests" e87_tests.log 200 $X/e87 python3 -m pytest -q -p no:cacheprovider \
    tests/test_gpu_fused_moe.py tests/test_moe_route.py -k "$SEL"
  SAN="fused_routing_on_gpu or (deepseek and cuda and torch) or (random and cuda and torch)"
  for tool in memcheck racecheck; do
    in_background "e87 $tool" e87_$tool.log 200 $X/e87 compute-sanitizer --target-processes all --error-exitcode 99 \
      --tool $tool python3 -m pytest -q -p no:cacheprovider tests/test_moe_route.py tests/test_gpu_fused_moe.py -k "$SAN"
  done
  wait; t
  grep -E "^FAILED|^E  |ERROR SUMMARY" $R/e87*.log | head -20
  for f in $R/e87*.log; do echo "### $f"; tail -15 "$f"; done > $OUT/s58a_tests.txt
fi
for v in m57 e87 m57b e87b; do
  d=${v%b}
  ( cd $X/$d && PYTHONPATH=$X/$d timeout 60 python3 $ROOT/bench/calls/route_chain.py > $R/chain_$v.txt 2>&1; \
    echo "route_chain $v rc=$?" ); t
done
paste $R/chain_m57.txt $R/chain_e87.txt $R/chain_m57b.txt $R/chain_e87b.txt | sed -E 's/ +/ /g' | tee $OUT/s58a_chain.txt
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then TREE=m57 bash "$(dirname "$0")/s54d.sh"; fi
