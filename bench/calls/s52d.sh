#!/usr/bin/env bash
# session 52 call D (~4 min on an H100; on an H200 it runs s47h instead, the tables of record). Carry .peer/pack:
# m53 = main (69 landed), e71 = main + experiment 71, e72 = 71 + 72 (`tools/stage_experiments.sh m53 e71:4728b3f
# e72:5c52e65 && tools/pack_staged.sh m53 e71 e72`); for the H200 branch also .peer/probe and .whl (s47h's carry).
# Short form (device minutes scarce): TEST_VERSIONS=e72 (the one to land if both win).
# Why (bench/NOTES.md session 52): experiment 70 (two candidates a warp) showed the plan issue-bound here: its second
# division per sequence in 18 warps cost +0.2..+0.4 us of plan on the six bench batches that fit at the first or
# second candidate, while saving random's and zipf's second round (-0.3). 71: round 0 holds only the first 4
# candidates plus a probe of the last (if it needs more than max_ctas CTAs, none fits: zipf stops after round 0);
# round 1 then covers 4..21 at 18 warps (random's chunk is the 22nd).
# Written BEFORE the run (session 52): e71 minus m53, q_len 2 plan: the six -0.1..-0.3 (14 fewer warps dividing in
# round 0), 256 zipf -0.2..-0.3 (one round), 128 random within +-0.1 (two rounds either way); q_len 1 unchanged.
# 72 (= 71 + the candidates' ceil(tiles / q) by a float reciprocal once per candidate and one correction step, exact
# below 2^22 tiles: bench/calls/rcp_division_check.py): e72 minus e71, q_len 2 plan: the six -0.1..-0.2 (the
# candidate pass's ~20-instruction division per sequence becomes ~8), 128 random -0.1..-0.3 (two passes), zipf
# -0.1..-0.2; q_len 1 unchanged.
# Land e72 (else e71) if its tests pass and no row's step or layer loses > 0.3 us in both rounds.
# Session 53 adds e73 (main + experiment 73, d6a98bd: with one kv head the CTA-start search's pos / head_cost and the
# modeled times' unit / batch without a division; `tools/stage_experiments.sh e73:d6a98bd && tools/pack_staged.sh m53
# e71 e72 e73`; run with TEST_VERSIONS="e72 e73" AB_VERSIONS="m53 e71 e72 e73"). Written BEFORE the run: e73 minus
# m53, q_len 2 plan -0.1..-0.3 on every row (three 32-bit divisions a thread in the starts and modeled times, ~18
# warps), q_len 1 plan 0.0..-0.1 (one a start); steps follow the plan. Same land rule; if e72 and e73 both win they
# stack (different phases) and land together.
# Also "m53:HPC_XLA_DECODE_MODEL_PIECE=0" (main with the choice off at q_len 2: the plain plan, piece cost 4, never
# aligned): does choosing still pay per step (plan + one layer) now that it costs ~3 us more than the plain plan?
# Written BEFORE: minus m53 at q_len 2, plan -2.5..-3.5; layer 0..+0.3 on 64x512 / 64x4K, +1..+2.5 on the skewed
# rows (s43b-s45's layout gains); step -1..-3 on the uniform rows, -1..+1 on the skewed. q_len 1 unchanged.
. "$(dirname "$0")/prelude.sh"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then TREE=m53 bash bench/calls/s47h.sh; exit; fi
unpack_packs
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
for v in ${TEST_VERSIONS:-e71 e72}; do
  E=$X/$v
  in_background "$v decode GPU file" d_${v}_t.log 300 $E $T tests/test_gpu_decode.py
  in_background "$v plan memcheck" d_${v}_mc.log 300 $E $CS $T tests/test_gpu_decode.py -k plan
  in_background "$v plan racecheck" d_${v}_rc.log 300 $E $CS --tool racecheck $T tests/test_gpu_decode.py -k plan
  in_background "$v device==host, aligned forced" d_${v}_al.log 300 $E env HPC_XLA_DECODE_ALIGNED=2 $T \
    tests/test_gpu_decode.py -k device_plan_equals
done
wait; t
collect d_
# device == host on the bench's own 8/1 batches (the test file's are 16/2)
cat > $R/dh.py <<'PY'
import torch, hpc_xla.torch as ht
from hpc_xla.bench.decode_workloads import workloads
bad = 0
for name, lens in workloads().items():
    for q_len in (1, 2):
        kw = dict(num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=64, q_len=q_len)
        gpu = ht.decode_plan(torch.tensor(lens, dtype=torch.int32, device="cuda"), **kw)
        cpu = ht.decode_plan(torch.tensor(lens, dtype=torch.int32), **dict(kw, max_ctas=gpu.config.max_ctas))
        bad += not torch.equal(gpu.plan.cpu(), cpu.plan)
print("bench batches device==host:", "all equal" if bad == 0 else "%d DIFFER" % bad)
PY
for v in ${TEST_VERSIONS:-e71 e72}; do (cd $X/$v && PYTHONPATH=$X/$v timeout 60 python3 $R/dh.py > $R/dh_$v.txt 2>&1; echo "$v: $(tail -n1 $R/dh_$v.txt)"); done
env AB_WIDTH=150 AB_TIMEOUT=120 OUT=/tmp/abl tools/ab_bench.sh 2 "decode --heads 8/1/128 --kv bf16" \
  ${AB_VERSIONS:-m53 e71 e72} > $OUT/d_ab.txt 2>&1; t
grep -a "│\|==" $OUT/d_ab.txt | grep -v "│     1 │" | cut -c1-110
