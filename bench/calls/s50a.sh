#!/usr/bin/env bash
# session 50 call A (~9 min, any Hopper; FIRST). Carry .peer/pack (m48 = main, e66 = main + experiment 66, e66d = 66 +
# 66c without 66b's halves step (e66c = 66 + 66b + 66c was s49n's), e66p = 66's plain path alone (the choosing path
# as main's): `tools/stage_experiments.sh m48 e66:5b0b10c e66d:a99ae69 e66p:b6ff9f5 && tools/pack_staged.sh m48 e66
# e66d e66p`).
# Why (bench/NOTES.md, session 49): s49n (H100, no tests) had e66c's plan 0.4-0.6 us faster at q_len 1 (the plain
# path; step -0.1..-1.4 on all rows, both rounds) and 0.3-0.7 us slower at q_len 2 (the choosing path; step
# +0.1..+1.6). Suspect: 66b's step, where each warp's last lane searches a second CTA start after its first.
# Written BEFORE the run (session 49; m48 plan us 2.8-3.3 at q_len 1, 6.4-8.0 at q_len 2 in s49n):
#   e66d: q_len 1 as e66c (plan 2.4-2.7); q_len 2 plan 0.3-1.0 below m48 (66's scan and per-warp arrays without 66b's
#         serial second search); land it if no row's step or layer loses > 0.3 us in both rounds and its tests pass.
#   e66:  q_len 2 between e66d and m48; q_len 1 plan ~0.2 above e66d (32 warps instead of the sized block).
#   e66p: q_len 1 as e66d (plan 2.4-2.7), q_len 2 as m48 (within +-0.3: the same code there). If e66d is still
#   slower than m48 at q_len 2, e66p is the one to land (its tests below).
# Tests (e66d): the decode GPU file, memcheck + racecheck of its plan tests, device==host with the aligned layout
# forced; device==host on e66 too; e66p's decode GPU file and plan memcheck / racecheck. Then the 2-round 8/1 bf16
# A/B m48 | e66 | e66d | e66p (e66c was measured in s49n), and ncu of e66d's plan
# kernel at q_len 2 while the call has time left (session 48: ~31k warp instructions on main).
# Short form (device minutes scarce): AB_VERSIONS="m48 e66d e66p" drops e66 from the A/B (~1 min less), NCU=0 the ncu.
. "$(dirname "$0")/prelude.sh"
unpack_packs
E=$X/e66d
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
in_background "e66d decode GPU file" a_t.log 300 $E $T tests/test_gpu_decode.py
in_background "e66d plan memcheck" a_mc.log 300 $E $CS $T tests/test_gpu_decode.py -k plan
in_background "e66d plan racecheck" a_rc.log 300 $E $CS --tool racecheck $T tests/test_gpu_decode.py -k plan
in_background "e66d device==host, aligned forced" a_al.log 300 $E env HPC_XLA_DECODE_ALIGNED=2 $T \
  tests/test_gpu_decode.py -k device_plan_equals
in_background "e66 device==host" a_e66.log 300 $X/e66 $T tests/test_gpu_decode.py -k device_plan_equals
P=$X/e66p
in_background "e66p decode GPU file" a_pt.log 300 $P $T tests/test_gpu_decode.py
in_background "e66p plan memcheck" a_pmc.log 300 $P $CS $T tests/test_gpu_decode.py -k plan
in_background "e66p plan racecheck" a_prc.log 300 $P $CS --tool racecheck $T tests/test_gpu_decode.py -k plan
wait; t
collect a_
env AB_WIDTH=150 AB_TIMEOUT=120 OUT=/tmp/abl tools/ab_bench.sh 2 "decode --heads 8/1/128 --kv bf16" \
  ${AB_VERSIONS:-m48 e66 e66d e66p} > $OUT/a_ab.txt 2>&1; t
# ncu only while the call has time left (600 s a call)
if [ "${NCU:-1}" = 1 ] && [ $(( $(date +%s) - S )) -lt 480 ]; then
  (cd $E && PYTHONPATH=$E timeout 70 ncu --clock-control none -k regex:DecodePlanKernel --launch-skip 2 --launch-count 1 \
    --set full --warp-sampling-interval 0 --import-source no -f -o $R/ncu_q2 python3 $ROOT/tools/profile_targets.py \
    decode --heads 8,1,128 --workload 1x128K+31x4K --q-len 2 --reps 4 > $R/ncu_q2.log 2>&1; echo "ncu q2 rc=$?")
  ncu -i $R/ncu_q2.ncu-rep > $OUT/ncu_e66d_q2.txt 2>&1
  ncu -i $R/ncu_q2.ncu-rep --page source --csv --print-source sass > $OUT/sass_e66d_q2.csv 2>&1
  grep -a "Duration\|SM Active Cycles\|Executed Ipc Active" $OUT/ncu_e66d_q2.txt | head -3
  python3 - "$OUT/sass_e66d_q2.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], encoding="utf8", errors="replace")))
hdr = rows[1]; ie = hdr.index("Instructions Executed")
print("e66d plan kernel warp instructions (q_len 2):", sum(int(r[ie] or 0) for r in rows[2:] if len(r) > ie))
PY
fi
t
grep -a "│\|==" $OUT/a_ab.txt | cut -c1-110
