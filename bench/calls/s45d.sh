#!/usr/bin/env bash
# session 45 call D (~1 min, any Hopper; carry .peer/probe (nvcc tools/decode_ring_probe.cu into it) and .peer/pack
# (e61c = main's kernels; TREE=name for another staged tree)). tools/decode_ring_probe with the fp8 pattern (16 KB tiles) beside the bf16 one, and the
# bench's fp8 8/1 q_len 1 rows on main in the same call.
# Written BEFORE the run (session 45, H100): bf16 as s45c (ring S=3 94% of the bench's ceiling at spin 800); fp8
# ring S=4 at 2-3 CTAs/SM 85-95% at spin 0-800, against the kernel's ~67% (1x128K+31x4K 32.7 us layer, 66 MB): if so,
# fp8 8/1 is bound by its per-tile work (the e4m3 -> f16 conversions), not the stream.
. "$(dirname "$0")/prelude.sh"
unpack_packs
timeout 120 ./.peer/probe/decode_ring_probe | tee $OUT/decode_ring_probe.txt; t
M=$X/${TREE:-e61c}
( cd $M && PYTHONPATH=$M timeout 100 python3 -m hpc_xla.bench decode --heads 8/1/128 --kv fp8 --q-len 1 \
    --out $OUT/dec_8_fp8_q1.json > $OUT/dec_8_fp8_q1.txt 2>&1; echo "== bench rc=$?" ); t
grep -v "^  " $OUT/dec_8_fp8_q1.txt | tail -12 | cut -c1-200
