#!/usr/bin/env bash
# session 41 call F (~6 min, any Hopper; carry .peer/exp/e46 (= main's kernels with its knob off) and .peer/exp/e47
# (experiment 47: the decode kernel as a piece loop around a tight tile loop, `tools/stage_experiments.sh
# e47:482adb5`)).
# s41e's ncu (H100, 8/1/128 bf16 1x128K+31x4K, attention kernel alone): the 16-row kernel (MT = 1) runs 57.5-59.0 us
# against the 8-row kernel's 51.1 with the same bytes; its extra stall samples sit in instruction fetch (no_instruction
# 0.33 -> 1.08 warps per issue, at the flat loop's back edge: 22 KB of loop code per tile) and in FinishPiece's
# 4-round shared-memory merge (its barrier 2.2% -> 6.3% of samples).
# Written BEFORE the run: e47's tests pass (decode GPU file + test_decode's cuda cases). A/B, 2 rounds, layer us,
# 8/1/128: q_len 2 bf16 -2..-4 us on 64x4K / 1x128K+31x4K / zipf (the fetch stalls gone; the merge's share stays),
# q_len 1 -0..1, fp8 the same direction; 64/8/128 within +-1%. ncu of e47 at q_len 2: no_instruction <= 0.5 warps per
# issue. Refuted if no q_len 2 row gains > 1 us in both rounds.
. "$(dirname "$0")/prelude.sh"
A=$PWD/.peer/exp/e46
B=$PWD/.peer/exp/e47
T="python3 -m pytest -q -p no:cacheprovider"
in_background "e47 decode gpu file" f_gpu.log 300 $B $T tests/test_gpu_decode.py
in_background "e47 test_decode cuda cases" f_cuda.log 300 $B $T tests/test_decode.py -k cuda
wait; t
collect f_
bench() {  # bench LABEL DIR HEADS: decode from DIR into $R/dec_LABEL.json
  ( cd $2 && PYTHONPATH=$2 timeout 150 python3 -m hpc_xla.bench decode --heads $3 --out $R/dec_$1.json \
    > $R/dec_$1.txt 2>&1; echo "== $1 rc=$?" ); t
}
for round in 1 2; do
  bench main_r$round $A 8/1/128
  bench e47_r$round $B 8/1/128
done
bench main_64 $A 64/8/128
bench e47_64 $B 64/8/128
( cd $B && PYTHONPATH=$B timeout 120 ncu --clock-control none --cache-control all --section WarpStateStats \
    --section SpeedOfLight --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio \
    -k regex:DecodeAttentionKernel -s 2 -c 1 python3 $ROOT/tools/profile_targets.py decode --heads 8,1,128 \
    --workload 1x128K+31x4K --q-len 2 --reps 3 > $R/ncu_e47_q2.txt 2>&1; echo "ncu rc=$?" )
grep -E "^\s+(Duration|DRAM Throughput)" $R/ncu_e47_q2.txt | awk '{$1=$1; print}' | tr '\n' ';'; echo
grep -E "smsp__average_warps_issue_stalled_" $R/ncu_e47_q2.txt | awk '{print $NF, $1}' | sort -gr | head -6 | \
  sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | tr '\n' ';'; echo
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
order = ["main_r1", "main_r2", "e47_r1", "e47_r2", "main_64", "e47_64"]
labels = [l for l in order if l in labels]
print("row".ljust(40) + "".join(l.rjust(9) for l in labels))
for key in sorted(rows):
    print(("%s %s" % key)[:40].ljust(40) + "".join(("%.1f" % rows[key][l] if l in rows[key] else "-").rjust(9) for l in labels))
PY
tar czf $OUT/s41f_raw.tgz -C $R $(cd $R && ls dec_* ncu_* *.log)
