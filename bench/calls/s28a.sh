#!/usr/bin/env bash
# session 28 call A (~8 min; carry .peer/exp/n): experiment 26 -- the down GEMM storing its rows by pair from
# registers (HPC_XLA_MOE_DOWN_STORE=scatter; moe_down_epilogue_sm90.h) and the reduce reading a token's k rows as one
# contiguous block. Run after s27d (whose tests cover n's defaults).
# Tests on n: scatter vs the TMA-store epilogue bitwise (fp8_tensor / bf16 / block128, EP with the sparse reduce,
# tiny and ragged groups, the act epilogue before it, several tiles per CTA; 128x256 and 128x128), the knob refusal;
# memcheck on the grouped oracle cases with scatter forced. Then n vs n+scatter on the grouped shapes at T = 1024, 4096, 2 rounds (~4.5 min), and
# per-kernel profiles of Qwen3 fp8 / Hy3-TP8 T=4096 with each store (~1 min).
# Predicted (session 28): the reduce ~2x its floor -> ~1.2x (Qwen3 fp8 T=4096 ~65 -> ~40 us, Hy3-TP8 ~110 -> ~75),
# the down GEMM +-5%: layer Qwen3 fp8 T=4096 -15..25 us, Hy3-TP8 T=4096 -20..35, T=1024 -1..3%.
# Refuted if no T=4096 row gains > 1%. If the GEMM got slower while the reduce gained: the 4-byte stores (a quad
# transpose to 16-byte stores next) or the stages (the mainloop keeps the TMA epilogue's carve-out: more fit now).
. "$(dirname "$0")/prelude.sh"
N=$PWD/.peer/exp/n
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
in_background "scatter 128x256" a_a.log 400 $N $T tests/test_gpu_fused_moe.py -k "down_scatter and 128x256"
in_background "scatter 128x128 + knobs" a_b.log 400 $N $T tests/test_gpu_fused_moe.py -k "down_scatter and 128x128 or knobs_reject"
in_background "memcheck" a_mc.log 400 $N env HPC_XLA_MOE_DOWN_STORE=scatter HPC_XLA_MOE_PATH=grouped $CS --tool memcheck \
  $T tests/test_gpu_fused_moe.py -k "grouped_vs_oracle and (case0 or case2) or grouped_dims"
wait; t
grep -E 'ERROR SUMMARY' $R/a_mc.log | sort | uniq -c | head -3
collect a_
env AB_WIDTH=100 AB_TIMEOUT=200 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b,hy3-tp8,hy3-ep8,dsv3-ep8 --tokens 1024,4096" \
  n n:HPC_XLA_MOE_DOWN_STORE=scatter > $R/a_ab.txt 2>&1; t
# where the time moved (the reduce and the down GEMM, per kernel; "after predecessor" = duration + gap)
profile_moe $N HPC_XLA_MOE_DOWN_STORE a_prof tma scatter
cp $R/a_ab.txt $R/a_prof_*.txt $OUT/; grep -a "│\|==" $R/a_ab.txt | cut -c1-70
for store in tma scatter; do echo "## profile $store"; grep -aiE "reduce|GroupedGemm|gather|==" $R/a_prof_$store.txt | cut -c1-120; done
