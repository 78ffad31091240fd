#!/usr/bin/env bash
# session 35 call B (~1 min; carry .peer/probe -- nvcc tools/gather_tma_probe.cu into it, the command is in its
# header): the gather probe with its cp.async mode (the producer warpgroup's 128 threads gathering A rows of x_q by
# 16-byte cp.async into the 128B-swizzled layout, completion by cp.async.mbarrier.arrive.noinc; the consumer fences
# the async proxy as wgmma needs). Session 35 measured the box and the per-row TMA modes (bench/NOTES.md).
# Predicted: check 0 bad bytes in all three; cp.async at spin 0 900-1500 cycles per k-block (x_q is L2-resident,
# 16 KB per k-block per SM), and with B at spin 1700 within 10% of the box's 3012. If so, a grouped mainloop that
# gathers A by cp.async (CUTLASS's KernelCpAsyncWarpSpecialized producer, ptr-array B by TMA) is worth building: it
# removes the token gather (Qwen3 fp8 T=4096 ~28 us of ~480, Hy3-TP8 ~66 of ~575 on the H100). If cp.async is > 25%
# slower than the box with B and spin, the lead is closed.
. "$(dirname "$0")/prelude.sh"
timeout 60 .peer/probe/gather_tma_probe > $OUT/gather_probe.txt 2>&1; echo "probe rc=$?"; t
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 .peer/probe/gather_tma_probe --check-only \
  > $OUT/probe_mc.log 2>&1; echo "probe memcheck rc=$?: $(grep 'ERROR SUMMARY' $OUT/probe_mc.log)"
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 99 .peer/probe/gather_tma_probe --check-only \
  > $OUT/probe_rc.log 2>&1; echo "probe racecheck rc=$?: $(grep 'RACECHECK SUMMARY\|ERROR SUMMARY' $OUT/probe_rc.log)"
cat $OUT/gather_probe.txt
