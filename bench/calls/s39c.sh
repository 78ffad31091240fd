#!/usr/bin/env bash
# session 39 call C, for the NEXT device session (~3 min, any Hopper; carry .peer/exp/e42 = experiment 42 staged and
# .peer/exp/m3 = main staged; restage with `tools/stage_experiments.sh e42:<experiment 42's commit>` and `m3`):
# experiment 42, the single-token layer's per-CTA timeline (tools/moe_trace.py; csrc/moe/moe_trace.cuh).
# Written BEFORE the run (H200, Qwen3 fp8 T=1, bench 19.1 us): gate-up phases ids + issue 0.8-1.2 us, to the 1st
# K group 2-3 (all 25 MB queued at once), groups 4-5, reduce + epilogue 0.5-1 -> last gate-up exit at 9-10 us;
# down's PdlWait released ~1 us after it; down jobs 4-5 us; sum + store < 0.5. Reading rules: the stage whose span
# exceeds its bytes' copy time (gate-up 25 MB ~6.5 us, down 12.6 MB ~3.5 us at ~3.8 TB/s) by the most is the next
# target; a hand-over > 2 us points at the PDL chain, a 1st-group latency > 3 us at the request queue's start.
# Then a 1-round A/B (main vs e42) at T=1: the stamps must not move the layer (> 0.3 us would taint the timeline).
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e42
for args in "--shape qwen3-30b-a3b/fp8_tensor" "--shape qwen3-30b-a3b/fp8_tensor --eager" \
    "--shape hy3-tp8/fp8_tensor"; do
  ( cd $E && PYTHONPATH=$E timeout 120 python3 $ROOT/tools/moe_trace.py $args 2>&1 | tail -30 ); t
done | tee $OUT/moe_trace.txt
env AB_WIDTH=110 AB_TIMEOUT=90 OUT=/tmp/abl HPC_BENCH_PEERS=0 tools/ab_bench.sh 1 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8 --tokens 1" m3 e42 > $R/c_ab.txt 2>&1; t
grep -a "│\|==" $R/c_ab.txt | cut -c1-110
cp $R/c_ab.txt $OUT/
