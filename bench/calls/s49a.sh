#!/usr/bin/env bash
# session 49 call A (~9.5 min, any Hopper; FIRST). Carry .peer/pack (m48 = main, e66 = main + experiment 66, e66b =
# main + 66 + the halves step without its middle barrier, e66c = e66b + the plain plan's block sized to its work,
# e67 = main + experiment 67: `tools/stage_experiments.sh m48 e66:5b0b10c e66b:6dc4f5d e66c:9aca73d e67:b893bdd &&
# tools/pack_staged.sh m48 e66 e66b e66c e67`; 6dc4f5d holds 66 too, 9aca73d 66b).
# Experiment 66 (issue #3, the plan kernel's instruction count): session 48's ncu of DecodePlanKernel (H100,
# 8/1 bf16 1x128K+31x4K) counted ~31k warp instructions at q_len 2 (~1000 in each of 32 warps, IPC ~2: 15k active
# cycles) and ~8k at q_len 1; cub's 64-bit warp-scans block scan alone was ~9.4k (every thread read and added all
# 32 warp sums). 66: BlockExclusiveSums (two int32 sums by warp shuffles, one barrier a chunk, totals in registers)
# for all three scans; the warps' makespans and aligned-candidate fits through shared arrays reduced after the
# barrier instead of 64-bit shared CAS-loop atomics; 42 registers (57), 42.2 KB smem, no stack. 66b: in the block
# halves' search of the two layouts (every Hopper grid of the 16-row kernels) a warp takes its CTAs' ends from the
# next lane (its last lane searches once more) instead of shared memory after a barrier, so the 14 of 32 warps past
# max_ctas (264 CTAs) skip the step; 50 registers. 66c: where the planner does not choose (the 8-row kernels: q_len 1
# at 8/1), the block is a thread per sequence and per CTA start in whole warps (~13 warps instead of 32 at 8/1 q_len 1).
# Tests: the decode GPU file (device plan == host plan over many batches / grids; test_decode_plan is CPU-only, 290 s
# of device time in s48a for what CI runs), memcheck +
# racecheck of the plan tests, for e66c (a superset of e66b's and e66's changes), device==host for e66 and e66b too;
# a 2-round A/B of the 8/1 bf16 suite (q_len 1 and 2): m48 | e66c | e67 (e66 / e66b only tested; device time was short); ncu of e66c's plan kernel
# (q_len 2; session 48: ~31k warp instructions). e67: decode GPU file, MoE stream tests, MoE T=1 A/B by its knob.
# Written BEFORE the run (session 48, H100, main: plan us 3.0-3.3 at q_len 1, 6.4-8.0 at q_len 2): e66 q_len 2 plan
# 4.5-6.0 (refuted above 6.4 in both rounds), q_len 1 2.8-3.2, layer us within +-0.3 (the same plans), ncu q_len 2
# <= 22k warp instructions; e66b q_len 2 plan another -0.3..-1.0 us below e66, q_len 1 as e66, ncu <= 19k; e66c
# q_len 1 plan -0.1..-0.3 below e66b, q_len 2 as e66b.
# Experiment 67 (issues #3 and #4; written in session 49 before any run): the decode plan and combine kernels and the
# MoE stream kernels ask for the largest shared-memory carveout (HPC_XLA_CARVEOUT=0: the driver's choice, = main).
# s48c's ncu had the plan kernel at a 64 KB configuration, the attention kernel at 228 KB; an SM changes its split
# only when empty. Predicted: decode 8/1 bf16 layer -0..-1.0 us and step -0..-1.5 (the combine's CTAs and the next
# layer's landing beside running CTAs), MoE T=1 Qwen3 fp8 -0..-2.0 (s46d: the down's CTAs arrived late); refuted if
# no row moves by more than 0.3 in both rounds. Land rule as 66's.
. "$(dirname "$0")/prelude.sh"
unpack_packs
M=$X/${BASE:-m48}; E=$X/e66c; F=$X/e67
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
in_background "e66c decode GPU file" a_t.log 300 $E $T tests/test_gpu_decode.py
in_background "e66c plan memcheck" a_mc.log 300 $E $CS $T tests/test_gpu_decode.py -k plan
in_background "e66c plan racecheck" a_rc.log 300 $E $CS --tool racecheck $T tests/test_gpu_decode.py -k plan
in_background "e66c device==host, aligned forced" a_al.log 300 $E env HPC_XLA_DECODE_ALIGNED=2 $T \
  tests/test_gpu_decode.py -k device_plan_equals
for v in e66 e66b; do
  in_background "$v device==host" a_$v.log 300 $X/$v $T tests/test_gpu_decode.py -k device_plan_equals
done
in_background "e67 decode GPU file" a_67d.log 300 $F $T tests/test_gpu_decode.py
in_background "e67 moe stream/one-token" a_67m.log 300 $F $T tests/test_gpu_fused_moe.py -k "stream or one_token or graph"
wait; t
collect a_
env AB_WIDTH=150 AB_TIMEOUT=120 OUT=/tmp/abl tools/ab_bench.sh 2 "decode --heads 8/1/128 --kv bf16" \
  ${BASE:-m48} e66c e67 > $OUT/a_ab.txt 2>&1; t
env AB_WIDTH=150 AB_TIMEOUT=60 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8/fp8_tensor --tokens 1" e67:HPC_XLA_CARVEOUT=0 e67 > $OUT/a_moe.txt 2>&1; t
# ncu only while the call has time left (600 s a call)
[ $(( $(date +%s) - S )) -lt 440 ] && (cd $E && PYTHONPATH=$E timeout 70 ncu --clock-control none -k regex:DecodePlanKernel --launch-skip 2 --launch-count 1 \
  --set full --warp-sampling-interval 0 --import-source no -f -o $R/ncu_q2 python3 $ROOT/tools/profile_targets.py \
  decode --heads 8,1,128 --workload 1x128K+31x4K --q-len 2 --reps 4 > $R/ncu_q2.log 2>&1; echo "ncu q2 rc=$?")
ncu -i $R/ncu_q2.ncu-rep > $OUT/ncu_e66c_q2.txt 2>&1
ncu -i $R/ncu_q2.ncu-rep --page source --csv --print-source sass > $OUT/sass_e66c_q2.csv 2>&1
grep -a "Duration\|SM Active Cycles\|Executed Ipc Active\|Configuration Size" $OUT/ncu_e66c_q2.txt | head -5
python3 - "$OUT/sass_e66c_q2.csv" <<'PY2'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], encoding="utf8", errors="replace")))
hdr = rows[1]; ie = hdr.index("Instructions Executed")
print("e66c plan kernel warp instructions (q_len 2):", sum(int(r[ie] or 0) for r in rows[2:] if len(r) > ie))
PY2
t
grep -a "│\|==" $OUT/a_ab.txt | cut -c1-110
grep -a "│\|==" $OUT/a_moe.txt | cut -c1-130
