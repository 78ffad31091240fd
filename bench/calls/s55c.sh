#!/usr/bin/env bash
# session 55 call C (~2 min, any Hopper card; FIRST next session -- the device could not start it in session 55).
# Carry .peer/pack (e78, e79: `tools/stage_experiments.sh e78:e7ac3c0 e79:95c2284 && tools/pack_staged.sh e78 e79`).
#   e78 = main + experiment 78: fused routing as ONE op (torch hpc_xla::fused_moe_routed / XLA hpc_xla_fused_moe_routed,
#         topk_weights / topk_ids written), moe_route's unchanged kernel as its first stage on every path.
#   e79 = e78 + moe_route's kernel triggering its dependents right after its PDL wait (was: after routing).
#   (78b / 79b: 78 / 79 with the faces' routing-option parsing in one helper -- Python only.)
# 1. e79's GPU tests (fused routing on every path, bit for bit against moe_route then fused_moe; a CUDA graph with
#    new logits; JAX jit; moe_route's GPU file; the stream-path tests) and memcheck over the fused-routing cases.
# 2. fused_routing_ab.py on e78 and e79: per layer, ids given / two ops / fused.
# Written BEFORE the run (session 55): tests pass, memcheck clean. e78: fused - two within +-0.5 us on every row (the
# same kernels; s55b: two - ids +6.4..+10.4). e79: two and fused -2..-4 us at T <= 4 against e78 (the next kernel's
# launch no longer after the routing), -0..-2 at T >= 16; ids unchanged.
# Land rule: 78 if its tests pass; 79 instead if its tests pass and its fused is faster than e78's by >= 1 us on at
# least 4 of the 6 T <= 4 rows with no row slower by > 0.5.
. "$(dirname "$0")/prelude.sh"
unpack_packs
in_background "e79 tests" e79_tests.log 150 $X/e79 python3 -m pytest -q -p no:cacheprovider -x \
  tests/test_gpu_fused_moe.py tests/test_moe_route.py -k "fused_routing or stream_path or one_token or jax_jit_on_gpu or route"
in_background "e79 memcheck" e79_memcheck.log 150 $X/e79 compute-sanitizer --target-processes all --error-exitcode 99 \
  --tool memcheck python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py tests/test_moe_route.py \
  -k "fused_routing_on_gpu or (deepseek and cuda and torch)"
in_background "e78 tests" e78_tests.log 150 $X/e78 python3 -m pytest -q -p no:cacheprovider -x \
  tests/test_gpu_fused_moe.py -k "fused_routing"
wait; t
grep -E "^FAILED|^E  |ERROR SUMMARY" $R/e7*.log | head -20
for f in $R/e7*.log; do echo "### $f"; tail -40 "$f"; done > $OUT/s55c_tests.txt
for v in e78 e79; do
  ( cd $X/$v && PYTHONPATH=$X/$v timeout 40 python3 $ROOT/bench/calls/fused_routing_ab.py $OUT/s55c_fr_$v.json \
      > $OUT/s55c_fr_$v.txt 2>&1; echo "fused_routing_ab $v rc=$?" ); t
done
for v in e78 e79; do echo "== $v"; cut -c1-150 $OUT/s55c_fr_$v.txt | grep "T="; done
