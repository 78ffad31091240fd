#!/usr/bin/env bash
# session 47 call A (~6 min, any Hopper; FIRST next session unless an H200 comes -- then s46h first; carry .peer/pack =
# `tools/stage_experiments.sh m46b e64:b9265bb && tools/pack_staged.sh m46b e64` -- m46b = main, e64 = main + 64).
# Experiment 64 (issue #4, T=1): the one-token fp8_tensor layer (csrc/moe/one_token_moe.cu) -- units of 128 columns
# of I (64 where I % 128 != 0), clusters of up to 8 ranks over K, each rank's w2 share (128-byte row pieces) in
# registers from the start, a PDL sum kernel; HPC_XLA_MOE_FUSED_DOWN=0 = main's two stream kernels. 63 (32-byte
# pieces) lost +6.8 us at 1.42 TB/s; s46e's probe put 128-byte pieces at 3.0-3.1 TB/s.
# Tests (the one-token / stream / interleaved / deterministic / random tests, 64 on by default), memcheck + racecheck
# + synccheck of the one-token tests, then a 2-round T=1 A/B: m46b | e64 | e64 =0 | e64 =2 (taken even where
# cudaOccupancyMaxActiveClusters says the grid is not one wave -- Qwen3's 48 clusters of 8 against 396 CTA slots is
# borderline: if e64 = m46b and =2 differs, the one-wave test said no), Qwen3 fp8, Hy3-TP8, Hy3-EP8; then
# tools/profile_kernels.py on e64 =2 (unit kernel vs sum kernel).
# Written BEFORE the run (session 46; H100, main Qwen3 fp8 T=1 21.7 us): Qwen3 fp8 -2.5..-4.5 us (37.7 MB at ~3 TB/s
# from ~2.5 us + ~1 finish + ~2 sum: ~18); Hy3-TP8 (W = 64: 64-byte pieces, 2.1-2.7 TB/s in s46e) -0.5..+1;
# Hy3-EP8 +-0.3 (1536 CTAs: not one wave, not taken); e64 =0 = m46b +-0.3. Refuted if Qwen3 gains < 1 us in both
# rounds. If the unit kernel alone is > 15 us (profile), its w13 pieces (256 bytes of 2048-byte rows at 8 ranks)
# or the cluster's DSMEM sum are next to look at.
. "$(dirname "$0")/prelude.sh"
unpack_packs
E=$X/e64
B=${BASE:-m46b}
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
K="stream or one_token or fused_down or deterministic or random_problems or graph_per_token or negative_ids or out_of_range or interleaved"
O="one_token_at_model_shapes or one_token_repeated or fused_down"
in_background "e64 moe tests" a_t.log 360 $E env "PYTEST_ADDOPTS=-k '$K'" $T tests/test_gpu_fused_moe.py
in_background "e64 memcheck" a_mc.log 300 $E $CS $T tests/test_gpu_fused_moe.py -k "$O"
in_background "e64 racecheck" a_rc.log 300 $E $CS --tool racecheck $T tests/test_gpu_fused_moe.py -k "$O"
in_background "e64 synccheck" a_sc.log 300 $E $CS --tool synccheck $T tests/test_gpu_fused_moe.py -k "$O"
wait; t
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $R/a_mc.log $R/a_rc.log $R/a_sc.log | sort | uniq -c
collect a_
env AB_WIDTH=110 AB_TIMEOUT=90 OUT=/tmp/abl HPC_BENCH_PEERS=0 tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8/fp8_tensor,hy3-ep8/fp8_tensor --tokens 1" \
  $B e64 e64:HPC_XLA_MOE_FUSED_DOWN=0 e64:HPC_XLA_MOE_FUSED_DOWN=2 > $R/a_ab.txt 2>&1; t
grep -a "│\|==" $R/a_ab.txt | cut -c1-110
cp $R/a_ab.txt $OUT/
( cd $E && PYTHONPATH=$E HPC_XLA_MOE_FUSED_DOWN=2 HPC_BENCH_PEERS=0 HPC_PROFILE_MOE=qwen3-30b-a3b/fp8_tensor:1,hy3-tp8/fp8_tensor:1 timeout 120 \
    python3 $ROOT/tools/profile_kernels.py moe > $OUT/prof_e64.txt 2>&1; echo "profile rc=$?" ); t
grep -E "==|after predecessor" $OUT/prof_e64.txt | cut -c1-150
