#!/usr/bin/env bash
# session 57 call B (~3.5 min, any Hopper card). Carry .peer/pack (m56 e84: `tools/stage_experiments.sh m56
# e84:44e507e && tools/pack_staged.sh m56 e84`), .peer/probe (H200 rows, last, H200 only).
#   e84 = in-CTA routing in the wgmma gate-up only (single-token fp8_tensor, ungrouped): its CTAs run moe_route's
#   routine (now csrc/moe/route_warp.cuh, shared with moe_route's kernel) instead of waiting for the routing kernel;
#   CTA 0 writes the op's topk outputs; the down kernel builds its hit list after its PDL wait. HPC_XLA_MOE_CTA_ROUTE=0
#   in the same binary = the routing kernel first, as on main.
# 1. Tests: e84's GPU tests (fused routing on every path + the new in-CTA ones, moe_route's GPU file, the stream
#    path), memcheck and racecheck over its routing cases.
# 2. s57a's route_chain.py on m56, PDL on and off (predictions in s57a.sh's header).
# 3. fused_routing_ab.py: m56, e84, e84 with HPC_XLA_MOE_CTA_ROUTE=0, e84, m56 (ABCBA: the card's drift shows).
# 4. On an H200 only: bench/calls/s54d.sh on m56.
# Written BEFORE the run (session 57): tests pass, sanitizers clean. e84 fused Qwen3 fp8 T=1 -1..-3 us against m56
# (26.8 on an H100 in s56b): the routing kernel's PDL link gone, the routine (~1-1.5 us: logits from memory + ~0.5 us
# of work) now on the gate-up's path and the down's hit list (~0.5-1 us) after its wait. Every other row (T >= 2,
# bf16, block128: the routing kernel, unchanged) and e84 at CTA_ROUTE=0 within +-0.5 of m56; route column +-0.2
# (the routine moved, its SASS -5 instructions: the norm computed before the trigger).
# Land rule: 84 lands if its tests pass, the sanitizers are clean, its Qwen3 fp8 T=1 fused is >= 0.5 us below
# m56's in both rounds, and no other T <= 4 row is slower than m56's by > 0.5 in both rounds.
. "$(dirname "$0")/prelude.sh"
unpack_packs
K="fused_routing or stream_path or one_token or jax_jit_on_gpu or route"
in_background "e84 tests" e84_tests.log 200 $X/e84 python3 -m pytest -q -p no:cacheprovider \
  tests/test_gpu_fused_moe.py tests/test_moe_route.py -k "$K"
for tool in memcheck racecheck; do
  in_background "e84 $tool" e84_$tool.log 200 $X/e84 compute-sanitizer --target-processes all --error-exitcode 99 \
    --tool $tool python3 -m pytest -q -p no:cacheprovider tests/test_moe_route.py tests/test_gpu_fused_moe.py \
    -k "fused_routing_on_gpu or inside_the_wgmma or (deepseek and cuda and torch) or (random and cuda and torch)"
done
wait; t
grep -E "^FAILED|^E  |ERROR SUMMARY" $R/e84*.log | head -20
for f in $R/e84*.log; do echo "### $f"; tail -15 "$f"; done > $OUT/s57b_tests.txt
for pdl in 1 0; do
  ( cd $X/m56 && PYTHONPATH=$X/m56 HPC_XLA_PDL=$pdl timeout 60 python3 $ROOT/bench/calls/route_chain.py \
      $OUT/s57a_chain_pdl$pdl.json > $OUT/s57a_chain_pdl$pdl.txt 2>&1; echo "route_chain pdl=$pdl rc=$?" ); t
done
paste $OUT/s57a_chain_pdl1.txt $OUT/s57a_chain_pdl0.txt | sed -E 's/ +/ /g'
ab() {  # ab LABEL VERSION [ENV=VALUE]
  ( cd $X/$2 && env PYTHONPATH=$X/$2 ${3:-HPC_XLA_MOE_CTA_ROUTE=1} timeout 60 python3 $ROOT/bench/calls/fused_routing_ab.py \
      $OUT/s57b_fr_$1.json > $OUT/s57b_fr_$1.txt 2>&1; echo "fused_routing_ab $1 rc=$?" ); t
}
ab m56a m56; ab e84a e84; ab e84off e84 HPC_XLA_MOE_CTA_ROUTE=0; ab e84b e84; ab m56b m56
for v in m56a e84a e84off e84b m56b; do echo "== $v"; grep "T=[124] " $OUT/s57b_fr_$v.txt | sed -E 's/ +/ /g' | cut -c1-130; done
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then TREE=m56 bash "$(dirname "$0")/s54d.sh"; fi
