#!/usr/bin/env bash
# session 41 call G (~5 min, any Hopper; carry .peer/exp/e46 (= main's kernels with its knob off) and .peer/exp/e48
# (experiment 48: the CTA's first piece's q loads issued before the ring's first copies, `tools/stage_experiments.sh
# e48:0150669`)).
# s41e's ncu (H100, 8/1/128 bf16 1x128K+31x4K): ~11% of the attention kernel's stall samples wait at LoadQ -- the
# first piece's q loads, issued after every CTA's first two tiles (~17 MB), come back ~5 us in, after those have
# landed, and the CTA issues nothing until then. Experiment 47 (the tight tile loop) was refuted in s41f (+0.2..2 us:
# its fetch stalls moved to the memory waits; the time did not move).
# Written BEFORE the run: e48's tests pass. A/B, 2 rounds, layer us: every 8/1 row -0.5..-2 us (bf16 and fp8, q_len 1
# and 2: the first tile's compute and the ring's refill start ~4 us earlier, less what the other CTA hid); 64/8 -0..1%.
# ncu of e48 at q_len 2: the LoadQ line's share of stall samples < 3%. Refuted if no 8/1 row gains > 0.5 us in both
# rounds.
. "$(dirname "$0")/prelude.sh"
A=$PWD/.peer/exp/e46
B=$PWD/.peer/exp/e48
T="python3 -m pytest -q -p no:cacheprovider"
in_background "e48 decode gpu file" g_gpu.log 300 $B $T tests/test_gpu_decode.py
in_background "e48 test_decode cuda cases" g_cuda.log 300 $B $T tests/test_decode.py -k cuda
wait; t
collect g_
bench() {  # bench LABEL DIR HEADS: decode from DIR into $R/dec_LABEL.json
  ( cd $2 && PYTHONPATH=$2 timeout 150 python3 -m hpc_xla.bench decode --heads $3 --out $R/dec_$1.json \
    > $R/dec_$1.txt 2>&1; echo "== $1 rc=$?" ); t
}
for round in 1 2; do
  bench main_r$round $A 8/1/128
  bench e48_r$round $B 8/1/128
done
bench main_64 $A 64/8/128
bench e48_64 $B 64/8/128
( cd $B && PYTHONPATH=$B timeout 120 ncu --clock-control none --cache-control all --section WarpStateStats \
    --section SpeedOfLight --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio \
    -k regex:DecodeAttentionKernel -s 2 -c 1 python3 $ROOT/tools/profile_targets.py decode --heads 8,1,128 \
    --workload 1x128K+31x4K --q-len 2 --reps 3 > $R/ncu_e48_q2.txt 2>&1; echo "ncu rc=$?" )
grep -E "^\s+(Duration|DRAM Throughput)" $R/ncu_e48_q2.txt | awk '{$1=$1; print}' | tr '\n' ';'; echo
grep -E "smsp__average_warps_issue_stalled_" $R/ncu_e48_q2.txt | awk '{print $NF, $1}' | sort -gr | head -6 | \
  sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | tr '\n' ';'; echo
( cd $B && PYTHONPATH=$B timeout 120 ncu --clock-control none --cache-control all --section SourceCounters \
    --section WarpStateStats --page source --print-source sass --csv -k regex:DecodeAttentionKernel -s 2 -c 1 \
    python3 $ROOT/tools/profile_targets.py decode --heads 8,1,128 --workload 1x128K+31x4K --q-len 2 --reps 3 \
    > $R/ncu_e48_q2_source.txt 2>&1; echo "ncu source rc=$?" )
python3 "$ROOT/tools/ncu_stalls.py" $R/ncu_e48_q2_source.txt 10 | cut -c1-120
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
order = ["main_r1", "main_r2", "e48_r1", "e48_r2", "main_64", "e48_64"]
labels = [l for l in order if l in labels]
print("row".ljust(40) + "".join(l.rjust(9) for l in labels))
for key in sorted(rows):
    print(("%s %s" % key)[:40].ljust(40) + "".join(("%.1f" % rows[key][l] if l in rows[key] else "-").rjust(9) for l in labels))
PY
tar czf $OUT/s41g_raw.tgz -C $R $(cd $R && ls dec_* ncu_* *.log)
