#!/usr/bin/env bash
# session 40 call B (~5 min, any Hopper; carry .peer/exp/m3 = main before the two-pass down sum, .peer/exp/m4 = main
# with it (141d8b2), .peer/exp/e44 = experiment 44 (4cffa67) staged on top of main): the landed sum and experiment
# 44 -- the single-token fp8_tensor down on wgmma (one-shot CTAs, weights copied before the PDL wait, clusters of
# top_k CTAs reduced through DSMEM). Restage: tools/stage_experiments.sh m4 e44:4cffa67 (m3: main at 79e736b).
# Written BEFORE the run (H200): the sum as experiment 43 measured (Qwen3 fp8 T=1 -0.3..-0.5 us, Hy3 -0.1..-0.3).
# e44: the down stage (entry -> last exit 6.6 us in experiment 43's timeline) becomes ~4.2 us of w2 at the gate-up's
# ~3 TB/s + ~1 us of MMAs, DSMEM reduce and stores -> Qwen3 fp8 T=1 18.8 -> 17.0-17.8 us; Hy3-TP8 (I = 192, 512
# CTAs) -0.5..-1.5; Hy3-EP8 (I = 1536 > 1024: not taken) unchanged. Refutation: Qwen3 moves by < 0.5 us.
# Correctness: e44's stream / one-token / graph tests (its default takes the wgmma down at T = 1), racecheck and
# synccheck of the one-token tests (cluster barriers and DSMEM writes), racecheck of the mma.sync down with its new
# two-pass sum (HPC_XLA_MOE_DOWN_WGMMA=0).
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e44
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
K="stream or one_token or deterministic or random_problems or graph_per_token or negative_ids or out_of_range"
O="one_token_at_model_shapes or one_token_repeated"
in_background "e44 moe stream tests" b_t.log 200 $E env "PYTEST_ADDOPTS=-k '$K'" $T tests/test_gpu_fused_moe.py
in_background "e44 racecheck" b_rc.log 200 $E $CS --tool racecheck $T tests/test_gpu_fused_moe.py -k "$O"
in_background "e44 synccheck" b_sc.log 200 $E $CS --tool synccheck $T tests/test_gpu_fused_moe.py -k "$O"
in_background "e44 =0 racecheck (sum)" b_rc0.log 200 $E env HPC_XLA_MOE_DOWN_WGMMA=0 $CS --tool racecheck $T \
  tests/test_gpu_fused_moe.py -k "$O"
wait; t
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $R/b_rc.log $R/b_sc.log $R/b_rc0.log | sort | uniq -c
collect b_
env AB_WIDTH=110 AB_TIMEOUT=90 OUT=/tmp/abl HPC_BENCH_PEERS=0 tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8/fp8_tensor,hy3-ep8/fp8_tensor --tokens 1" m3 m4 e44 \
  > $R/b_ab.txt 2>&1; t
grep -a "│\|==" $R/b_ab.txt | cut -c1-110
cp $R/b_ab.txt $OUT/
