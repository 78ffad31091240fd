#!/usr/bin/env bash
# session 55 call C (~1.5 min, any Hopper card). Carry .peer/pack (e78 = main + experiment 78: fused routing as one
# op, moe_route's unchanged kernel first on every path; tools/stage_experiments.sh e78:d88d092 &&
# tools/pack_staged.sh e78). e78's GPU tests: fused routing on every path (bit for bit against moe_route then
# fused_moe), in a CUDA graph with new logits, JAX jit; moe_route's GPU file; the stream-path tests; memcheck over
# the fused-routing cases. Then fused_routing_ab.py (its fused form should now read as the two ops: same kernels).
# Written BEFORE the run: all pass, memcheck clean; fused - two within +-0.5 us on every row.
. "$(dirname "$0")/prelude.sh"
unpack_packs
E=$X/e78
in_background "e78 tests" e78_tests.log 150 $E python3 -m pytest -q -p no:cacheprovider -x \
  tests/test_gpu_fused_moe.py tests/test_moe_route.py -k "fused_routing or stream_path or one_token or jax_jit_on_gpu or route"
in_background "e78 memcheck" e78_memcheck.log 150 $E compute-sanitizer --target-processes all --error-exitcode 99 \
  --tool memcheck python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py -k "fused_routing_on_gpu"
wait; t
grep -E "^FAILED|^E  |ERROR SUMMARY" $R/e78_*.log | head -20
for f in $R/e78_*.log; do echo "### $f"; tail -40 "$f"; done > $OUT/s55c_tests.txt
( cd $E && PYTHONPATH=$E timeout 40 python3 $ROOT/bench/calls/fused_routing_ab.py $OUT/s55c_fr_e78.json \
    > $OUT/s55c_fr_e78.txt 2>&1; echo "fused_routing_ab e78 rc=$?" ); t
cut -c1-150 $OUT/s55c_fr_e78.txt | grep "T="
