#!/usr/bin/env bash
# session 46 call B (~5 min, any Hopper; carry .peer/pack = `tools/stage_experiments.sh e63 (67512f6) && tools/pack_staged.sh
# m46 e63`; m46 = main at 8526c36, the kernels e63 starts from).
# Experiment 63 (67512f6, issue #4 T=1): the single-token fp8_tensor down fused into the wgmma gate-up CTAs (each
# multiplies its 32 intermediate columns by w2's 32 matching columns, loaded into registers right after its w13
# copies) + a PDL sum kernel; HPC_XLA_MOE_FUSED_DOWN=0 = the down kernel as on main. Tests (fused on by default):
# the stream / one-token / fused-down / interleaved / deterministic tests, memcheck + racecheck + synccheck of the
# one-token and fused-down tests. Then a 2-round T=1 A/B: m46 | e63 | e63 =0, Qwen3 fp8, Hy3-TP8, Hy3-EP8.
# Written BEFORE the run (session 46; H100, main Qwen3 fp8 T=1 21.7 us in s46x): Qwen3 fp8 -2.5..-4.5 us (s44c's
# timeline: w2's 12.6 MB streamed after the gate-up's last exit, DRAM idle ~3 us between; fused, all 37.7 MB land by
# ~13.6 us from the first PdlWait, + ~1 us gate-up finish + ~0.3 down mma + ~1.2 sum kernel -> ~16.5 vs 21.5),
# Hy3-TP8 -0.3..-1.5 (its down CTAs were resident early: less gap to close), Hy3-EP8 +-0.3 (its gate-up is not on
# wgmma: not fused), e63 =0 = m46 +-0.3. Refuted if Qwen3 gains < 1 us in both rounds.
. "$(dirname "$0")/prelude.sh"
unpack_packs
E=$X/e63
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
K="stream or one_token or fused_down or deterministic or random_problems or graph_per_token or negative_ids or out_of_range or interleaved"
O="one_token_at_model_shapes or one_token_repeated or fused_down_deterministic"
in_background "e63 moe tests" b_t.log 300 $E env "PYTEST_ADDOPTS=-k '$K'" $T tests/test_gpu_fused_moe.py
in_background "e63 memcheck" b_mc.log 300 $E $CS $T tests/test_gpu_fused_moe.py -k "$O"
in_background "e63 racecheck" b_rc.log 300 $E $CS --tool racecheck $T tests/test_gpu_fused_moe.py -k "$O"
in_background "e63 synccheck" b_sc.log 300 $E $CS --tool synccheck $T tests/test_gpu_fused_moe.py -k "$O"
wait; t
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $R/b_mc.log $R/b_rc.log $R/b_sc.log | sort | uniq -c
collect b_
env AB_WIDTH=110 AB_TIMEOUT=90 OUT=/tmp/abl HPC_BENCH_PEERS=0 tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8/fp8_tensor,hy3-ep8/fp8_tensor --tokens 1" \
  m46 e63 e63:HPC_XLA_MOE_FUSED_DOWN=0 > $R/b_ab.txt 2>&1; t
grep -a "│\|==" $R/b_ab.txt | cut -c1-110
cp $R/b_ab.txt $OUT/
