#!/usr/bin/env bash
# session 41 call E (~4 min, any Hopper; carry .peer/exp/e46 = HEAD + experiment 46 staged): WHERE the 16-row decode
# kernel (MT = 1) loses its time. s41d (H100, layer us): HPC_XLA_DECODE_FORCE_MT1=1 at q_len 1 (same bytes, same
# pieces, rows 8-15 zero) costs +2.6 (64x4K) .. +4.7 (1x128K+31x4K) .. +5.4 (zipf) over the 8-row kernel, most of
# q_len 2's gap; its SASS compute span per tile is 250 instructions vs 169. ncu (attention kernel alone, 8/1/128
# bf16, 1x128K+31x4K): warp states + the source-level stall samples of q_len 1 (MT = 0), q_len 1 forced MT = 1 and
# q_len 2 (MT = 1).
# Written BEFORE the run: if the kernel's time is the per-tile chain, MT = 1 shows more samples in the softmax lines
# (MUFU / SHFL / FMNMX, the rescale vote) and fewer at the ring wait (LDGDEPBAR / DEPBAR) and the barriers, with
# "Issued Warp Per Scheduler" up; if instead the piece epilogue (FinishPiece's shared-memory merge, 16 rows'
# stores) carries it, its BAR / STS / LDS lines grow. Predicted: the softmax lines, +30-60% of the per-tile samples.
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e46
SEC="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
for v in "q1 1 0" "q1mt1 1 1" "q2 2 0"; do
  set -- $v
  for page in details source; do
    f=$R/ncu_${1}_$page.txt
    if [ $page = details ]; then args="$SEC"; else args="--section SourceCounters --section WarpStateStats --page source --print-source sass --csv"; fi
    # shellcheck disable=SC2086
    ( cd $E && HPC_XLA_DECODE_FORCE_MT1=$3 PYTHONPATH=$E timeout 150 ncu --clock-control none --cache-control all $args \
        -k regex:DecodeAttentionKernel -s 2 -c 1 python3 $ROOT/tools/profile_targets.py decode --heads 8,1,128 \
        --workload 1x128K+31x4K --q-len $2 --reps 3 > $f 2>&1; echo "$1 $page ncu rc=$?" ); t
  done
  echo "== $1 (q_len $2, FORCE_MT1=$3)"
  grep -E "^\s+(Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|Issued Warp Per Scheduler|No Eligible|Eligible Warps Per Scheduler|Active Warps Per Scheduler|Warp Cycles Per Issued Instruction|Registers Per Thread)" \
    $R/ncu_${1}_details.txt | awk '{$1=$1; print}' | tr '\n' ';' | cut -c1-700; echo
  # stall reasons in warps per issued instruction, the largest first
  grep -E "smsp__average_warps_issue_stalled_" $R/ncu_${1}_details.txt | awk '{print $NF, $1}' | sort -gr | head -8 | \
    sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | tr '\n' ';'; echo
  python3 "$ROOT/tools/ncu_stalls.py" $R/ncu_${1}_source.txt 22 | cut -c1-150
done
tar czf $OUT/ncu_s41e.tgz -C $R $(cd $R && ls ncu_*)
