#!/usr/bin/env bash
# session 35 call C (~6 min; carry .peer/exp/m = main, .peer/exp/e38 = main + a1c2a4a): the gate-up GEMM that
# gathers its own A rows (HPC_XLA_MOE_GATHER=producer; csrc/moe/moe_gather_mainloop_sm90.h). Run right after s35b
# (its probe of the one-warp cp.async gather explains what this A/B measures).
# Tests: its own (8 cases, fp8_tensor and bf16 and a 64-row fallback, both w13 layouts: bitwise vs the token gather,
# launch counters, oracle), the knob refusals, the grouped oracle / deterministic tests with the knob set; memcheck,
# racecheck, synccheck on case 0 (fp8) and case 5 (bf16).
# Then the A/B, 2 rounds: m | e38 producer (the gate-up then runs one-CTA clusters: m's N-pairs gained 1-6% on
# Mixtral / Hy3 at T >= 4096, so a third arm gives m with HPC_XLA_MOE_GEMM_CLUSTER=1 to separate the two effects).
# Predicted (H100): Qwen3 fp8 T=4096 -3..5% (the 28 us gather gone, a ~10 us quant kernel back), Hy3-TP8 T=4096
# -5..9% (66 us gather, ~20 us quant), Qwen3 bf16 T=4096 -4..7% (its gather a copy of 134 MB, nothing back), T=16384
# the same shares, Mixtral fp8 within +-2% (its gather is small against its GEMMs); T=2048 about half the T=4096
# gains. Refuted if no row gains > 2% against m.
. "$(dirname "$0")/prelude.sh"
E8=$PWD/.peer/exp/e38
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
M=tests/test_gpu_fused_moe.py
in_background "e38 gather-in-GEMM + knobs" c_a.log 240 $E8 $T $M -k "gather_in_gemm or knobs_reject"
in_background "e38 oracle / deterministic, producer" c_b.log 240 $E8 env HPC_XLA_MOE_GATHER=producer \
  $T $M -k "grouped_vs_oracle or grouped_deterministic or gather_by_tokens"
wait; t
for tool in memcheck racecheck synccheck; do
  in_background "e38 $tool" c_$tool.log 200 $E8 env HPC_XLA_MOE_GATHER=producer \
    $CS --tool $tool $T $M -k "gather_in_gemm and (case0 or case5)"
done
wait; t
env AB_WIDTH=100 AB_TIMEOUT=240 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,qwen3-30b-a3b/bf16,hy3-tp8,mixtral-8x7b/fp8_tensor --tokens 2048,4096,16384" m \
  e38:HPC_XLA_MOE_GATHER=producer m:HPC_XLA_MOE_GEMM_CLUSTER=1 > $R/c_ab.txt 2>&1; t
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $R/c_memcheck.log $R/c_racecheck.log $R/c_synccheck.log | sort | uniq -c
collect c_
cp $R/c_ab.txt $OUT/; grep -a "│\|==" $R/c_ab.txt | cut -c1-90
