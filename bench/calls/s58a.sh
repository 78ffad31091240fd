#!/usr/bin/env bash
# session 58 call A (~2.5 min, any Hopper card; on an H200 it goes on with s54d.sh's rows, ~3 min more). Carry
# .peer/pack (m57 e87 e88: `tools/stage_experiments.sh m57 e87:7478f8a e88:607b055 && tools/pack_staged.sh m57 e87
# e88`), .peer/probe
# (H200 rows only; build: see bench/NOTES.md's procedures or `nvcc -std=c++17 -I. -gencode
# arch=compute_90a,code=sm_90a -O3 -o .peer/probe/decode_ring_probe tools/decode_ring_probe.cu`).
#   m57 = main after session 57 (moe_route's routine with its loads in flight together, experiment 86).
#   87 = grouped routing by warp reductions: group ranks in registers, the kept groups by redux max / min rounds (were
#   warp arg-max rounds of ten dependent shuffles, ranks through shared memory), dropped groups' experts marked taken
#   in the lane masks (each rescan divided e / group_size and loaded a kept flag per expert), a group's top-two loop
#   with its loads in flight together.
#   88 = 87 + the sigmoid and select passes in blocks of 4 of a lane's elements, loads first (shared memory and the
#   correction bias, the bias branch-free); SASS +256 instructions an instance.
# 1. Tests: e87's and e88's GPU tests (moe_route's GPU file: random grouped cases, DeepSeek-V3 and ties; fused routing on every
#    path incl. the grouped cases; the stream path); memcheck and racecheck over its routing cases.
# 2. route_chain.py on m57, e87, e88, e88, e87, m57 (PDL on): the new grouped row (DeepSeek-V3: E = 256, 8 groups, 4 kept, sigmoid,
#    bias) and the ungrouped rows as a control.
# 3. On an H200 only: bench/calls/s54d.sh on m57.
# Written BEFORE the run (session 57, no grouped row measured yet): m57's grouped row 5-6 us a call (s57c's
# ungrouped E = 256 k = 8: 4.2), e87 -1.5..-3 us on it (f32 and bf16, T = 1 and 16); every ungrouped row within
# +-0.15 of m57 (its code is the same but for the scratch offsets). e88 against e87: grouped rows -0.4..-1.2 (the
# sigmoid pass and the bias loads in 2 batches instead of 8 chains), ungrouped E <= 128 -0.1..+0.2 (the select pass
# saves little at 4 elements a lane; the size may cost that), E = 512 -0.3..-0.8.
# Land rule: 87 lands if its tests pass, the sanitizers are clean, its grouped rows are >= 0.5 us below m57's at T = 1
# (f32 and bf16) in both rounds, and no ungrouped row is slower than m57's by > 0.2 in both rounds. 88 instead of 87
# if its tests pass too, its grouped rows are >= 0.3 below 87's in both rounds and no ungrouped row at E <= 128 is
# slower than 87's by > 0.15 in both rounds.
. "$(dirname "$0")/prelude.sh"
unpack_packs
if [ -z "${NO_TESTS:-}" ]; then  # NO_TESTS=1: the timing only
  SEL="fused_routing or stream_path or one_token or jax_jit_on_gpu or route"
  SAN="fused_routing_on_gpu or (deepseek and cuda and torch) or (random and cuda and torch)"
  for v in e87 e88; do
    in_background "$v tests" ${v}_tests.log 220 $X/$v python3 -m pytest -q -p no:cacheprovider \
      tests/test_gpu_fused_moe.py tests/test_moe_route.py -k "$SEL"
    for tool in memcheck racecheck; do
      in_background "$v $tool" ${v}_$tool.log 220 $X/$v compute-sanitizer --target-processes all --error-exitcode 99 \
        --tool $tool python3 -m pytest -q -p no:cacheprovider tests/test_moe_route.py tests/test_gpu_fused_moe.py -k "$SAN"
    done
  done
  wait; t
  grep -E "^FAILED|^E  |ERROR SUMMARY" $R/e8*.log | head -20
  for f in $R/e8*.log; do echo "### $f"; tail -15 "$f"; done > $OUT/s58a_tests.txt
fi
for v in m57 e87 e88 e88b e87b m57b; do
  d=${v%b}
  ( cd $X/$d && PYTHONPATH=$X/$d timeout 60 python3 $ROOT/bench/calls/route_chain.py > $R/chain_$v.txt 2>&1; \
    echo "route_chain $v rc=$?" ); t
done
paste $R/chain_m57.txt $R/chain_e87.txt $R/chain_e88.txt $R/chain_e88b.txt $R/chain_e87b.txt $R/chain_m57b.txt | sed -E 's/ +/ /g' | tee $OUT/s58a_chain.txt
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then TREE=m57 bash "$(dirname "$0")/s54d.sh"; fi
