#!/usr/bin/env bash
# session 52 call C (~3 min on an H100; on an H200 it runs s47h instead, the tables of record). Carry .peer/pack:
# m53 = main (69 landed), e70 = main + experiment 70 (`tools/stage_experiments.sh m53 e70:ae40bac &&
# tools/pack_staged.sh m53 e70`); for the H200 branch also .peer/probe and .whl (s47h's carry).
# Why (bench/NOTES.md session 52): under 69 the candidates run in rounds of one a warp (18 warps at 264 CTAs), and the
# six bench batches whose chunk is the first or second candidate stop after round 1 (q_len 2 plan -0.2..-0.6 us), but
# 128 random (its chunk the 22nd candidate) and 256 zipf (none fits) take a second round: +0.0..+0.3 against m52.
# 70: two candidates a warp in one pass over the batch (c and c + warps; their divisions independent), so one round
#     holds all 32 at 18 warps.
# Written BEFORE the run (session 52): e70 minus m53, q_len 2 plan: 128 random and 256 zipf -0.2..-0.4 (the second
# round's barrier and serial pass gone); the six others within +-0.1 (a second division per sequence, overlapped);
# q_len 1 unchanged (the plain kernel is untouched). Land if its tests pass and no row's step or layer loses > 0.3 us
# in both rounds.
. "$(dirname "$0")/prelude.sh"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then TREE=m53 bash bench/calls/s47h.sh; exit; fi
unpack_packs
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
E=$X/e70
in_background "e70 decode GPU file" c_t.log 300 $E $T tests/test_gpu_decode.py
in_background "e70 plan memcheck" c_mc.log 300 $E $CS $T tests/test_gpu_decode.py -k plan
in_background "e70 plan racecheck" c_rc.log 300 $E $CS --tool racecheck $T tests/test_gpu_decode.py -k plan
in_background "e70 device==host, aligned forced" c_al.log 300 $E env HPC_XLA_DECODE_ALIGNED=2 $T \
  tests/test_gpu_decode.py -k device_plan_equals
wait; t
collect c_
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
(cd $E && PYTHONPATH=$E timeout 60 python3 $R/dh.py > $R/dh_e70.txt 2>&1; echo "e70: $(tail -n1 $R/dh_e70.txt)")
env AB_WIDTH=150 AB_TIMEOUT=120 OUT=/tmp/abl tools/ab_bench.sh 2 "decode --heads 8/1/128 --kv bf16" \
  ${AB_VERSIONS:-m53 e70} > $OUT/c_ab.txt 2>&1; t
grep -a "│\|==" $OUT/c_ab.txt | grep -v "│     1 │" | cut -c1-110
