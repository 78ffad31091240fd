#!/usr/bin/env bash
# session 56 call B (~3.5 min on an H100). Carry .peer/pack (e78 e80 e81 e82 e83 m55: `tools/stage_experiments.sh
# e81:1f42b81 e82:1f9a196` before 80 landed, `e83:3b46c8a` after; `tools/pack_staged.sh e78 e80 e81 e82 e83 m55`),
# .peer/probe.
#   e78 = 78b (fused routing as one op, moe_route's kernel unchanged as its first stage); e80 = 79b + the lean
#   routing kernel (s56a: -1.6..-2.8 us a routed layer against e78 at T <= 2);
#   e81 = 78b + the lean kernel (no early trigger: 79b's was 0..+4.6 us slower at T <= 4 in s56a);
#   e82 = 81 + the top-k by warp reductions (redux max / min; only the round's winner rescans).
#   e83 = 82 + the first pass's logits loads unrolled by 4 (in flight together; rolled, 4 loads in a row at E = 128).
# 1. Tests: e81 / e82 / e83 GPU tests (fused routing on every path, moe_route's GPU file incl. ties, the stream path);
#    memcheck and racecheck over e83's routing cases (82's kernel in it).
# 2. fused_routing_ab.py on e78, e80, e81, e82, e83.
# 3. On an H200 only: bench/calls/s54d.sh on m55.
# Written BEFORE the run (session 56): tests pass, sanitizers clean. e81 against e80: fused and two -0..-3 us at
# T <= 4 (the early trigger gone), route the same (+-0.3). e82 against e81: route -0.8..-1.5 us at E = 128 (qwen3
# rows), -0.3..-0.8 at E = 64 (block128 rows); fused / two by the same. e83 against e82: route -0.5..-1.0 at
# E = 128, -0.2..-0.5 at E = 64.
# Land rule: among e80 / e81 / e82 / e83 whose tests pass and whose fused is on no T <= 4 row slower than e78's by > 0.5,
# the lowest mean fused over the nine T <= 4 rows (three shapes x T = 1, 2, 4); 82 only if it beats 81's mean by
# >= 0.3 us (more code), 83 only if it beats the chosen one's by >= 0.3; none -> 78 (main has 80 since s56a).
# Short form for a small device budget: `TEST_VERSIONS="e81 e83" AB_VERSIONS="e80 e81 e83" bash bench/calls/s56b.sh`
# with only those packed (m55 absent: no H200 rows); its rule: the lowest mean of the nine rows against e80 (main).
. "$(dirname "$0")/prelude.sh"
unpack_packs
K="fused_routing or stream_path or one_token or jax_jit_on_gpu or route"
for v in ${TEST_VERSIONS:-e81 e82 e83}; do
  in_background "$v tests" ${v}_tests.log 170 $X/$v python3 -m pytest -q -p no:cacheprovider -x \
    tests/test_gpu_fused_moe.py tests/test_moe_route.py -k "$K"
done
for tool in memcheck racecheck; do
  in_background "e83 $tool" e83_$tool.log 170 $X/e83 compute-sanitizer --target-processes all --error-exitcode 99 \
    --tool $tool python3 -m pytest -q -p no:cacheprovider tests/test_moe_route.py tests/test_gpu_fused_moe.py \
    -k "fused_routing_on_gpu or (deepseek and cuda and torch) or (random and cuda and torch)"
done
wait; t
grep -E "^FAILED|^E  |ERROR SUMMARY" $R/e*.log | head -20
for f in $R/e*.log; do echo "### $f"; tail -15 "$f"; done > $OUT/s56b_tests.txt
for v in ${AB_VERSIONS:-e78 e80 e81 e82 e83}; do
  ( cd $X/$v && PYTHONPATH=$X/$v timeout 60 python3 $ROOT/bench/calls/fused_routing_ab.py $OUT/s56b_fr_$v.json \
      > $OUT/s56b_fr_$v.txt 2>&1; echo "fused_routing_ab $v rc=$?" ); t
done
for v in ${AB_VERSIONS:-e78 e80 e81 e82 e83}; do echo "== $v"; grep "T=" $OUT/s56b_fr_$v.txt | sed -E 's/ +/ /g' | cut -c1-130; done
if [ -d $X/m55 ] && nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then TREE=m55 bash "$(dirname "$0")/s54d.sh"; fi
