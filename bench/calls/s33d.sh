#!/usr/bin/env bash
# session 33 call D (~5 min; carry .peer/exp/n, .peer/exp/e34, .peer/exp/e35): experiments 34 and 35 on main (n),
# their tests; the A/B is s33e.sh (chain it right after).
# e34 = main + 5cb7ec1: fp8_block128's 128x128 grouped GEMMs in 2-CTA clusters along N (A by TMA multicast), the
# form experiment 33 landed for the 128x256 tiles. e35 = main + ffbb725: every persistent cluster runs one
# contiguous run of the grouped problem's tiles (CUTLASS's group scheduler hands out q, q+G, ...: a new expert, new
# TMA descriptors, on almost every tile at Qwen3's shapes); HPC_XLA_MOE_TILE_ORDER=strided gives CUTLASS's back.
# Tests: e34's block128 cluster test + memcheck/synccheck; e35's tile-order test (strided / blocked / unset bitwise
# equal, 96-128 experts, both w13 layouts), grouped oracle cases (incl. 128 / 96 experts), cluster pairs, knob
# refusals + memcheck / synccheck; then moe_bits.py: e35's outputs on benchmark rows must equal n's bit for bit.
# Predicted (s33e): e34 DSv3-EP8 T=4096 -1..4%, T=16384 -1..3% (refuted if both < 1%); e35 Qwen3 fp8 T=4096 -5..20 us,
# T=1024 -3..10, Hy3-TP8 T=4096 -5..15, Mixtral unchanged (refuted if no Qwen3 / Hy3 row gains > 1%).
. "$(dirname "$0")/prelude.sh"
N=$PWD/.peer/exp/n; E4=$PWD/.peer/exp/e34; E5=$PWD/.peer/exp/e35
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
M=tests/test_gpu_fused_moe.py
in_background "e34 block128 cluster + knobs" d_a.log 240 $E4 $T $M -k "block128_cluster or knobs_reject"
in_background "e34 memcheck" d_mc.log 240 $E4 $CS --tool memcheck $T $M -k "block128_cluster and (case0 or case1)"
in_background "e35 grouped" d_b.log 240 $E5 $T $M -k "tile_orders or grouped_vs_oracle or cluster_pairs or \
knobs_reject or grouped_deterministic"
in_background "e35 memcheck" d_mc5.log 240 $E5 $CS --tool memcheck $T $M -k "(grouped_vs_oracle and (case6 or case7)) \
or (tile_orders_equal and (case0 or case4))"
wait; t
in_background "e34 synccheck" d_sc.log 200 $E4 $CS --tool synccheck $T $M -k "block128_cluster and case2"
in_background "e35 synccheck" d_sc5.log 200 $E5 $CS --tool synccheck $T $M -k "tile_orders_equal and case2"
( cd $N && PYTHONPATH=$N timeout 150 python3 ../../../bench/calls/moe_bits.py /tmp/bits_n.npz > $R/d_bits.log 2>&1 )
( cd $E5 && PYTHONPATH=$E5 timeout 150 python3 ../../../bench/calls/moe_bits.py /tmp/bits_e35.npz >> $R/d_bits.log 2>&1 )
python3 bench/calls/moe_bits.py /tmp/bits_n.npz /tmp/bits_e35.npz >> $R/d_bits.log 2>&1; tail -12 $R/d_bits.log
wait; t
grep -hE 'ERROR SUMMARY' $R/d_mc.log $R/d_mc5.log $R/d_sc.log $R/d_sc5.log | sort | uniq -c | head -4
collect d_
cp $R/d_bits.log $OUT/
