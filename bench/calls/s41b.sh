#!/usr/bin/env bash
# session 41 call B (~6 min, any Hopper; carry .peer/exp/m5 and .peer/vllm_triton_moe (tools/fetch_triton_moe.sh)):
# the MoE table of record for main with the two-pass stream down sum, vLLM 0.33's Triton in the same run (as s22c5).
# Written BEFORE the run: Qwen3 fp8 T=1 ~18.3-19.5 us in the table (s40b's A/B 18.3; the table's T=1 row follows the
# bf16 T=16384 rows and read 2 us above the A/B in session 39), other rows as session 39's table (kernels unchanged).
. "$(dirname "$0")/prelude.sh"
W=$PWD/.peer/exp/m5
( cd $W && PYTHONPATH=$W HPC_TRITON_MOE_DIR=$PWD/../../vllm_triton_moe timeout 420 python3 -m hpc_xla.bench moe \
  --out $OUT/moe.json > $OUT/moe_table.txt 2>&1; echo "bench rc=$?" ); t
grep -v "^  " $OUT/moe_table.txt | tail -70 | cut -c1-190
