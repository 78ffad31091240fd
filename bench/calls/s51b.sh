#!/usr/bin/env bash
# session 51 call B (~4 min, any Hopper). Carry .peer/pack: e68s (= main since 68s landed: the same code), e68d =
# main + experiment 68d, e68p = 68d + 68p (`tools/stage_experiments.sh e68d:d08cd0a e68p:d08cd0a,0434213 &&
# tools/pack_staged.sh e68s e68d e68p`).
# Why (s51a's phase timing, H100, cycles): the choosing plan (q_len 2) spends ~3950 on its first scan (cub's 64-bit
# scan in 32 warps; the plain path's whole scan, global load included, is ~1450 in 8 warps), 2600-3300 on the CTA
# starts, 1100-1400 on the modeled times, 2300-4700 on the aligned candidates and ~3300 on the aligned layout (cub's
# raking scan + starts): 13-15k cycles = the 6.3-8.1 us plan. Every phase runs in 32 warps where ~9-17 have work.
# And 68/68b (the same plain-path code) read +0.1..+0.3 us of q_len 1 plan: the code around it matters too.
# 68d: the choosing block sized to its work (a thread per CTA start of each layout, whole-warp halves: 576 threads =
#      18 warps at 264 CTAs), all its scans by shuffles (cub gone), candidates a warp each in turn.
# 68p: 68d as two kernels (plain / choosing), each with only its own path's code (plain: 632 SASS instructions).
# Written BEFORE the run (session 51):
#   e68d: q_len 2 plan -1.0..-2.0 us (fewer warps through every block-wide phase; the candidates' latency doubles
#         per warp, ~+0.3), q_len 1 within +-0.2 (same path); step follows the plan; layer unchanged (same plans).
#   e68p: q_len 1 plan -0.1..-0.4 below e68d (less code to fetch), q_len 2 as e68d +-0.2.
#   Land e68p (else e68d) if its tests pass and no row's step or layer loses > 0.3 us in both rounds.
# Short form (device minutes scarce): TEST_VERSIONS=e68p tests only the one to land.
. "$(dirname "$0")/prelude.sh"
unpack_packs
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
for v in ${TEST_VERSIONS:-e68p e68d}; do
  E=$X/$v
  in_background "$v decode GPU file" b_${v}_t.log 300 $E $T tests/test_gpu_decode.py
  in_background "$v plan memcheck" b_${v}_mc.log 300 $E $CS $T tests/test_gpu_decode.py -k plan
  in_background "$v plan racecheck" b_${v}_rc.log 300 $E $CS --tool racecheck $T tests/test_gpu_decode.py -k plan
done
in_background "e68p device==host, aligned forced" b_e68p_al.log 300 $X/e68p env HPC_XLA_DECODE_ALIGNED=2 $T \
  tests/test_gpu_decode.py -k device_plan_equals
wait; t
collect b_
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
for v in e68d e68p; do (cd $X/$v && PYTHONPATH=$X/$v timeout 60 python3 $R/dh.py > $R/dh_$v.txt 2>&1; echo "$v: $(tail -n1 $R/dh_$v.txt)"); done
env AB_WIDTH=150 AB_TIMEOUT=120 OUT=/tmp/abl tools/ab_bench.sh 2 "decode --heads 8/1/128 --kv bf16" \
  ${AB_VERSIONS:-e68s e68d e68p} > $OUT/b_ab.txt 2>&1; t
grep -a "│\|==" $OUT/b_ab.txt | cut -c1-110
