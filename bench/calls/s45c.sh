#!/usr/bin/env bash
# session 45 call C (~1.5 min, any Hopper; carry .peer/probe (nvcc tools/decode_ring_probe.cu into it, command in its
# header) and .peer/pack (e61c = main's kernels)).
# tools/decode_ring_probe: the decode KV stream's own ceiling on the benchmark's pattern (bf16 8/1, 32 KB tiles of
# random pages), next to the bench's 8/1 bf16 q_len 1 rows on main in the same call.
# Written BEFORE the run (session 45; H100 figures, copy ceiling ~2.9-3.0 TB/s there): ldg 85-95% of the copy ceiling;
# ring S=3 2 CTAs/SM spin 0 85-95%, spin 800 75-85% (near the kernel: 64x4K ~51.5 us layer = ~2.6 TB/s), spin 1600
# < 70%; ring S=6 1 CTA/SM within 5% of S=3; bulk within 5% of cp.async. If a deeper ring or bulk copies at spin 800
# beat S=3 by > 8%, the ring is the lever for #3's absolute targets; if not, the per-tile math is.
. "$(dirname "$0")/prelude.sh"
unpack_packs
timeout 120 ./.peer/probe/decode_ring_probe | tee $OUT/decode_ring_probe.txt; t
M=$X/e61c
( cd $M && PYTHONPATH=$M timeout 100 python3 -m hpc_xla.bench decode --heads 8/1/128 --kv bf16 --q-len 1 \
    --out $OUT/dec_8_bf16_q1.json > $OUT/dec_8_bf16_q1.txt 2>&1; echo "== bench rc=$?" ); t
grep -v "^  " $OUT/dec_8_bf16_q1.txt | tail -12 | cut -c1-200
