#!/usr/bin/env bash
# session 48 call A (~7 min, any Hopper; FIRST next session -- before s47h if an H200 comes, since the tables of record
# should carry the faster planner if it lands). Carry .peer/pack (m46b = main, e65 = main + experiment 65:
# `tools/stage_experiments.sh e65:49931f2` after `tar xJf` of the m46b pack into .peer/exp, then
# `tools/pack_staged.sh m46b e65`).
# Experiment 65 (issue #3, the issue's measure is one step WITH its plan): the same plans in less plan-kernel time --
# 32-bit divisions on the device (DivNonNeg: the 64-bit ones are called subroutines on every CTA start's critical
# path), each layout's total / capacity / CTA count computed once (CostLayout's constructor), the two candidate
# layouts searched by the block's two halves side by side, 32-bit raking scans where the values are 32-bit (the
# plain planner as session 43 had it), and HPC_XLA_DECODE_PLAN_TRIGGER (0: the attention kernel let in after the
# first scan, as in session 43; 1: right after PdlWait, as 59b; default 1 only where the planner chooses).
# Tests: the decode GPU file (device plan == host plan, bit for bit, over many batches and grids), test_decode_plan,
# memcheck + racecheck of the plan tests. Then a 2-round A/B of the 8/1 bf16 suite (q_len 1 and 2; the table has us
# = step with the plan, plan us, layer us): m46b | e65 | e65 TRIGGER=0 | e65 TRIGGER=1.
# Written BEFORE the run (session 47, H100, main: plan us 3.8-3.9 at q_len 1, 7.8-10.2 at q_len 2; s47p: the choice
# of two layouts ~3 us, the aligned candidate ~3 us): e65 q_len 1 plan 2.7-3.2 (session 43's code path again; if it
# stays at ~3.8 with TRIGGER=0 too, the +1 us was not the scan or the trigger), q_len 2 plan 4.0-6.0 (refuted if
# > 7 in both rounds), layer us within +-0.3 of m46b everywhere (the same plans), so step us at q_len 2 -4..-6.
. "$(dirname "$0")/prelude.sh"
unpack_packs
M=$X/${BASE:-m46b}; E=$X/e65
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
in_background "e65 decode GPU file" a_t.log 300 $E $T tests/test_gpu_decode.py
in_background "e65 plan tests (CPU + device==host)" a_p.log 300 $E $T tests/test_decode_plan.py
in_background "e65 plan memcheck" a_mc.log 300 $E $CS $T tests/test_gpu_decode.py -k plan
in_background "e65 plan racecheck" a_rc.log 300 $E $CS --tool racecheck $T tests/test_gpu_decode.py -k plan
wait; t
collect a_
env AB_WIDTH=150 AB_TIMEOUT=120 OUT=/tmp/abl tools/ab_bench.sh 2 "decode --heads 8/1/128 --kv bf16" \
  ${BASE:-m46b} e65 e65:HPC_XLA_DECODE_PLAN_TRIGGER=0 e65:HPC_XLA_DECODE_PLAN_TRIGGER=1 > $R/a_ab.txt 2>&1; t
cp $R/a_ab.txt $OUT/
grep -a "│\|==" $R/a_ab.txt | cut -c1-110
