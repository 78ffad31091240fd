#!/usr/bin/env bash
# session 56 call A (~3 min on an H100; ~7 min on an H200). Carry .peer/pack (e78 e79 e80 m55:
# `tools/stage_experiments.sh e78:e7ac3c0 e79:95c2284 e80:155a8b5 && tools/pack_staged.sh e78 e79 e80 m55`),
# .peer/probe.
#   e78 = experiment 78b: fused routing as ONE op, moe_route's unchanged kernel as its first stage (s55c's header).
#   e79 = 79b: 78b + moe_route's kernel triggering its dependents right after its PDL wait.
#   e80 = 79b + a lean routing kernel (one instance per logits dtype and grouping, loops rolled, scratch sized by E:
#         520 SASS instructions, was 1712; same arithmetic, same bits).
#   m55 = main's code since session 54 (the baseline of the new "route" column: moe_route alone, chained).
# 1. Tests: e79 / e80 GPU tests of fused routing + moe_route's GPU file + the stream path, memcheck on e80's
#    fused-routing and routing cases; e78's fused-routing tests.
# 2. fused_routing_ab.py on m55, e78, e79, e80: per layer, ids / two / fused / route.
# 3. On an H200 only: bench/calls/s54d.sh on m55 (the H200 rows of #2 / #3 / #4, unmeasured since session 39-40).
# Written BEFORE the run (session 56):
#   tests pass, memcheck clean. e78: fused - two within +-0.5 us on every row (the same kernels; s55b: two - ids
#   +6.4..+10.4). e79: two and fused -2..-4 us at T <= 4 against e78, -0..-2 at T >= 16; ids unchanged.
#   e80: route -1..-3 us against e79 on every row; two and fused -1..-3 at T <= 4 against e79; ids unchanged.
# Land rule: 78 if its tests pass; 79 instead if its tests pass and its fused is faster than e78's by >= 1 us on at
# least 4 of the 6 T <= 4 rows with no row slower by > 0.5; 80 instead of either if its tests pass and its fused is
# faster than the chosen one's by >= 0.5 us on at least 4 of the 6 T <= 4 rows with no row slower by > 0.5.
. "$(dirname "$0")/prelude.sh"
unpack_packs
K="fused_routing or stream_path or one_token or jax_jit_on_gpu or route"
for v in e79 e80; do
  in_background "$v tests" ${v}_tests.log 170 $X/$v python3 -m pytest -q -p no:cacheprovider -x \
    tests/test_gpu_fused_moe.py tests/test_moe_route.py -k "$K"
done
in_background "e80 memcheck" e80_memcheck.log 170 $X/e80 compute-sanitizer --target-processes all --error-exitcode 99 \
  --tool memcheck python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py tests/test_moe_route.py \
  -k "fused_routing_on_gpu or (deepseek and cuda and torch) or (random and cuda and torch)"
in_background "e78 tests" e78_tests.log 170 $X/e78 python3 -m pytest -q -p no:cacheprovider -x \
  tests/test_gpu_fused_moe.py -k "fused_routing"
wait; t
grep -E "^FAILED|^E  |ERROR SUMMARY" $R/e*.log | head -20
for f in $R/e*.log; do echo "### $f"; tail -40 "$f"; done > $OUT/s56a_tests.txt
for v in m55 e78 e79 e80; do
  ( cd $X/$v && PYTHONPATH=$X/$v timeout 60 python3 $ROOT/bench/calls/fused_routing_ab.py $OUT/s56a_fr_$v.json \
      > $OUT/s56a_fr_$v.txt 2>&1; echo "fused_routing_ab $v rc=$?" ); t
done
for v in m55 e78 e79 e80; do echo "== $v"; grep "T=" $OUT/s56a_fr_$v.txt | sed -E 's/ +/ /g' | cut -c1-150; done
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then TREE=m55 bash "$(dirname "$0")/s54d.sh"; fi
