#!/usr/bin/env bash
# session 54 call C (~2.5 min on an H100; on an H200 it runs s47h with TREE=m54 instead: the tables of record). Carry
# .peer/pack: m54 = main 5516932, e74 = m54 + experiment 73 (d6a98bd), e75 = m54 + experiment 75 (269c68e: an A/A
# control -- dead code at the end of DecodePlanKernel, never run, so the plan kernels' SASS grows by 144-160 lines
# and no kernel does anything differently; the attention and combine kernels' SASS is identical in all three)
# (`tools/stage_experiments.sh m54 e74:d6a98bd e75:269c68e && tools/pack_staged.sh m54 e74 e75`); for the H200 branch
# also .peer/probe and .whl.
# Why: 73 read 128 random's q_len 2 LAYER +0.7..+1.0 in four rounds over two sessions with identical device plans and
# identical attention kernels. The one mechanism left is where the module's code lands; that row is the one whose time
# is cold-code fetch (mid-CTA FinishPiece, sessions 42-43). 75 changes code size only.
# Written BEFORE the run (session 54): device == host "all equal" for e75; e75 minus m54 plan within +-0.1 on every
# row. Rule: if e75 moves 128 random's q_len 2 layer (or any row's layer) by >= 0.5 us in the same direction in all
# three rounds, placement alone moves that row by as much as 73 did: 73's layer reading is placement, and 73 lands
# (its plan gain, -0.1..-0.3 at q_len 2, held in both sessions). If e75 stays within +-0.3 there, inconclusive (a
# different shift) and 73 stays out. e74 should read random's layer +0.6..+1.0 again.
. "$(dirname "$0")/prelude.sh"
M=${M:-m54}
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then TREE=$M bash bench/calls/s47h.sh; exit; fi
unpack_packs
cat > $R/dh.py <<'PY'
import torch, hpc_xla.torch as ht
from hpc_xla.bench.decode_workloads import workloads
bad = []
for name, lens in workloads().items():
    for q_len in (1, 2):
        kw = dict(num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=64, q_len=q_len)
        gpu = ht.decode_plan(torch.tensor(lens, dtype=torch.int32, device="cuda"), **kw)
        cpu = ht.decode_plan(torch.tensor(lens, dtype=torch.int32), **dict(kw, max_ctas=gpu.config.max_ctas))
        if not torch.equal(gpu.plan.cpu(), cpu.plan):
            bad.append("%s q_len %d" % (name, q_len))
print("bench batches device==host:", "all equal" if not bad else "DIFFER: " + ", ".join(bad))
PY
(cd $X/e75 && PYTHONPATH=$X/e75 timeout 60 python3 $R/dh.py > $OUT/dh_e75.txt 2>&1; echo "e75: $(tail -n1 $OUT/dh_e75.txt)")
env AB_WIDTH=150 AB_TIMEOUT=120 OUT=/tmp/abl tools/ab_bench.sh ${ROUNDS:-3} "decode --heads 8/1/128 --kv bf16" \
  ${AB_VERSIONS:-$M e74 e75} > $OUT/d_ab.txt 2>&1; t
python3 $ROOT/bench/calls/decode_tables.py deltas $OUT/d_ab.txt $M | tee $OUT/d_ab_deltas.txt
