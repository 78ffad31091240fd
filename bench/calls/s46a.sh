#!/usr/bin/env bash
# session 46 call A (~5 min, any Hopper; carry .peer/pack = `tools/stage_experiments.sh e62:d3664d8 &&
# tools/pack_staged.sh e61c e62` (e61c = main's kernels; restage mN from main if main's kernels moved, and set B)).
# Experiment 62 (d3664d8, issue #4): experiment 44's single-token fp8_tensor down on wgmma + experiment 43's L2
# prefetch of each hit expert's w2 by the wgmma gate-up CTAs (HPC_MOE_PREFETCH: 0 = 44 alone, 2 = after the CTA's
# copies are issued, 4 = after its first K group landed). Tests: the stream / one-token / graph tests at the default
# (0) and at =4, racecheck + synccheck of the one-token tests (clusters, DSMEM) at =4. Then a 2-round T=1 A/B: main
# | e62 (=0) | e62 =2 | e62 =4, Qwen3-30B fp8, Hy3-TP8, Hy3-EP8 (I = 1536 > 1024: the wgmma down not taken, so the
# prefetch only loads L2 for the mma.sync down there).
# Written BEFORE the run (session 45; H100 figures, main ~21-22 us Qwen3 fp8 T=1 on an H100, 18.3 on the H200):
# =0 +0.3 (s40b's 44 on the H200); =4 Qwen3 -1.5..-3.5 us (s44c's timeline of 44: the down's PdlWait releases 2.6 us
# after the last gate-up exit and its last CTA exits 7.5 us after it, waiting on w2 from HBM; from L2 its copies land
# in ~1 us, less ~1 us the gate-up loses to the extra 12.6 MB), Hy3-TP8 -0.5..-1.5 (its down CTAs are resident early
# already: less to gain), Hy3-EP8 within +-0.5 (43's =4 on the mma.sync down: +0.7 on Qwen3 in s40a). =2 between =0
# and =4, or worse than =4 (its prefetches compete with the gate-up's own copies from the start). Refuted if =4 gains
# < 0.5 us on Qwen3 in both rounds. If it wins: a timeline (stamps of e45 + the prefetch) before landing.
. "$(dirname "$0")/prelude.sh"
unpack_packs
B=${BASE:-e61c}
E=$X/e62
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
K="stream or one_token or deterministic or random_problems or graph_per_token or negative_ids or out_of_range"
O="one_token_at_model_shapes or one_token_repeated"
in_background "e62 moe stream tests (=0)" a_t0.log 240 $E env "PYTEST_ADDOPTS=-k '$K'" $T tests/test_gpu_fused_moe.py
in_background "e62 moe stream tests (=4)" a_t4.log 240 $E env HPC_MOE_PREFETCH=4 "PYTEST_ADDOPTS=-k '$K'" $T \
  tests/test_gpu_fused_moe.py
in_background "e62 =4 racecheck" a_rc.log 240 $E env HPC_MOE_PREFETCH=4 $CS --tool racecheck $T tests/test_gpu_fused_moe.py -k "$O"
in_background "e62 =4 synccheck" a_sc.log 240 $E env HPC_MOE_PREFETCH=4 $CS --tool synccheck $T tests/test_gpu_fused_moe.py -k "$O"
wait; t
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $R/a_rc.log $R/a_sc.log | sort | uniq -c
collect a_
env AB_WIDTH=110 AB_TIMEOUT=90 OUT=/tmp/abl HPC_BENCH_PEERS=0 tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8/fp8_tensor,hy3-ep8/fp8_tensor --tokens 1" \
  $B e62 e62:HPC_MOE_PREFETCH=2 e62:HPC_MOE_PREFETCH=4 > $R/a_ab.txt 2>&1; t
grep -a "│\|==" $R/a_ab.txt | cut -c1-110
cp $R/a_ab.txt $OUT/
