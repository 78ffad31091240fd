#!/usr/bin/env bash
# session 30 call B (~9 min; carry .peer/exp/n): the MoE A/Bs of s27d, s28a and s28c in one run, 1 round each,
# versions side by side: vLLM's w13 layout (HPC_BENCH_MOE_INTERLEAVE=0: the act kernel) / interleaved (main's default
# for ours) / + experiment 26 (down store by pair) / + experiment 28 (gather by tokens) / + both.
# Predicted: interleaved vs vLLM's layout Qwen3 fp8 T=4096 -5..8% (session 27's H100: -6.8%); 26: Qwen3 fp8 T=4096
# -15..25 us, Hy3-TP8 -20..35; 28: Qwen3 fp8 -4..7 us, Hy3-TP8 -10..18; both: the sum within noise.
# Refuted (each of 26, 28): no T=4096 row gains > 1%. Second round and profiles only while time is left.
. "$(dirname "$0")/prelude.sh"
N=$PWD/.peer/exp/n
V="n:HPC_BENCH_MOE_INTERLEAVE=0 n n:HPC_XLA_MOE_DOWN_STORE=scatter n:HPC_XLA_MOE_GATHER=tokens
   n:HPC_XLA_MOE_DOWN_STORE=scatter,HPC_XLA_MOE_GATHER=tokens"
AB="env AB_WIDTH=100 AB_TIMEOUT=200 OUT=/tmp/abl tools/ab_bench.sh"
# shellcheck disable=SC2086
$AB 1 "moe --shapes qwen3-30b-a3b,hy3-tp8,hy3-ep8 --tokens 1024,4096" $V > $R/b_ab1.txt 2>&1; t
cp $R/b_ab1.txt $OUT/; grep -a "│\|==" $R/b_ab1.txt | cut -c1-70
if [ $(( $(date +%s) - S )) -lt 330 ]; then
  # shellcheck disable=SC2086
  $AB 1 "moe --shapes qwen3-30b-a3b,hy3-tp8 --tokens 4096" $V > $R/b_ab2.txt 2>&1; t
  cp $R/b_ab2.txt $OUT/; grep -a "│\|==" $R/b_ab2.txt | cut -c1-70
fi
if [ $(( $(date +%s) - S )) -lt 450 ]; then
  profile_moe $N HPC_XLA_MOE_DOWN_STORE b_prof tma scatter
  for s in tma scatter; do echo "## profile $s"; grep -aiE "reduce|GroupedGemm|gather|quant|==" $R/b_prof_$s.txt | cut -c1-120; done
  cp $R/b_prof_*.txt $OUT/
fi
