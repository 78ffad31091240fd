#!/usr/bin/env bash
# session 52 call A (~4 min, any Hopper; FIRST). Carry .peer/pack: m52 = main (68d + 68p landed), e69 = main +
# experiment 69, e69a = 69 + 69a (`tools/stage_experiments.sh m52 e69:ea67594 e69a:ea67594,00baf70 &&
# tools/pack_staged.sh m52 e69 e69a`).
# Why (bench/NOTES.md session 51): the q_len 2 plan is 5.0-7.4 us on an H100 after 68d / 68p, all of it the kernel's
# own phases; the aligned candidates (2.3-4.7k cycles in s51a's timing, before 68d) now take two turns a warp in the
# 18-warp block, and both cost layouts' CTA starts + modeled times (~4k cycles) are searched even where the aligned
# layout is chosen from a bound (68's early decision lost on the other rows through the lost overlap, in 32 warps).
# 69: the candidates in rounds, stopping after the first round in which one fits (every bench batch that fits at all
#     fits in round 1 but 128 random's). 69a: 69 + 68's early decision.
# Written BEFORE the run (session 51):
#   e69: q_len 2 plan -0.2..-0.6 us on the six rows whose chunk fits in round 1 (the second turn gone), random and
#        zipf within +-0.2 (a barrier more a round); q_len 1 unchanged (the plain kernel is untouched).
#   e69a: a further -0.5..-1.5 on 64x4K, 1x128K+31x4K, 1x64K+15x4K, 1x32K+63x1K (starts + modeled times skipped),
#         within +0.3 elsewhere.
#   Land e69a (else e69) if its tests pass and no row's step or layer loses > 0.3 us in both rounds.
# Short form (device minutes scarce): TEST_VERSIONS=e69a tests only the one to land.
. "$(dirname "$0")/prelude.sh"
unpack_packs
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
for v in ${TEST_VERSIONS:-e69a e69}; do
  E=$X/$v
  in_background "$v decode GPU file" a_${v}_t.log 300 $E $T tests/test_gpu_decode.py
  in_background "$v plan memcheck" a_${v}_mc.log 300 $E $CS $T tests/test_gpu_decode.py -k plan
  in_background "$v plan racecheck" a_${v}_rc.log 300 $E $CS --tool racecheck $T tests/test_gpu_decode.py -k plan
done
in_background "e69a device==host, aligned forced" a_e69a_al.log 300 $X/e69a env HPC_XLA_DECODE_ALIGNED=2 $T \
  tests/test_gpu_decode.py -k device_plan_equals
wait; t
collect a_
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
for v in e69 e69a; do (cd $X/$v && PYTHONPATH=$X/$v timeout 60 python3 $R/dh.py > $R/dh_$v.txt 2>&1; echo "$v: $(tail -n1 $R/dh_$v.txt)"); done
env AB_WIDTH=150 AB_TIMEOUT=120 OUT=/tmp/abl tools/ab_bench.sh 2 "decode --heads 8/1/128 --kv bf16" \
  ${AB_VERSIONS:-m52 e69 e69a} > $OUT/a_ab.txt 2>&1; t
grep -a "│\|==" $OUT/a_ab.txt | cut -c1-110
