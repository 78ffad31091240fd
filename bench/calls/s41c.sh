#!/usr/bin/env bash
# session 41 call C (~2 min, any Hopper; carry .peer/exp/e45 = experiment 45 staged: `tools/stage_experiments.sh
# e45:cb7b631`): experiment 44's wgmma down with per-CTA stamps (experiment 42's, the down's fields re-read:
# 'hit list built' = its copies issued, 'jobs' = B load + MMAs, 'sum + store' = the cluster reduce and stores).
# Written BEFORE the run (H200, Qwen3 fp8 T=1, e44 18.6 us): down CTAs enter as gate-up CTAs leave (~10-12 us);
# copies issued < 0.5 us after entry; PdlWait released ~0.4 us after the last gate-up exit; MMAs done 3-4 us after
# the first entries (w2's 12.6 MB at ~3.3 TB/s); cluster reduce + store < 0.5 us. If instead the MMAs finish < 1 us
# after PdlWait, the down's time is its entry (the gate-up tail), and T=1's next target is the gate-up alone.
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e45
for args in "--shape qwen3-30b-a3b/fp8_tensor" "--shape hy3-tp8/fp8_tensor" ; do
  ( cd $E && PYTHONPATH=$E timeout 120 python3 $ROOT/tools/moe_trace.py $args 2>&1 | tail -30 ); t
done | tee $OUT/moe_trace_e45.txt
