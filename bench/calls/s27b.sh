#!/usr/bin/env bash
# session 27 call B (~1.5 min; carry .peer/exp/e19): is the 8/1 tail systematic? Session 25's timeline (experiment 19)
# found CTAs with the same tiles finishing 27.8-39.8 us. The e19 copy of tools/decode_trace.py now also prints the
# stream time per tile against the CTA index, the SM id (by 16), first- vs second-on-its-SM, and the slowest 10%'s SM
# ids, and dumps the raw stamps (npz). Each row twice: the same SMs slow both times = a static weight per SM (or per
# CTA slot) can even the finish; different ones = only on-demand handout can (experiment 20).
. "$(dirname "$0")/prelude.sh"
W=$PWD/.peer/exp/e19
i=0
for args in "--workload 64x4K --graph" "--workload 64x4K --graph" "--workload 1x128K+31x4K --graph" \
            "--workload 1x128K+31x4K --graph" "--workload 64x4K --kv fp8 --graph" "--heads 64,8,128 --workload 64x4K --graph"; do
  i=$((i + 1))
  ( cd $W && PYTHONPATH=$W timeout 60 python3 tools/decode_trace.py $args --dump $OUT/trace_$i.npz 2>&1 | tail -26 ); echo
done | tee $OUT/trace.txt
