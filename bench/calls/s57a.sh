#!/usr/bin/env bash
# session 57 call A (~1 min, any Hopper card). Carry .peer/pack (main staged: `tools/stage_experiments.sh m56 &&
# tools/pack_staged.sh m56`, TREE=name for another). What a routing call costs, taken apart (bench/calls/route_chain.py):
# moe_route chained over E / top_k / T / logits dtype, next to a chain of one-element adds, with PDL on and off.
# Written BEFORE the run (session 56, from s56b's route column: 4.6 us at E = 128, 3.6 at E = 64, T = 1 f32): adds
# 1.5-2.5 us each; E = 32 k = 1 2.5-3.5 us (the link); +0.4-0.8 us per doubling of E at k = 8; k = 1 -> 8 at E = 32
# +0.3-0.6; T = 16 within 0.3 of T = 1 (one warp a token, four a CTA); bf16 logits within 0.2 of f32; PDL off +0.5-1.5
# on every row (the next call's launch no longer overlapping).
. "$(dirname "$0")/prelude.sh"
unpack_packs
M=$X/${TREE:-m56}
for pdl in 1 0; do
  ( cd $M && PYTHONPATH=$M HPC_XLA_PDL=$pdl timeout 60 python3 $ROOT/bench/calls/route_chain.py $OUT/s57a_chain_pdl$pdl.json \
      > $OUT/s57a_chain_pdl$pdl.txt 2>&1; echo "route_chain pdl=$pdl rc=$?" ); t
done
paste $OUT/s57a_chain_pdl1.txt $OUT/s57a_chain_pdl0.txt | sed -E 's/ +/ /g'
