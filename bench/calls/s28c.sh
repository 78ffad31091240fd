#!/usr/bin/env bash
# session 28 call C (~7 min; carry .peer/exp/n): experiment 28 -- the grouped path's gather by tokens
# (HPC_XLA_MOE_GATHER=tokens): a warp per (token, segment) reads the token's row once, quantizes it once and stores it
# into each of the token's local rows; no quant kernel, no x_q round trip. Run after s28a (same binary).
# Tests on n: tokens vs rows bitwise (fp8_tensor with bf16 / fp8 x, EP, bf16, block128 with bf16 / fp8 x, tiny
# groups), the knob refusal; memcheck on the grouped oracle cases with the token form forced. Then n vs n+tokens on
# the grouped shapes at T = 1024, 4096, 2 rounds (~4.5 min), and per-kernel profiles of
# Qwen3 fp8 / Hy3-TP8 T=4096 with each form (~1 min).
# Predicted (session 28): quant + gather Qwen3 fp8 T=4096 5.5 + 20.5 us -> ~19, Hy3-TP8 11 + 47 -> ~40: layer Qwen3
# fp8 T=4096 -4..7 us, Hy3-TP8 -10..18, bf16 rows -2..5 (x read once instead of k times), EP rows (per-row quant
# today) +-3. Refuted if no T=4096 row gains > 1%.
. "$(dirname "$0")/prelude.sh"
N=$PWD/.peer/exp/n
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
in_background "gather tests + knobs" c_a.log 400 $N $T tests/test_gpu_fused_moe.py -k "gather_by_tokens or knobs_reject"
in_background "memcheck" c_mc.log 400 $N env HPC_XLA_MOE_GATHER=tokens HPC_XLA_MOE_PATH=grouped $CS --tool memcheck \
  $T tests/test_gpu_fused_moe.py -k "grouped_vs_oracle and (case0 or case2) or grouped_dims"
wait; t
grep -E 'ERROR SUMMARY' $R/c_mc.log | sort | uniq -c | head -3
collect c_
env AB_WIDTH=100 AB_TIMEOUT=200 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b,hy3-tp8,hy3-ep8,dsv3-ep8 --tokens 1024,4096" n n:HPC_XLA_MOE_GATHER=tokens \
  > $R/c_ab.txt 2>&1; t
profile_moe $N HPC_XLA_MOE_GATHER c_prof rows tokens  # where the time moved: quant + gather per kernel
cp $R/c_ab.txt $R/c_prof_*.txt $OUT/; grep -a "│\|==" $R/c_ab.txt | cut -c1-70
for gather in rows tokens; do echo "## profile $gather"; grep -aiE "quant|gather|align|==" $R/c_prof_$gather.txt | cut -c1-120; done
