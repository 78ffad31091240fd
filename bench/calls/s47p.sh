#!/usr/bin/env bash
# session 47 call P (~2.5 min, any Hopper; carry .peer/pack with m46b = main). Why: s47hh's decode table showed the
# issue's measure ("us" = one step with its plan) at q_len 2 ~10 us above "layer us" -- plan us 7.8-10.3 at q_len 2
# since session 45 (s42/s43: 2.7-2.9), 3.8-3.9 at q_len 1 -- while the A/Bs and the FlashInfer tables since session
# 44 compared layer us only. Which part of the choosing planner (two piece-cost layouts, then the aligned candidate
# search) costs it: the 8/1 bf16 q_len 2 suite, ours only, under the default, HPC_XLA_DECODE_ALIGNED=0 (no aligned
# candidate) and HPC_XLA_DECODE_PIECE_COST=4 (no choice: session 43's planner), and q_len 1 once.
# Written BEFORE the run: default plan us 8-10.5 (as s47hh); ALIGNED=0 saves part of it (the warp-per-candidate
# search with 64-bit divisions, the second scan and locate); PIECE_COST=4 back to ~2.8-3.9 us (then us at q_len 2
# ~56-60 against FlashInfer's 56.6-56.7 on 64x4K / 1x128K+31x4K).
. "$(dirname "$0")/prelude.sh"
X=$ROOT/.peer/exp; mkdir -p $X; tar xJf .peer/pack/m46b.tar.xz -C $X; M=$X/m46b; t
run() {  # run LABEL ENV... : the 8/1 bf16 suite at q_len 2 (ours only) under ENV
  local label=$1; shift
  ( cd $M && env PYTHONPATH=$M "$@" timeout 100 python3 -m hpc_xla.bench decode --heads 8/1/128 --kv bf16 --q-len ${QL:-2} \
      --out $OUT/p_$label.json > $R/p_$label.txt 2>&1; echo "== $label rc=$?" ); t
}
run default HPC_XLA_DECODE_ALIGNED=1
run aligned0 HPC_XLA_DECODE_ALIGNED=0
run cost4 HPC_XLA_DECODE_PIECE_COST=4
QL=1 run q1 HPC_XLA_DECODE_ALIGNED=1
python3 - $OUT <<'PY'
import json, sys, os
out = sys.argv[1]
labels = ["default", "aligned0", "cost4", "q1"]
rows = {}
for l in labels:
    p = os.path.join(out, "p_%s.json" % l)
    if not os.path.exists(p): continue
    for r in json.load(open(p))["rows"]:
        rows.setdefault(r["workload"], {})[l] = (r["us"], r["plan_us"], r["layer_us"])
print("workload".ljust(22) + "".join(("%s us/plan/layer" % l).rjust(22) for l in labels))
for w, d in rows.items():
    print(w[:22].ljust(22) + "".join(("%.1f/%.1f/%.1f" % d[l] if l in d else "-").rjust(22) for l in labels))
PY
