#!/usr/bin/env bash
# session 35 call A (~3 min; carry .peer/exp/n, .peer/probe): (1) tools/gather_tma_probe.cu (built here into
# .peer/probe/): do 1-row x 128-byte TMA boxes with the 128B swizzle land where one 128-row box would, and what do
# 128 of them per k-block cost against one box, with and without the B stream and ~an MMA's consumer time (the
# gather-in-the-producer lead). Predicted: check 0 bad bytes (the swizzle is a function of the shared-memory
# address); rows from a warp within 10% of the box's time once the consumer spins >= 1000 cycles per k-block, one
# lane up to ~2x slower at spin 0. (2) main's binary (n = main with experiment 37 the default and experiment 27
# removed): the narrow-cluster test (its unset run now expects clusters), the knob refusals, the stream path's tests.
. "$(dirname "$0")/prelude.sh"
R=$OUT  # logs straight into $OUT: what ran comes back even if the budget ends the call
N=$PWD/.peer/exp/n
T="python3 -m pytest -q -p no:cacheprovider"
M=tests/test_gpu_fused_moe.py
timeout 60 .peer/probe/gather_tma_probe > $OUT/gather_probe.txt 2>&1; echo "probe rc=$?"; t
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 .peer/probe/gather_tma_probe --check-only \
  > $R/a_probe_mc.log 2>&1; echo "probe memcheck rc=$?: $(grep 'ERROR SUMMARY' $R/a_probe_mc.log)"
# the probe alone on the GPU first (its timings), then the tests
in_background "narrow pairs + knobs" a_a.log 150 $N $T $M -k "narrow_cluster or knobs_reject"
in_background "stream path" a_b.log 150 $N $T $M -k "stream_path"
wait; t
collect a_
cat $OUT/gather_probe.txt
