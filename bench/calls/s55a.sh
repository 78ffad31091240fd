#!/usr/bin/env bash
# session 55 call A (~5-7 min; any Hopper card, H200 rows of record added when it is one). Carry .peer/pack (m55 =
# main, e76 = main + experiment 76: fused routing inside fused_moe; tools/stage_experiments.sh e76:234c7c6 &&
# tools/pack_staged.sh m55 e76), .peer/probe.
#   1. e76's GPU tests: the new fused-routing cases (every path: stream mma.sync / wgmma gate-up, fp8 and bf16 down,
#      E = 1024, grouped top-k with bias, EP, tiled, grouped; CUDA graph with new logits; JAX jit), moe_route's GPU
#      file, and the stream-path files whose kernels now carry the routing flag (ids-given instances: same registers
#      as main); memcheck + racecheck over the fused-routing cases.
#   2. bench/calls/fused_routing_ab.py on e76: per layer, ids given / moe_route + fused_moe / fused routing.
#   3. bench moe T=1,4 ids given, m55 vs e76, ROUNDS (default "1"; "1 2" for two) -- the ids-given path must not move.
# Written BEFORE the run (session 55): tests all pass, sanitizers clean. Fused routing, T <= 4 (stream path), per
# layer: fused - two -1.0..-3.0 us (a routing launch and its drain leave the chain; the CTAs
# route ~1-1.5 us themselves before their first weight copy), and fused - ids +0.5..+1.5 us (that
# routing, on the critical path); T >= 16 (tiled / grouped: the routing kernel launched first in the op) within
# +-0.5 of the two ops. bench moe ids-given rows: within +-0.3 us (identical kernels; placement only).
# Land rule: tests and sanitizers pass, and no ids-given T=1 / T=4 row is slower by more than 0.5 us (both rounds, given two).
. "$(dirname "$0")/prelude.sh"
unpack_packs
M=$X/m55; E=$X/e76
H200=0; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && H200=1
K="fused_routing or stream_path or one_token or cuda_graph_per_token or jax_jit_on_gpu"
in_background "e76 tests" e76_tests.log 280 $E python3 -m pytest -q -p no:cacheprovider -x \
  tests/test_gpu_fused_moe.py tests/test_moe_route.py -k "$K or route"
in_background "e76 memcheck" e76_memcheck.log 280 $E compute-sanitizer --target-processes all --error-exitcode 99 \
  --tool memcheck python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py -k "fused_routing_on_gpu"
in_background "e76 racecheck" e76_racecheck.log 280 $E compute-sanitizer --target-processes all --error-exitcode 99 \
  --tool racecheck python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py -k "fused_routing_on_gpu and (T1- or T3- or T2-)"
wait; t
grep -E "^FAILED|^E  |ERROR SUMMARY|RACECHECK SUMMARY" $R/e76_*.log | head -20
for f in $R/e76_*.log; do echo "### $f"; tail -40 "$f"; done > $OUT/s55a_tests.txt
[ $H200 = 1 ] && h200_rows $M  # the rows of record first when the card is an H200
# (its "two" form runs moe_route then fused_moe in any build: e76 alone gives all three forms)
for v in e76; do
  ( cd ${X}/$v && PYTHONPATH=${X}/$v timeout 150 python3 $ROOT/bench/calls/fused_routing_ab.py $OUT/s55a_fr_$v.json \
      > $OUT/s55a_fr_$v.txt 2>&1; echo "fused_routing_ab $v rc=$?" ); t
done
for round in ${ROUNDS:-1}; do
  for v in m55 e76; do
    ( cd ${X}/$v && PYTHONPATH=${X}/$v HPC_BENCH_PEERS=0 timeout 90 python3 -m hpc_xla.bench moe --shapes \
        qwen3-30b-a3b/fp8_tensor,hy3-tp8/fp8_tensor,qwen3-30b-a3b/bf16 --tokens 1,4 > $OUT/s55a_moe_${v}_$round.txt 2>&1
      echo "moe $v round $round rc=$?" ); t
  done
done
echo "== fused routing (us per layer, e76)"
cut -c1-150 $OUT/s55a_fr_e76.txt | grep "T="
echo "== bench moe ids given (T=1 / 4): m55, e76 per round"
for round in ${ROUNDS:-1}; do for v in m55 e76; do echo "-- $v $round"; grep -a "│" $OUT/s55a_moe_${v}_$round.txt | grep -E "│ *(1|4) *│" | cut -c1-70; done; done
