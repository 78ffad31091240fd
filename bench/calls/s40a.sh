#!/usr/bin/env bash
# session 40 call A (~6 min, any Hopper; carry .peer/exp/m3 = main staged and .peer/exp/e43 = experiment 43 staged, optionally .peer/exp/t43;
# restage with `tools/stage_experiments.sh m3 e43:3cc67ec`): experiment 43 -- the T=1 layer's L2 prefetches
# (HPC_MOE_PREFETCH bits: 1 the gate-up CTA's own w13 rows before its cp.async copies, 2 its share of the expert's w2
# right after its copies are issued, 4 that share after its first K group landed) and the two-pass down sum.
# Written BEFORE the run (H200, Qwen3 fp8 T=1 19.0 us main; experiment 42's timeline: gate-up streams 25 MB at
# ~2.7-3.1 TB/s, then ~2.5 us with HBM idle (gate-up reduce/epilogue, down entry + hit list), down 12.6 MB at 2.7
# TB/s, then 1.5 us of sum + store): two-pass sum alone (=0) -0.3..-0.8 us; =4 (w2 streams while the gate-up
# finishes and the down starts; the down's jobs hit L2) -2..-4 us; =2 less than =4 (w2 competes with w13 for HBM
# from the start); =1 0..-1.5 us (the TMA unit queues the rows sooner than 512 cp.async per CTA do); =5 the two
# together. Refutation: a setting that moves Qwen3 by < 0.5 us (both rounds) is noise. Correctness first: the
# stream / one-token / deterministic / graph tests of e43 with every bit on (=7).
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e43
T="python3 -m pytest -q -p no:cacheprovider"
in_background "e43 =7 moe stream tests" a_e43.log 200 $E env HPC_MOE_PREFETCH=7 \
  "PYTEST_ADDOPTS=-k 'stream or one_token or deterministic or random_problems or graph_per_token or negative_ids or out_of_range'" \
  $T tests/test_gpu_fused_moe.py
wait; t
collect a_
env AB_WIDTH=110 AB_TIMEOUT=90 OUT=/tmp/abl HPC_BENCH_PEERS=0 tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8/fp8_tensor,hy3-ep8/fp8_tensor --tokens 1" m3 e43 \
  e43:HPC_MOE_PREFETCH=4 e43:HPC_MOE_PREFETCH=2 e43:HPC_MOE_PREFETCH=1 e43:HPC_MOE_PREFETCH=5 > $R/a_ab.txt 2>&1; t
grep -a "│\|==" $R/a_ab.txt | cut -c1-110
cp $R/a_ab.txt $OUT/
# The timeline with the prefetches (t43 = experiments 42 + 43 built together, staged by hand from the tree of
# ec30458 + 3cc67ec, conflict resolved: the stamp before the w2 prefetch): where the 12.6 MB of w2 now lands.
X=$PWD/.peer/exp/t43
if [ -d $X ]; then
  for v in 0 4 5; do
    echo "## HPC_MOE_PREFETCH=$v"
    ( cd $X && PYTHONPATH=$X HPC_MOE_PREFETCH=$v timeout 120 python3 $ROOT/tools/moe_trace.py \
      --shape qwen3-30b-a3b/fp8_tensor 2>&1 | tail -24 ); t
  done | tee $OUT/moe_trace_t43.txt | grep -a "phase\|layer\|per call\|entry\|exit"
fi
