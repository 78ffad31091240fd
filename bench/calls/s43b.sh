#!/usr/bin/env bash
# session 43 call B (~7 min, same machine as s43a if possible; carry .peer/exp/m8, .peer/exp/t8 (= main + experiment
# 49's trace: `tools/stage_experiments.sh t8:024a68f`) and .whl).
# (1) FlashInfer fp8 8/1/128 (its JIT build first).
# (2) The planner's piece cost at q_len 2 (HPC_XLA_DECODE_PIECE_COST, tiles a piece; the default charges 4 from 8 rows
#     up). s42d's trace with 51 (H100): a piece costs start 10892 + finish 7315 + advance 4165 cycles = 11.3 us at q_len 2
#     (8.3 at q_len 1) ~ 6.2 tiles of 1.83 us, and the slowest CTA of 1x128K+31x4K (2 pieces, 12 tiles) ends 8.7 us after
#     the mean CTA (3.9 at q_len 1). Session 41 (before 51): 6 gained 1.4-2 us on the skewed rows but cost 64x4K +2.8.
# (3) Per-CTA trace (bench/calls/decode_trace_ctas.py on t8) at piece cost 4 and 6: which CTAs set the end.
# Written BEFORE the run: cost 6 at q_len 2: 1x128K+31x4K / 1x64K+15x4K / 2x32K+30x4K -1..-2.5 us, zipf -2..-4, 64x4K
# +0..+3, 64x512 +0..+1; 5 in between. The trace: 2-piece CTAs' per-piece cost above 1-piece CTAs'; with 6 the
# slowest CTA within 5 us of the mean. Adopt 5 or 6 for >= 16 rows only if no q_len 2 row then loses > 0.5 us in
# both rounds and the three skewed rows gain.
# bench/calls/plan_model.py (the planner re-done in Python; CTA time = tiles + P x pieces) says which cost each row
# should favour: at q_len 2 (P = 6.2 tiles) 64x512 / 64x4K / 1x64K+15x4K pc4, 1x32K+63x1K pc5, 1x128K+31x4K /
# 2x32K+30x4K / random / zipf pc6 (-2, -2, -3, -2 tiles of makespan); at q_len 1 (P = 4.5) pc5 on 1x128K+31x4K,
# 2x32K+30x4K, 1x32K+63x1K, random (-0.5..-1 tile), pc4 elsewhere. If the measured best cost per row follows the
# model, the next step is a planner that picks its piece cost among candidates by the modeled makespan.
. "$(dirname "$0")/prelude.sh"
M=$PWD/.peer/exp/m8
TR=$PWD/.peer/exp/t8
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?"
( cd $M && PYTHONPATH=$M:/tmp/site timeout 330 python3 -m hpc_xla.bench decode --heads 8/1/128 --kv fp8 \
  --out $OUT/dec_8_fp8.json > $R/dec_8_fp8.txt 2>&1; echo "== fi fp8 rc=$?" ); t
bench() {  # bench LABEL COST Q_LEN: main's decode, 8/1/128 (no FlashInfer on the path)
  ( cd $M && env HPC_XLA_DECODE_PIECE_COST=$2 PYTHONPATH=$M timeout 150 python3 -m hpc_xla.bench decode \
    --heads 8/1/128 --q-len $3 --out $R/pc_$1.json > $R/pc_$1.txt 2>&1; echo "== $1 rc=$?" ); t
}
for round in 1 2; do bench c4_r$round 4 2; bench c5_r$round 5 2; bench c6_r$round 6 2; done
for round in 1 2; do bench q1c4_r$round 4 1; bench q1c5_r$round 5 1; done
for cost in 4 6; do
  ( cd $TR && HPC_XLA_DECODE_PIECE_COST=$cost PYTHONPATH=$TR timeout 120 python3 $ROOT/bench/calls/decode_trace_ctas.py \
    --q-len 2 > $R/ctas_$cost.txt 2>&1; echo "== trace cost $cost rc=$?" ); t
  cut -c1-160 $R/ctas_$cost.txt
done
( python3 $ROOT/bench/calls/decode_tables.py ab $R pc_ c4_r1 c4_r2 c5_r1 c5_r2 c6_r1 c6_r2
  python3 $ROOT/bench/calls/decode_tables.py ab $R pc_ q1c4_r1 q1c4_r2 q1c5_r1 q1c5_r2
  echo "fp8 vs FlashInfer:"; python3 $ROOT/bench/calls/decode_tables.py fi $OUT/dec_8_fp8.json ) | tee $OUT/piece_cost_table.txt
tar czf $OUT/s43b_raw.tgz -C $R $(cd $R && ls pc_* ctas_* dec_* 2>/dev/null)
