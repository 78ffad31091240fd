#!/usr/bin/env bash
# session 46 call H (~4 min; ONLY worth it on an H200 -- the issues' targets are H200 numbers and no H200 has come
# since session 39; carry .peer/pack (m46b = main, or `tools/stage_experiments.sh mN && tools/pack_staged.sh
# mN` and TREE=mN) and .peer/probe (nvcc tools/decode_ring_probe.cu into it, command in its header)).
# Our side of the tables of record, no peers (FlashInfer's JIT and vLLM's Triton need calls of their own: s45a-style,
# s41b): rope_norm's suite twice (#2's 8/1 row), the decode suite whole (#3's absolute targets: 8/1, 64/8, 32/8;
# bf16 and fp8; q_len 1 and 2), and tools/decode_ring_probe (is the H200's 69-73% the kernel or the pattern?).
# Written BEFORE the run (session 45): rope_norm bf16 8/1 T=16384 75-78% of the copy ceiling (s38b: 77%); decode
# 8/1 bf16 q_len 1 64x4K / 1x128K+31x4K 42-44 / 43-45 us layer (s38b 43.1 / 44.5; 61c changes q_len 2 only), q_len 2
# 1x128K+31x4K 46-50 (s39d 51.4, then 54b / 59b / 61c: -5..-7 on the H100); probe: the skeleton at spin 800 85-95% of
# the copy ceiling (H100: 94%).
. "$(dirname "$0")/prelude.sh"
unpack_packs
M=$X/${TREE:-m46b}
timeout 60 ./.peer/probe/decode_ring_probe | tee $OUT/decode_ring_probe.txt; t
for round in 1 2; do
  ( cd $M && PYTHONPATH=$M timeout 150 python3 -m hpc_xla.bench rope_norm --out $OUT/rope_norm_$round.json \
      > $OUT/rope_table_$round.txt 2>&1; echo "rope bench $round rc=$?" ); t
done
( cd $M && PYTHONPATH=$M timeout 240 python3 -m hpc_xla.bench decode --out $OUT/decode.json > $OUT/decode_table.txt 2>&1;
  echo "decode bench rc=$?" ); t
grep -E "8/1" $OUT/rope_table_1.txt $OUT/rope_table_2.txt | cut -c1-190
grep -v "^  " $OUT/decode_table.txt | grep -E "8/1/128|64/8/128" | cut -c1-150
