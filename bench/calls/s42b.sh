#!/usr/bin/env bash
# session 42 call B (~5 min, any Hopper; carry .peer/exp/e46 (= main's kernels with its knob off) and .peer/exp/e50
# (experiment 50: K and V in rings of their own, tile i's K slot refilled before P V; `tools/stage_experiments.sh
# e50:aeb1948`)).
# Why: the 16-row decode kernel's per-tile compute counts in its time (session 41: +1.4..5.4 us at q_len 1 with the
# same bytes; stall relocations 47 / 48 did not move it); one K+V stage is refilled only after P V, so the next
# copy waits for the softmax and P V. FlashInfer's prefill loop refills K right after S. (Run s42a first: if its
# trace shows the waits, not the compute, growing with 16 rows, expect less from this.)
# Written BEFORE the run: e50's tests pass (decode GPU file + test_decode's cuda cases). A/B, 2 rounds, layer us:
# 8/1 bf16 q_len 2 -1..-3 us on 64x4K / 1x128K+31x4K / 2x32K / zipf (toward FlashInfer's FA2: H100 55.5 / 55.7 /
# 44.1 / 92.9), q_len 1 -0.5..-2, fp8 the same direction; 64/8 within +-1%. Refuted if no q_len 2 row gains > 1 us
# in both rounds; landed only if no row loses > 1 us (D = 256 spills more with it: its kernels would keep the old
# loop).
. "$(dirname "$0")/prelude.sh"
A=$PWD/.peer/exp/e46
B=$PWD/.peer/exp/e50
T="python3 -m pytest -q -p no:cacheprovider"
in_background "e50 decode gpu file" b_gpu.log 300 $B $T tests/test_gpu_decode.py
in_background "e50 test_decode cuda cases" b_cuda.log 300 $B $T tests/test_decode.py -k cuda
wait; t
collect b_
bench() {  # bench LABEL DIR HEADS: decode from DIR into $R/dec_LABEL.json
  ( cd $2 && PYTHONPATH=$2 timeout 150 python3 -m hpc_xla.bench decode --heads $3 --out $R/dec_$1.json \
    > $R/dec_$1.txt 2>&1; echo "== $1 rc=$?" ); t
}
for round in 1 2; do
  bench main_r$round $A 8/1/128
  bench e50_r$round $B 8/1/128
done
bench main_64 $A 64/8/128
bench e50_64 $B 64/8/128
( cd $B && PYTHONPATH=$B timeout 120 ncu --clock-control none --cache-control all --section WarpStateStats \
    --section SpeedOfLight --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio \
    -k regex:DecodeAttentionKernel -s 2 -c 1 python3 $ROOT/tools/profile_targets.py decode --heads 8,1,128 \
    --workload 1x128K+31x4K --q-len 2 --reps 3 > $R/ncu_e50_q2.txt 2>&1; echo "ncu rc=$?" )
grep -E "^\s+(Duration|DRAM Throughput)" $R/ncu_e50_q2.txt | awk '{$1=$1; print}' | tr '\n' ';'; echo
grep -E "smsp__average_warps_issue_stalled_" $R/ncu_e50_q2.txt | awk '{print $NF, $1}' | sort -gr | head -6 | \
  sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | tr '\n' ';'; echo
( cd $B && PYTHONPATH=$B timeout 120 ncu --clock-control none --cache-control all --section SourceCounters \
    --section WarpStateStats --page source --print-source sass --csv -k regex:DecodeAttentionKernel -s 2 -c 1 \
    python3 $ROOT/tools/profile_targets.py decode --heads 8,1,128 --workload 1x128K+31x4K --q-len 2 --reps 3 \
    > $R/ncu_e50_q2_source.txt 2>&1; echo "ncu source rc=$?" )
python3 "$ROOT/tools/ncu_stalls.py" $R/ncu_e50_q2_source.txt 10 | cut -c1-120
# the short table: layer us (decode_attention with its plan built) per version and round
python3 - "$R" <<'PY' | tee $OUT/ab_table.txt
import json, glob, os, sys
rows, labels = {}, []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "dec_*.json"))):
    label = os.path.basename(f)[4:-5]
    labels.append(label)
    for r in json.load(open(f))["rows"]:
        key = ("%s %d/%d q%d" % (r["kv"], r["heads"][0], r["heads"][1], r["q_len"]), r["workload"])
        rows.setdefault(key, {})[label] = r["layer_us"]
order = ["main_r1", "main_r2", "e50_r1", "e50_r2", "main_64", "e50_64"]
labels = [l for l in order if l in labels]
print("row".ljust(40) + "".join(l.rjust(9) for l in labels))
for key in sorted(rows):
    print(("%s %s" % key)[:40].ljust(40) + "".join(("%.1f" % rows[key][l] if l in rows[key] else "-").rjust(9) for l in labels))
PY
tar czf $OUT/s42b_raw.tgz -C $R $(cd $R && ls dec_* ncu_* *.log)
