#!/usr/bin/env bash
# session 37 call B (~2 min; carry .peer/exp/e41): why experiment 41 ran 1.5x SLOWER than the two stream kernels
# (s37a, H100: Qwen3 fp8 T=1 22.4 -> 32.7 us, ~1.15 TB/s). ncu of the one kernel at Qwen3 fp8 T=1, cold L2: duration,
# DRAM / L2 throughput, warp states, then the SASS lines with the most stall samples. Expected readings: a CTA
# waiting on its ring (stall_long_scoreboard / barrier at the wait) with DRAM well below peak says the copies are
# not in flight (issue or ring depth); long grid-barrier waits (the ATOM / spin loop) say stage imbalance; time in
# the per-chunk index math or the wgmma wait says the iteration itself is the bound.
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e41
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy"
f=$OUT/ncu_one.txt
( cd $E && PYTHONPATH=$E HPC_XLA_MOE_ONE_KERNEL=1 timeout 150 ncu --clock-control none --cache-control all $SEC \
    -k regex:OneKernel -s 2 -c 1 python3 $ROOT/tools/profile_targets.py moe --shape qwen3-30b-a3b/fp8_tensor --tokens 1 \
    --reps 3 > $f 2>&1; echo "ncu rc=$?" )
grep -E "Duration|Compute \(SM\) Throughput|DRAM Throughput|L2 Cache Throughput|Memory Throughput|Stall|Warp Cycles Per Issued|Issued Warp|Registers|Grid Size|Block Limit|Achieved" $f | head -40
f=$OUT/ncu_one_src.csv
( cd $E && PYTHONPATH=$E HPC_XLA_MOE_ONE_KERNEL=1 timeout 150 ncu --clock-control none --cache-control all \
    --section SourceCounters --section WarpStateStats --page source --print-source sass --csv -k regex:OneKernel -s 2 \
    -c 1 python3 $ROOT/tools/profile_targets.py moe --shape qwen3-30b-a3b/fp8_tensor --tokens 1 --reps 3 > $f 2>&1
  echo "ncu source rc=$?" )
python3 - "$f" <<'PY'
import csv, sys
rows = list(csv.reader(l for l in open(sys.argv[1], errors="replace") if l.startswith('"')))
if not rows:
    sys.exit("no CSV rows")
head, body = rows[0], rows[1:]
col = next((i for i, h in enumerate(head) if "Warp Stall Sampling (All" in h), None)
src = next((i for i, h in enumerate(head) if h.strip() in ("Source", "# Source")), 1)
adr = next((i for i, h in enumerate(head) if h.strip() in ("Address", "# Address")), 0)
if col is None:
    sys.exit("no stall column in: " + ", ".join(head[:20]))
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
total = sum(num(r[col]) for r in body if len(r) > col) or 1.0
for r in sorted((r for r in body if len(r) > col), key=lambda r: -num(r[col]))[:25]:
    print("%6.1f%%  %s  %s" % (100 * num(r[col]) / total, r[adr][:8], r[src][:100]))
PY
