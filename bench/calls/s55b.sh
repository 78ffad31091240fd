#!/usr/bin/env bash
# session 55 call B (~2.5-3 min; any Hopper card, H200 rows of record added when it is one). Carry .peer/pack (m55 =
# main, e77 = main + experiment 77 = 76's fused routing with moe_route's per-token routine in registers;
# tools/stage_experiments.sh e77:837e853 && tools/pack_staged.sh m55 e77), .peer/probe.
#   1. e77's GPU tests: the fused-routing cases (s55a's, + Mixtral's 8 experts; E = 1024 now routes by the kernel
#      first), moe_route's GPU file (its kernel runs the new routine), the stream-path tests; memcheck over the
#      fused-routing cases and moe_route's DeepSeek-V3 case, racecheck over the in-CTA ones.
#   2. bench/calls/fused_routing_ab.py on m55 (the old routing kernel: its "two" form) and e77.
# Written BEFORE the run (session 55, after s55a: 76's in-CTA routing +5..+9 us over the two ops at T <= 4, and the
# two ops +9 us over ids given on every row): the routine was ~4-5 us of dependent shared-memory and load latency
# per token; in registers ~1-1.5 us. Predicted, per layer: e77 two - ids +4..+6 us (m55: +9); e77 fused - ids at
# T <= 4 +1..+3 us (76: +14..+17), i.e. fused below two by 2-5 us; T >= 16 fused within +-0.5 of two.
# Land rule: tests and sanitizers pass, and e77's fused is not slower than e77's two on any row by more than 0.5 us
# (else the stream path launches the routing kernel first too, and what lands is the one-op form).
. "$(dirname "$0")/prelude.sh"
unpack_packs
M=$X/m55; E=$X/e77
H200=0; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && H200=1
K="fused_routing or stream_path or one_token or jax_jit_on_gpu"
in_background "e77 tests" e77_tests.log 150 $E python3 -m pytest -q -p no:cacheprovider -x \
  tests/test_gpu_fused_moe.py tests/test_moe_route.py -k "$K or route"
in_background "e77 memcheck" e77_memcheck.log 150 $E compute-sanitizer --target-processes all --error-exitcode 99 \
  --tool memcheck python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py tests/test_moe_route.py -k "fused_routing_on_gpu or (deepseek and cuda and torch)"
in_background "e77 racecheck" e77_racecheck.log 150 $E compute-sanitizer --target-processes all --error-exitcode 99 \
  --tool racecheck python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py -k "fused_routing_on_gpu and (T1- or T3- or T2- or T4-)"
wait; t
grep -E "^FAILED|^E  |ERROR SUMMARY|RACECHECK SUMMARY" $R/e77_*.log | head -20
for f in $R/e77_*.log; do echo "### $f"; tail -40 "$f"; done > $OUT/s55b_tests.txt
[ $H200 = 1 ] && h200_rows $M  # the rows of record first when the card is an H200
# (its "two" form runs moe_route then fused_moe in any build; m55's "fused" is the two ops too)
for v in m55 e77; do
  ( cd ${X}/$v && PYTHONPATH=${X}/$v timeout 40 python3 $ROOT/bench/calls/fused_routing_ab.py $OUT/s55b_fr_$v.json \
      > $OUT/s55b_fr_$v.txt 2>&1; echo "fused_routing_ab $v rc=$?" ); t
done
echo "== fused routing (us per layer): m55 (old routing kernel; its fused = two ops), then e77"
cut -c1-150 $OUT/s55b_fr_m55.txt | grep "T=" ; cut -c1-150 $OUT/s55b_fr_e77.txt | grep "T="
