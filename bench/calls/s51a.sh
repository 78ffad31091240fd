#!/usr/bin/env bash
# session 51 call A (~5 min, any Hopper; FIRST). Carry .peer/pack: m50 = main after 66p; e68s = main + experiment 68s;
# e68 = 68s + 68; e68b = 68 + 68b; e68t = 68s + phase timing (`tools/stage_experiments.sh m50 e68s:6815a45
# e68t:22b733e e68:b400e9d e68b:b400e9d,65cc656 && tools/pack_staged.sh m50 e68s e68t e68 e68b`).
# Why: (1) 68s drops BlockExclusiveSums' dead second sum (the plain plan, every q_len 1 plan at 8/1); (2) 66's
# instruction cuts in the choosing path (q_len 2) bought <= 0.3 us of its ~7 us, so where the q_len 2 plan's time goes
# is not known: 68t times the plan kernel's phases (clock64 after a barrier, thread 0) under graph replay, 8 plans a
# graph as the bench's plan us; (3) 68 decides the aligned layout from a bound (its chunk below both cost layouts'
# mean modeled CTA time) before either layout's CTA starts are searched -- the same plans, the starts/model phase
# skipped on 64x4K, 1x128K+31x4K, 1x64K+15x4K and 1x32K+63x1K at q_len 2; 68b also scans the aligned layout's CTA
# prefix by shuffles (cub's 32-bit raking scan gone).
# Written BEFORE the run (session 51):
#   e68s: q_len 1 plan 2.2-2.6 (m50 2.3-2.6), q_len 2 = m50 +-0.3 (same code), step / layer +-0.3.
#   e68t, q_len 2 (choosing), cycles at ~1.98 GHz: scan ~2000 (cub's 64-bit warp-scans scan, the L2 load of
#         seq_lens), starts ~800 (8-step binary searches), model ~800 (divisions, WarpMax, 64-bit CAS atomics), cand
#         ~2000 (a division a sequence a warp), layout 500-1500 (aligned scan + starts when aligned), rest ~300; work
#         ~6-8k cycles = 3-4 us of the 6.3-8.1 us plan; q_len 1 work ~2k. If work is well below plan us, the launch /
#         drain / PDL flush is the cost, not the phases.
#   e68: q_len 2 plan -0.4..-1.0 us on the 4 early-decided rows (starts + model skipped), within +-0.3 elsewhere
#        (2x32K+30x4K, random, zipf, 64x512: one barrier more); step follows the plan, layer unchanged (same plans).
#   e68b: a further -0.1..-0.3 on the 5 aligned rows (a shuffle scan for cub's raking one).
#   Land e68b (else e68, else e68s) if its tests pass and no row's step or layer loses > 0.3 us in both rounds.
. "$(dirname "$0")/prelude.sh"
unpack_packs
T="python3 -m pytest -q -p no:cacheprovider"
CS="compute-sanitizer --target-processes all --error-exitcode 99"
for v in e68b e68s; do
  E=$X/$v
  in_background "$v decode GPU file" a_${v}_t.log 300 $E $T tests/test_gpu_decode.py
  in_background "$v plan memcheck" a_${v}_mc.log 300 $E $CS $T tests/test_gpu_decode.py -k plan
  in_background "$v plan racecheck" a_${v}_rc.log 300 $E $CS --tool racecheck $T tests/test_gpu_decode.py -k plan
done
in_background "e68b device==host, aligned forced" a_e68b_al.log 300 $X/e68b env HPC_XLA_DECODE_ALIGNED=2 $T \
  tests/test_gpu_decode.py -k device_plan_equals
in_background "e68 device==host" a_e68_dh.log 300 $X/e68 $T tests/test_gpu_decode.py -k device_plan_equals
wait; t
collect a_
# device == host on the bench's own 8/1 batches (where 68's early decision fires; the test file's batches are 16/2)
cat > $R/dh.py <<'PY'
import torch, hpc_xla.torch as ht
from hpc_xla.bench.decode_workloads import workloads
bad = 0
for name, lens in workloads().items():
    for q_len in (1, 2):
        kw = dict(num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=64, q_len=q_len)
        gpu = ht.decode_plan(torch.tensor(lens, dtype=torch.int32, device="cuda"), **kw)
        cpu = ht.decode_plan(torch.tensor(lens, dtype=torch.int32), **dict(kw, max_ctas=gpu.config.max_ctas))
        ok = torch.equal(gpu.plan.cpu(), cpu.plan)
        bad += not ok
        h = cpu.plan[:16].tolist()
        print("%-22s q_len %d max_ctas %d ctas %d cap %d pc %d aligned %d device==host %s" % (
            name, q_len, gpu.config.max_ctas, h[10], h[11], h[12], h[14], ok))
print("bench batches device==host:", "all equal" if bad == 0 else "%d DIFFER" % bad)
PY
for v in e68 e68b; do (cd $X/$v && PYTHONPATH=$X/$v timeout 60 python3 $R/dh.py > $OUT/a_dh_$v.txt 2>&1; echo "$v: $(tail -n1 $OUT/a_dh_$v.txt)"); done
P=$X/e68t
(cd $P && PYTHONPATH=$P HPC_XLA_DECODE_PLAN_PROFILE=1 timeout 90 python3 tools/plan_phases.py > $OUT/a_phases_raw.txt \
  2>&1; echo "phases rc=$?"); t
python3 $P/tools/plan_phases.py --parse $OUT/a_phases_raw.txt | tee $OUT/a_phases.txt
env AB_WIDTH=150 AB_TIMEOUT=120 OUT=/tmp/abl tools/ab_bench.sh 2 "decode --heads 8/1/128 --kv bf16" \
  ${AB_VERSIONS:-m50 e68s e68 e68b} > $OUT/a_ab.txt 2>&1; t
grep -a "│\|==" $OUT/a_ab.txt | cut -c1-110
