#!/usr/bin/env bash
# session 35 call B (~4 min; carry .peer/probe -- nvcc tools/gather_tma_probe.cu into it, the command is in its
# header -- and .peer/exp/m = main): (1) the gather probe with its cp.async mode (the producer warpgroup's 128 threads gathering A rows of x_q by
# 16-byte cp.async into the 128B-swizzled layout, completion by cp.async.mbarrier.arrive.noinc; the consumer fences
# the async proxy as wgmma needs). Session 35 measured the box and the per-row TMA modes (bench/NOTES.md).
# Predicted: check 0 bad bytes in all three; cp.async (4 warps) at spin 0 900-1500 cycles per k-block (x_q is
# L2-resident, 16 KB per k-block per SM), and with B at spin 1700 within 10% of the box's 3012; one warp (the form a
# CUTLASS ptr-array kernel's spare MainloopAux warp could run: 32 cp.async per lane per k-block) 1.2-2x the four
# warps' cycles at spin 0 and within 10% of the box with B at spin 1700. If so, a grouped mainloop that
# gathers A by cp.async (CUTLASS's KernelCpAsyncWarpSpecialized producer, ptr-array B by TMA) is worth building: it
# removes the token gather (Qwen3 fp8 T=4096 ~28 us of ~480, Hy3-TP8 ~66 of ~575 on the H100). If cp.async is > 25%
# slower than the box with B and spin, the lead is closed.
# (2) The 64-row tiles beyond 64 rows per expert (HPC_XLA_MOE_GEMM_TILE=64x256; block128 runs 64x128) against the
# default 128-row tiles, 2 rounds, at 85-256 rows per expert. Why now: experiment 37 made the 64-row tiles faster
# (pairs), the threshold (64 rows, fused_moe_plan.h kGroupedNarrowMaxRows) was set before it, and session 35's
# routing A/B showed the partly filled last 128-row tile costing up to 9-12%. Rows per expert (T x 8 / E_global):
# Hy3 (TP8 and EP8) 85 / 128 / 171, Qwen3 128 / 192 / 256, DeepSeek-V3 EP8 64 (already 64-row) / 96 / 128 at
# T=2048 / 3072 / 4096. Predicted: Hy3 T=2048 and DeepSeek-V3 T=3072 -3..-10%; Qwen3 T=2048 and Hy3 T=3072 -3..+5%;
# Qwen3 T=3072 / 4096 and Hy3 T=4096 +3..10% (half the B reuse). If a row gains > 3% in both rounds,
# GroupedCtaRows's threshold moves to the measured crossover.
. "$(dirname "$0")/prelude.sh"
timeout 60 .peer/probe/gather_tma_probe > $OUT/gather_probe.txt 2>&1; echo "probe rc=$?"; t
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 .peer/probe/gather_tma_probe --check-only \
  > $OUT/probe_mc.log 2>&1; echo "probe memcheck rc=$?: $(grep 'ERROR SUMMARY' $OUT/probe_mc.log)"
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 99 .peer/probe/gather_tma_probe --check-only \
  > $OUT/probe_rc.log 2>&1; echo "probe racecheck rc=$?: $(grep 'RACECHECK SUMMARY\|ERROR SUMMARY' $OUT/probe_rc.log)"
env AB_WIDTH=100 AB_TIMEOUT=200 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8,hy3-ep8,dsv3-ep8 --tokens 2048,3072,4096" m \
  m:HPC_XLA_MOE_GEMM_TILE=64x256 > $OUT/ab_tile.txt 2>&1; t
cat $OUT/gather_probe.txt
grep -a "│\|==" $OUT/ab_tile.txt | cut -c1-90
