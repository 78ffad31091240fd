#!/usr/bin/env bash
# session 28 call B (~5 min; carry .peer/exp/n): experiment 27 -- the wgmma gate-up CTAs (the stream path at T=1)
# prefetch the down kernel's w2 into L2 once their own weight copies have landed (HPC_XLA_MOE_W2_PREFETCH=bulk: one
# cp.async.bulk.prefetch.L2 per CTA; =lines: prefetch.global.L2 per 128-byte line). Session 11 prefetched at the
# kernel's start and ran 2.2x slower; this form only follows each CTA's own copies.
# Tests on n: bitwise equal output with either form (3 shapes, launch counter), the knob refusal; memcheck on the
# stream tests with the prefetch on.
# Then n vs bulk vs lines at T=1 (default wgmma gate-up), and with HPC_XLA_MOE_UP_WGMMA=1 at T=2, 4 (2 rounds).
# Predicted (session 28): Qwen3 fp8 T=1 19.2-19.6 -> 16.5-18 us, Hy3-TP8 T=1 15.4 -> 14-15 (the down kernel reads
# w2 from L2: its ~7.6 us after the gate-up shrinks toward its fixed cost). Refuted if neither form gains >= 0.5 us on
# Qwen3 T=1; > 2 us slower means the prefetches still queue ahead of other CTAs' copies (then: prefetch only from
# the CTAs of the last-issued clusters, or from the down kernel's prologue before its PDL wait).
. "$(dirname "$0")/prelude.sh"
N=$PWD/.peer/exp/n
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
in_background "prefetch tests + knobs" b_a.log 300 $N $T tests/test_gpu_fused_moe.py -k "w2_prefetch or knobs_reject"
in_background "memcheck" b_mc.log 300 $N env HPC_XLA_MOE_W2_PREFETCH=bulk HPC_XLA_MOE_UP_WGMMA=1 HPC_XLA_MOE_PATH=stream \
  $CS --tool memcheck $T tests/test_gpu_fused_moe.py -k "one_token_at_model_shapes or stream_path_vs"
wait; t
grep -E 'ERROR SUMMARY' $R/b_mc.log | sort | uniq -c | head -3
collect b_
S1="moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8 --tokens 1"
env AB_WIDTH=100 AB_TIMEOUT=150 OUT=/tmp/abl tools/ab_bench.sh 2 "$S1" \
  n n:HPC_XLA_MOE_W2_PREFETCH=bulk n:HPC_XLA_MOE_W2_PREFETCH=lines > $R/b_ab1.txt 2>&1; t
S2="moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8 --tokens 2,4"
env AB_WIDTH=100 AB_TIMEOUT=150 OUT=/tmp/abl tools/ab_bench.sh 1 "$S2" n n:HPC_XLA_MOE_UP_WGMMA=1 \
  n:HPC_XLA_MOE_UP_WGMMA=1,HPC_XLA_MOE_W2_PREFETCH=bulk n:HPC_XLA_MOE_UP_WGMMA=1,HPC_XLA_MOE_W2_PREFETCH=lines \
  > $R/b_ab2.txt 2>&1; t
cp $R/b_ab*.txt $OUT/; grep -a "│\|==" $R/b_ab1.txt $R/b_ab2.txt | cut -c1-90
