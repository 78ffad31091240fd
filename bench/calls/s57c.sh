#!/usr/bin/env bash
# session 57 call C (~2.5 min, any Hopper card). Carry .peer/pack (m56 e86: `tools/stage_experiments.sh m56
# e86:514c044 && tools/pack_staged.sh m56 e86`), .peer/probe (H200 rows, last, H200 only).
#   86 = moe_route's routine with its loads in flight together: a rescan loads all of a lane's keys and masks the
#   taken ones (it branched around each load), the select pass stores order keys (ungrouped) and keeps each lane's
#   best (no scan before the first round), the softmax pass branch-free and unrolled by 4.
# 1. Tests: e86's GPU tests (moe_route's GPU file incl. ties and grouped, fused routing on every path, the stream
#    path); memcheck and racecheck over its routing cases.
# 2. route_chain.py on m56 and e86 (PDL on).
# 3. fused_routing_ab.py at T = 1, 2, 4: m56, e86, e86, m56.
# 4. On an H200 only: bench/calls/s54d.sh on m56.
# Written BEFORE the run (session 57, from s57b's chain: m56 4.8 us at E = 128 k = 8, 1.9 at E = 32 k = 1, +1.3 for
# k 1 -> 8): e86 route chain E = 128 k = 8 3.6-4.2 us, E = 32 k = 8 2.3-2.8 (k 1 -> 8 +0.4-0.9), E = 32 k = 1 within
# 0.2 of m56; the E slope (64 -> 512) flatter by 0.1-0.3 us per doubling. fused_routing_ab's route column -0.6..-1.2 at
# E = 128 (4.7), -0.4..-0.9 at E = 64 (3.7); fused -0.5..-1.0 on every T <= 4 row; ids unchanged.
# Land rule: 86 lands if its tests pass, the sanitizers are clean, its route column is >= 0.3 us below m56's at E = 128
# in both rounds, and no fused T <= 4 row is slower than m56's by > 0.3 in both rounds.
. "$(dirname "$0")/prelude.sh"
unpack_packs
if [ -z "${NO_TESTS:-}" ]; then  # NO_TESTS=1: the timing only
  SEL="fused_routing or stream_path or one_token or jax_jit_on_gpu or route"
  in_background "86 tests" e86_tests.log 200 $X/e86 python3 -m pytest -q -p no:cacheprovider \
    tests/test_gpu_fused_moe.py tests/test_moe_route.py -k "$SEL"
  SAN="fused_routing_on_gpu or (deepseek and cuda and torch) or (random and cuda and torch)"
  for tool in memcheck racecheck; do
    in_background "e86 $tool" e86_$tool.log 200 $X/e86 compute-sanitizer --target-processes all --error-exitcode 99 \
      --tool $tool python3 -m pytest -q -p no:cacheprovider tests/test_moe_route.py tests/test_gpu_fused_moe.py -k "$SAN"
  done
  wait; t
  grep -E "^FAILED|^E  |ERROR SUMMARY" $R/e86*.log | head -20
  for f in $R/e86*.log; do echo "### $f"; tail -15 "$f"; done > $OUT/s57c_tests.txt
fi
for v in m56 e86; do
  ( cd $X/$v && PYTHONPATH=$X/$v timeout 60 python3 $ROOT/bench/calls/route_chain.py > $R/chain_$v.txt 2>&1; \
    echo "route_chain $v rc=$?" ); t
done
paste $R/chain_m56.txt $R/chain_e86.txt | sed -E 's/ +/ /g' | tee $OUT/s57c_chain.txt
ab() {  # ab LABEL VERSION
  ( cd $X/$2 && PYTHONPATH=$X/$2 FR_TOKENS=1,2,4 timeout 60 python3 $ROOT/bench/calls/fused_routing_ab.py \
      > $R/fr_$1.txt 2>&1; echo "fr $1 rc=$?" ); t
}
ab m56a m56; ab e86a e86; ab e86b e86; ab m56b m56
for v in m56a e86a e86b m56b; do echo "== $v"; grep "T=" $R/fr_$v.txt | sed -E 's/ +/ /g' | cut -c1-130; done \
  | tee $OUT/s57c_fr.txt
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then TREE=m56 bash "$(dirname "$0")/s54d.sh"; fi
